package turntest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// Effects is a fake side-effect service for the crash harness, standing for a payment or mail
// API that dedups on an idempotency key: the host's model performs each side effect through
// Do, with the key it would send to the real service (turn.ToolKey or turn.Input.ToolKey) and
// a description of the effect ("refund A-1 700"). It is safe for concurrent use.
//
// An effect is identified by its key: calls with one key are one effect, performed once. The
// description only pairs the effects of different runs of one request's turn: [Crashes] runs
// a request's turn again after a crash, and an effect that the re-run performs under a new key
// with the description of one an earlier run performed is that effect done twice (the key was
// derived from something that changes between runs). Within one run every key is an effect
// of its own, so two refunds of the same amount by one user in one turn are two refunds, and
// so are equal-looking refunds of two requests. Outside [Crashes], which tells Effects when a
// run starts, all calls belong to one run, and [Effects.Duplicates] finds nothing: count with
// [Effects.Performed] there.
type Effects struct {
	mu       sync.Mutex
	keys     map[string]int             // idempotency key -> the run that performed it
	effect   map[string]string          // idempotency key -> its description
	attempts map[runEffect][]string     // keys Do was called with, per run and description
	runs     map[string][]int           // request id -> its runs, in order
	request  map[int]string             // run -> its request id
	run      int                        // the current run; 0 outside the harness
	order    []string                   // keys, first performance first
	byEffect map[string]map[string]bool // description -> keys performed with it
}

// runEffect is a description within one run.
type runEffect struct {
	run    int
	effect string
}

// NewEffects returns an empty Effects.
func NewEffects() *Effects {
	return &Effects{keys: map[string]int{}, effect: map[string]string{}, attempts: map[runEffect][]string{},
		runs: map[string][]int{"": {0}}, request: map[int]string{0: ""}, byEffect: map[string]map[string]bool{}}
}

// startRun starts a new run of requestID's turn: the Do calls from now on are its.
func (e *Effects) startRun(requestID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.run = len(e.request)
	e.request[e.run] = requestID
	e.runs[requestID] = append(e.runs[requestID], e.run)
}

// Do performs effect under the idempotency key key, as a service that dedups on it does: the
// first call with a key performs it and returns true; a later call with the same key performs
// nothing and returns false. The same effect under two keys is performed twice: when the two
// come from two runs of one request's turn, that is what the crash harness catches.
func (e *Effects) Do(key, effect string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	re := runEffect{e.run, effect}
	if !slices.Contains(e.attempts[re], key) {
		e.attempts[re] = append(e.attempts[re], key)
	}
	if _, seen := e.keys[key]; seen {
		return false
	}
	e.keys[key], e.effect[key] = e.run, effect
	e.order = append(e.order, key)
	if e.byEffect[effect] == nil {
		e.byEffect[effect] = map[string]bool{}
	}
	e.byEffect[effect][key] = true
	return true
}

// Performed returns how many times effect was performed: the number of distinct keys Do
// performed it under, in every run.
func (e *Effects) Performed(effect string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.byEffect[effect])
}

// Duplicates returns the effects performed more often than intended, in the order they were
// first performed: for each request and description, the keys performed by the runs of that
// request's turn, when they outnumber the keys the busiest single run asked for (what one run
// intends). Outside [Crashes] it returns nil (see [Effects]).
func (e *Effects) Duplicates() []Duplicate {
	e.mu.Lock()
	defer e.mu.Unlock()
	type group struct {
		request, effect string
	}
	performed := map[group][]string{}
	var groups []group
	for _, key := range e.order {
		g := group{e.request[e.keys[key]], e.effect[key]}
		if performed[g] == nil {
			groups = append(groups, g)
		}
		performed[g] = append(performed[g], key)
	}
	var out []Duplicate
	for _, g := range groups {
		intended := 0
		for _, run := range e.runs[g.request] {
			intended = max(intended, len(e.attempts[runEffect{run, g.effect}]))
		}
		if keys := performed[g]; len(keys) > intended {
			out = append(out, Duplicate{Effect: g.effect, RequestID: g.request, Intended: intended, Keys: keys})
		}
	}
	return out
}

