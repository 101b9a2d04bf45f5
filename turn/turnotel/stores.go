package turnotel

import (
	"context"
	"database/sql"
	"errors"
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

// Inbox returns ib with a span around each call. It implements each of inbox.TxCompleter,
// inbox.Journal, inbox.Outbox and inbox.TxOutbox exactly when ib does, so the Runner's joint
// transaction, step journal and outbox keep working through it (TestWrappedInboxKeepsItsInterfaces
// walks every combination). ib itself when tracing is off.
func Inbox(ib inbox.Inbox, o Options) inbox.Inbox {
	tr := o.Tracer()
	if ib == nil || tr == nil {
		return ib
	}
	base := &inboxes{Inbox: ib, ib: ib, tracer: tr}
	tx, isTx := ib.(inbox.TxCompleter)
	j, isJournal := ib.(inbox.Journal)
	ob, isOutbox := ib.(inbox.Outbox)
	var (
		txm = &txMethods{tx: tx, tracer: tr}
		jm  = &journalMethods{j: j, tracer: tr}
		om  = &outboxMethods{ob: ob, tracer: tr}
	)
	switch txo, isTxOutbox := ib.(inbox.TxOutbox); {
	case isTxOutbox:
		return &txOutboxInbox{base, jm, om, txm, &txOutboxMethods{txo: txo, tracer: tr}}
	case isOutbox && isTx:
		return &outboxTxInbox{base, jm, om, txm}
	case isOutbox:
		return &outboxInbox{base, jm, om}
	case isJournal && isTx:
		return &journalTxInbox{base, jm, txm}
	case isJournal:
		return &journalInbox{base, jm}
	case isTx:
		return &txInbox{base, txm}
	}
	return base
}

// The wrappers of each combination of the inbox's optional interfaces: the methods of each
// interface live in one *Methods type, embedded where the combination has it.
type (
	txInbox struct {
		*inboxes
		*txMethods
	}
	journalInbox struct {
		*inboxes
		*journalMethods
	}
	journalTxInbox struct {
		*inboxes
		*journalMethods
		*txMethods
	}
	outboxInbox struct {
		*inboxes
		*journalMethods
		*outboxMethods
	}
	outboxTxInbox struct {
		*inboxes
		*journalMethods
		*outboxMethods
		*txMethods
	}
	txOutboxInbox struct {
		*inboxes
		*journalMethods
		*outboxMethods
		*txMethods
		*txOutboxMethods
	}
)

// journalMethods trace inbox.Journal's methods.
type journalMethods struct {
	j      inbox.Journal
	tracer trace.Tracer
}

func (b *journalMethods) Steps(ctx context.Context, key string) ([]inbox.Step, error) {
	ctx, span := start(ctx, b.tracer, "inbox.Steps")
	steps, err := b.j.Steps(ctx, key)
	end(span, err)
	return steps, err
}

func (b *journalMethods) RecordStep(ctx context.Context, key string, s inbox.Step) (inbox.Step, error) {
	ctx, span := start(ctx, b.tracer, "inbox.RecordStep", AttrStep.Int(s.Ordinal), AttrStepName.String(s.Name))
	st, err := b.j.RecordStep(ctx, key, s)
	end(span, err)
	return st, err
}

// outboxMethods trace inbox.Outbox's own methods.
type outboxMethods struct {
	ob     inbox.Outbox
	tracer trace.Tracer
}

func (b *outboxMethods) Promote(ctx context.Context, key string, through int) (int, error) {
	ctx, span := start(ctx, b.tracer, "inbox.Promote")
	n, err := b.ob.Promote(ctx, key, through)
	end(span, err)
	return n, err
}

func (b *outboxMethods) Claim(ctx context.Context, n int, lease time.Duration) ([]inbox.Intent, error) {
	ctx, span := start(ctx, b.tracer, "outbox.Claim")
	its, err := b.ob.Claim(ctx, n, lease)
	end(span, err)
	return its, err
}

func (b *outboxMethods) Delivered(ctx context.Context, id string, attempt int) error {
	ctx, span := start(ctx, b.tracer, "outbox.Delivered")
	err := b.ob.Delivered(ctx, id, attempt)
	end(span, settled(err))
	return err
}

func (b *outboxMethods) Retry(ctx context.Context, id string, attempt int, reason string, at time.Time) error {
	ctx, span := start(ctx, b.tracer, "outbox.Retry")
	err := b.ob.Retry(ctx, id, attempt, reason, at)
	end(span, settled(err))
	return err
}

func (b *outboxMethods) Bury(ctx context.Context, id string, attempt int, reason string) error {
	ctx, span := start(ctx, b.tracer, "outbox.Bury")
	err := b.ob.Bury(ctx, id, attempt, reason)
	end(span, settled(err))
	return err
}

func (b *outboxMethods) Intents(ctx context.Context, f inbox.IntentFilter) ([]inbox.Intent, error) {
	ctx, span := start(ctx, b.tracer, "outbox.Intents")
	its, err := b.ob.Intents(ctx, f)
	end(span, err)
	return its, err
}

func (b *outboxMethods) RedriveIntent(ctx context.Context, id, note string) (inbox.Intent, error) {
	ctx, span := start(ctx, b.tracer, "outbox.RedriveIntent")
	it, err := b.ob.RedriveIntent(ctx, id, note)
	end(span, err)
	return it, err
}

// txOutboxMethods trace inbox.TxOutbox's own method.
type txOutboxMethods struct {
	txo    inbox.TxOutbox
	tracer trace.Tracer
}

func (b *txOutboxMethods) PromoteTx(ctx context.Context, tx inbox.SQLTx, key string, through int) (int, error) {
	ctx, span := start(ctx, b.tracer, "inbox.Promote")
	n, err := b.txo.PromoteTx(ctx, tx, key, through)
	end(span, err)
	return n, err
}

// inboxes embeds the Inbox, so a method it gains later passes through, untraced, until a
// span is added here.
type inboxes struct {
	inbox.Inbox
	ib     inbox.Inbox
	tracer trace.Tracer
}

// Unwrap returns the wrapped Inbox, for a caller that needs an optional interface the
// wrapper does not trace (turn.Retention.DeleteUser's inbox.Eraser).
func (b *inboxes) Unwrap() inbox.Inbox { return b.ib }

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

// txMethods trace inbox.TxCompleter's own methods.
type txMethods struct {
	tx     inbox.TxCompleter
	tracer trace.Tracer
}

func (b *txMethods) TxDB() *sql.DB { return b.tx.TxDB() }

func (b *txMethods) CompleteTx(ctx context.Context, tx inbox.SQLTx, requestID string, result []byte) error {
	ctx, span := start(ctx, b.tracer, "inbox.Complete")
	err := b.tx.CompleteTx(ctx, tx, requestID, result)
	end(span, err)
	return err
}

// settled is a relay's settle error as its span records it: inbox.ErrLeaseLost (another
// relay claimed the intent since; nothing changed) is an outcome the relay expects, not a
// failure.
func settled(err error) error {
	if errors.Is(err, inbox.ErrLeaseLost) {
		return nil
	}
	return err
}
