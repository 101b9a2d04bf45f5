package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/session"
)

// Figures are a run's counts: what was done to it and what the checker found.
type Figures struct {
	Cell          Cell
	Requests      int // valid requests produced, poison ones included
	Conversations int
	Invalid       int // records that are not requests
	Poison        int // requests whose model call kills its member
	Strangers     int // records of another user's conversation
	Panics        int // requests whose model, store or Handler panics
	Limited       int // requests the model always rate-limits
	Members       int
	Workers       int // Temporal worker processes

	Kills          int // kill -9 of a member
	WorkerKills    int // kill -9 of a Temporal worker
	ServerRestarts int // Temporal dev server restarts
	Terms          int // SIGTERM of a member
	DBKills        int // rounds of pg_terminate_backend
	ConnsKilled    int // connections those rounds ended
	Restarts       int // broker restarts
	Bursts         int // 429 bursts
	Crashes        int // member exits by a poison request
	MemberFails    int // member exits the run did not cause (an error from Run, say)
	// Batches counts the batches of two or more records the members handed off in one call
	// (Cell.MemberMaxBatch), from their logs.
	Batches int

	ResultRecords int // records on the results topic (a request's result may repeat)
	Turns         int // turns in the session histories
	Refunds       int // refund rows; RefundCalls counts the calls the idempotent service took
	RefundCalls   int
	// ModelSteps counts the executions of the agent's model steps (chaos_steps), and
	// ExtraModelSteps those beyond one per request and step: model calls the journal did
	// not save. They may not exceed ExtraBound (see ExtraBound).
	ModelSteps      int
	ExtraModelSteps int
	// Emails counts the email rows (one per idempotency key); EmailRedeliveries the calls
	// beyond one per row, the relay's at-least-once redeliveries (reported, not failed).
	Emails            int
	EmailRedeliveries int
	// Compactions counts the checkpoints in the session histories; CompactionRuns the
	// executions of compaction steps (chaos_compactions), ExtraCompactionRuns those beyond
	// one per request and step (finished compactions paid for again), which count with
	// ExtraModelSteps against ExtraBound; CompactionProblems the broken rules of compaction:
	// a turn with a checkpoint that is not its first event or with two, checkpoints that do
	// not chain (each folds from the previous one's Through plus one, the first from seq 1)
	// or cut a turn, a summary that does not hold every user message it covers, a
	// checkpoint no counted compaction wrote, and more events after the latest checkpoint's
	// range than the Runner lets a model see before it compacts (an event left uncovered).
	Compactions         int
	CompactionRuns      int
	ExtraCompactionRuns int
	CompactionProblems  int
	// CompactedReruns counts the turns stored with a checkpoint whose request was delivered
	// more than once (a kill, SIGTERM, revoke or failure met the turn): each took its
	// compaction from the journal or, cut before the record, ran it again (an extra run).
	CompactedReruns int
	// EmailsWithoutCommit counts the email rows of a request with no turn in its session
	// (an intent of a turn that never committed was delivered); CommittedWithoutEmail the
	// committed turns of valid requests with no email; DeadIntents the intents the relays
	// buried; PendingIntents those still pending after the checker's tail delivery. Each
	// must be zero.
	EmailsWithoutCommit   int
	CommittedWithoutEmail int
	DeadIntents           int
	PendingIntents        int

	Lost                 int
	DuplicateTurns       int
	OrderViolations      int
	ContextMisses        int
	DuplicateSideEffects int
	DeadLetters          int // distinct records dead-lettered
	ValidDeadLetters     int // valid requests, not poison, among them
	NoOutcome            int // records with neither a result nor a dead letter
	// DuplicateResults counts request ids with more than one result record; read
	// read_committed in the transactional cell, where each is a failure (elsewhere readers
	// dedup on the request id, and a republished result is expected).
	DuplicateResults int
	Other            int // the checks with no figure of their own: see Failures

	Elapsed time.Duration
	Seed    uint64

	// Failures lists the checks that failed, each with up to three examples. Empty means
	// the run passed.
	Failures []string
}