// Duplicate is a side effect that happened more often than intended.
type Duplicate struct {
	// Effect is the effect's description.
	Effect string
	// RequestID is the request whose turn performed it, "" outside [Crashes].
	RequestID string
	// Intended is how many times one run of the turn performs it: the number of distinct keys
	// the run that asked most asked for.
	Intended int
	// Keys are the idempotency keys it was performed under, more than Intended: keys that
	// differ between runs mean the key was derived from something that changes between runs.
	Keys []string
}

// CrashPoint is a row of the crash table (docs/DESIGN.md): where a turn's process dies.
type CrashPoint string

// The crash table's rows: the process dies right after this step of the turn.
const (
	AfterBegin    CrashPoint = "after inbox begin"
	AfterModel    CrashPoint = "after the model call"
	AfterAppend   CrashPoint = "after the session append"
	AfterComplete CrashPoint = "after the inbox complete"
	AfterPublish  CrashPoint = "after the publish"
)

// CrashPoints lists the crash table's rows in the order of a turn.
var CrashPoints = []CrashPoint{AfterBegin, AfterModel, AfterAppend, AfterComplete, AfterPublish}

// DuringStep is the crash point inside step n (1-based) of a turn's step journal
// (turn.Journal): the step ran, its side effects happened, and the process died before its
// record landed. The redelivery must run that step again, with the same key.
func DuringStep(n int) CrashPoint { return CrashPoint(fmt.Sprintf("during step %d", n)) }

// AfterStep is the crash point right after step n's record landed in the journal. The
// redelivery must not run steps 1 to n again.
func AfterStep(n int) CrashPoint { return CrashPoint(fmt.Sprintf("after step %d", n)) }

// CrashPointsFor lists the crash points of a turn of steps journal steps, in the order of a
// turn: CrashPoints with DuringStep(i) and AfterStep(i) for each step between AfterBegin and
// AfterModel.
func CrashPointsFor(steps int) []CrashPoint {
	out := []CrashPoint{AfterBegin}
	for i := 1; i <= steps; i++ {
		out = append(out, DuringStep(i), AfterStep(i))
	}
	return append(out, CrashPoints[1:]...)
}

// CrashConfig configures the crash harness.
type CrashConfig struct {
	// NewModel returns the host's model, performing its side effects through fx. It is
	// called for every delivery, as a restarted process builds its model again; fx is the
	// same service across the deliveries of one crash point. Required.
	NewModel func(fx *Effects) turn.ModelClient
	// Requests are delivered in order, each first crashing at the point and then delivered
	// again; default three requests of one conversation.
	Requests []turn.Request
	// Runner, when set, adjusts the Runner of each delivery (App, HistoryLimit, ...); the
	// harness sets Model, Sessions and Inbox.
	Runner func(r *turn.Runner)
	// Steps is how many journal steps (turn.Journal: Input.Step, turn.RunStep, the agent
	// loop's model and tool calls) one turn of the model records. With Steps > 0 the harness
	// also crashes during and after each step (CrashPointsFor) and reports, as a problem, a
	// step that ran again after its record landed. A turn that compacts (turn.CompactStep,
	// before the model) counts that step among them: it is the turn's first.
	Steps int
	// History are requests delivered once each, without a crash, before Requests at every
	// crash point: a conversation's earlier turns, for the compactions of Requests to fold
	// (set a small HistoryLimit or ContextBudget through Runner). Each must succeed.
	History []turn.Request
}

