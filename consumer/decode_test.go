package consumer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// DecodeRecord is the consumer's check of a record, which deadletter.Redrive applies before
// it republishes one: a valid envelope under the Decoder, keyed by its conversation id.
func TestDecodeRecord(t *testing.T) {
	t.Parallel()
	good, err := turntest.NewRequest("c-1", "u-1", "hi").Encode()
	require.NoError(t, err)
	req, err := consumer.DecodeRecord(turn.Decoder{}, []byte("c-1"), good)
	require.NoError(t, err)
	require.Equal(t, "c-1", req.ConversationID)
	for name, c := range map[string]struct {
		key, value []byte
		want       string
	}{
		"no key":      {nil, good, "record has no key"},
		"another key": {[]byte("c-2"), good, "differs from conversation_id"},
		"malformed":   {[]byte("c-1"), []byte(`{"id": `), "bad request"},
		"too long":    {[]byte("c-1"), good, "over the limit"},
	} {
		d := turn.Decoder{}
		if name == "too long" {
			d.MaxTextBytes = 1
		}
		_, err := consumer.DecodeRecord(d, c.key, c.value)
		require.ErrorContains(t, err, c.want, name)
	}
}
