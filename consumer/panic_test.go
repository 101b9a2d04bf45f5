package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
	"github.com/turnstile-go/turnstile/turntest"
)

// panicAppend is a session store whose Append panics for one conversation, as a store with a
// bug for some input would.
type panicAppend struct {
	session.Store
	conv string
}

func (s panicAppend) Append(ctx context.Context, k session.Key, v int64, t session.Turn) (session.Appended, error) {
	if k.Conversation == s.conv {
		var m map[string]int
		//lint:ignore SA5000 the panic is the point: a nil map write, a bug in the host's store
		m["boom"]++
	}
	return s.Store.Append(ctx, k, v, t)
}

// A panic in the Handler, a store method, TurnContextFunc or the decoder fails an attempt with
// the panic in the reason; the member's other turns finish, the member never exits, and each
// panicking request is dead-lettered once its attempts run out, with the panic in its reason.
func TestPanicsFailAttemptsNotTheMember(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	m := e.start(memberOpts{
		runner: func(r *turn.Runner) { r.Sessions = panicAppend{Store: r.Sessions, conv: "p-store"} },
		wrap: func(h consumer.Handler) consumer.Handler {
			return consumer.HandlerFunc(func(ctx context.Context, req turn.Request) (*turn.Result, error) {
				if req.ConversationID == "p-handler" {
					panic(fmt.Sprintf("handler bug for %s", req.ID))
				}
				return h.Handle(ctx, req)
			})
		},
		tune: func(cfg *consumer.Config) {
			cfg.RetryBackoff, cfg.MaxRetryBackoff = 5*time.Millisecond, 20*time.Millisecond
			cfg.TurnContextFunc = func(ctx context.Context, req turn.Request) (context.Context, context.CancelFunc) {
				if req.ConversationID == "p-ctx" {
					var p *turn.Request
					_ = p.ID // a nil pointer dereference
				}
				return ctx, nil
			}
		},
		before: func(c *consumer.Consumer) {
			consumer.SetDecodeHook(c, func(msg *sarama.ConsumerMessage) {
				if string(msg.Key) == "p-decoder" {
					panic("decoder bug")
				}
			})
		},
	})
	var ok []turn.Request
	for i := range 20 {
		ok = append(ok, request(fmt.Sprintf("ok-%d", i%5), fmt.Sprintf("hello %d", i)))
	}
	bad := map[string]string{
		"p-handler": "panic in handler: handler bug for ",
		"p-store":   "panic in session or inbox store: assignment to entry in nil map",
		"p-ctx":     "panic in TurnContextFunc: runtime error: invalid memory address or nil pointer dereference",
		"p-decoder": "panic in decoder: decoder bug",
	}
	var all []turn.Request
	for i, r := range ok {
		all = append(all, r)
		if i == 3 {
			for conv := range bad {
				all = append(all, request(conv, "this one panics"))
			}
		}
	}
	e.produce(all...)
	results := e.resultsByID(len(ok))
	for _, r := range ok {
		require.Len(t, results[r.ID], 1, "every other turn of the member finished")
	}
	dls := e.cluster.ReadAll(t, e.dlq, len(bad), wait)
	require.Len(t, dls, len(bad))
	for _, dl := range dls {
		h := turntest.HeaderMap(dl)
		want, known := bad[string(dl.Key)]
		require.True(t, known, "dead letter of %q", dl.Key)
		require.Contains(t, h[consumer.HeaderReason], want)
		require.Contains(t, h[consumer.HeaderReason], "[at ", "the reason has the trimmed stack")
		require.Equal(t, "3", h[consumer.HeaderAttempts], "dead-lettered after its attempts (%s)", dl.Key)
		require.Equal(t, turn.KindAttempt.String(), h[consumer.HeaderKind])
	}
	select {
	case err := <-m.done:
		t.Fatalf("the member exited: %v", err)
	default:
	}
	require.True(t, m.c.Health().Ready(), "the member still serves")
}

// With metrics on, a request that must run alone (turn.KindRunAlone, crash isolation) is
// served and counted: the attempts counter has an attribute set for every turn.Kind (the one
// missing here once put every member that took the partition in a panic loop).
func TestMetricsOnRunAloneIsServed(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var asked atomic.Bool
	m := e.start(memberOpts{
		wrap: func(h consumer.Handler) consumer.Handler {
			return consumer.HandlerFunc(func(ctx context.Context, req turn.Request) (*turn.Result, error) {
				if req.Text == "alone" && asked.CompareAndSwap(false, true) {
					return nil, turn.ErrRunAlone
				}
				return h.Handle(ctx, req)
			})
		},
		tune: func(cfg *consumer.Config) { cfg.Telemetry = turnotel.Options{MeterProvider: mp} },
	})
	alone := request("a-1", "alone")
	e.produce(alone, request("a-2", "beside"))
	results := e.resultsByID(2)
	require.Len(t, results[alone.ID], 1, "the request that must run alone is served")
	require.EqualValues(t, 1, m.c.Stats().Alone)
	group := attribute.String("messaging.consumer.group.name", e.group)
	kind := func(k turn.Kind) string { return attrs(group, attribute.String("turnstile.error.kind", k.String())) }
	eventually(t, func() bool { return collect(t, reader, consumer.MetricAttempts)[kind(turn.KindNone)] == 2 }, "both served")
	require.Equal(t, int64(1), collect(t, reader, consumer.MetricAttempts)[kind(turn.KindRunAlone)])
}

// A 1.2 MB answer, over the producer's default Producer.MaxMessageBytes (sarama's 1 MiB), is
// dead-lettered before the session append, with a reason naming the limit: the conversation's
// next turn never sees an answer its user was not given.
func TestAnswerTooLargeToPublishIsNotAppended(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	e.start(memberOpts{model: func(_ context.Context, in turn.Input) (turn.Output, error) {
		if in.Request.Text == "write a novel" {
			return turn.Output{Events: []session.Event{{Text: strings.Repeat("words ", 200_000)}}}, nil
		}
		return echo(in)
	}})
	big, next := request("big-1", "write a novel"), request("big-1", "and now?")
	e.produce(big, next)
	results := e.resultsByID(1)
	require.Len(t, results[next.ID], 1, "the conversation goes on")
	dls := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dls, 1)
	h := turntest.HeaderMap(dls[0])
	require.Equal(t, big.ID, h[consumer.HeaderRequestID])
	require.Equal(t, turn.KindPermanent.String(), h[consumer.HeaderKind])
	require.Contains(t, h[consumer.HeaderReason], "over the limit of")
	require.Contains(t, h[consumer.HeaderReason], fmt.Sprintf("Producer.MaxMessageBytes of %d bytes", sarama.NewConfig().Producer.MaxMessageBytes))
	texts, perRequest := e.history("big-1")
	require.Zero(t, perRequest[big.ID], "the session holds no turn of the refused answer")
	require.Equal(t, []string{"and now?"}, texts)
}
