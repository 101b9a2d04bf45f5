package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/turn"
)

const dlqListUsage = `
Lists the dead letters of a dead-letter topic, oldest first (by the time each was
dead-lettered, across partitions): time, conversation, request id, attempts, age, source
(topic/partition/offset of the request; in Temporal mode "submit" or "gap" for a request that
had no record), the dead letter's own topic/partition/offset (for dlq show) and reason. --json
adds the kind, the error, the workflow id and sequence (Temporal mode) and what was dropped.
A --topic the cluster does not have (for dlq list, show and redrive) exits 3, naming the
topics it has.

Examples:
  turnstile dlq list --brokers kafka:9092 --topic agent.requests.dlq
  turnstile dlq list --brokers kafka:9092 --topic agent.requests.dlq --conversation c-7731
  turnstile dlq list --brokers kafka:9092 --topic agent.requests.dlq --reason "bug 42" --since 24h
  turnstile dlq list --brokers kafka:9092 --topic agent.requests.dlq --request-id 0b9c... --json
`

const dlqShowUsage = `
Shows dead letters in full: every header and the request's value. Select them by request id,
or by the dead letter's own partition and offset.

Examples:
  turnstile dlq show --brokers kafka:9092 --topic agent.requests.dlq --request-id 0b9c6f55-...
  turnstile dlq show --brokers kafka:9092 --topic agent.requests.dlq --partition 2 --offset 17 --json
`

const dlqRedriveUsage = `
Re-drives dead letters once the cause is fixed: each request's inbox entry becomes runnable
again, with fresh attempts (its earlier reason stays in the entry's audit, with --note), and
the request record is published again to its source partition of the requests topic, with
its key and headers. A dead letter whose value was dropped (too large) is re-driven from its
source record. Re-driving twice runs a request once: a request already answered is skipped.
A dead letter of Temporal mode's Bridge.Submit (request-origin header "submit") has no source record:
it goes to --requests-topic, which it needs, on its key's partition (murmur2, as a Java
producer places it); a gap dead letter (reason "gap") has no request and is refused. In
Temporal mode the workflow runs a re-driven request again (it tells it from a duplicate by the
redriven-from header). Give at least one filter, or --all.

A dead letter that can never pass is refused, with its reason: a record larger than the
producer's limit (--max-message-bytes) or than the requests topic's max.message.bytes, and,
unless --force, a request the consumer dead-letters again at once (a value that does not
decode or fails validation under --max-text-bytes, a key that is not its conversation id).
--dry-run makes the same checks (the placement, the source record, the sizes, the consumer's
checks, the inbox entry when --db is given) and changes nothing: it says what the real run
would do, and fails where it would fail.

Examples:
  turnstile dlq redrive --brokers kafka:9092 --topic agent.requests.dlq \
      --db postgres://turnstile@db:5432/agent --reason "bug 42" --note "fixed in v1.4 (ops: ada)"
  turnstile dlq redrive --brokers kafka:9092 --topic agent.requests.dlq \
      --db sqlite:/var/lib/agent/turnstile.db --request-id 0b9c6f55-... --dry-run
`

// letterFilter is what the dead-letter flags select: deadletter.Filter's fields, and a
// conversation.
type letterFilter struct {
	deadletter.Filter
	// conversation, when set, is the conversation id to match exactly: the dead letter's
	// conversation header, or its key when the request did not decode.
	conversation string
}

func (f letterFilter) match(l deadletter.Letter) bool {
	return f.conversation == "" || conversationOf(l) == f.conversation
}

func (f letterFilter) empty() bool {
	d := f.Filter
	return f.conversation == "" && d.RequestID == "" && d.Reason == "" && d.SourcePartition == nil && d.SourceOffset == nil &&
		d.Partition == nil && d.Offset == nil && d.Since.IsZero() && d.Until.IsZero()
}

// conversationOf is a dead letter's conversation: its header, or its key (the conversation
// id) when the request did not decode.
func conversationOf(l deadletter.Letter) string {
	if l.ConversationID != "" {
		return l.ConversationID
	}
	return printable(l.Key)
}