// Line returns the figures on one line, as RELIABILITY.md records them.
func (f *Figures) Line() string {
	var temporal string
	if f.Cell.Temporal() {
		temporal = fmt.Sprintf(" workers=%d worker_kills=%d server_restarts=%d batches=%d", f.Workers, f.WorkerKills, f.ServerRestarts, f.Batches)
	}
	return fmt.Sprintf("cell=%s requests=%d conversations=%d invalid=%d poison=%d strangers=%d panics=%d limited=%d members=%d%s kills=%d sigterms=%d db_kills=%d (connections=%d) restarts=%d bursts=%d poison_crashes=%d member_failures=%d "+
		"results=%d turns=%d refunds=%d refund_calls=%d model_steps=%d extra_model_steps=%d (bound %d) compactions=%d compaction_runs=%d extra_compaction_runs=%d compaction_problems=%d compacted_reruns=%d emails=%d email_redeliveries=%d "+
		"emails_without_commit=%d committed_without_email=%d dead_intents=%d pending_intents=%d "+
		"lost=%d duplicate_turns=%d order_violations=%d context_misses=%d duplicate_side_effects=%d dead_letters=%d valid_dead_letters=%d no_outcome=%d duplicate_results=%d other_failures=%d elapsed=%s seed=%d",
		f.Cell, f.Requests, f.Conversations, f.Invalid, f.Poison, f.Strangers, f.Panics, f.Limited, f.Members, temporal, f.Kills, f.Terms, f.DBKills, f.ConnsKilled, f.Restarts, f.Bursts, f.Crashes, f.MemberFails,
		f.ResultRecords, f.Turns, f.Refunds, f.RefundCalls, f.ModelSteps, f.ExtraModelSteps, f.ExtraBound(),
		f.Compactions, f.CompactionRuns, f.ExtraCompactionRuns, f.CompactionProblems, f.CompactedReruns, f.Emails, f.EmailRedeliveries,
		f.EmailsWithoutCommit, f.CommittedWithoutEmail, f.DeadIntents, f.PendingIntents,
		f.Lost, f.DuplicateTurns, f.OrderViolations, f.ContextMisses, f.DuplicateSideEffects, f.DeadLetters, f.ValidDeadLetters, f.NoOutcome, f.DuplicateResults, f.Other,
		f.Elapsed.Round(100*time.Millisecond), f.Seed)
}

// ExtraBound bounds ExtraModelSteps plus ExtraCompactionRuns: the faults that can cut a
// model or compaction step between its execution (which it counts as its last act) and its
// record in the journal. They are the
// kill -9s of members and workers, the poison requests' exits (a kill of the member by its
// own model, with other turns in flight), the SIGTERMs (a drain that cuts a turn) and the
// connections the database kills ended (a killed connection fails the count's reply or the
// record). The window is one database round trip, so a fault rarely cuts even one step; the
// bound is the journal's acceptance line rather than a worst case (a kill with many turns in
// flight could, in principle, cut one step of each).
func (f *Figures) ExtraBound() int {
	return f.Kills + f.WorkerKills + f.Crashes + f.Terms + f.ConnsKilled
}

// OK reports whether every check passed.
func (f *Figures) OK() bool { return len(f.Failures) == 0 }

// problems collects the failures of one check with a few examples.
type problems struct {
	n        int
	examples []string
	convs    map[string][]kind // conversation -> the kinds of its records counted
	order    []string
}

// count notes a problem of a record of kind k in conversation conv, for byConv.
func (p *problems) count(conv string, k kind) {
	if p.convs == nil {
		p.convs = map[string][]kind{}
	}
	if _, ok := p.convs[conv]; !ok {
		p.order = append(p.order, conv)
	}
	p.convs[conv] = append(p.convs[conv], k)
}

