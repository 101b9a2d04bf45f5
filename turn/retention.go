package turn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
)

// Defaults of Retention: how long what a turn stores is kept.
const (
	// DefaultInboxHorizon is Retention.InboxHorizon's default: done and dead inbox entries
	// (results, failure reasons, journals) and delivered and dead outbox intents are kept 14
	// days after their last update, twice Kafka's default retention.ms (7 days), so that a
	// request delivered again is still answered from its stored result.
	DefaultInboxHorizon = 14 * 24 * time.Hour
	// DefaultAttachmentIdle is Retention.AttachmentIdle's default: an attachment is kept 30
	// days after its last Put.
	DefaultAttachmentIdle = 30 * 24 * time.Hour
	// DefaultSessionIdle is Retention.SessionIdle's default: a session (its whole history,
	// checkpoints and state) is kept 90 days after its last turn.
	DefaultSessionIdle = 90 * 24 * time.Hour
)

// Retention keeps what turnstile stores per turn bounded: the inbox entries with their
// journals and the outbox intents (inbox.Inbox.Purge), the sessions (session.Retention), the
// attachments (attachment.Retention). A service runs it on a schedule, as it would run the
// inbox's purge (inbox.RunPurge), and calls EraseUser for a data-deletion request (with
// External set to a workflow.UserEraser in Temporal mode):
//
//	ret := turn.NewRetention(runner) // the Runner's stores, the default horizons
//	go func() { _ = ret.Schedule(ctx) }()
//
// A nil store is left alone. The inbox's purge is not by app: it deletes the old entries of
// every app sharing the inbox; the sessions and attachments are those of App only. Compaction
// deletes nothing: a session keeps its every event and checkpoint until it is idle for
// SessionIdle (or its user is deleted). docs/RETENTION.md says what is kept, where, and for
// how long. In Temporal mode, schedule workflow.RunLedgerPurge beside it.
type Retention struct {
	// App is the app whose sessions and attachments are deleted; default DefaultApp.
	App string
	// Inbox is purged of done and dead entries (with their journals) and of delivered and
	// dead outbox intents older than InboxHorizon; nil: not purged.
	Inbox inbox.Inbox
	// Sessions loses the sessions of App idle for SessionIdle; nil: none deleted.
	Sessions session.Retention
	// Attachments loses the attachments of App not put for AttachmentIdle; nil: none
	// deleted.
	Attachments attachment.Retention
	// InboxHorizon is how long a done or dead inbox entry, and a delivered or dead outbox
	// intent, is kept after its last update; default DefaultInboxHorizon. Keep it longer
	// than the requests topic's retention.ms: a request delivered again after its entry was
	// purged runs again as new. Entries in progress and pending intents are never purged.
	InboxHorizon time.Duration
	// SessionIdle is how long a session is kept after its last update; default
	// DefaultSessionIdle. Keep it at least InboxHorizon: DeleteUser finds a user's inbox
	// entries through their sessions.
	SessionIdle time.Duration
	// External, when set, erases what the service keeps of a user outside these stores, in
	// EraseUser and DeleteUser (before these stores): in Temporal mode, workflow.UserEraser
	// (the conversation workflows' histories and the hand-off ledger).
	External UserEraser
	// AttachmentIdle is how long an attachment is kept after its last Put; default
	// DefaultAttachmentIdle. Keep it longer than the requests topic's retention.ms: a request
	// whose attachment is gone before its turn ran is dead-lettered.
	AttachmentIdle time.Duration
	// Every is the time between two runs of Schedule; default the shortest horizon in use
	// over 24, at least a minute (14 hours with the defaults).
	Every time.Duration
	// Logger gets a line per scheduled run that deleted something or failed; default
	// slog.Default().
	Logger *slog.Logger
	// NowFunc returns the current time; default time.Now.
	NowFunc func() time.Time
	// RanFunc, when set, is called after each scheduled run with what it deleted and its
	// error.
	RanFunc func(Deleted, error)
}

// Deleted counts what a retention run or a user's deletion deleted.
type Deleted struct {
	// Inbox counts inbox entries (each with its journal's steps) and outbox intents.
	Inbox int64
	// Sessions counts sessions, each with its history, checkpoints and state.
	Sessions int64
	// Attachments counts attachments.
	Attachments int64
}

// NewRetention returns the Retention of r's stores with the default horizons: App, Inbox,
// Sessions when r.Sessions is a session.Retention, Attachments when r.Attachments is an
// attachment.Retention. Stores wrapped by turn/turnotel purge and delete by age, and
// EraseUser looks through them (their Unwrap methods) for the interfaces it needs; their
// calls are then not traced.
func NewRetention(r *Runner) Retention {
	ret := Retention{App: r.App, Inbox: r.Inbox}
	ret.Sessions, _ = r.Sessions.(session.Retention)
	ret.Attachments, _ = r.Attachments.(attachment.Retention)
	return ret
}

// Validate reports an error when a horizon or Every is negative, or when no store is set.
func (r Retention) Validate() error {
	switch {
	case r.InboxHorizon < 0, r.SessionIdle < 0, r.AttachmentIdle < 0, r.Every < 0:
		return errors.New("turn: Retention.InboxHorizon, SessionIdle, AttachmentIdle and Every must not be negative")
	case r.Inbox == nil && r.Sessions == nil && r.Attachments == nil:
		return errors.New("turn: Retention has no store: set Inbox, Sessions or Attachments")
	}
	return nil
}