// filterFlags adds the dead-letter filters to f.
func filterFlags(f *flags) func() letterFilter {
	var (
		srcPart, part         optInt32
		srcOff, off           optInt64
		since, until          timeFlag
		requestID, what, conv string
	)
	f.StringVar(&requestID, "request-id", "", "only the dead letters of this request id")
	f.StringVar(&conv, "conversation", "", "only the dead letters of this conversation id")
	f.StringVar(&what, "reason", "", "only the dead letters whose reason contains this text")
	f.Var(&srcPart, "source-partition", "only those whose request came from this partition")
	f.Var(&srcOff, "source-offset", "only those whose request came from this offset")
	f.Var(&part, "partition", "only the dead letters in this partition of the dead-letter topic")
	f.Var(&off, "offset", "only the dead letter at this offset of the dead-letter topic")
	f.Var(&since, "since", "only those dead-lettered at or after this time (RFC 3339, or a duration ago: 24h)")
	f.Var(&until, "until", "only those dead-lettered before this time (RFC 3339, or a duration ago)")
	return func() letterFilter {
		return letterFilter{Filter: deadletter.Filter{RequestID: requestID, Reason: what, SourcePartition: srcPart.v,
			SourceOffset: srcOff.v, Partition: part.v, Offset: off.v, Since: since.t, Until: until.t}, conversation: conv}
	}
}