// byConv summarises the conversations counted, the first 12 of them, with the kinds of records
// other than valid among them: a conversation held up shows its culprit.
func (p *problems) byConv() string {
	slices.Sort(p.order)
	var parts []string
	for i, conv := range p.order {
		if i == 12 {
			parts = append(parts, fmt.Sprintf("and %d more", len(p.order)-i))
			break
		}
		part := fmt.Sprintf("%s %d", conv, len(p.convs[conv]))
		for _, k := range p.convs[conv] {
			if k != kindValid {
				part += " incl. " + k.String()
			}
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

func (p *problems) add(format string, args ...any) {
	p.n++
	if len(p.examples) < 3 {
		p.examples = append(p.examples, fmt.Sprintf(format, args...))
	}
}

// envelope is the part of a request or result the checker reads, decoded with encoding/json
// on its own rather than with turn's decoder.
type envelope struct {
	RequestID      string `json:"request_id"`
	ConversationID string `json:"conversation_id"`
	Text           string `json:"text"`
}

// outcomes tallies the records on the results and dead-letter topics against the workload.
type outcomes struct {
	w            *workload
	byValue      map[string]string   // record value -> request id
	results      map[string][]string // request id -> texts of its result records
	dead         map[string]bool     // request ids dead-lettered
	reasons      map[string]string   // request id -> the reason header of its dead letter
	attempts     map[string]string   // request id -> the attempts header of its dead letter
	records      int                 // result records
	strayResults problems            // a result that names no request of the workload, or under another key
	strayDead    problems            // a dead letter that is no record of the workload
}

func newOutcomes(w *workload) *outcomes {
	o := &outcomes{w: w, byValue: make(map[string]string, len(w.order)),
		results: make(map[string][]string), dead: make(map[string]bool), reasons: make(map[string]string),
		attempts: make(map[string]string)}
	for _, it := range w.order {
		o.byValue[string(it.value)] = it.id
	}
	return o
}

func (o *outcomes) addResult(r *kgo.Record) {
	o.records++
	var env envelope
	if err := json.Unmarshal(r.Value, &env); err != nil {
		o.strayResults.add("offset %d of partition %d: not JSON: %v", r.Offset, r.Partition, err)
		return
	}
	it, ok := o.w.byID[env.RequestID]
	if !ok || string(r.Key) != it.conv || env.ConversationID != it.conv {
		o.strayResults.add("result of %q under key %q, conversation %q", env.RequestID, r.Key, env.ConversationID)
		return
	}
	o.results[env.RequestID] = append(o.results[env.RequestID], env.Text)
}

func (o *outcomes) addDead(r *kgo.Record) {
	var reason, attempts, requestID string
	for _, h := range r.Headers {
		switch h.Key {
		case consumer.HeaderReason:
			reason = string(h.Value)
		case consumer.HeaderAttempts:
			attempts = string(h.Value)
		case consumer.HeaderRequestID:
			requestID = string(h.Value)
		}
	}
	id, ok := o.byValue[string(r.Value)]
	if !ok {
		// In Temporal mode a dead letter's value is the request re-encoded, not the
		// record's bytes: it is known by its request id and key.
		if it, known := o.w.byID[requestID]; known && it.kind != kindInvalid && string(r.Key) == it.conv {
			id, ok = requestID, true
		}
	}
	if !ok {
		o.strayDead.add("dead letter at offset %d of partition %d: %.80q", r.Offset, r.Partition, r.Value)
		return
	}
	o.dead[id] = true
	if reason != "" || o.reasons[id] == "" {
		o.reasons[id] = reason
		o.attempts[id] = attempts
	}
}

// settled counts the workload's records that have an outcome: a result or a dead letter.
func (o *outcomes) settled() int {
	n := 0
	for _, it := range o.w.order {
		if len(o.results[it.id]) > 0 || o.dead[it.id] {
			n++
		}
	}
	return n
}

// turnRow is one event of a session history.
type turnRow struct {
	conv, requestID, author, body string
	seq                           int64
	data                          []byte
}

// check reads the topics and the tables and fills in f's checks.
func check(ctx context.Context, cfg *Config, brokers []string, db *sql.DB, prefix string, w *workload, f *Figures) error {
	o := newOutcomes(w)
	committed := cfg.Cell.Transactional()
	results, err := readTopic(ctx, brokers, topicResults, int32(cfg.Partitions), committed)
	if err != nil {
		return err
	}
	for _, r := range results {
		o.addResult(r)
	}
	dead, err := readTopic(ctx, brokers, topicDeadLetters, dlqPartitions, committed)
	if err != nil {
		return err
	}
	for _, r := range dead {
		o.addDead(r)
	}
	f.ResultRecords = o.records

	events, err := readHistories(ctx, db, prefix)
	if err != nil {
		return err
	}
	tb, err := readTables(ctx, db, prefix)
	if err != nil {
		return err
	}
	judge(w, o, events, tb, committed, f)
	return nil
}

// readHistories reads every event of every session, by conversation, oldest first.
func readHistories(ctx context.Context, db *sql.DB, prefix string) ([]turnRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT s.conversation, e.request_id, e.author, e.body, e.seq, e.data
		FROM `+prefix+`events e JOIN `+prefix+`sessions s ON s.id = e.session_id
		ORDER BY s.conversation, e.seq`)
	if err != nil {
		return nil, fmt.Errorf("read histories: %w", err)
	}
	defer rows.Close()
	var events []turnRow
	for rows.Next() {
		var e turnRow
		if err := rows.Scan(&e.conv, &e.requestID, &e.author, &e.body, &e.seq, &e.data); err != nil {
			return nil, fmt.Errorf("read histories: %w", err)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read histories: %w", err)
	}
	return events, nil
}

// stepRun names a model step of a request in chaos_steps.
type stepRun struct {
	requestID string
	ordinal   int
}

// tables are the fake services' rows the checker reads: what the side effects and the model
// steps left behind, and the intents the relays buried.
type tables struct {
	refunds     map[string]int  // request id -> refund rows
	refundCalls int             // calls the refund service took
	steps       map[stepRun]int // model step -> executions
	compactions map[stepRun]int // compaction step -> executions
	deliveries  map[string]int  // request id -> its deliveries, when more than one
	emails      map[string]int  // request id -> email rows
	emailCalls  int             // calls the email service took
	deadIntents []string        // ids of the buried intents, with their reasons
}

func newTables() *tables {
	return &tables{refunds: map[string]int{}, steps: map[stepRun]int{}, compactions: map[stepRun]int{}, deliveries: map[string]int{}, emails: map[string]int{}}
}

// readTables reads the refund, email and step tables and the buried intents with plain SQL.
func readTables(ctx context.Context, db *sql.DB, prefix string) (*tables, error) {
	tb := newTables()
	scan := func(what, query string, row func(id string, n int)) error {
		rows, err := db.QueryContext(ctx, query)
		if err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return fmt.Errorf("read %s: %w", what, err)
			}
			row(id, n)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		return nil
	}
	stepRow := func(into map[stepRun]int) func(id string, n int) {
		return func(id string, n int) {
			i := strings.LastIndexByte(id, '#')
			var ord int
			_, _ = fmt.Sscan(id[i+1:], &ord)
			into[stepRun{id[:i], ord}] = n
		}
	}
	for _, q := range []struct {
		what, query string
		row         func(id string, n int)
	}{
		{"refunds", `SELECT request_id, calls FROM ` + prefix + `chaos_refunds`, func(id string, n int) {
			tb.refunds[id]++
			tb.refundCalls += n
		}},
		{"emails", `SELECT request_id, calls FROM ` + prefix + `chaos_emails`, func(id string, n int) {
			tb.emails[id]++
			tb.emailCalls += n
		}},
		{"model steps", `SELECT request_id || '#' || ordinal, runs FROM ` + prefix + `chaos_steps`, stepRow(tb.steps)},
		{"compactions", `SELECT request_id || '#' || ordinal, runs FROM ` + prefix + `chaos_compactions`, stepRow(tb.compactions)},
		// The inbox's key is the request id, "/" and a hash of its scope.
		{"deliveries", `SELECT split_part(request_id, '/', 1), deliveries FROM ` + prefix + `inbox WHERE deliveries > 1`, func(id string, n int) {
			tb.deliveries[id] = n
		}},
		{"buried intents", `SELECT id || ': ' || reason, attempts FROM ` + prefix + `outbox WHERE status = 'dead' ORDER BY id`, func(id string, n int) {
			tb.deadIntents = append(tb.deadIntents, fmt.Sprintf("%s (%d attempts)", id, n))
		}},
	} {
		if err := scan(q.what, q.query, q.row); err != nil {
			return nil, err
		}
	}
	return tb, nil
}

// judge fills in f's checks from what was read: the outcomes on the topics, the events of
// every session (by conversation, oldest first) and the fake services' tables. With
// committed (the topics were read read_committed), a request id with more than one result
// record is a failure. f's fault counts must be set: they bound the extra model steps.
func judge(w *workload, o *outcomes, events []turnRow, tb *tables, committed bool, f *Figures) {
	var lost, dup, order, miss, sideDup, validDead, foreign, noRefund, noOutcome, served, noReason, dupResults, memberFails problems
	var extra, noSteps, emailNoCommit, commitNoEmail, deadIntents, pending, compaction problems
	turns, replies := histories(events, w, &order, &miss, &foreign)
	compacted := checkCompactions(events, tb, &compaction, f)
	f.CompactedReruns = 0
	for id := range compacted {
		if tb.deliveries[id] > 1 {
			f.CompactedReruns++
		}
	}
	for id, n := range turns {
		f.Turns += n
		if n > 1 {
			dup.add("request %s: %d turns in its session", id, n)
		}
	}
	f.Refunds, f.RefundCalls = 0, tb.refundCalls
	for id, n := range tb.refunds {
		f.Refunds += n
		if n > 1 {
			sideDup.add("request %s: %d refunds", id, n)
		}
	}
	f.Emails, f.EmailRedeliveries = 0, 0
	for id, n := range tb.emails {
		f.Emails += n
		if n > 1 {
			sideDup.add("request %s: %d emails (under as many keys)", id, n)
		}
		if turns[id] == 0 {
			it := w.byID[id]
			emailNoCommit.add("request %s (%s of %s): an email and no committed turn", id, it.kind, it.conv)
		}
	}
	f.EmailRedeliveries = tb.emailCalls - f.Emails
	f.ModelSteps, f.ExtraModelSteps = countRuns(tb.steps, "model", &extra)
	f.CompactionRuns, f.ExtraCompactionRuns = countRuns(tb.compactions, "compaction", &extra)
	var overBound problems // one failure, whose figures are ExtraModelSteps and ExtraCompactionRuns
	if bound := f.ExtraBound(); f.ExtraModelSteps+f.ExtraCompactionRuns > bound {
		overBound.add("%d extra executions of model steps and %d of compactions, more than the %d kills, poison exits, SIGTERMs and killed connections: %s",
			f.ExtraModelSteps, f.ExtraCompactionRuns, bound, strings.Join(extra.examples, "; "))
	}
	for _, id := range tb.deadIntents {
		deadIntents.add("%s", id)
	}
	f.DeadIntents = deadIntents.n
	if f.PendingIntents > 0 {
		pending.add("%d intents still pending after the checker's relay ran for %s", f.PendingIntents, tailTimeout)
	}
	for _, it := range w.order {
		texts := o.results[it.id]
		if o.dead[it.id] {
			f.DeadLetters++
		}
		if !o.dead[it.id] && len(texts) == 0 {
			noOutcome.add("%s record %s (%s #%d): neither a result nor a dead letter", it.kind, it.id, it.conv, it.n)
			noOutcome.count(it.conv, it.kind)
		}
		if len(texts) > 1 {
			dupResults.add("request %s (%s): %d result records", it.id, it.kind, len(texts))
		}
		if it.kind.deadLettered() {
			switch {
			case len(texts) > 0:
				served.add("%s record %s of %s: served (%d results)", it.kind, it.id, it.conv, len(texts))
			case !o.dead[it.id]:
				lost.add("%s record %s of %s: not dead-lettered", it.kind, it.id, it.conv)
			case o.reasons[it.id] == "":
				noReason.add("%s record %s of %s: dead-lettered without a reason", it.kind, it.id, it.conv)
			}
			continue
		}
		switch {
		case o.dead[it.id]:
			validDead.add("request %s (%s #%d) dead-lettered: %q after %s attempts", it.id, it.conv, it.n, o.reasons[it.id], o.attempts[it.id])
		case len(texts) == 0:
			lost.add("request %s (%s #%d): no result", it.id, it.conv, it.n)
		case turns[it.id] == 0:
			lost.add("request %s (%s #%d): a result but no turn in its session", it.id, it.conv, it.n)
		}
		for _, t := range texts {
			if turns[it.id] > 0 && t != replies[it.id] {
				dup.add("request %s: a result %q differs from the turn stored %q", it.id, t, replies[it.id])
				break
			}
		}
		if turns[it.id] == 0 {
			continue
		}
		if tb.refunds[it.id] == 0 {
			noRefund.add("request %s: a turn but no refund", it.id)
		}
		if tb.emails[it.id] == 0 {
			commitNoEmail.add("request %s (%s #%d): a committed turn and no email", it.id, it.conv, it.n)
		}
		for _, ord := range modelOrdinals {
			switch {
			case compacted[it.id]:
				ord++ // the compaction is step 1
				if tb.steps[stepRun{it.id, ord}] == 0 {
					noSteps.add("request %s: a turn and no execution of its model step %d", it.id, ord)
				}
			case tb.steps[stepRun{it.id, ord}] == 0 && tb.steps[stepRun{it.id, ord + 1}] == 0:
				// A turn stored without a checkpoint ran its model steps first, or second after
				// a compaction whose summary failed (a 429 burst) and which it went on without.
				noSteps.add("request %s: a turn and no execution of its model step %d (or %d after a failed compaction)", it.id, ord, ord+1)
			}
		}
	}

	f.Lost, f.DuplicateTurns, f.OrderViolations, f.ContextMisses = lost.n, dup.n, order.n, miss.n
	f.DuplicateSideEffects, f.ValidDeadLetters = sideDup.n, validDead.n
	f.NoOutcome, f.DuplicateResults = noOutcome.n, dupResults.n
	f.EmailsWithoutCommit, f.CommittedWithoutEmail = emailNoCommit.n, commitNoEmail.n
	f.CompactionProblems = compaction.n
	if !committed {
		dupResults = problems{} // republished results are expected: readers dedup on the request id
	}
	if len(noOutcome.convs) > 0 {
		noOutcome.examples = append(noOutcome.examples, "by conversation: "+noOutcome.byConv())
	}
	if f.MemberFails > 0 {
		memberFails.add("%d member or worker exits the run did not cause (a panic, an error from Run: see the logs)", f.MemberFails)
	}
	f.Other = foreign.n + noRefund.n + o.strayResults.n + o.strayDead.n + served.n + noReason.n + memberFails.n + noSteps.n
	for _, c := range []struct {
		name string
		p    *problems
	}{
		{"lost", &lost}, {"duplicate turns", &dup}, {"order violations", &order}, {"context misses", &miss},
		{"duplicate side effects", &sideDup}, {"valid requests dead-lettered", &validDead},
		{"turns of no valid request", &foreign}, {"turns without their refund", &noRefund},
		{"stray results", &o.strayResults}, {"stray dead letters", &o.strayDead},
		{"records with no outcome", &noOutcome}, {"expected dead letters served", &served},
		{"dead letters without a reason", &noReason}, {"duplicate committed results", &dupResults},
		{"members that died by themselves", &memberFails},
		{"extra model steps past the bound", &overBound}, {"turns without their model steps", &noSteps},
		{"compaction problems", &compaction},
		{"emails without a committed turn", &emailNoCommit}, {"committed turns without their email", &commitNoEmail},
		{"buried intents", &deadIntents}, {"intents left pending", &pending},
	} {
		if c.p.n > 0 {
			f.Failures = append(f.Failures, fmt.Sprintf("%s: %d (%s)", c.name, c.p.n, strings.Join(c.p.examples, "; ")))
		}
	}
}

// histories walks each conversation's history, oldest first. It counts the turns of each
// request id and keeps each one's reply; it checks that the turns follow the produced order
// and that each reply quotes the user message before it in the history.
func histories(events []turnRow, w *workload, order, miss, foreign *problems) (turns map[string]int, replies map[string]string) {
	turns, replies = map[string]int{}, map[string]string{}
	var (
		conv, prevText string
		prevN          int
	)
	for i := 0; i < len(events); {
		e := events[i]
		if e.conv != conv {
			conv, prevText, prevN = e.conv, "", 0
		}
		// A turn is the run of events of one request id: the user's message, then the reply.
		j := i + 1
		for j < len(events) && events[j].conv == conv && events[j].requestID == e.requestID {
			j++
		}
		turn := events[i:j]
		i = j
		turns[e.requestID]++
		if turn[0].author == session.AuthorCheckpoint { // a compaction's (checkCompactions)
			turn = turn[1:]
		}
		it, ok := w.byID[e.requestID]
		if !ok || it.kind != kindValid || it.conv != conv || len(turn) != 2 || turn[0].author != "user" || turn[0].body != userText(conv, it.n, kindValid) || turn[1].author != "assistant" {
			foreign.add("conversation %s: a turn of %s that is no valid request of it (%d events)", conv, e.requestID, len(turn))
			continue
		}
		replies[e.requestID] = turn[1].body
		if it.n <= prevN {
			order.add("conversation %s: #%d after #%d", conv, it.n, prevN)
		}
		if want := replyText(turn[0].body, prevText); turn[1].body != want {
			miss.add("conversation %s #%d: replied %q, want %q", conv, it.n, turn[1].body, want)
		}
		prevText, prevN = turn[0].body, it.n
	}
	return turns, replies
}

// countRuns sums the executions of steps, and those beyond one per request and step, which
// it adds to extra as the what steps that ran again.
func countRuns(steps map[stepRun]int, what string, extra *problems) (runs, extraRuns int) {
	for s, n := range steps {
		runs += n
		if n > 1 {
			extraRuns += n - 1
			extra.add("request %s: %s step %d ran %d times", s.requestID, what, s.ordinal, n)
		}
	}
	return runs, extraRuns
}

// checkCompactions walks each conversation's history, oldest first, and checks its
// checkpoints (see Figures.CompactionProblems), counting them in f.Compactions. It returns
// the request ids whose turn holds a checkpoint: their model steps come one later.
func checkCompactions(events []turnRow, tb *tables, bad *problems, f *Figures) (compacted map[string]bool) {
	compacted = map[string]bool{}
	f.Compactions = 0
	for start := 0; start < len(events); {
		end := start + 1
		for end < len(events) && events[end].conv == events[start].conv {
			end++
		}
		checkConversation(events[start:end], tb, bad, f, compacted)
		start = end
	}
	return compacted
}

// checkConversation checks the checkpoints of one conversation's history.
func checkConversation(events []turnRow, tb *tables, bad *problems, f *Figures, compacted map[string]bool) {
	conv := events[0].conv
	bySeq := make(map[int64]turnRow, len(events))
	for _, e := range events {
		bySeq[e.seq] = e
	}
	var through int64 // the latest checkpoint's
	for i, e := range events {
		if e.author != session.AuthorCheckpoint {
			continue
		}
		f.Compactions++
		c, _, err := session.CheckpointOf(session.Event{ID: e.requestID, RequestID: e.requestID, Seq: e.seq, Author: e.author, Text: e.body, Data: e.data})
		if err != nil {
			bad.add("conversation %s: %v", conv, err)
			continue
		}
		switch {
		case compacted[e.requestID]:
			bad.add("conversation %s: the turn of %s holds two checkpoints (the second at seq %d)", conv, e.requestID, e.seq)
		case i > 0 && events[i-1].requestID == e.requestID:
			bad.add("conversation %s: the checkpoint at seq %d is not the first event of %s's turn", conv, e.seq, e.requestID)
		case c.From != through+1:
			bad.add("conversation %s: the checkpoint at seq %d folds seqs %d to %d, the one before covers through %d", conv, e.seq, c.From, c.Through, through)
		case bySeq[c.Through].requestID == bySeq[c.Through+1].requestID:
			bad.add("conversation %s: the checkpoint at seq %d covers through seq %d, in the middle of a turn", conv, e.seq, c.Through)
		case tb.compactions[stepRun{e.requestID, 1}] == 0:
			bad.add("conversation %s: the checkpoint at seq %d of %s, and no execution of its compaction counted", conv, e.seq, e.requestID)
		}
		compacted[e.requestID] = true
		var covered []string // the user messages of seqs 1 to c.Through
		for _, u := range events {
			if u.seq <= c.Through && u.author == "user" {
				covered = append(covered, u.body)
			}
		}
		if want := summaryText(covered); c.Summary != want {
			bad.add("conversation %s: the checkpoint at seq %d summarizes %q, it covers the messages %q", conv, e.seq, c.Summary, want)
		}
		through = max(through, c.Through)
	}
	// Before a turn the Runner compacts more than chaosHistoryLimit uncovered events; the
	// last turn stored adds its two.
	if tail := int64(len(events)) - through - countCheckpointsAfter(events, through); tail > chaosHistoryLimit+2 {
		bad.add("conversation %s: %d events after the latest checkpoint's range (seqs 1 to %d), more than a model sees before it compacts (%d) and a turn", conv, tail, through, chaosHistoryLimit)
	}
}

// countCheckpointsAfter counts the checkpoint events after seq through.
func countCheckpointsAfter(events []turnRow, through int64) int64 {
	var n int64
	for _, e := range events {
		if e.seq > through && e.author == session.AuthorCheckpoint {
			n++
		}
	}
	return n
}
