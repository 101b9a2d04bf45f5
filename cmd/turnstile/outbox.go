package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
)

const outboxListUsage = `
Lists the outbox's intents (the deferred side effects of committed turns, which the relay
delivers), what needs attention first: the dead ones, then the pending ones by when they are
next due, then the delivered ones, oldest first; each with its id, status, attempts, name,
conversation, when next due, and the last failure's reason. --status keeps one status
(pending, delivered, dead), --conversation one conversation's. At most --limit rows: a
listing cut there says so ("more rows: raise --limit").

Examples:
  turnstile outbox list --db postgres://turnstile@db:5432/agent --status dead
  turnstile outbox list --db sqlite:/var/lib/agent/turnstile.db --conversation c-7731 --json
`

const outboxRedriveUsage = `
Makes a dead intent pending again, due now with no attempts spent, for the relay to deliver
once more: for an operator who fixed what killed it. The id is the intent's (KEY#ORDINAL, as
outbox list shows it), as the first argument or --id; --note is kept as its reason. An intent
that is not dead is left as it is (exit code 1).

Examples:
  turnstile outbox redrive --db postgres://turnstile@db:5432/agent "0b9c.../5f0e...#2" --note "refund API fixed (INC-123)"
`

const inboxStepsUsage = `
Lists the step journal of a request: the steps of its turn that completed (model and tool
calls), by ordinal, with their name, whether deferred (an outbox intent), the size of their
recorded output and when recorded. It finds the entry as inbox get does: --request-id with
--user and --conversation (the inbox key scopes the request id to its session, under --app),
or the raw key, as --key or the first argument.

Examples:
  turnstile inbox steps --db postgres://turnstile@db:5432/agent --request-id 0b9c... --user u-12 --conversation c-7731
  turnstile inbox steps --db postgres://turnstile@db:5432/agent "0b9c.../5f0e..."
  turnstile inbox steps --db sqlite:/var/lib/agent/turnstile.db --key "0b9c.../5f0e..." --json
`

