package turn

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
)

// The kinds of what a user's erasure deletes (ErasedKind.Name), in the order EraseUser
// reports them. An External eraser adds its own (workflow.UserEraser: ErasedWorkflowRuns,
// ErasedLedgerRows).
const (
	// ErasedWorkflowRuns counts Temporal runs, each with its history (the inputs of its
	// signals, updates and activities: the user's texts and the turns' results).
	ErasedWorkflowRuns = "workflow runs"
	// ErasedLedgerRows counts rows of Temporal mode's hand-off ledger: the requests handed
	// off (with their texts), the overflow of pending ones, the conversations' States.
	ErasedLedgerRows = "ledger rows"
	// ErasedInboxEntries counts inbox entries, each with its stored result or failure reason.
	ErasedInboxEntries = "inbox entries"
	// ErasedJournalSteps counts step journal rows: the outputs of model calls and tools.
	ErasedJournalSteps = "journal steps"
	// ErasedOutboxIntents counts outbox intents with their payloads, pending ones too.
	ErasedOutboxIntents = "outbox intents"
	// ErasedSessions counts sessions, each with its state.
	ErasedSessions = "sessions"
	// ErasedEvents counts the events of those sessions' histories, the compactions'
	// checkpoints included.
	ErasedEvents = "session events"
	// ErasedAttachments counts attachments with their content.
	ErasedAttachments = "attachments"
)

// ErasedKind is one kind of what a user's erasure deleted, or in a dry run would delete.
type ErasedKind struct {
	// Name is one of the Erased constants (or an External eraser's own kind).
	Name string `json:"kind"`
	// Where says the store: "inbox", "session store", a Temporal namespace, ...
	Where string `json:"where"`
	// Count is how many rows, runs or files.
	Count int64 `json:"count"`
}

// Erasure is what Retention.EraseUser deleted or, in a dry run, would delete.
type Erasure struct {
	App    string `json:"app"`
	User   string `json:"user"`
	DryRun bool   `json:"dry_run"`
	// Conversations are the user's conversations found, ascending: those of the user's
	// sessions and those External found (a conversation that never applied a request has
	// no session).
	Conversations []string `json:"conversations"`
	// Kinds lists every kind a store of the Retention keeps, zero counts too, in the order of
	// the deletion: External's first, then the inbox's, the sessions', the attachments'.
	Kinds []ErasedKind `json:"kinds"`
}

// Count returns the count of the kind named name (summed over the stores that keep it), 0
// when no store keeps it.
func (e Erasure) Count(name string) int64 {
	var n int64
	for _, k := range e.Kinds {
		if k.Name == name {
			n += k.Count
		}
	}
	return n
}

// UserErasure is what Retention.EraseUser asks its External eraser for.
type UserErasure struct {
	App  string
	User string
	// Conversations are the conversations of the user's sessions (empty when the Retention
	// has no session store).
	Conversations []string
	// DryRun: count what would be deleted, delete nothing.
	DryRun bool
}

// UserErased is what an External eraser deleted, or in a dry run would delete.
type UserErased struct {
	// Conversations are the conversations of the user it found (those asked included): the
	// Retention erases their inbox entries too.
	Conversations []string
	// Kinds counts what it deleted, kind by kind.
	Kinds []ErasedKind
}

// UserEraser erases what a service keeps of a user outside a Retention's stores (its
// External): workflow.UserEraser does Temporal mode's workflow histories and hand-off ledger.
// It is a separate interface because package workflow builds on this one.
type UserEraser interface {
	// EraseUser deletes, or with DryRun counts, what it keeps of the user: that of the
	// conversations given and of those it finds the user in. Errors: its store's; what it
	// deleted before one stays deleted, and a call made again deletes the rest.
	EraseUser(ctx context.Context, req UserErasure) (UserErased, error)
}

