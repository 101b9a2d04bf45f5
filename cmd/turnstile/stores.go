package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

var discard = slog.New(slog.DiscardHandler)

const inboxGetUsage = `
Shows a request's inbox entry: status, attempts, reason, the record it came in, its stored
result and the audit of its re-drives. The inbox key scopes the request id to its session
(turn.InboxKey): give --user and --conversation with --request-id, or the raw key (--key or
an argument, as inbox get KEY).

Examples:
  turnstile inbox get --db postgres://turnstile@db:5432/agent --request-id 0b9c... --user u-12 --conversation c-7731
  turnstile inbox get --db sqlite:/var/lib/agent/turnstile.db --key "0b9c.../5f0e..." --json
`

const inboxPurgeUsage = `
Deletes done and dead inbox entries last updated longer ago than --older-than, with their
step journals, and delivered and dead outbox intents as old (counted with the entries);
entries in progress and pending intents stay. A request Kafka delivers again after its entry was purged runs again as new:
keep entries longer than the requests topic's retention. Run it from cron, or call
inbox.RunPurge in the service.

Examples:
  turnstile inbox purge --db postgres://turnstile@db:5432/agent --older-than 720h
`

const sessionShowUsage = `
Shows a session: owner, version, event count, state, its latest checkpoints and its most
recent events. Without --user it shows the conversation's session whoever owns it (a
conversation id is unique within an app); with --user, only that user's.

A checkpoint is a compaction's summary (turn.Runner.ContextBudget), stored as an event of
the turn that compacted: it covers seqs 1 to its "through" (it folded "from" to "through"
into the previous summary), under a summarization policy, in so many tokens. The model sees
the latest checkpoint's summary and every event after its range; the events it covers stay
in the history. The command reads back through the history until it has found --checkpoints
of them, or reached its start.

Examples:
  turnstile session show --db postgres://turnstile@db:5432/agent --conversation c-7731
  turnstile session show --db postgres://turnstile@db:5432/agent --user u-12 --conversation c-7731
  turnstile session show --db sqlite:/var/lib/agent/turnstile.db --user u-12 --conversation c-7731 --recent 5 --json
`

const sessionDeleteUsage = `
Deletes sessions with their history and state: one conversation (--user and --conversation),
every session of a user (--user alone: a data-deletion request), or the sessions of the app
idle for longer than --idle-for. A later request of a deleted session starts a fresh one.

--user alone erases every copy of the user's texts that turnstile keeps
(turn.Retention.EraseUser), and prints each kind with its count:
  workflow runs    with --temporal: every run of the user's conversation workflows, running
                   ones terminated, deleted with their histories (the requests' texts, the
                   turns' results)
  ledger rows      with --temporal: the hand-off ledger's requests, overflow and states
  inbox entries    with their stored results and failure reasons
  journal steps    the outputs of model calls and tools
  outbox intents   with their payloads, pending ones too
  sessions         with their state
  session events   the histories, compactions' checkpoints included
  attachments      in the database (its tables, when turnstile migrate made them) and, with
                   --attachments-dir, in a service's filesystem store there
The user's conversations are those of the user's sessions and, in Temporal mode, those the
visibility store finds by TurnstileUser and those the ledger finds the user's requests in: a
conversation whose requests are all held at a sequence gap has no session yet. One conversation
(--user and --conversation) goes with its inbox entries, journals and outbox intents too.
Sessions deleted by --idle-for keep theirs until the inbox's purge (inbox purge, or
turn.Retention's InboxHorizon): a later --user deletion no longer finds them, since it finds
a user's conversations through their sessions.

--dry-run deletes nothing: with --user alone it prints the same kinds with what they would
count (--json: the whole report); otherwise it lists the sessions it would delete (at most
1000). Stop the user's traffic first: a request still in the requests topic starts a new
session or workflow. Without the deletion a closed run's history stays until the namespace's
retention period has passed.

A deleted row is gone from the tables but not from the disk at once: SQLite keeps its pages
in the file's free list (and the WAL) until VACUUM; PostgreSQL keeps the row as a dead tuple
until VACUUM marks its space free, and its bytes stay in the page until new rows overwrite
them; VACUUM FULL rewrites each table into a new file (the old one is unlinked). WAL
segments, backups and replicas keep copies on their own schedule. --vacuum (with --user)
then runs VACUUM on SQLite (the whole file rebuilt) and a WAL checkpoint(TRUNCATE), or a plain
VACUUM of the turnstile tables on PostgreSQL (no lock that stops the service); --vacuum-full
runs VACUUM FULL there instead, which holds an exclusive lock on each table while it rewrites
it: the service's turns wait. docs/RETENTION.md says more.

--idle-for also deletes the attachments last put longer ago than --idle-for. Attachments
belong to a user, not a conversation: --conversation deletes none.

Examples:
  turnstile session delete --db postgres://turnstile@db:5432/agent --user u-12 --dry-run
  turnstile session delete --db postgres://turnstile@db:5432/agent --user u-12 --vacuum
  turnstile session delete --db postgres://turnstile@db:5432/agent --user u-12 --temporal temporal:7233 --dry-run --json
  turnstile session delete --db postgres://turnstile@db:5432/agent --user u-12 --attachments-dir /srv/agent/attachments
  turnstile session delete --db postgres://turnstile@db:5432/agent --user u-12 --conversation c-7731
  turnstile session delete --db sqlite:/var/lib/agent/turnstile.db --idle-for 2160h
`