// CrashReport is what happened at one crash point.
type CrashReport struct {
	Point CrashPoint
	// Duplicates are the side effects performed more than once.
	Duplicates []Duplicate
	// ModelCalls counts the model calls per request id, crashed ones included.
	ModelCalls map[string]int
	// StepRuns counts, per request id and step ordinal, the runs of the step that reached the
	// journal (its record was asked for, whether or not it landed), crashed ones included. A
	// step answered from the journal is not counted.
	StepRuns map[string]map[int]int
	// SummarizerCalls counts, per request id and step ordinal, the calls of the Runner's
	// summarizer (the Runner's Summarizer, else the model's, as turn.ModelSummarizer finds
	// it) for the turn's compaction step, crashed ones included.
	SummarizerCalls map[string]map[int]int
	// Problems are broken guarantees other than duplicates: a redelivery that failed, a
	// request with no result or with a turn stored other than once, a model called again
	// after its turn was stored; and of compaction: a summarizer called again after its
	// compaction step's record landed (a finished compaction paid for twice), a turn that
	// compacted stored without its checkpoint (lost) or with two (doubled), checkpoints that
	// do not chain (each folds from the previous one's Through plus one, the first from seq
	// 1) or that cut a turn in two, and a model that did not see the latest summary and every
	// event after the range it covers (an event left uncovered).
	Problems []string
}

// OK reports whether the crash point showed no duplicate and no problem.
func (r CrashReport) OK() bool { return len(r.Duplicates) == 0 && len(r.Problems) == 0 }

// String formats the report for a test failure.
func (r CrashReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "crash %s:", r.Point)
	for _, d := range r.Duplicates {
		fmt.Fprintf(&b, "\n  side effect %q of request %s happened %d times (one run of the turn does it %d times), under keys %s: derive the call id given to turn.ToolKey from something stable across re-runs (the tool's name and ordinal in the turn, or a hash of its arguments), not the model's tool-call id",
			d.Effect, d.RequestID, len(d.Keys), d.Intended, strings.Join(d.Keys, ", "))
	}
	for _, p := range r.Problems {
		b.WriteString("\n  " + p)
	}
	return b.String()
}

// CheckCrashes runs [Crashes] and fails t with every report that is not OK. It returns the
// reports.
func CheckCrashes(t testing.TB, cfg CrashConfig) []CrashReport {
	t.Helper()
	reports, err := Crashes(context.Background(), cfg)
	if err != nil {
		t.Fatalf("turntest: crash harness: %v", err)
	}
	var bad []string
	for _, r := range reports {
		if !r.OK() {
			bad = append(bad, r.String())
		}
	}
	if len(bad) > 0 {
		t.Fatalf("turntest: side effects or turns not once across crashes:\n%s", strings.Join(bad, "\n"))
	}
	return reports
}

// Crashes runs cfg's requests through a turn.Runner on memory stores once per crash point
// (CrashPointsFor(cfg.Steps)), each with stores and an Effects of its own, after cfg.History
// (delivered once, no crash): every request's first delivery dies at the point (from then on
// that process writes nothing: no store call of it lands), and the request is delivered again
// to a fresh Runner and model, as Kafka redelivers after a crash. AfterPublish delivers a
// request that completed once more. It reports, per point, the side effects that happened
// more than once and any other broken guarantee. Errors: an invalid cfg.
func Crashes(ctx context.Context, cfg CrashConfig) ([]CrashReport, error) {
	if cfg.NewModel == nil {
		return nil, errors.New("turntest: CrashConfig.NewModel is nil")
	}
	reqs := cfg.Requests
	if len(reqs) == 0 {
		for i := range 3 {
			reqs = append(reqs, NewRequest("crash-conversation", "crash-user", fmt.Sprintf("message %d", i+1)))
		}
	}
	points := CrashPointsFor(cfg.Steps)
	out := make([]CrashReport, 0, len(points))
	for _, point := range points {
		out = append(out, crashAt(ctx, cfg, reqs, point))
	}
	return out, nil
}

// quiet drops the Runner's logs of the crashes the harness makes.
var quiet = slog.New(slog.DiscardHandler)

// errCrashed is what a crashed process's calls return: nothing of them lands.
var errCrashed = errors.New("turntest: process crashed")

// crashSwitch is one process's life: armed at a point, dead from the moment it is reached.
type crashSwitch struct {
	mu    sync.Mutex
	point CrashPoint // "" for a process that does not crash
	dead  bool
}