// EraseUser deletes every copy of user's texts that the Retention's stores keep in App,
// whatever its age (a data-deletion request), and returns each kind with its count; with
// dryRun it deletes nothing and returns what it would delete now (the counts of the same
// statements, rolled back in the SQL stores). In order:
//
//  1. the conversations of the user's sessions are listed (session.UserLister);
//  2. External (in Temporal mode workflow.UserEraser) erases the user's workflow runs with
//     their histories and the ledger's rows, and adds the conversations it found: those held
//     at a sequence gap, which never applied a request, have no session;
//  3. the inbox entries of those conversations under the user's own inbox keys, in progress,
//     done or dead, with their stored results and failure reasons, their journal steps and
//     their outbox intents with payloads, pending ones too (inbox.EraseCounter);
//  4. the user's sessions with their events, checkpoints and state (session.UserEraser);
//  5. the user's attachments (attachment.Retention; a dry run needs attachment.UserCounter).
//
// It stops at the first failure, so a call that failed can be made again: the sessions that
// lead to the inbox entries go only after the entries. Stop the user's traffic first: a turn
// in flight meanwhile may store its entry and start a fresh session after it. Inbox entries
// of conversations that neither a session nor External leads to go with the inbox's purge
// only: those of a request refused before its session was made, and those of a session
// deleted before (by SessionIdle, which must therefore be at least InboxHorizon, or by a
// Delete of the session alone; `turnstile session delete --conversation` erases the
// conversation's entries first). Records on Kafka's topics go with the topics' retention. The rows deleted stay in the databases'
// free pages until a vacuum (docs/RETENTION.md).
//
// A store that wraps another (turn/turnotel's, through an Unwrap method) is looked through
// for the interfaces, and its calls are not traced. Errors, before anything is deleted: an
// empty user; an Inbox that is not an inbox.Eraser (a dry run: an inbox.EraseCounter), an
// Inbox or External set with Sessions that is nil or not a session.UserLister, a dry run
// with Sessions that is not a session.UserEraser or Attachments not an
// attachment.UserCounter. Then the stores' errors, with the Erasure of what was done before.
func (r Retention) EraseUser(ctx context.Context, user string, dryRun bool) (Erasure, error) {
	app := r.app()
	e := Erasure{App: app, User: user, DryRun: dryRun, Conversations: []string{}}
	fail := func(format string, args ...any) (Erasure, error) {
		return e, fmt.Errorf("turn: Retention.EraseUser: "+format, args...)
	}
	if user == "" {
		return fail("empty user")
	}
	p, err := r.erasePlan(dryRun)
	if err != nil {
		return fail("%w", err)
	}
	if p.lister != nil {
		keys, err := p.lister.UserSessions(ctx, app, user)
		if err != nil {
			return fail("list the sessions of %s in %s: %w", user, app, err)
		}
		for _, k := range keys {
			e.Conversations = append(e.Conversations, k.Conversation)
		}
	}
	if r.External != nil {
		got, err := r.External.EraseUser(ctx, UserErasure{App: app, User: user, Conversations: slices.Clone(e.Conversations), DryRun: dryRun})
		e.Kinds = append(e.Kinds, got.Kinds...)
		if err != nil {
			return fail("%w", err)
		}
		e.Conversations = append(e.Conversations, got.Conversations...)
		slices.Sort(e.Conversations)
		e.Conversations = slices.Compact(e.Conversations)
	}
	if r.Inbox != nil {
		n, err := r.eraseInbox(ctx, p, user, e.Conversations, dryRun)
		e.Kinds = append(e.Kinds, ErasedKind{ErasedInboxEntries, "inbox", n.Entries},
			ErasedKind{ErasedJournalSteps, "inbox", n.Steps}, ErasedKind{ErasedOutboxIntents, "outbox", n.Intents})
		if err != nil {
			return fail("erase the inbox entries of %s in %s: %w", user, app, err)
		}
	}
	if r.Sessions != nil {
		var n session.UserCounts
		if p.sessions != nil {
			n, err = p.sessions.DeleteUserCounted(ctx, app, user, dryRun)
		} else {
			n.Sessions, err = r.Sessions.DeleteUser(ctx, app, user)
		}
		e.Kinds = append(e.Kinds, ErasedKind{ErasedSessions, "session store", n.Sessions}, ErasedKind{ErasedEvents, "session store", n.Events})
		if err != nil {
			return fail("delete the sessions of %s in %s: %w", user, app, err)
		}
	}
	if r.Attachments != nil {
		var n int64
		if dryRun {
			n, err = p.attachments.CountUser(ctx, app, user)
		} else {
			n, err = r.Attachments.DeleteUser(ctx, app, user)
		}
		e.Kinds = append(e.Kinds, ErasedKind{ErasedAttachments, "attachment store", n})
		if err != nil {
			return fail("delete the attachments of %s in %s: %w", user, app, err)
		}
	}
	return e, nil
}

