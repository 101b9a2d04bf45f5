package turnotel_test

import (
	"context"
	"database/sql"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// calls records which methods of a fake inbox ran.
type calls struct {
	mu    sync.Mutex
	names []string
}

func (c *calls) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, name)
}

// The parts of a fake inbox, one per optional interface, so that a test can assemble every
// combination of them (embedding two interfaces that share Inbox's methods would hide them).
type (
	txPart      struct{ c *calls }
	journalPart struct{ c *calls }
	outboxPart  struct{ c *calls }
	txOutPart   struct{ c *calls }
)

func (p txPart) TxDB() *sql.DB { return nil }
func (p txPart) CompleteTx(context.Context, inbox.SQLTx, string, []byte) error {
	p.c.add("CompleteTx")
	return nil
}
func (p journalPart) Steps(context.Context, string) ([]inbox.Step, error) {
	p.c.add("Steps")
	return nil, nil
}
func (p journalPart) RecordStep(_ context.Context, _ string, s inbox.Step) (inbox.Step, error) {
	p.c.add("RecordStep")
	return s, nil
}
func (p outboxPart) Promote(context.Context, string, int) (int, error) {
	p.c.add("Promote")
	return 0, nil
}
func (p outboxPart) Claim(context.Context, int, time.Duration) ([]inbox.Intent, error) {
	p.c.add("Claim")
	return nil, nil
}
func (p outboxPart) Delivered(context.Context, string, int) error { p.c.add("Delivered"); return nil }
func (p outboxPart) Retry(context.Context, string, int, string, time.Time) error {
	p.c.add("Retry")
	return nil
}
func (p outboxPart) Bury(context.Context, string, int, string) error { p.c.add("Bury"); return nil }
func (p outboxPart) Intents(context.Context, inbox.IntentFilter) ([]inbox.Intent, error) {
	p.c.add("Intents")
	return nil, nil
}
func (p outboxPart) RedriveIntent(context.Context, string, string) (inbox.Intent, error) {
	p.c.add("RedriveIntent")
	return inbox.Intent{}, nil
}
func (p txOutPart) PromoteTx(context.Context, inbox.SQLTx, string, int) (int, error) {
	p.c.add("PromoteTx")
	return 0, nil
}

// The inbox wrapped for tracing implements each optional interface (TxCompleter, Journal,
// Outbox, TxOutbox) exactly when the wrapped inbox does, for every combination, and each
// method of each passes through with a span.
func TestWrappedInboxKeepsItsInterfaces(t *testing.T) {
	t.Parallel()
	c := &calls{}
	base := inbox.NewMemoryInbox()
	tx, j, o, txo := txPart{c}, journalPart{c}, outboxPart{c}, txOutPart{c}
	combos := map[string]inbox.Inbox{
		"plain": struct{ inbox.Inbox }{base},
		"tx": struct {
			inbox.Inbox
			txPart
		}{base, tx},
		"journal": struct {
			inbox.Inbox
			journalPart
		}{base, j},
		"journal+tx": struct {
			inbox.Inbox
			journalPart
			txPart
		}{base, j, tx},
		"outbox": struct {
			inbox.Inbox
			journalPart
			outboxPart
		}{base, j, o},
		"outbox+tx": struct {
			inbox.Inbox
			journalPart
			outboxPart
			txPart
		}{base, j, o, tx},
		"txoutbox": struct {
			inbox.Inbox
			journalPart
			outboxPart
			txPart
			txOutPart
		}{base, j, o, tx, txo},
	}
	ifaces := map[string]reflect.Type{
		"TxCompleter": reflect.TypeFor[inbox.TxCompleter](),
		"Journal":     reflect.TypeFor[inbox.Journal](),
		"Outbox":      reflect.TypeFor[inbox.Outbox](),
		"TxOutbox":    reflect.TypeFor[inbox.TxOutbox](),
	}
	seen := map[string]bool{}
	for name, ib := range combos {
		rec := tracetest.NewSpanRecorder()
		wrapped := turnotel.Inbox(ib, turnotel.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
		require.NotEqual(t, reflect.TypeOf(ib), reflect.TypeOf(wrapped), name)
		var has []string
		for iname, it := range ifaces {
			orig := reflect.TypeOf(ib).Implements(it)
			require.Equal(t, orig, reflect.TypeOf(wrapped).Implements(it), "%s: %s", name, iname)
			if orig {
				has = append(has, iname)
			}
		}
		seen[name] = true
		ctx := context.Background()
		want := 0
		if w, ok := wrapped.(inbox.TxCompleter); ok {
			require.NoError(t, w.CompleteTx(ctx, nil, "k", nil))
			want++
		}
		if w, ok := wrapped.(inbox.Journal); ok {
			_, err := w.Steps(ctx, "k")
			require.NoError(t, err)
			_, err = w.RecordStep(ctx, "k", inbox.Step{Ordinal: 1, Name: "model"})
			require.NoError(t, err)
			want += 2
		}
		if w, ok := wrapped.(inbox.Outbox); ok {
			_, err := w.Promote(ctx, "k", 0)
			require.NoError(t, err)
			_, err = w.Claim(ctx, 1, time.Minute)
			require.NoError(t, err)
			require.NoError(t, w.Delivered(ctx, "i", 1))
			require.NoError(t, w.Retry(ctx, "i", 1, "r", time.Now()))
			require.NoError(t, w.Bury(ctx, "i", 1, "r"))
			_, err = w.Intents(ctx, inbox.IntentFilter{})
			require.NoError(t, err)
			_, err = w.RedriveIntent(ctx, "i", "n")
			require.NoError(t, err)
			want += 7
		}
		if w, ok := wrapped.(inbox.TxOutbox); ok {
			_, err := w.PromoteTx(ctx, nil, "k", 0)
			require.NoError(t, err)
			want++
		}
		require.Len(t, rec.Ended(), want, "%s (%v): one span per call", name, has)
	}
	require.Len(t, seen, 7)
	require.Positive(t, len(c.names))
}