func (c *crashSwitch) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// reached kills the process if it is armed at p, and reports whether it is dead.
func (c *crashSwitch) reached(p CrashPoint) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.point == p {
		c.dead = true
	}
	return c.dead
}

func crashAt(ctx context.Context, cfg CrashConfig, reqs []turn.Request, point CrashPoint) CrashReport {
	rep := CrashReport{Point: point, ModelCalls: make(map[string]int), StepRuns: make(map[string]map[int]int),
		SummarizerCalls: make(map[string]map[int]int)}
	fx := NewEffects()
	sessions, ib := session.NewMemoryStore(), inbox.NewMemoryInbox()
	steps := &stepLog{ids: map[string]string{}, landed: map[string]map[int]bool{}, compacted: map[string]compactionRun{}, rep: &rep}
	var callsMu sync.Mutex
	runner := func(sw *crashSwitch) *turn.Runner {
		host := cfg.NewModel(fx)
		r := &turn.Runner{Logger: quiet}
		if cfg.Runner != nil {
			cfg.Runner(r)
		}
		// The wrapper below hides the model's own summarizer and counter: the Runner gets
		// them as it would find them on the model.
		summarizer := r.Summarizer
		if summarizer == nil {
			summarizer = turn.ModelSummarizer(host)
		}
		if r.Tokens == nil {
			r.Tokens = turn.ModelTokenCounter(host)
		}
		r.Summarizer = crashSummarizer{s: summarizer, sw: sw, steps: steps, key: r.InboxKey}
		model := turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
			callsMu.Lock()
			rep.ModelCalls[in.Request.ID]++
			callsMu.Unlock()
			steps.checkView(ctx, sessions, r.Key(in.Request), in)
			out, err := host.Respond(ctx, in)
			if sw.reached(AfterModel) {
				return turn.Output{}, errCrashed
			}
			return out, err
		})
		r.Model, r.Sessions, r.Inbox = model, crashStore{Store: sessions, sw: sw}, crashInbox{Outbox: ib, sw: sw, steps: steps}
		return r
	}
	for _, req := range cfg.History {
		steps.ids[runnerOf(cfg).InboxKey(req)] = req.ID
		fx.startRun(req.ID)
		if _, err := runner(&crashSwitch{}).Run(ctx, req); err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("history request %s: %v", req.ID, err))
		}
	}
	for _, req := range reqs {
		steps.ids[runnerOf(cfg).InboxKey(req)] = req.ID
		first := &crashSwitch{point: point}
		fx.startRun(req.ID)
		res, err := runner(first).Run(ctx, req)
		if point == AfterPublish && err == nil {
			first.reached(AfterPublish) // the result was published; the commit never happened
		}
		if !first.isDead() {
			rep.Problems = append(rep.Problems, fmt.Sprintf("request %s: the turn never reached %q (first delivery: %v)", req.ID, point, err))
		}
		calls := rep.ModelCalls[req.ID]
		fx.startRun(req.ID)
		again, err := runner(&crashSwitch{}).Run(ctx, req)
		switch {
		case err != nil:
			rep.Problems = append(rep.Problems, fmt.Sprintf("request %s: the redelivery failed: %v", req.ID, err))
			continue
		case point == AfterPublish && again.Text != res.Text:
			rep.Problems = append(rep.Problems, fmt.Sprintf("request %s: the redelivery answered %q, the first delivery %q", req.ID, again.Text, res.Text))
		}
		if stored := point == AfterAppend || point == AfterComplete || point == AfterPublish; stored && rep.ModelCalls[req.ID] != calls {
			rep.Problems = append(rep.Problems, fmt.Sprintf("request %s: the model was called again although its turn was stored", req.ID))
		}
	}
	rep.Problems = append(rep.Problems, checkStored(ctx, sessions, ib, reqs, cfg)...)
	rep.Problems = append(rep.Problems, checkCompactions(ctx, sessions, append(slices.Clone(cfg.History), reqs...), cfg, steps)...)
	rep.Problems = append(rep.Problems, steps.problems...)
	rep.Duplicates = fx.Duplicates()
	sort.Strings(rep.Problems)
	return rep
}