func (r Retention) app() string { return cmp.Or(r.App, DefaultApp) }
func (r Retention) now() time.Time {
	if r.NowFunc != nil {
		return r.NowFunc()
	}
	return time.Now()
}

// every returns Every, or its default.
func (r Retention) every() time.Duration {
	if r.Every > 0 {
		return r.Every
	}
	shortest := time.Duration(0)
	for _, h := range []struct {
		on bool
		d  time.Duration
	}{
		{r.Inbox != nil, cmp.Or(r.InboxHorizon, DefaultInboxHorizon)},
		{r.Sessions != nil, cmp.Or(r.SessionIdle, DefaultSessionIdle)},
		{r.Attachments != nil, cmp.Or(r.AttachmentIdle, DefaultAttachmentIdle)},
	} {
		if h.on && (shortest == 0 || h.d < shortest) {
			shortest = h.d
		}
	}
	return max(time.Minute, shortest/24)
}

// Run runs the retention once: the inbox's purge with the cutoff now less InboxHorizon, then
// the deletion of App's sessions idle since before now less SessionIdle, then that of its
// attachments not put since before now less AttachmentIdle. A part that fails does not stop
// the others; the error joins theirs, each naming its part, and Deleted counts what was
// deleted, also by a part that failed part way (each store deletes in batches that commit
// on their own, so a run that fails loses no work). Errors: Validate's, the stores'.
func (r Retention) Run(ctx context.Context) (Deleted, error) {
	var d Deleted
	if err := r.Validate(); err != nil {
		return d, err
	}
	now := r.now()
	var errs []error
	if r.Inbox != nil {
		n, err := r.Inbox.Purge(ctx, now.Add(-cmp.Or(r.InboxHorizon, DefaultInboxHorizon)))
		d.Inbox = n
		if err != nil {
			errs = append(errs, fmt.Errorf("inbox purge: %w", err))
		}
	}
	if r.Sessions != nil {
		n, err := r.Sessions.DeleteIdle(ctx, r.app(), now.Add(-cmp.Or(r.SessionIdle, DefaultSessionIdle)))
		d.Sessions = n
		if err != nil {
			errs = append(errs, fmt.Errorf("idle sessions: %w", err))
		}
	}
	if r.Attachments != nil {
		n, err := r.Attachments.DeleteIdle(ctx, r.app(), now.Add(-cmp.Or(r.AttachmentIdle, DefaultAttachmentIdle)))
		d.Attachments = n
		if err != nil {
			errs = append(errs, fmt.Errorf("idle attachments: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return d, fmt.Errorf("turn: retention: %w", err)
	}
	return d, nil
}

// Schedule calls Run at once and then every Every until ctx ends; then it returns nil. A
// failed run is logged and the next one tries again. Run one per service (several are
// harmless: they delete the same rows). Errors: Validate's, before any run.
func (r Retention) Schedule(ctx context.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	logger := cmp.Or(r.Logger, slog.Default())
	tick := time.NewTicker(r.every())
	defer tick.Stop()
	for {
		d, err := r.Run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			logger.Warn("retention run failed; trying again at the next run", "app", r.app(), "inbox", d.Inbox,
				"sessions", d.Sessions, "attachments", d.Attachments, "err", err)
		case d != Deleted{}:
			logger.Info("retention run", "app", r.app(), "inbox", d.Inbox, "sessions", d.Sessions, "attachments", d.Attachments)
		}
		if r.RanFunc != nil {
			r.RanFunc(d, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// DeleteUser is EraseUser, not a dry run, with its counts summed up as Deleted's: Inbox counts
// the inbox entries and the outbox intents, Sessions the sessions, Attachments the
// attachments (the events, the journal steps and what External erased are in EraseUser's
// Erasure). Errors are EraseUser's.
func (r Retention) DeleteUser(ctx context.Context, user string) (Deleted, error) {
	e, err := r.EraseUser(ctx, user, false)
	return Deleted{
		Inbox:       e.Count(ErasedInboxEntries) + e.Count(ErasedOutboxIntents),
		Sessions:    e.Count(ErasedSessions),
		Attachments: e.Count(ErasedAttachments),
	}, err
}

// unwrapAs returns v as a T, or the store it wraps (a decorator's Unwrap method returning a
// session.Store or an inbox.Inbox, as turn/turnotel's wrappers have) as one, outermost first.
func unwrapAs[T any](v any) (T, bool) {
	for v != nil {
		if t, ok := v.(T); ok {
			return t, true
		}
		switch w := v.(type) {
		case interface{ Unwrap() session.Store }:
			v = w.Unwrap()
		case interface{ Unwrap() inbox.Inbox }:
			v = w.Unwrap()
		default:
			v = nil
		}
	}
	var zero T
	return zero, false
}

// inboxKeySuffix returns what every inbox key (InboxKey) of a request of (app, user,
// conversation) ends in: "/" and the scope's UUID.
func inboxKeySuffix(app, user, conversation string) string {
	var name [256]byte
	return "/" + nameUUID(inboxScopeNamespace, appendLengthPrefixed(name[:0], app, user, conversation))
}