const migrateUsage = `
Creates or upgrades the session, inbox and attachment tables (with --ledger, Temporal mode's
ledger too) to this version's schema. Safe to run from several places at once, and again:
what is done already is left alone. A SQLite file that does not exist is created (no other
command creates one: they fail with "no SQLite database at PATH").

Examples:
  turnstile migrate --db postgres://turnstile@db:5432/agent
  turnstile migrate --db sqlite:/var/lib/agent/turnstile.db --table-prefix agent_
  turnstile migrate --db postgres://turnstile@db:5432/agent --ledger
`

type entryJSON struct {
	Key          string               `json:"key"`
	Conversation string               `json:"conversation"`
	Status       string               `json:"status"`
	Attempts     int                  `json:"attempts"`
	Reason       string               `json:"reason,omitempty"`
	Source       string               `json:"source"`
	CreatedAt    time.Time            `json:"created_at"`
	UpdatedAt    time.Time            `json:"updated_at"`
	Result       json.RawMessage      `json:"result,omitempty"`
	Redrives     []inbox.RedriveAudit `json:"redrives,omitempty"`
}

func inboxGet(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "inbox get", inboxGetUsage).withDB().withApp().withJSON()
	k, err := withEntryKey(f).parse(f, args)
	if err != nil {
		return err
	}
	ctx, _, ib, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	en, err := ib.Get(ctx, k)
	if errors.Is(err, inbox.ErrNotFound) {
		return fmt.Errorf("%w: no inbox entry %s", errNotFound, k)
	}
	if err != nil {
		return err
	}
	j := entryJSON{Key: en.Key, Conversation: en.Conversation, Status: en.Status.String(), Attempts: en.Attempts,
		Reason: en.Reason, Source: fmt.Sprintf("%s/%d/%d", en.Topic, en.Partition, en.Offset), CreatedAt: en.CreatedAt,
		UpdatedAt: en.UpdatedAt, Redrives: en.Redrives}
	if json.Valid(en.Result) {
		j.Result = en.Result
	}
	if *f.json {
		return printJSON(e.stdout, j)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\nconversation:\t%s\nstatus:\t%s\nattempts:\t%d\nsource:\t%s\ncreated:\t%s\nupdated:\t%s\n",
		j.Key, j.Conversation, j.Status, j.Attempts, j.Source, j.CreatedAt.Format(time.RFC3339), j.UpdatedAt.Format(time.RFC3339))
	if j.Reason != "" {
		fmt.Fprintf(tw, "reason:\t%s\n", j.Reason)
	}
	for i, r := range j.Redrives {
		fmt.Fprintf(tw, "re-drive %d:\t%s, after %d attempts: %s (note: %s)\n", i+1, r.At.Format(time.RFC3339), r.Attempts, r.Reason, r.Note)
	}
	if len(j.Result) > 0 {
		fmt.Fprintf(tw, "result:\t%s\n", j.Result)
	}
	return tw.Flush()
}