// checkStored checks that every request has one turn in its session and a result.
func checkStored(ctx context.Context, sessions session.Store, ib inbox.Inbox, reqs []turn.Request, cfg CrashConfig) []string {
	r := runnerOf(cfg)
	var problems []string
	for _, req := range reqs {
		events, err := sessions.FindTurn(ctx, r.Key(req), req.ID)
		if err != nil {
			problems = append(problems, fmt.Sprintf("request %s: no turn in its session: %v", req.ID, err))
			continue
		}
		e, err := ib.Get(ctx, r.InboxKey(req))
		if err != nil || e.Status != inbox.StatusDone {
			problems = append(problems, fmt.Sprintf("request %s: no stored result (%v, %v)", req.ID, e.Status, err))
			continue
		}
		var res turn.Result
		if err := json.Unmarshal(e.Result, &res); err != nil || res.Events != len(events) {
			problems = append(problems, fmt.Sprintf("request %s: the stored result counts %d events, the session holds %d", req.ID, res.Events, len(events)))
		}
	}
	all := append(slices.Clone(cfg.History), reqs...)
	for _, key := range sessionKeys(r, all) {
		sess, err := sessions.Get(ctx, key, 0)
		if err != nil {
			continue
		}
		if want := countTurns(r, all, key); sess.Version != want {
			problems = append(problems, fmt.Sprintf("session %s: %d turns stored for %d requests", key, sess.Version, want))
		}
	}
	return problems
}

// runnerOf returns a Runner as cfg adjusts it, for its keys.
func runnerOf(cfg CrashConfig) *turn.Runner {
	r := &turn.Runner{}
	if cfg.Runner != nil {
		cfg.Runner(r)
	}
	return r
}

