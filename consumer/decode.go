package consumer

import (
	"errors"

	"github.com/turnstile-go/turnstile/turn"
)

// DecodeRecord applies the consumer's checks to a request record's key and value: the value is
// a valid request envelope under d (turn.Decoder.Decode), and the key is the request's
// conversation id (G7). A record that fails them is dead-lettered by the consumer at once, as
// often as it is published; deadletter.Redrive refuses to re-drive it for that. It returns the
// request, without its Source and Headers, or the reason: turn.Decoder.Decode's
// *turn.DecodeError, or an error naming the key.
func DecodeRecord(d turn.Decoder, key, value []byte) (turn.Request, error) {
	if len(key) == 0 {
		return turn.Request{}, errors.New("record has no key; the key must be the conversation id")
	}
	req, err := d.Decode(value)
	if err != nil {
		return turn.Request{}, err
	}
	if req.ConversationID != string(key) {
		return turn.Request{}, &keyMismatchError{key: string(key), conversation: req.ConversationID}
	}
	return req, nil
}