// readLetters parses the dlq flags, checks them with check (nil: no check beyond --topic)
// before it connects, and reads the dead letters they select, in time order (dead-letter
// time, then partition and offset).
func readLetters(ctx context.Context, f *flags, topic *string, filter func() letterFilter, check func(letterFilter) error, args []string) ([]deadletter.Letter, func(), error) {
	if err := f.parse(args); err != nil {
		return nil, nil, err
	}
	if err := f.require("topic"); err != nil {
		return nil, nil, err
	}
	fl := filter()
	if check != nil {
		if err := check(fl); err != nil {
			return nil, nil, err
		}
	}
	client, err := f.kafka()
	if err != nil {
		return nil, nil, err
	}
	if err := requireTopics(client, [2]string{"topic", *topic}); err != nil {
		client.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	letters, err := deadletter.Read(ctx, client, *topic, fl.Filter)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	letters = slices.DeleteFunc(letters, func(l deadletter.Letter) bool { return !fl.match(l) })
	slices.SortStableFunc(letters, func(a, b deadletter.Letter) int { return a.Timestamp.Compare(b.Timestamp) })
	return letters, func() { client.Close() }, nil
}

// letterJSON is a dead letter as the CLI prints it.
type letterJSON struct {
	ID             string    `json:"id"`
	Time           time.Time `json:"time"`
	RequestID      string    `json:"request_id,omitempty"`
	ConversationID string    `json:"conversation_id,omitempty"`
	Reason         string    `json:"reason"`
	Kind           string    `json:"kind,omitempty"` // turn.Kind's name (consumer.HeaderKind)
	Error          string    `json:"error,omitempty"`
	Attempts       int       `json:"attempts"`
	Source         string    `json:"source"`
	AgeSeconds     int64     `json:"age_seconds"`
	ValueDropped   string    `json:"value_dropped,omitempty"`
	HeadersDropped string    `json:"headers_dropped,omitempty"`
	KeyDropped     string    `json:"key_dropped,omitempty"`
	// Origin, WorkflowID and Sequence are deadletter.Letter's (Temporal mode: a request from
	// Bridge.Submit or a gap, the workflow that dead-lettered it, its sequence).
	Origin     string            `json:"origin,omitempty"`
	WorkflowID string            `json:"workflow_id,omitempty"`
	Sequence   int64             `json:"sequence,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Key        string            `json:"key,omitempty"`
	Value      string            `json:"value,omitempty"`
}

// kindLabel is the CLI's label of a dead letter's kind: the turn.Kind's name, "" when the dead
// letter does not say.
func kindLabel(k turn.Kind) string {
	if k == turn.KindNone {
		return ""
	}
	return k.String()
}

func toJSON(l deadletter.Letter, full bool) letterJSON {
	j := letterJSON{ID: l.ID(), Time: l.Timestamp.UTC(), RequestID: l.RequestID, ConversationID: conversationOf(l),
		Reason: l.Reason, Error: l.Error, Attempts: l.Attempts, Source: source(l), Kind: kindLabel(l.Kind),
		AgeSeconds: int64(time.Since(l.Timestamp) / time.Second), ValueDropped: l.ValueDropped,
		HeadersDropped: l.HeadersDropped, KeyDropped: l.KeyDropped, Origin: l.Origin, WorkflowID: l.WorkflowID, Sequence: l.Sequence}
	if full {
		j.Key, j.Value = printable(l.Key), printable(l.Value)
		if len(l.Headers) > 0 {
			j.Headers = map[string]string{}
			for _, h := range l.Headers {
				j.Headers[string(h.Key)] = printable(h.Value)
			}
		}
	}
	return j
}

// source is where the request came from: its origin when it had no record
// (deadletter.OriginSubmit, OriginGap: Temporal mode); else TOPIC/PARTITION/OFFSET of its
// record; else "?".
func source(l deadletter.Letter) string {
	switch {
	case l.Origin != "":
		return l.Origin
	case l.Source.Offset >= 0 && l.Source.Topic != "":
		return fmt.Sprintf("%s/%d/%d", l.Source.Topic, l.Source.Partition, l.Source.Offset)
	}
	return "?"
}

// sequenceText is a dead letter's sequence for dlq show: "" when it has none.
func sequenceText(seq int64) string {
	if seq == 0 {
		return ""
	}
	return fmt.Sprint(seq)
}

func printable(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return fmt.Sprintf("<%d bytes, not UTF-8>", len(b))
}

func age(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	case d >= time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return d.String()
}

// orDash is s, or "-" when s is empty, for a table cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func dlqList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "dlq list", dlqListUsage).withKafka().withJSON()
	topic := f.String("topic", "", "the dead-letter topic (required)")
	filter := filterFlags(f)
	letters, done, err := readLetters(ctx, f, topic, filter, nil, args)
	if err != nil {
		return err
	}
	defer done()
	if *f.json {
		out := make([]letterJSON, 0, len(letters))
		for _, l := range letters {
			out = append(out, toJSON(l, false))
		}
		return printJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tCONVERSATION\tREQUEST ID\tATTEMPTS\tAGE\tSOURCE\tDEAD LETTER\tREASON")
	for _, l := range letters {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", l.Timestamp.UTC().Format(time.RFC3339), orDash(conversationOf(l)),
			orDash(l.RequestID), l.Attempts, age(l.Timestamp), source(l), l.ID(), clipText(l.Reason, 100))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d dead letters\n", len(letters))
	return nil
}

func dlqShow(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "dlq show", dlqShowUsage).withKafka().withJSON()
	topic := f.String("topic", "", "the dead-letter topic (required)")
	filter := filterFlags(f)
	letters, done, err := readLetters(ctx, f, topic, filter, func(fl letterFilter) error {
		if fl.RequestID == "" && (fl.Partition == nil || fl.Offset == nil) {
			return usagef("give --request-id, or --partition and --offset")
		}
		return nil
	}, args)
	if err != nil {
		return err
	}
	defer done()
	if len(letters) == 0 {
		return fmt.Errorf("%w: no dead letter matches", errNotFound)
	}
	if *f.json {
		out := make([]letterJSON, 0, len(letters))
		for _, l := range letters {
			out = append(out, toJSON(l, true))
		}
		return printJSON(e.stdout, out)
	}
	for i, l := range letters {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		j := toJSON(l, true)
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		for _, kv := range [][2]string{{"dead letter", j.ID}, {"time", j.Time.Format(time.RFC3339)}, {"request id", j.RequestID},
			{"conversation", j.ConversationID}, {"attempts", fmt.Sprint(j.Attempts)}, {"source", j.Source},
			{"reason", j.Reason}, {"kind", j.Kind}, {"error", j.Error}, {"origin", j.Origin}, {"workflow id", j.WorkflowID},
			{"sequence", sequenceText(j.Sequence)}, {"value dropped", j.ValueDropped}, {"headers dropped", j.HeadersDropped},
			{"key dropped", j.KeyDropped}, {"key", j.Key}} {
			if kv[1] != "" {
				fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
			}
		}
		for k, v := range j.Headers {
			fmt.Fprintf(tw, "header %s:\t%s\n", k, v)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if j.Value != "" {
			fmt.Fprintf(e.stdout, "value:\n%s\n", j.Value)
		}
	}
	return nil
}

func dlqRedrive(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "dlq redrive", dlqRedriveUsage).withKafka().withDB().withApp().withJSON()
	topic := f.String("topic", "", "the dead-letter topic (required)")
	requests := f.String("requests-topic", "", "publish to this topic instead of each dead letter's source topic")
	note := f.String("note", "", "kept in each inbox entry's audit: who re-drove it and why")
	all := f.Bool("all", false, "re-drive every dead letter of the topic (without a filter)")
	dry := f.Bool("dry-run", false, "list what would be re-driven and change nothing")
	force := f.Bool("force", false, "re-drive requests the consumer refuses (malformed, invalid, a key that is not the conversation id)")
	maxText := f.Int("max-text-bytes", 0, "the service's turn.Decoder.MaxTextBytes, for the consumer's checks (0: turn.DefaultMaxTextBytes)")
	maxBytes := f.Int("max-message-bytes", sarama.NewConfig().Producer.MaxMessageBytes,
		"the producer's record size limit in bytes (at most the requests topic's max.message.bytes)")
	filter := filterFlags(f)
	letters, done, err := readLetters(ctx, f, topic, filter, func(fl letterFilter) error {
		switch {
		case fl.empty() && !*all:
			return usagef("give a filter (--request-id, --reason, ...) or --all")
		case *f.db == "" && !*dry:
			return usagef("--db (or %s) is required: the inbox entries are re-driven there", envName("db"))
		case *maxBytes < 1:
			return usagef("--max-message-bytes must be at least 1")
		case *maxText < 0:
			return usagef("--max-text-bytes must not be negative")
		}
		return nil
	}, args)
	if err != nil {
		return err
	}
	defer done()
	var ib inbox.Inbox // a dry run without --db takes every entry to be dead
	if *f.db != "" {
		db, _, sib, err := f.stores()
		if err != nil {
			return err
		}
		defer db.Close()
		ib = sib
	}
	client, err := f.kafka()
	if err != nil {
		return err
	}
	defer client.Close()
	if err := requireTopics(client, [2]string{"requests-topic", *requests}); err != nil {
		return err
	}
	client.Config().Producer.MaxMessageBytes = *maxBytes // Redrive's producer and its size check take it from here
	rctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	outcomes, stopped := deadletter.Redrive(rctx, deadletter.Options{Client: client, Inbox: ib, App: *f.app,
		RequestsTopic: *requests, Note: *note, Logger: discard, DryRun: *dry, Force: *force,
		Decoder: turn.Decoder{MaxTextBytes: *maxText}}, letters)
	if stopped != nil && len(outcomes) == 0 {
		return stopped
	}
	type row struct {
		ID        string `json:"id"`
		RequestID string `json:"request_id,omitempty"`
		Action    string `json:"action,omitempty"`
		To        string `json:"published_to,omitempty"`
		Error     string `json:"error,omitempty"`
	}
	rows := make([]row, 0, len(outcomes))
	failed := 0
	for _, o := range outcomes {
		r := row{ID: o.Letter.ID(), RequestID: o.Letter.RequestID, Action: string(o.Action)}
		if o.Err != nil {
			r.Action, r.Error = "", o.Err.Error()
			failed++
		} else if o.Action == deadletter.Redriven || o.Action == deadletter.Republished {
			r.To = fmt.Sprintf("%s/%d/%d", o.Topic, o.Partition, o.Offset)
			if o.DryRun {
				r.To = fmt.Sprintf("%s/%d", o.Topic, o.Partition)
			}
		}
		rows = append(rows, r)
	}
	if *f.json {
		if err := printJSON(e.stdout, rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		to := "PUBLISHED TO"
		if *dry {
			to = "WOULD PUBLISH TO"
			for i := range rows {
				if rows[i].Action != "" {
					rows[i].Action = "would be " + rows[i].Action
				}
			}
		}
		fmt.Fprintf(tw, "DEAD LETTER\tREQUEST ID\tACTION\t%s\tERROR\n", to)
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.RequestID, r.Action, r.To, r.Error)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, o := range outcomes {
		if deadletter.NoInboxEntry(o) {
			fmt.Fprintf(e.stderr, "warning: %s: request %s spent attempts but has no inbox entry under --app %q: "+
				"purged since (it runs as new), or the service's Runner.App is another (it is dead-lettered again)\n",
				o.Letter.ID(), o.Letter.RequestID, *f.app)
		}
	}
	switch {
	case stopped != nil: // the rows above are what was done
		return fmt.Errorf("%d of %d dead letters handled (%d not re-driven), then: %w", len(outcomes), len(letters), failed, stopped)
	case failed > 0 && *dry:
		return fmt.Errorf("dry run: %d of %d dead letters would not be re-driven", failed, len(outcomes))
	case failed > 0:
		return fmt.Errorf("%d of %d dead letters not re-driven", failed, len(outcomes))
	}
	if *dry {
		fmt.Fprintf(e.stderr, "dry run: %d dead letters would be re-driven or skipped as shown; nothing changed\n", len(outcomes))
	}
	return nil
}
