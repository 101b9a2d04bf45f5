package turnotel

import (
	"context"
	"database/sql"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
)

// txSessions is sessions over a session.TxAppender: the Runner's joint append-and-complete
// transaction keeps working through it.
type txSessions struct {
	*sessions
	tx session.TxAppender
}

func (s *txSessions) TxDB() *sql.DB { return s.tx.TxDB() }

func (s *txSessions) AppendTx(ctx context.Context, key session.Key, expectedVersion int64, t session.Turn, join session.JoinFunc) (session.Appended, error) {
	ctx, span := start(ctx, s.tracer, "session.Append")
	v, err := s.tx.AppendTx(ctx, key, expectedVersion, t, join)
	if span != nil && err == nil && v.Duplicate {
		span.SetAttributes(AttrDuplicate.Bool(true))
	}
	end(span, err)
	return v, err
}

// Inbox returns ib with a span around each call; it implements inbox.TxCompleter when ib
// does. ib itself when tracing is off.
func Inbox(ib inbox.Inbox, o Options) inbox.Inbox {
	tr := o.Tracer()
	if ib == nil || tr == nil {
		return ib
	}
	base := &inboxes{Inbox: ib, ib: ib, tracer: tr}
	if tx, ok := ib.(inbox.TxCompleter); ok {
		return &txInbox{inboxes: base, tx: tx}
	}
	return base
}

// inboxes embeds the Inbox, so a method it gains later passes through, untraced, until a
// span is added here.
type inboxes struct {
	inbox.Inbox
	ib     inbox.Inbox
	tracer trace.Tracer
}

func (b *inboxes) Begin(ctx context.Context, d inbox.Delivery) (inbox.Entry, error) {
	ctx, span := start(ctx, b.tracer, "inbox.Begin")
	e, err := b.ib.Begin(ctx, d)
	if span != nil && err == nil {
		span.SetAttributes(AttrInboxStatus.String(e.Status.String()), AttrAttempt.Int(e.Attempts))
	}
	end(span, err)
	return e, err
}

func (b *inboxes) Complete(ctx context.Context, requestID string, result []byte) error {
	ctx, span := start(ctx, b.tracer, "inbox.Complete")
	err := b.ib.Complete(ctx, requestID, result)
	end(span, err)
	return err
}

func (b *inboxes) Fail(ctx context.Context, requestID string, f inbox.Failure) error {
	ctx, span := start(ctx, b.tracer, "inbox.Fail", attribute.Bool("turnstile.inbox.refund", f.Refund))
	err := b.ib.Fail(ctx, requestID, f)
	end(span, err)
	return err
}

func (b *inboxes) MarkDead(ctx context.Context, requestID, reason string) error {
	ctx, span := start(ctx, b.tracer, "inbox.MarkDead")
	err := b.ib.MarkDead(ctx, requestID, reason)
	end(span, err)
	return err
}

func (b *inboxes) Get(ctx context.Context, requestID string) (inbox.Entry, error) {
	ctx, span := start(ctx, b.tracer, "inbox.Get")
	e, err := b.ib.Get(ctx, requestID)
	end(span, ignoreNotFound(err))
	return e, err
}

func (b *inboxes) Purge(ctx context.Context, before time.Time) (int64, error) {
	ctx, span := start(ctx, b.tracer, "inbox.Purge")
	n, err := b.ib.Purge(ctx, before)
	end(span, err)
	return n, err
}

// CheckConcurrency passes the Runner's question on to the inbox (turn.Runner.CheckConcurrency).
func (b *inboxes) CheckConcurrency(n int) error { return checkConcurrency(b.ib, n) }

// Location returns the wrapped inbox's Location, "" when it has none.
func (b *inboxes) Location(ctx context.Context) (string, error) { return location(ctx, b.ib) }

type txInbox struct {
	*inboxes
	tx inbox.TxCompleter
}

func (b *txInbox) TxDB() *sql.DB { return b.tx.TxDB() }

func (b *txInbox) CompleteTx(ctx context.Context, tx inbox.SQLTx, requestID string, result []byte) error {
	ctx, span := start(ctx, b.tracer, "inbox.Complete")
	err := b.tx.CompleteTx(ctx, tx, requestID, result)
	end(span, err)
	return err
}