func inboxPurge(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "inbox purge", inboxPurgeUsage).withDB()
	older := f.Duration("older-than", 0, "delete done and dead entries last updated longer ago than this (required; 720h is 30 days)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *older <= 0 {
		return usagef("--older-than is required and must be positive")
	}
	ctx, _, ib, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	cutoff := time.Now().Add(-*older)
	n, err := ib.Purge(ctx, cutoff)
	if err != nil {
		return partly(n, "purged %d inbox entries (and delivered or dead outbox intents)", err)
	}
	fmt.Fprintf(e.stdout, "purged %d inbox entries last updated before %s\n", n, cutoff.UTC().Format(time.RFC3339))
	return nil
}

// partly is the error of a bulk change that failed after done items (done is the count, what
// formats it): err alone when nothing was done, so that a failure does not read as a result.
func partly(done int64, what string, err error) error {
	if done == 0 {
		return err
	}
	return fmt.Errorf(what+", then: %w", done, err)
}

// summaryJSON is a session without its state and events, as session delete --dry-run lists
// it; snake_case like the rest of the CLI's JSON and turnstile's records.
type summaryJSON struct {
	App          string    `json:"app"`
	User         string    `json:"user"`
	Conversation string    `json:"conversation"`
	Version      int64     `json:"version"`
	EventCount   int64     `json:"event_count"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// sessionJSON is a session as session show prints it (session.Session has no JSON names of
// its own).
type sessionJSON struct {
	summaryJSON
	State json.RawMessage `json:"state,omitempty"`
	// CoveredThrough is the last seq the latest checkpoint covers (0: none found): the model
	// sees its summary and the events after it.
	CoveredThrough int64 `json:"covered_through"`
	// Checkpoints are the latest checkpoints, oldest first, at most --checkpoints;
	// CheckpointsFrom is the first seq read for them (1: the whole history was read).
	Checkpoints     []checkpointJSON `json:"checkpoints"`
	CheckpointsFrom int64            `json:"checkpoints_from"`
	Events          []session.Event  `json:"events"`
}

// checkpointJSON is a checkpoint event as session show lists it: the event's seq, request id
// and time, what it covers (session.CheckpointData's from, through, policy, previous_policy
// and tokens) and its summary. Error is why a checkpoint event could not be read (its
// range and summary are then empty).
type checkpointJSON struct {
	Seq       int64     `json:"seq"`
	RequestID string    `json:"request_id"`
	Time      time.Time `json:"time"`
	session.CheckpointData
	Summary string `json:"summary"`
	Error   string `json:"error,omitempty"`
}

// latestCheckpoints returns the latest want checkpoints of key's session, oldest first, and
// the first seq it read for them: it starts from sess's events and reads further back (four
// times as many events each time) until it has found want of them or read the whole history.
func latestCheckpoints(ctx context.Context, ss *sqlsession.Store, key session.Key, sess session.Session, want int) ([]checkpointJSON, int64, error) {
	events := sess.Events
	for {
		var out []checkpointJSON
		for i := len(events) - 1; i >= 0 && len(out) < want; i-- {
			e := events[i]
			c, ok, err := session.CheckpointOf(e)
			if !ok {
				continue
			}
			row := checkpointJSON{Seq: e.Seq, RequestID: e.RequestID, Time: e.Time, CheckpointData: c.CheckpointData, Summary: c.Summary}
			if err != nil {
				row.Error = err.Error()
			}
			out = append(out, row)
		}
		from := sess.EventCount + 1
		if len(events) > 0 {
			from = events[0].Seq
		}
		if len(out) >= want || from <= 1 {
			slices.Reverse(out)
			return out, max(from, 1), nil
		}
		more, err := ss.Get(ctx, key, int(min(sess.EventCount, int64(max(4*len(events), 256)))))
		if err != nil {
			return nil, 0, err
		}
		events, sess.EventCount = more.Events, more.EventCount
	}
}

// ownerOf returns the key of conv's session in app, whoever owns it.
func ownerOf(ctx context.Context, ss *sqlsession.Store, app, conv string) (session.Key, error) {
	found, err := ss.List(ctx, sqlsession.ListFilter{App: app, Conversation: conv, Limit: 1})
	if err != nil {
		return session.Key{}, err
	}
	if len(found) == 0 {
		return session.Key{}, fmt.Errorf("%w: no session of conversation %s in app %s", errNotFound, conv, app)
	}
	return found[0].Key, nil
}

func sessionShow(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "session show", sessionShowUsage).withDB().withApp().withJSON()
	user := f.String("user", "", "the session's user id (without it, the conversation's owner, whoever it is)")
	conv := f.String("conversation", "", "the conversation id (required)")
	recent := f.Int("recent", 20, "how many of the most recent events to show")
	wantCheckpoints := f.Int("checkpoints", 10, "how many of the latest checkpoints (compactions' summaries) to list")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := f.require("conversation"); err != nil {
		return err
	}
	ctx, ss, _, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	key := session.Key{App: *f.app, User: *user, Conversation: *conv}
	if key.User == "" {
		if key, err = ownerOf(ctx, ss, key.App, key.Conversation); err != nil {
			return err
		}
	}
	sess, err := ss.Get(ctx, key, *recent)
	if errors.Is(err, session.ErrNotFound) || errors.Is(err, session.ErrOwnerMismatch) {
		return fmt.Errorf("%w: no session %s", errNotFound, key)
	}
	if err != nil {
		return err
	}
	cps, cpFrom, err := latestCheckpoints(ctx, ss, key, sess, *wantCheckpoints)
	if err != nil {
		return err
	}
	var covered int64
	if len(cps) > 0 {
		covered = cps[len(cps)-1].Through
	}
	if *f.json {
		return printJSON(e.stdout, sessionJSON{summaryJSON: summaryJSON{App: key.App, User: key.User, Conversation: key.Conversation,
			Version: sess.Version, EventCount: sess.EventCount, CreatedAt: sess.CreatedAt, UpdatedAt: sess.UpdatedAt},
			State: sess.State, CoveredThrough: covered, Checkpoints: append([]checkpointJSON{}, cps...), CheckpointsFrom: cpFrom,
			Events: append([]session.Event{}, sess.Events...)})
	}
	fmt.Fprintf(e.stdout, "session %s: version %d, %d events, created %s, updated %s\n", key, sess.Version, sess.EventCount,
		sess.CreatedAt.Format(time.RFC3339), sess.UpdatedAt.Format(time.RFC3339))
	if len(sess.State) > 0 {
		fmt.Fprintf(e.stdout, "state: %s\n", sess.State)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	printCheckpoints(tw, cps, cpFrom, *wantCheckpoints)
	fmt.Fprintln(tw, "SEQ\tTIME\tREQUEST ID\tAUTHOR\tTEXT")
	for _, ev := range sess.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", ev.Seq, ev.Time.Format(time.RFC3339), ev.RequestID, ev.Author, clipText(ev.Text, 100))
	}
	return tw.Flush()
}

// printCheckpoints prints to tw what session show found of the checkpoints: a line on what
// the model sees, then a table of the checkpoints, oldest first.
func printCheckpoints(tw *tabwriter.Writer, cps []checkpointJSON, from int64, want int) {
	switch {
	case want <= 0:
		return
	case len(cps) == 0: // the whole history was read
		fmt.Fprintln(tw, "checkpoints: none (no compaction yet): the model sees the events")
		return
	}
	sees := "the latest is unreadable: the Runner fails the conversation's turns"
	if last := cps[len(cps)-1]; last.Error == "" {
		sees = fmt.Sprintf("the latest covers seqs 1 to %d: the model sees its summary and the events after seq %d", last.Through, last.Through)
	}
	fmt.Fprintf(tw, "checkpoints: %d listed, of the history from seq %d on; %s\n", len(cps), from, sees)
	fmt.Fprintln(tw, "SEQ\tTIME\tREQUEST ID\tCOVERS\tFOLDED\tPOLICY\tTOKENS\tSUMMARY")
	for _, c := range cps {
		if c.Error != "" {
			fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t-\t-\tunreadable: %s\n", c.Seq, c.Time.Format(time.RFC3339), c.RequestID, clipText(c.Error, 100))
			continue
		}
		policy := c.Policy
		if c.PreviousPolicy != "" {
			policy += " (was " + c.PreviousPolicy + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t1-%d\t%d-%d\t%s\t%d\t%s\n", c.Seq, c.Time.Format(time.RFC3339), c.RequestID,
			c.Through, c.From, c.Through, policy, c.Tokens, clipText(strings.Join(strings.Fields(c.Summary), " "), 80))
	}
	fmt.Fprintln(tw)
}

// dryRunLimit is the most sessions session delete --dry-run lists.
const dryRunLimit = 1000

func sessionDelete(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "session delete", sessionDeleteUsage).withDB().withApp().withJSON().withTemporal()
	user := f.String("user", "", "delete this user's sessions (all of them, or --conversation)")
	conv := f.String("conversation", "", "with --user: delete this conversation only")
	idle := f.Duration("idle-for", 0, "delete the app's sessions not updated for this long (720h is 30 days)")
	dry := f.Bool("dry-run", false, "delete nothing: with --user alone, count each kind that would be deleted; otherwise list the sessions")
	vacuum := f.Bool("vacuum", false, "with --user alone: then VACUUM the database (SQLite: the file, and a WAL checkpoint; PostgreSQL: the turnstile tables)")
	vacuumFullFlag := f.Bool("vacuum-full", false, "with --user alone, on PostgreSQL: then VACUUM FULL the turnstile tables (locks each table while it rewrites it)")
	attachmentsDir := f.String("attachments-dir", "", "with --user or --idle-for: delete attachments from the filesystem store in this directory too")
	if err := f.parse(args); err != nil {
		return err
	}
	idleSet := false
	f.Visit(func(fl *flag.Flag) { idleSet = idleSet || fl.Name == "idle-for" })
	switch {
	case idleSet && *idle <= 0:
		return usagef("--idle-for must be positive")
	case *user != "" && idleSet:
		return usagef("give --user (with or without --conversation) or --idle-for, not both")
	case *user == "" && !idleSet:
		return usagef("give --user (with or without --conversation), or --idle-for")
	case *conv != "" && *user == "":
		return usagef("--conversation needs --user")
	case *f.json && !*dry && (*user == "" || *conv != ""):
		return usagef("--json goes with --dry-run, or with --user alone")
	case *f.temporal != "" && (*user == "" || *conv != ""):
		return usagef("--temporal goes with --user alone (a user's deletion)")
	case *attachmentsDir != "" && *conv != "":
		return usagef("--attachments-dir goes with --user alone or --idle-for: attachments belong to a user, not a conversation")
	case (*vacuum || *vacuumFullFlag) && *dry:
		return usagef("--vacuum and --vacuum-full do not go with --dry-run")
	case (*vacuum || *vacuumFullFlag) && (*user == "" || *conv != ""):
		return usagef("--vacuum and --vacuum-full go with --user alone (a user's deletion)")
	case *vacuumFullFlag && strings.HasPrefix(*f.db, "sqlite:"):
		return usagef("--vacuum-full is for PostgreSQL: on SQLite --vacuum rebuilds the whole file")
	}
	ctx, ss, ib, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	cutoff := time.Now().Add(-*idle)
	if *user != "" && *conv == "" {
		mode := vacuumNone
		switch {
		case *vacuumFullFlag:
			mode = vacuumFull
		case *vacuum:
			mode = vacuumPlain
		}
		return eraseUser(ctx, e, f, ss, ib, *user, *attachmentsDir, *dry, mode)
	}
	if *dry {
		lf := sqlsession.ListFilter{App: *f.app, User: *user, Conversation: *conv, Limit: dryRunLimit + 1}
		if *user == "" {
			lf.UpdatedBefore = cutoff
		}
		return dryRunDelete(ctx, e, ss, lf, *f.json)
	}
	switch {
	case *conv != "":
		key := session.Key{App: *f.app, User: *user, Conversation: *conv}
		if found, err := ss.List(ctx, sqlsession.ListFilter{App: key.App, User: key.User, Conversation: key.Conversation, Limit: 1}); err != nil {
			return err
		} else if len(found) == 0 {
			return fmt.Errorf("%w: no session %s", errNotFound, key)
		}
		// The conversation's inbox entries (results, journals, outbox intents) first: once
		// its session is gone, no user's deletion leads to them.
		n, err := ib.Erase(ctx, []inbox.Scope{{Conversation: key.Conversation,
			KeySuffix: turn.InboxKey(key.App, turn.Request{UserID: key.User, ConversationID: key.Conversation})}})
		if err != nil {
			return partly(n, "erased %d inbox entries and outbox intents", err)
		}
		if err := ss.Delete(ctx, key); errors.Is(err, session.ErrNotFound) || errors.Is(err, session.ErrOwnerMismatch) {
			return fmt.Errorf("%w: no session %s", errNotFound, key)
		} else if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "deleted session %s and %d inbox entries and outbox intents of it\n", key, n)
	default:
		n, err := ss.DeleteIdle(ctx, *f.app, cutoff)
		if err != nil {
			return partly(n, "deleted %d sessions", err)
		}
		fmt.Fprintf(e.stdout, "deleted %d sessions of app %s idle since before %s\n", n, *f.app, cutoff.UTC().Format(time.RFC3339))
		return deleteAttachments(ctx, e, f, ss.TxDB(), *attachmentsDir, fmt.Sprintf("of app %s last put before %s", *f.app, cutoff.UTC().Format(time.RFC3339)),
			func(ctx context.Context, s attachment.Retention) (int64, error) {
				return s.DeleteIdle(ctx, *f.app, cutoff)
			})
	}
	return nil
}

// dryRunDelete lists the sessions that lf selects (what session delete would delete), at
// most dryRunLimit of them. One conversation that is not there is not found, as its delete
// would be.
func dryRunDelete(ctx context.Context, e *env, ss *sqlsession.Store, lf sqlsession.ListFilter, asJSON bool) error {
	found, err := ss.List(ctx, lf)
	if err != nil {
		return err
	}
	if lf.Conversation != "" && len(found) == 0 {
		return fmt.Errorf("%w: no session %s", errNotFound, session.Key{App: lf.App, User: lf.User, Conversation: lf.Conversation})
	}
	more := len(found) > dryRunLimit
	found = found[:min(len(found), dryRunLimit)]
	rows := make([]summaryJSON, 0, len(found))
	for _, x := range found {
		rows = append(rows, summaryJSON{App: x.Key.App, User: x.Key.User, Conversation: x.Key.Conversation,
			Version: x.Version, EventCount: x.EventCount, CreatedAt: x.CreatedAt, UpdatedAt: x.UpdatedAt})
	}
	if asJSON {
		if err := printJSON(e.stdout, rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "USER\tCONVERSATION\tVERSION\tEVENTS\tUPDATED")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", r.User, r.Conversation, r.Version, r.EventCount, r.UpdatedAt.UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if more {
		fmt.Fprintf(e.stderr, "more than %d sessions would be deleted (the first %d listed); nothing was deleted\n", dryRunLimit, dryRunLimit)
	} else {
		fmt.Fprintf(e.stderr, "%d sessions would be deleted; nothing was deleted\n", len(rows))
	}
	return nil
}

func migrateCmd(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "migrate", migrateUsage).withDB()
	f.createsDB = true
	ledger := f.Bool("ledger", false, "also the Temporal mode's ledger tables (workflow.SQLLedger)")
	if err := f.parse(args); err != nil {
		return err
	}
	ctx, ss, ib, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := ss.Migrate(ctx); err != nil {
		return err
	}
	if err := ib.Migrate(ctx); err != nil {
		return err
	}
	as, err := f.sqlAttachments(ss.TxDB())
	if err != nil {
		return err
	}
	if err := as.Migrate(ctx); err != nil {
		return err
	}
	if *ledger {
		l, done, err := f.ledger()
		if err != nil {
			return err
		}
		defer done()
		if err := l.Migrate(ctx); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "Temporal mode's ledger tables (prefix %s) are at this version's schema\n", *f.prefix)
	}
	fmt.Fprintf(e.stdout, "sessions, inbox and attachment tables (prefix %s) are at this version's schema\n", *f.prefix)
	return nil
}