// intentJSON is an intent as outbox list prints it; snake_case like the rest of the CLI's JSON.
type intentJSON struct {
	ID           string    `json:"id"`
	Key          string    `json:"key"`
	Conversation string    `json:"conversation"`
	Ordinal      int       `json:"ordinal"`
	Name         string    `json:"name"`
	Status       string    `json:"status"`
	Attempts     int       `json:"attempts"`
	Reason       string    `json:"reason,omitempty"`
	NextAt       time.Time `json:"next_at"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	PayloadBytes int       `json:"payload_bytes"`
}

func toIntentJSON(it inbox.Intent) intentJSON {
	return intentJSON{ID: it.ID, Key: it.Key, Conversation: it.Conversation, Ordinal: it.Ordinal, Name: it.Name,
		Status: it.Status.String(), Attempts: it.Attempts, Reason: it.Reason, NextAt: it.NextAt, CreatedAt: it.CreatedAt,
		UpdatedAt: it.UpdatedAt, PayloadBytes: len(it.Payload)}
}

// stepJSON is a journal step as inbox steps prints it.
type stepJSON struct {
	Ordinal  int       `json:"ordinal"`
	Name     string    `json:"name"`
	Deferred bool      `json:"deferred"`
	Bytes    int       `json:"bytes"`
	At       time.Time `json:"at"`
}

// parseNamed parses args, one of which, not a flag, may name what the command acts on (the
// id of outbox redrive, the key of inbox steps), before the flags, between them or after
// ("--db X ID --note N", as the usage shows); without it the flag name (value fl) does.
// Errors: parse's, and a usage error naming what when neither gives it.
func (f *flags) parseNamed(args []string, name string, fl *string, what string) (string, error) {
	var v string
	if i := f.firstPositional(args); i >= 0 {
		v, args = args[i], append(append([]string(nil), args[:i]...), args[i+1:]...)
	}
	if err := f.parse(args); err != nil {
		return "", err
	}
	if v == "" {
		v = *fl
	}
	if v == "" {
		return "", usagef("give %s (the first argument, or --%s)", what, name)
	}
	return v, nil
}

// firstPositional returns the index in args of the first argument that is neither a flag nor
// a flag's value, or -1: a "-name" or "--name" without "=" takes the next argument as its
// value unless the flag is a boolean; "--" ends the flags.
func (f *flags) firstPositional(args []string) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return i + 1
			}
			return -1
		case !strings.HasPrefix(a, "-") || a == "-":
			return i
		case strings.Contains(a, "="):
			continue
		}
		fl := f.Lookup(strings.TrimLeft(a, "-"))
		if fl == nil {
			continue // an unknown flag: parse reports it
		}
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			i++ // the flag's value
		}
	}
	return -1
}

func outboxList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "outbox list", outboxListUsage).withDB().withJSON()
	status := f.String("status", "", "keep intents of this status: pending, delivered or dead")
	conv := f.String("conversation", "", "keep intents of this conversation")
	limit := f.Int("limit", 100, "list at most this many intents")
	if err := f.parse(args); err != nil {
		return err
	}
	filter := inbox.IntentFilter{Conversation: *conv, Limit: *limit}
	if *limit < 1 {
		return usagef("--limit must be at least 1")
	}
	if *status != "" {
		st, err := inbox.ParseIntentStatus(*status)
		if err != nil {
			return usagef("--status %q: want pending, delivered or dead", *status)
		}
		filter.Status = st
	}
	ctx, _, ib, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	its, more, err := attentionFirst(ctx, ib, filter)
	if err != nil {
		return err
	}
	if more {
		defer fmt.Fprintf(e.stderr, "showing %d intents; more rows: raise --limit (now %d), or filter with --status or --conversation\n", len(its), *limit)
	} else {
		defer fmt.Fprintf(e.stderr, "%d intents\n", len(its))
	}
	out := make([]intentJSON, 0, len(its))
	for _, it := range its {
		out = append(out, toIntentJSON(it))
	}
	if *f.json {
		return printJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tATTEMPTS\tNAME\tCONVERSATION\tNEXT AT\tREASON")
	for _, it := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", it.ID, it.Status, it.Attempts, it.Name, it.Conversation,
			it.NextAt.Format(time.RFC3339), oneLine(it.Reason))
	}
	return tw.Flush()
}

// attentionFirst returns the intents filter selects, at most filter.Limit of them, dead first,
// then pending by when next due, then delivered (oldest first, as the outbox lists them); a
// filter.Status keeps that status only. more is whether there were more than filter.Limit.
func attentionFirst(ctx context.Context, ib inbox.Outbox, filter inbox.IntentFilter) (its []inbox.Intent, more bool, err error) {
	statuses := []inbox.IntentStatus{inbox.IntentDead, inbox.IntentPending, inbox.IntentDelivered}
	if filter.Status != 0 {
		statuses = []inbox.IntentStatus{filter.Status}
	}
	limit := filter.Limit
	for _, st := range statuses {
		if len(its) == limit {
			more = more || hasIntents(ctx, ib, filter, st)
			continue
		}
		f := filter
		f.Status, f.Limit = st, limit-len(its)+1
		got, err := ib.Intents(ctx, f)
		if err != nil {
			return nil, false, err
		}
		if len(got) == f.Limit {
			got, more = got[:f.Limit-1], true
		}
		if st == inbox.IntentPending {
			slices.SortStableFunc(got, func(a, b inbox.Intent) int { return a.NextAt.Compare(b.NextAt) })
		}
		its = append(its, got...)
	}
	return its, more, nil
}

// hasIntents reports whether filter, with status st, selects any intent (an error: it says
// yes, so that the listing still says it may be cut).
func hasIntents(ctx context.Context, ib inbox.Outbox, filter inbox.IntentFilter, st inbox.IntentStatus) bool {
	filter.Status, filter.Limit = st, 1
	got, err := ib.Intents(ctx, filter)
	return err != nil || len(got) > 0
}

// oneLine keeps a reason on one line of a table.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func outboxRedrive(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "outbox redrive", outboxRedriveUsage).withDB()
	idFlag := f.String("id", "", "the intent's id (KEY#ORDINAL), instead of the first argument")
	note := f.String("note", "", "why the intent is re-driven, kept as its reason")
	id, err := f.parseNamed(args, "id", idFlag, "the intent's id")
	if err != nil {
		return err
	}
	ctx, _, ib, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	it, err := ib.RedriveIntent(ctx, id, *note)
	switch {
	case errors.Is(err, inbox.ErrNotFound):
		return fmt.Errorf("%w: no intent %s", errNotFound, id)
	case errors.Is(err, inbox.ErrIntentNotDead):
		return fmt.Errorf("intent %s is %s, not dead: left as it is", id, it.Status)
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "re-drove intent %s (%s): pending, due now\n", it.ID, it.Name)
	return nil
}

func inboxSteps(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "inbox steps", inboxStepsUsage).withDB().withApp().withJSON()
	key, err := withEntryKey(f).parse(f, args)
	if err != nil {
		return err
	}
	ctx, _, ib, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	if _, err := ib.Get(ctx, key); errors.Is(err, inbox.ErrNotFound) {
		return fmt.Errorf("%w: no inbox entry %s", errNotFound, key)
	} else if err != nil {
		return err
	}
	steps, err := ib.Steps(ctx, key)
	if err != nil {
		return err
	}
	out := make([]stepJSON, 0, len(steps))
	for _, s := range steps {
		out = append(out, stepJSON{Ordinal: s.Ordinal, Name: s.Name, Deferred: s.Deferred, Bytes: len(s.Output), At: s.At})
	}
	if *f.json {
		return printJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDINAL\tNAME\tDEFERRED\tBYTES\tAT")
	for _, s := range out {
		fmt.Fprintf(tw, "%d\t%s\t%t\t%d\t%s\n", s.Ordinal, s.Name, s.Deferred, s.Bytes, s.At.Format(time.RFC3339Nano))
	}
	return tw.Flush()
}