// erasePlan holds the optional interfaces of a Retention's stores that EraseUser uses.
type erasePlan struct {
	lister      session.UserLister
	sessions    session.UserEraser // nil: DeleteUser, without counting events (not in a dry run)
	eraser      inbox.Eraser
	counter     inbox.EraseCounter // nil: Erase, whose count goes in the entries (not in a dry run)
	attachments attachment.UserCounter
}

// erasePlan finds the interfaces EraseUser needs, or says which one a store lacks.
func (r Retention) erasePlan(dryRun bool) (erasePlan, error) {
	var p erasePlan
	var ok bool
	if r.Inbox != nil || r.External != nil {
		if p.lister, ok = unwrapAs[session.UserLister](r.Sessions); !ok && r.Sessions != nil {
			return p, fmt.Errorf("the sessions (%T) are not a session.UserLister: the user's conversations, and so their inbox entries and workflows, cannot be found", r.Sessions)
		}
		if !ok && r.Inbox != nil {
			return p, errors.New("no session store: the user's conversations, and so their inbox entries, cannot be found")
		}
	}
	if r.Inbox != nil {
		if p.eraser, ok = unwrapAs[inbox.Eraser](r.Inbox); !ok {
			return p, fmt.Errorf("the inbox (%T) is not an inbox.Eraser: the user's entries would stay until the purge", r.Inbox)
		}
		if p.counter, ok = unwrapAs[inbox.EraseCounter](r.Inbox); !ok && dryRun {
			return p, fmt.Errorf("the inbox (%T) is not an inbox.EraseCounter: a dry run cannot count its entries", r.Inbox)
		}
	}
	if r.Sessions != nil {
		if p.sessions, ok = unwrapAs[session.UserEraser](r.Sessions); !ok && dryRun {
			return p, fmt.Errorf("the sessions (%T) are not a session.UserEraser: a dry run cannot count them", r.Sessions)
		}
	}
	if r.Attachments != nil && dryRun {
		if p.attachments, ok = r.Attachments.(attachment.UserCounter); !ok {
			return p, fmt.Errorf("the attachments (%T) are not an attachment.UserCounter: a dry run cannot count them", r.Attachments)
		}
	}
	return p, nil
}

// eraseInbox erases (counts, in a dry run) the user's inbox entries and outbox intents of
// convs, inbox.MaxEraseScopes conversations a call.
func (r Retention) eraseInbox(ctx context.Context, p erasePlan, user string, convs []string, dryRun bool) (inbox.EraseCounts, error) {
	var total inbox.EraseCounts
	app := r.app()
	for part := range slices.Chunk(convs, inbox.MaxEraseScopes) {
		scopes := make([]inbox.Scope, len(part))
		for i, conv := range part {
			scopes[i] = inbox.Scope{Conversation: conv, KeySuffix: inboxKeySuffix(app, user, conv)}
		}
		var n inbox.EraseCounts
		var err error
		if p.counter != nil {
			n, err = p.counter.EraseCounted(ctx, scopes, dryRun)
		} else {
			n.Entries, err = p.eraser.Erase(ctx, scopes)
		}
		total.Entries, total.Steps, total.Intents = total.Entries+n.Entries, total.Steps+n.Steps, total.Intents+n.Intents
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
