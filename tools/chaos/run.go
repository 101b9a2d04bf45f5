package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// Run runs the chaos suite as cfg says and returns its figures. An error means the run could
// not be made (no database, a process that would not start, a topic that could not be read);
// a run that was made but failed a check returns its figures with Failures set and a nil
// error.
func Run(ctx context.Context, cfg Config) (*Figures, error) {
	began := time.Now()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(logw, "%6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	rng := mrand.New(mrand.NewPCG(cfg.Seed, 0x6368616f73)) // "chaos"

	db, prefix, err := setupTables(ctx, cfg.DSN)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if !cfg.KeepTables {
		defer dropTables(db, prefix)
	}
	logf("tables %s* in the database; logs and broker data in %s", prefix, cfg.Dir)
	w, err := newWorkload(rng, cfg)
	if err != nil {
		return nil, err
	}

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	brk := &broker{cfg: &cfg, args: childArgs{Role: "broker", Name: "broker", Port: port, DataDir: filepath.Join(cfg.Dir, "kafka")}}
	if err := brk.start(ctx); err != nil {
		return nil, err
	}
	defer brk.stop()
	brokers := []string{brk.addr}
	if err := createTopics(ctx, brokers, int32(cfg.Partitions)); err != nil {
		return nil, err
	}
	logf("broker at %s; %d records to produce at %d/s", brk.addr, len(w.order), cfg.Rate)

	var srv *temporalServer
	if cfg.Cell.Temporal() {
		srv = &temporalServer{cfg: &cfg, db: filepath.Join(cfg.Dir, "temporal.db")}
		if srv.port, err = freePort(); err != nil {
			return nil, err
		}
		if err := srv.start(ctx); err != nil {
			return nil, err
		}
		defer srv.stop()
		logf("Temporal dev server at %s, state in %s", srv.host(), srv.db)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	appName := strings.TrimSuffix(prefix, "_")
	base := childArgs{Cell: cfg.Cell, Brokers: brokers, DSN: cfg.DSN, AppName: appName,
		Prefix: prefix, Group: "chaos", Requests: topicRequests, Results: topicResults, DeadLetters: topicDeadLetters,
		MaxInFlight: cfg.MaxInFlight, Faults: modelFaults{Seed: cfg.Seed, SlowShare: cfg.SlowShare, FailShare: cfg.FailShare,
			SlowMax: cfg.SlowMax, BurstLength: cfg.BurstLength}}
	if srv != nil {
		base.TemporalHost, base.TaskQueue = srv.host(), "chaos-"+appName
	}
	var supervisors sync.WaitGroup
	newSlots := func(role, name string, n int, seedBase uint64) []*slot {
		out := make([]*slot, n)
		for i := range out {
			a := base
			a.Role, a.Name = role, fmt.Sprintf("%s%d", name, i+1)
			if role == "member" {
				a.MaxBatch = cfg.Cell.MemberMaxBatch(i)
			}
			s := &slot{cfg: &cfg, rng: mrand.New(mrand.NewPCG(cfg.Seed, seedBase+uint64(i))),
				stopCh: make(chan struct{}), exited: make(chan struct{}), args: a}
			out[i] = s
			supervisors.Go(func() {
				if err := s.run(runCtx, logf); err != nil {
					logf("%s %s: %v", role, s.args.Name, err)
				}
			})
		}
		return out
	}
	slots := newSlots("member", "m", cfg.Members, 0)
	var workers []*slot
	if srv != nil {
		workers = newSlots("worker", "w", cfg.Workers, 100)
	}
	stopMembers := func() {
		var wg sync.WaitGroup
		for _, s := range append(append([]*slot(nil), slots...), workers...) {
			wg.Go(func() { s.stop(30 * time.Second) })
		}
		wg.Wait()
		supervisors.Wait()
	}
	defer stopMembers()

	watch := newWatcher(brokers, w, cfg.Cell.Transactional())
	go watch.run(runCtx)

	f := &Figures{Cell: cfg.Cell, Requests: w.count(kindValid) + w.count(kindPoison), Conversations: cfg.Conversations,
		Invalid: w.count(kindInvalid), Poison: w.count(kindPoison), Strangers: w.count(kindStranger),
		Panics: w.count(kindPanicModel) + w.count(kindPanicStore) + w.count(kindPanicHandler), Limited: w.count(kindLimited),
		Members: cfg.Members, Workers: len(workers), Seed: cfg.Seed}
	span := time.Duration(float64(len(w.order)) / float64(cfg.Rate) * float64(time.Second))
	schedule := newSchedule(rng, cfg, span)

	var sent atomic.Int64
	produced := make(chan error, 1)
	go func() { produced <- produce(runCtx, brokers, topicRequests, w, cfg.Rate, &sent) }()
	producing := began
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	progress := func() {
		logf("produced %d/%d, outcomes %d/%d", sent.Load(), len(w.order), watch.settled(), len(w.order))
	}
	start := time.Now()
	for _, flt := range schedule {
		if err := sleepUntil(runCtx, start.Add(flt.at), tick.C, progress); err != nil {
			return nil, err
		}
		if err := apply(runCtx, flt, slots, workers, brk, srv, db, appName, f, logf); err != nil {
			return nil, err
		}
	}
	select {
	case err := <-produced:
		if err != nil {
			return nil, err
		}
	case <-runCtx.Done():
		return nil, runCtx.Err()
	}
	logf("all %d records produced in %s; draining", len(w.order), time.Since(producing).Round(time.Second))
	deadline := time.Now().Add(cfg.DrainTimeout)
	for watch.settled() < len(w.order) && time.Now().Before(deadline) {
		if err := sleepUntil(runCtx, time.Now().Add(250*time.Millisecond), tick.C, progress); err != nil {
			return nil, err
		}
	}
	progress()
	stopMembers()
	cancel()
	for _, s := range append(append([]*slot(nil), slots...), workers...) {
		s.mu.Lock()
		f.Crashes += s.poisonExits
		f.MemberFails += s.errorExits
		s.mu.Unlock()
	}
	if f.Batches, err = countBatches(cfg.Dir, slots); err != nil {
		return nil, err
	}
	logf("members stopped; delivering the outbox's tail")
	ob, err := sqlinbox.New(db, sqlinbox.PostgreSQL, sqlinbox.Options{TablePrefix: prefix, Concurrency: -1})
	if err != nil {
		return nil, err
	}
	tailLog := slog.New(slog.NewTextHandler(logfWriter(logf), &slog.HandlerOptions{Level: slog.LevelWarn})).With("relay", "checker")
	if f.PendingIntents, err = drainOutbox(ctx, db, ob, prefix, tailTimeout, tailLog); err != nil {
		return nil, err
	}
	logf("checking")
	if err := check(ctx, &cfg, brokers, db, prefix, w, f); err != nil {
		return nil, err
	}
	f.Elapsed = time.Since(began)
	return f, nil
}

// tailTimeout bounds the checker's delivery of the intents left pending when the members
// stopped.
const tailTimeout = 60 * time.Second

// logfWriter writes each Write as a progress line.
type logfWriter func(format string, args ...any)

func (w logfWriter) Write(p []byte) (int, error) {
	w("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// apply does one fault of the schedule.
func apply(ctx context.Context, flt fault, slots, workers []*slot, brk *broker, srv *temporalServer, db *sql.DB, appName string, f *Figures, logf func(string, ...any)) error {
	switch flt.kind {
	case faultServer:
		if srv == nil {
			return nil
		}
		logf("%s", flt.kind)
		if err := srv.restart(ctx); err != nil {
			return fmt.Errorf("Temporal server restart: %w", err)
		}
		f.ServerRestarts++
		return nil
	case faultBroker:
		logf("%s", flt.kind)
		if err := brk.restart(ctx); err != nil {
			return fmt.Errorf("broker restart: %w", err)
		}
		f.Restarts++
		return nil
	case faultDBKill:
		n, err := killConnections(ctx, db, appName)
		if err != nil {
			return err
		}
		logf("%s: %d connections", flt.kind, n)
		f.DBKills++
		f.ConnsKilled += n
		return nil
	}
	sig, why, minUp := syscall.SIGKILL, intentKill, 2*time.Second
	who := "member m"
	switch flt.kind {
	case faultWorkerKill:
		slots, who = workers, "worker w"
	case faultTerm:
		sig, why = syscall.SIGTERM, intentTerm
	case faultBurst:
		sig, why, minUp = syscall.SIGUSR1, intentNone, 0
		if len(workers) > 0 { // Temporal mode: the model runs in the workers
			slots, who = workers, "worker w"
		}
	}
	if len(slots) == 0 {
		return nil
	}
	// The slot drawn, or the next one that is up; members restart within seconds.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		for k := range slots {
			i := (flt.slot + k) % len(slots)
			if slots[i].signal(sig, why, minUp) {
				logf("%s of %s%d", flt.kind, who, i+1)
				switch flt.kind {
				case faultKill:
					f.Kills++
				case faultWorkerKill:
					f.WorkerKills++
				case faultTerm:
					f.Terms++
				case faultBurst:
					f.Bursts++
				}
				return nil
			}
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	logf("%s: no member up for 30s; skipped", flt)
	return nil
}

// sleepUntil waits until t, calling onTick on every tick.
func sleepUntil(ctx context.Context, t time.Time, tick <-chan time.Time, onTick func()) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return nil
		case <-tick:
			onTick()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// setupTables opens the database and creates the stores' tables and the fake services' (the
// refunds, the emails, the model steps' and the compactions' executions) under a prefix of
// the run's own.
func setupTables(ctx context.Context, dsn string) (*sql.DB, string, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "chaos_" + hex.EncodeToString(b[:]) + "_"
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", dsn, err)
	}
	db.SetMaxOpenConns(4)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, "", fmt.Errorf("PostgreSQL at %s: %w", dsn, err)
	}
	sessions, err := sqlsession.New(db, sqlsession.PostgreSQL, sqlsession.Options{TablePrefix: prefix, Concurrency: -1})
	if err == nil {
		err = sessions.Migrate(ctx)
	}
	if err != nil {
		db.Close()
		return nil, "", err
	}
	dedup, err := sqlinbox.New(db, sqlinbox.PostgreSQL, sqlinbox.Options{TablePrefix: prefix, Concurrency: -1})
	if err == nil {
		err = dedup.Migrate(ctx)
	}
	// The refund and email services: one row per idempotency key, as a payment or email API
	// keeps them, with the calls it took under that key.
	service := func(name string) string {
		return `CREATE TABLE ` + prefix + name + ` (
			tool_key TEXT PRIMARY KEY,
			request_id TEXT NOT NULL,
			conversation TEXT NOT NULL,
			calls INTEGER NOT NULL DEFAULT 1,
			created_at TIMESTAMPTZ NOT NULL DEFAULT now())`
	}
	for _, ddl := range []string{
		service("chaos_refunds"),
		service("chaos_emails"),
		// The executions of the agent's model steps, counted by the steps themselves.
		`CREATE TABLE ` + prefix + `chaos_steps (
			request_id TEXT NOT NULL,
			ordinal INTEGER NOT NULL,
			runs INTEGER NOT NULL DEFAULT 1,
			PRIMARY KEY (request_id, ordinal))`,
		// The executions of the compaction steps, counted by the summarizer.
		`CREATE TABLE ` + prefix + `chaos_compactions (
			request_id TEXT NOT NULL,
			ordinal INTEGER NOT NULL,
			runs INTEGER NOT NULL DEFAULT 1,
			PRIMARY KEY (request_id, ordinal))`,
	} {
		if err == nil {
			_, err = db.ExecContext(ctx, ddl)
		}
	}
	if err != nil {
		dropTables(db, prefix)
		db.Close()
		return nil, "", err
	}
	return db, prefix, nil
}

// dropTables drops every table of the run.
func dropTables(db *sql.DB, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1)`, prefix)
	if err != nil {
		return
	}
	var names []string
	for rows.Next() {
		var n string
		if rows.Scan(&n) == nil {
			names = append(names, `"`+n+`"`)
		}
	}
	rows.Close()
	if len(names) > 0 {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+strings.Join(names, ", ")+" CASCADE")
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// watcher follows the results and dead-letter topics during the run, so that the run knows
// when every record has its outcome. The checker reads the topics again on its own.
type watcher struct {
	brokers []string
	// committed reads read_committed (the transactional cell).
	committed bool
	mu        sync.Mutex
	o         *outcomes
	n         atomic.Int64
}

func newWatcher(brokers []string, w *workload, committed bool) *watcher {
	return &watcher{brokers: brokers, o: newOutcomes(w), committed: committed}
}

func (wt *watcher) settled() int { return int(wt.n.Load()) }

func (wt *watcher) run(ctx context.Context) {
	opts := []kgo.Opt{kgo.SeedBrokers(wt.brokers...), kgo.ConsumeTopics(topicResults, topicDeadLetters),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}
	if wt.committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if errors.Is(ctx.Err(), context.Canceled) {
			return
		}
		wt.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == topicResults {
				wt.o.addResult(r)
			} else {
				wt.o.addDead(r)
			}
		})
		wt.n.Store(int64(wt.o.settled()))
		wt.mu.Unlock()
	}
}

// temporalServer is the dev server of CellTemporal: a process of the temporal CLI on a fixed
// port of 127.0.0.1 that keeps its state in a database file, so that a restart continues
// every workflow where it was.
type temporalServer struct {
	cfg  *Config
	db   string
	port int

	mu  sync.Mutex
	cur *testsuite.DevServer
	log *os.File
}

func (s *temporalServer) host() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// start starts the server on its port and database file and waits until it serves.
func (s *temporalServer) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(s.cfg.Dir, "temporal.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv, err := testsuite.StartDevServer(sctx, testsuite.DevServerOptions{
		ExistingPath:  s.cfg.TemporalCLI,
		ClientOptions: &client.Options{HostPort: s.host(), Namespace: "default", Logger: quietTemporal{}},
		DBFilename:    s.db,
		LogLevel:      "error",
		// WAL and synchronous=NORMAL: durable across the process restarts of the run, and
		// many times faster than the default rollback journal on a loaded disk.
		ExtraArgs: []string{"--dynamic-config-value", `history.timerProcessorMaxTimeShift="50ms"`,
			"--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"},
		Stdout: logf,
		Stderr: logf,
	})
	if err != nil {
		logf.Close()
		return fmt.Errorf("Temporal dev server (%s): %w", s.cfg.TemporalCLI, err)
	}
	s.mu.Lock()
	s.cur, s.log = srv, logf
	s.mu.Unlock()
	return nil
}

// stop stops the server, if it runs.
func (s *temporalServer) stop() {
	s.mu.Lock()
	srv, logf := s.cur, s.log
	s.cur, s.log = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Stop()
	logf.Close()
}

// restart stops the server and starts it again on its database file.
func (s *temporalServer) restart(ctx context.Context) error {
	s.stop()
	return s.start(ctx)
}

// killConnections ends every PostgreSQL connection of the run's members and workers and
// returns how many it ended. A round that finds none (every child is between a crash and its
// restart, or its pool is idle) tries again every 250 ms for up to 5 s, so that the fault lands
// on live connections; it returns 0 only if none showed up in that time.
func killConnections(ctx context.Context, db *sql.DB, appName string) (int, error) {
	var n int
	for try := 0; try < 20; try++ {
		// The members' connections are picked first (a materialized CTE), so that the planner
		// cannot call pg_terminate_backend on any other row.
		err := db.QueryRowContext(ctx, `WITH members AS MATERIALIZED (
				SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid())
			SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM members`, appName).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("kill database connections: %w", err)
		}
		if n > 0 {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return n, nil
}

// countBatches counts the batches the members logged handing off (batchHandedOff) in their
// logs in dir.
func countBatches(dir string, members []*slot) (int, error) {
	n := 0
	for _, s := range members {
		data, err := os.ReadFile(filepath.Join(dir, s.args.Name+".log"))
		if err != nil {
			return 0, fmt.Errorf("chaos: count batches: %w", err)
		}
		n += bytes.Count(data, []byte(`msg="`+batchHandedOff+`"`))
	}
	return n, nil
}