func sessionKeys(r *turn.Runner, reqs []turn.Request) []session.Key {
	seen := map[session.Key]bool{}
	var out []session.Key
	for _, req := range reqs {
		if k := r.Key(req); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func countTurns(r *turn.Runner, reqs []turn.Request, key session.Key) int64 {
	var n int64
	for _, req := range reqs {
		if r.Key(req) == key {
			n++
		}
	}
	return n
}

// crashStore is a session store in a process that may die: once dead, nothing it is asked
// lands; Append kills it at AfterAppend after the write landed.
type crashStore struct {
	session.Store
	sw *crashSwitch
}

func (s crashStore) Get(ctx context.Context, key session.Key, recent int) (session.Session, error) {
	if s.sw.isDead() {
		return session.Session{}, errCrashed
	}
	return s.Store.Get(ctx, key, recent)
}

func (s crashStore) Create(ctx context.Context, key session.Key, state json.RawMessage) (session.Session, error) {
	if s.sw.isDead() {
		return session.Session{}, errCrashed
	}
	return s.Store.Create(ctx, key, state)
}

func (s crashStore) Append(ctx context.Context, key session.Key, v int64, t session.Turn) (session.Appended, error) {
	if s.sw.isDead() {
		return session.Appended{}, errCrashed
	}
	ap, err := s.Store.Append(ctx, key, v, t)
	if s.sw.reached(AfterAppend) {
		return session.Appended{}, errCrashed
	}
	return ap, err
}

func (s crashStore) FindTurn(ctx context.Context, key session.Key, requestID string) ([]session.Event, error) {
	if s.sw.isDead() {
		return nil, errCrashed
	}
	return s.Store.FindTurn(ctx, key, requestID)
}

func (s crashStore) Delete(ctx context.Context, key session.Key) error {
	if s.sw.isDead() {
		return errCrashed
	}
	return s.Store.Delete(ctx, key)
}

// crashInbox is crashStore's counterpart for the inbox: Begin kills it at AfterBegin and
// Complete at AfterComplete, after the write landed.
// The outbox methods the harness does not crash (the relay's: Claim, Delivered, ...) pass
// through.
type crashInbox struct {
	inbox.Outbox
	sw    *crashSwitch
	steps *stepLog
}

func (b crashInbox) Begin(ctx context.Context, d inbox.Delivery) (inbox.Entry, error) {
	if b.sw.isDead() {
		return inbox.Entry{}, errCrashed
	}
	e, err := b.Outbox.Begin(ctx, d)
	if b.sw.reached(AfterBegin) {
		return inbox.Entry{}, errCrashed
	}
	return e, err
}

func (b crashInbox) Complete(ctx context.Context, requestID string, result []byte) error {
	if b.sw.isDead() {
		return errCrashed
	}
	err := b.Outbox.Complete(ctx, requestID, result)
	if b.sw.reached(AfterComplete) {
		return errCrashed
	}
	return err
}

func (b crashInbox) Fail(ctx context.Context, requestID string, f inbox.Failure) error {
	if b.sw.isDead() {
		return errCrashed
	}
	return b.Outbox.Fail(ctx, requestID, f)
}

func (b crashInbox) MarkDead(ctx context.Context, requestID, reason string) error {
	if b.sw.isDead() {
		return errCrashed
	}
	return b.Outbox.MarkDead(ctx, requestID, reason)
}

func (b crashInbox) Get(ctx context.Context, requestID string) (inbox.Entry, error) {
	if b.sw.isDead() {
		return inbox.Entry{}, errCrashed
	}
	return b.Outbox.Get(ctx, requestID)
}

// stepLog watches the journal of one crash point's runs: it counts each step run that reached
// the journal and reports a step that ran again after its record landed; it counts the
// summarizer's calls, keeps each request's compaction and checks what each model call saw.
type stepLog struct {
	mu        sync.Mutex
	ids       map[string]string        // inbox key -> request id
	landed    map[string]map[int]bool  // inbox key -> ordinals whose record landed
	compacted map[string]compactionRun // request id -> its compaction, as the summarizer wrote it
	problems  []string
	rep       *CrashReport
}

// ran counts a run of step s under key, and reports it when the step's record had landed.
func (l *stepLog) ran(key string, s inbox.Step) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.ids[key]
	if l.rep.StepRuns[id] == nil {
		l.rep.StepRuns[id] = map[int]int{}
	}
	l.rep.StepRuns[id][s.Ordinal]++
	if l.landed[key][s.Ordinal] {
		l.problems = append(l.problems, fmt.Sprintf("request %s: step %d (%s) ran again after its record landed in the journal", id, s.Ordinal, s.Name))
	}
}

func (l *stepLog) land(key string, ordinal int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.landed[key] == nil {
		l.landed[key] = map[int]bool{}
	}
	l.landed[key][ordinal] = true
}

// Steps implements inbox.Journal.
func (b crashInbox) Steps(ctx context.Context, key string) ([]inbox.Step, error) {
	if b.sw.isDead() {
		return nil, errCrashed
	}
	return b.Outbox.Steps(ctx, key)
}

// RecordStep implements inbox.Journal: it dies at DuringStep before the record lands and at
// AfterStep after.
func (b crashInbox) RecordStep(ctx context.Context, key string, s inbox.Step) (inbox.Step, error) {
	if b.sw.isDead() {
		return inbox.Step{}, errCrashed
	}
	b.steps.ran(key, s)
	if b.sw.reached(DuringStep(s.Ordinal)) {
		return inbox.Step{}, errCrashed
	}
	st, err := b.Outbox.RecordStep(ctx, key, s)
	if err == nil {
		b.steps.land(key, s.Ordinal)
	}
	if b.sw.reached(AfterStep(s.Ordinal)) {
		return inbox.Step{}, errCrashed
	}
	return st, err
}

// Promote implements inbox.Outbox.
func (b crashInbox) Promote(ctx context.Context, key string, through int) (int, error) {
	if b.sw.isDead() {
		return 0, errCrashed
	}
	return b.Outbox.Promote(ctx, key, through)
}
