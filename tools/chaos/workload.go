package chaos

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turnstile-go/turnstile/turn"
)

// kind says what a produced record is and which outcome it must get.
type kind int

const (
	kindValid        kind = iota // a result, once, in its conversation's order
	kindPoison                   // a valid request whose model call kills its member: dead-lettered
	kindInvalid                  // not a request (broken JSON): dead-lettered
	kindStranger                 // another user's record in a conversation: dead-lettered, never served (G7)
	kindPanicModel               // the model panics on every attempt: dead-lettered
	kindPanicStore               // the session store's Append panics on every attempt: dead-lettered
	kindPanicHandler             // the member's Handler panics on every attempt (Temporal mode): dead-lettered
	kindLimited                  // the model always answers turn.RetryAfter: dead-lettered
)

// kinds lists every kind, so that tests walk them all.
var kinds = []kind{kindValid, kindPoison, kindInvalid, kindStranger, kindPanicModel, kindPanicStore, kindPanicHandler, kindLimited}

// String names the kind as the figures and failures do.
func (k kind) String() string {
	switch k {
	case kindValid:
		return "valid"
	case kindPoison:
		return "poison"
	case kindInvalid:
		return "invalid"
	case kindStranger:
		return "stranger"
	case kindPanicModel:
		return "panicking model"
	case kindPanicStore:
		return "panicking store"
	case kindPanicHandler:
		return "panicking handler"
	case kindLimited:
		return "always rate-limited"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// suffix ends the text of a request of kind k, which is how the model, the store and the
// member's Handler recognise it; "" for the kinds that need none.
func (k kind) suffix() string {
	switch k {
	case kindPoison:
		return poisonSuffix
	case kindPanicModel:
		return " panic-model"
	case kindPanicStore:
		return " panic-store"
	case kindPanicHandler:
		return " panic-handler"
	case kindLimited:
		return " always-limited"
	}
	return ""
}

// deadLettered reports whether a record of kind k must end on the dead-letter topic.
func (k kind) deadLettered() bool { return k != kindValid }

// item is one record the producer sends.
type item struct {
	kind  kind
	id    string // request id; for an invalid record, the id its broken JSON starts with
	conv  string
	n     int // 1-based position in the conversation (requests); a stranger's is the victim's next
	value []byte
}

// workload is what a run produces, in produce order, and what the checker expects of it.
type workload struct {
	order []item
	byID  map[string]item // every request id, invalid records included
}

// newWorkload spreads cfg.Requests valid requests evenly over cfg.Conversations, adds
// cfg.Poison poison requests, cfg.Panics requests of each panicking kind and cfg.Limited
// always rate-limited ones (one per conversation, at a drawn position, never first),
// cfg.Strangers records of another user (one per conversation, after its first request) and
// cfg.Invalid broken records, and interleaves them the way many users writing at once would.
// In Temporal mode (cfg.Cell) every request carries its position as its Sequence.
// Everything, request ids included, is drawn from rng, so one seed gives one workload.
func newWorkload(rng *rand.Rand, cfg Config) (*workload, error) {
	w := &workload{byID: make(map[string]item)}
	newID := func() string {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], rng.Uint64())
		binary.LittleEndian.PutUint64(b[8:], rng.Uint64())
		b[6] = b[6]&0x0f | 0x40 // version 4
		b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
		return uuid.UUID(b).String()
	}
	sequenced := cfg.Cell.Temporal()
	// The conversations that get a request of their own kind, in turn.
	var special []kind
	for k, n := range map[kind]int{kindPoison: cfg.Poison, kindPanicModel: cfg.Panics, kindPanicStore: cfg.Panics,
		kindLimited: cfg.Limited, kindStranger: cfg.Strangers} {
		for range n {
			special = append(special, k)
		}
	}
	if sequenced {
		for range cfg.Panics {
			special = append(special, kindPanicHandler)
		}
	}
	// Map order is random: sort before use, so that one seed gives one workload.
	for i := 1; i < len(special); i++ {
		for j := i; j > 0 && special[j] < special[j-1]; j-- {
			special[j], special[j-1] = special[j-1], special[j]
		}
	}
	encode := func(it *item, user string) error {
		req := turn.Request{Schema: turn.SchemaVersion, ID: it.id, ConversationID: it.conv, UserID: user,
			Text: userText(it.conv, it.n, it.kind)}
		if it.kind == kindStranger {
			req.Text = "from another user into " + it.conv
		}
		if sequenced {
			req.Sequence = int64(it.n)
		}
		v, err := req.Encode()
		if err != nil {
			return fmt.Errorf("encode request %s: %w", it.id, err)
		}
		it.value = v
		return nil
	}
	queues := make([][]item, cfg.Conversations)
	for c := range cfg.Conversations {
		conv := fmt.Sprintf("conv-%03d", c+1)
		user := fmt.Sprintf("user-%03d", c+1)
		count := cfg.Requests / cfg.Conversations
		if c < cfg.Requests%cfg.Conversations {
			count++
		}
		specialAt, sk := -1, kindValid
		if c < len(special) && special[c] != kindStranger {
			sk = special[c]
			count++
			specialAt = rng.IntN(count-1) + 1 // never first, so a context is there to miss
		}
		for i := range count {
			it := item{kind: kindValid, id: newID(), conv: conv, n: i + 1}
			if i == specialAt {
				it.kind = sk
			}
			if err := encode(&it, user); err != nil {
				return nil, err
			}
			queues[c] = append(queues[c], it)
		}
		if c < len(special) && special[c] == kindStranger {
			// After the victim's first request, so that the session is the victim's when the
			// stranger comes; with the victim's next sequence, so that a workflow that let
			// the stranger take it would drop the victim's request.
			q := queues[c]
			at := 1 + rng.IntN(len(q))
			it := item{kind: kindStranger, id: newID(), conv: conv, n: len(q) + 1}
			if at < len(q) {
				it.n = q[at].n
			}
			if err := encode(&it, fmt.Sprintf("intruder-%03d", c+1)); err != nil {
				return nil, err
			}
			queues[c] = append(q[:at], append([]item{it}, q[at:]...)...)
		}
	}
	for range cfg.Invalid {
		c := rng.IntN(cfg.Conversations)
		it := item{kind: kindInvalid, id: newID(), conv: fmt.Sprintf("conv-%03d", c+1)}
		it.value = fmt.Appendf(nil, `{"schema":1,"request_id":%q,"conversation_id":%q,"text":`, it.id, it.conv)
		// An invalid record goes anywhere in its conversation: it must not hold up the rest.
		q := queues[c]
		at := rng.IntN(len(q) + 1)
		queues[c] = append(q[:at], append([]item{it}, q[at:]...)...)
	}
	var live []int
	for c := range queues {
		live = append(live, c)
	}
	for len(live) > 0 {
		i := rng.IntN(len(live))
		c := live[i]
		w.order = append(w.order, queues[c][0])
		queues[c] = queues[c][1:]
		if len(queues[c]) == 0 {
			live = append(live[:i], live[i+1:]...)
		}
	}
	for _, it := range w.order {
		w.byID[it.id] = it
	}
	return w, nil
}

// count returns how many items are of kind k.
func (w *workload) count(k kind) int {
	n := 0
	for _, it := range w.order {
		if it.kind == k {
			n++
		}
	}
	return n
}

// produce sends the workload at rate records per second with a kgo client (idempotent, which
// keeps each partition's order through retries and broker restarts), keyed by conversation.
// It returns once every record is acknowledged, or with the first produce error.
func produce(ctx context.Context, brokers []string, topic string, w *workload, rate int, sent *atomic.Int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 250 * time.Millisecond }))
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer cl.Close()
	var (
		mu       sync.Mutex
		firstErr error
	)
	const tick = 100 * time.Millisecond
	perTick := max(1, rate/int(time.Second/tick))
	t := time.NewTicker(tick)
	defer t.Stop()
	for i := 0; i < len(w.order); {
		for j := 0; j < perTick && i < len(w.order); j, i = j+1, i+1 {
			it := w.order[i]
			cl.Produce(ctx, &kgo.Record{Key: []byte(it.conv), Value: it.value}, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, fmt.Errorf("produce %s: %w", it.id, err))
					mu.Unlock()
					return
				}
				sent.Add(1)
			})
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("producer flush: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return firstErr
}

// cmpErr returns first, or err when first is nil.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
