package sqlsession_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// jointTurn is one turn as turn.Runner makes it on the joint path: Begin, then the append with
// the completion joined to it.
func jointTurn(ctx context.Context, s *sqlsession.Store, b *sqlinbox.Inbox, key session.Key, version int64, req string) error {
	if _, err := b.Begin(ctx, inbox.Delivery{Key: req, Conversation: key.Conversation, Topic: "requests"}); err != nil {
		return err
	}
	_, err := s.AppendTx(ctx, key, version, turnOf(req, 2), func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
		return b.CompleteTx(ctx, tx, req, []byte(`{"request":"`+req+`"}`))
	})
	return err
}

// requireTurnIff checks that req's turn is stored in key's session exactly when its inbox entry
// is done, and returns whether it is.
func requireTurnIff(t *testing.T, s *sqlsession.Store, b *sqlinbox.Inbox, key session.Key, req string) bool {
	t.Helper()
	ctx := context.Background()
	_, err := s.FindTurn(ctx, key, req)
	stored := err == nil
	if !stored {
		require.ErrorIs(t, err, session.ErrNotFound)
	}
	e, err := b.Get(ctx, req)
	done := err == nil && e.Status == inbox.StatusDone
	if err != nil {
		require.ErrorIs(t, err, inbox.ErrNotFound)
	}
	require.Equal(t, stored, done, "request %s: turn stored %v, inbox done %v", req, stored, done)
	return stored
}

// TestPostgresKilledMidBatch: the connection of a batch of joint turns is killed
// (pg_terminate_backend) inside its transaction, after its bumps or after its completions.
// Every caller of that batch gets a retryable error and nothing of it is stored; no caller is
// told of a turn that is not stored; retried, each turn is stored once.
func TestPostgresKilledMidBatch(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"bumped", "inserted"} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			db := sqltest.PostgresDB
			sqlDB := db.Open(t)
			s, b := newPairWith(t, db, sqlDB, 0, batching)
			var killed atomic.Bool
			sqlsession.SetAppendHook(s, func(ctx context.Context, at string, tx sqldialect.Querier) {
				if at != stage || killed.Swap(true) {
					return
				}
				var pid int
				require.NoError(t, tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
				var ok bool
				require.NoError(t, sqlDB.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
				require.True(t, ok)
				for range 1000 { // pg_terminate_backend signals; wait until the backend is gone
					var n int
					require.NoError(t, sqlDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n))
					if n == 0 {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				t.Errorf("backend %d still there after pg_terminate_backend", pid)
			})
			const n = 16
			keys := make([]session.Key, n)
			for i := range keys {
				keys[i] = newKey(t)
				_, err := s.Create(context.Background(), keys[i], nil)
				require.NoError(t, err)
			}
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = jointTurn(context.Background(), s, b, keys[i], 0, "req-"+keys[i].Conversation)
				}()
			}
			wg.Wait()
			require.True(t, killed.Load())
			failed := 0
			for i, err := range errs {
				req := "req-" + keys[i].Conversation
				stored := requireTurnIff(t, s, b, keys[i], req)
				if err != nil {
					failed++
					requireRetryable(t, err)
					require.False(t, stored, "caller %d got %v, yet its turn is stored", i, err)
					require.NoError(t, jointTurn(context.Background(), s, b, keys[i], 0, req), "the retry of caller %d", i)
				} else {
					require.True(t, stored, "caller %d was told of a turn that is not stored", i)
				}
				require.True(t, requireTurnIff(t, s, b, keys[i], req))
				require.EqualValues(t, 1, mustGet(t, s, keys[i]).Version, "caller %d's turn is stored once", i)
			}
			require.NotZero(t, failed, "the killed batch had callers")
		})
	}
}

func mustGet(t *testing.T, s session.Store, key session.Key) session.Session {
	t.Helper()
	sess, err := s.Get(context.Background(), key, 0)
	require.NoError(t, err)
	return sess
}

// crashApp, crashUser and crashSessions name what the crash child writes.
const (
	crashApp      = "crash"
	crashUser     = "user"
	crashSessions = 32
)

func crashKey(i int) session.Key {
	return session.Key{App: crashApp, User: crashUser, Conversation: fmt.Sprintf("conv-%02d", i)}
}

func crashReq(i, turn int) string { return fmt.Sprintf("conv-%02d-turn-%d", i, turn) }

// openCrashPair opens the batched store and inbox of the crash test on the database named by
// the environment the parent gives its child (and reads itself).
func openCrashPair(t *testing.T, dsn, dialect, prefix string) (*sqlsession.Store, *sqlinbox.Inbox) {
	t.Helper()
	driver := "sqlite"
	if dialect == string(sqlsession.PostgreSQL) {
		driver = "pgx"
	}
	sqlDB, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { sqlDB.Close() })
	s, err := sqlsession.New(sqlDB, sqlsession.Dialect(dialect), sqlsession.Options{TablePrefix: prefix, Concurrency: crashSessions, Batch: batching})
	require.NoError(t, err)
	b, err := sqlinbox.New(sqlDB, sqlinbox.Dialect(dialect), sqlinbox.Options{TablePrefix: prefix, Concurrency: crashSessions, Batch: batching})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	require.NoError(t, b.Migrate(context.Background()))
	return s, b
}

// crashChild runs joint turns on crashSessions sessions at once until it is killed, printing
// "ack REQUEST" once a turn's AppendTx returned success.
func crashChild(t *testing.T) {
	s, b := openCrashPair(t, os.Getenv("CRASH_DSN"), os.Getenv("CRASH_DIALECT"), os.Getenv("CRASH_PREFIX"))
	ctx := context.Background()
	var out sync.Mutex
	var wg sync.WaitGroup
	for i := range crashSessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := crashKey(i)
			if _, err := s.Create(ctx, key, nil); err != nil {
				fmt.Fprintln(os.Stderr, "create:", err)
				return
			}
			for turn := 0; ; turn++ {
				if err := jointTurn(ctx, s, b, key, int64(turn), crashReq(i, turn)); err != nil {
					fmt.Fprintln(os.Stderr, "turn:", err)
					return
				}
				out.Lock()
				fmt.Fprintf(os.Stdout, "ack %s\n", crashReq(i, turn)) // one write(2) per line, not buffered
				out.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestBatchedCrash kills (SIGKILL) a process in the middle of its batched joint turns, on a
// SQLite file and on PostgreSQL: every turn the process was told had been stored is stored
// with its request done, and no turn is stored without its request done nor the other way.
func TestBatchedCrash(t *testing.T) {
	if os.Getenv("CRASH_DSN") != "" {
		crashChild(t)
		return
	}
	t.Parallel()
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			dsn := "file:" + filepath.Join(t.TempDir(), "crash.db") + "?" + sqltest.SQLitePragmas + "&_pragma=journal_mode(WAL)"
			prefix := "t" + sqltest.ID(t) + "_"
			if db.Postgres {
				dsn = sqltest.PostgresDSN()
				prefix = sqltest.Prefix(t, db.Open(t), true)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestBatchedCrash$", "-test.count=1")
			cmd.Env = append(os.Environ(), "CRASH_DSN="+dsn, "CRASH_DIALECT="+string(dialectOf(db)), "CRASH_PREFIX="+prefix)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			acked := map[string]bool{}
			lines := bufio.NewScanner(stdout)
			for lines.Scan() {
				if req, ok := strings.CutPrefix(lines.Text(), "ack "); ok {
					acked[req] = true
					if len(acked) == 300 {
						require.NoError(t, cmd.Process.Kill())
					}
				}
			}
			werr := cmd.Wait()
			var exit *exec.ExitError
			require.True(t, errors.As(werr, &exit) && !exit.Exited(), "the child was killed, not ended: %v\n%s", werr, stderr.String())
			require.GreaterOrEqual(t, len(acked), 300, "acknowledgements before the kill")

			s, b := openCrashPair(t, dsn, string(dialectOf(db)), prefix)
			for i := range crashSessions {
				key := crashKey(i)
				sess := mustGet(t, s, key)
				for turn := 0; turn < int(sess.Version)+2; turn++ {
					req := crashReq(i, turn)
					stored := requireTurnIff(t, s, b, key, req)
					require.Equal(t, turn < int(sess.Version), stored, "%s: the session is at version %d", req, sess.Version)
					if acked[req] {
						require.True(t, stored, "%s was acknowledged, yet it is not stored", req)
					}
				}
			}
		})
	}
}

// TestRunnerOnBatchedStores runs turns through turn.Runner on batched stores of one database,
// 64 at once on the joint path with an instant model: every turn is stored once with its
// request done, and each request run again replays its stored Result.
func TestRunnerOnBatchedStores(t *testing.T) {
	t.Parallel()
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s, b := newPairWith(t, db, db.Open(t), 0, sqlsession.Batching{Size: 64})
			model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
				return turn.Output{Events: []session.Event{{Text: fmt.Sprintf("reply %d", in.Session.Version+1)}}}, nil
			})
			r := &turn.Runner{Model: model, Sessions: s, Inbox: b, App: "batched"}
			const conversations, turns = 64, 4
			reqs := make([][]turn.Request, conversations)
			var wg sync.WaitGroup
			errs := make([]error, conversations)
			for c := range conversations {
				wg.Go(func() {
					for i := range turns {
						req := turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(),
							ConversationID: fmt.Sprintf("conv-%d", c), UserID: "user", Text: "hello"}
						reqs[c] = append(reqs[c], req)
						res, err := r.Run(context.Background(), req)
						if err == nil && res.Text != fmt.Sprintf("reply %d", i+1) {
							err = fmt.Errorf("turn %d answered %q", i, res.Text)
						}
						if err != nil {
							errs[c] = err
							return
						}
					}
				})
			}
			wg.Wait()
			for c := range conversations {
				require.NoError(t, errs[c], "conversation %d", c)
				sess := mustGet(t, s, r.Key(reqs[c][0]))
				require.EqualValues(t, turns, sess.Version)
				require.EqualValues(t, 2*turns, sess.EventCount)
				for i, req := range reqs[c] {
					res, err := r.Run(context.Background(), req)
					require.NoError(t, err)
					require.True(t, res.Replayed, "conversation %d turn %d is replayed", c, i)
					require.Equal(t, fmt.Sprintf("reply %d", i+1), res.Text)
				}
			}
		})
	}
}

// TestBatchedCompletionOfAMissingEntry: in batches of joint turns, one caller's completion
// names an inbox entry that no Begin made (purged, say). That caller gets inbox.ErrNotFound,
// and neither its turn nor an entry for its key is stored (on PostgreSQL the batched completion
// is an upsert whose insert of that key must never commit); every other caller's turn is
// stored with its request done.
func TestBatchedCompletionOfAMissingEntry(t *testing.T) {
	t.Parallel()
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s, b := newPairWith(t, db, db.Open(t), 0, sqlsession.Batching{Size: 64, Wait: 20 * time.Millisecond})
			ctx := context.Background()
			const callers, rounds = 16, 3
			for round := range rounds {
				keys := make([]session.Key, callers)
				reqs := make([]string, callers)
				for i := range keys {
					keys[i] = session.Key{App: "missing", User: "user", Conversation: fmt.Sprintf("conv-%d-%d-%s", round, i, uuid.NewString())}
					_, err := s.Create(ctx, keys[i], nil)
					require.NoError(t, err)
					reqs[i] = uuid.NewString()
				}
				missing := round % callers // the caller whose entry does not exist
				errs := make([]error, callers)
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						if i != missing {
							errs[i] = jointTurn(ctx, s, b, keys[i], 0, reqs[i])
							return
						}
						_, errs[i] = s.AppendTx(ctx, keys[i], 0, turnOf(reqs[i], 2), func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
							return b.CompleteTx(ctx, tx, reqs[i], []byte(`{"request":"`+reqs[i]+`"}`))
						})
					})
				}
				wg.Wait()
				for i := range callers {
					if i == missing {
						require.ErrorIs(t, errs[i], inbox.ErrNotFound, "round %d: the caller without an entry", round)
						require.False(t, requireTurnIff(t, s, b, keys[i], reqs[i]), "round %d: no turn nor entry for the missing key", round)
						_, err := b.Get(ctx, reqs[i])
						require.ErrorIs(t, err, inbox.ErrNotFound, "round %d: the completion left no entry behind", round)
						continue
					}
					require.NoError(t, errs[i], "round %d caller %d", round, i)
					require.True(t, requireTurnIff(t, s, b, keys[i], reqs[i]), "round %d caller %d", round, i)
				}
			}
		})
	}
}

// TestBatchedJoinCompletesOneEntryTwice: a join that completes its request twice in one batched
// transaction (Complete is idempotent: the first result stays, a second call on a done entry
// succeeds) stores its turn, as it does unbatched. PostgreSQL's upsert refuses to change one
// row twice in a statement ("ON CONFLICT DO UPDATE command cannot affect row a second time"):
// the batched completion sends each key once. A regression test of a review's finding.
func TestBatchedJoinCompletesOneEntryTwice(t *testing.T) {
	t.Parallel()
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s, b := newPairWith(t, db, db.Open(t), 0, sqlsession.Batching{Size: 8, Wait: time.Millisecond})
			ctx := context.Background()
			key := session.Key{App: "twice", User: "user", Conversation: "conv-" + uuid.NewString()}
			_, err := s.Create(ctx, key, nil)
			require.NoError(t, err)
			req := uuid.NewString()
			_, err = b.Begin(ctx, inbox.Delivery{Key: req, Conversation: key.Conversation, Topic: "requests"})
			require.NoError(t, err)
			_, err = s.AppendTx(ctx, key, 0, turnOf(req, 2), func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
				if err := b.CompleteTx(ctx, tx, req, []byte(`"first"`)); err != nil {
					return err
				}
				return b.CompleteTx(ctx, tx, req, []byte(`"second"`))
			})
			require.NoError(t, err, "a join completing its entry twice")
			require.True(t, requireTurnIff(t, s, b, key, req))
		})
	}
}

// TestPostgresBatchesProbeIndexesAsTablesGrow: PostgreSQL plans a prepared statement once per
// connection (its generic plan, kept) with the tables' sizes of that moment. Here the batched
// statements make generic plans on a pool of two connections while the inbox holds 400 rows
// and the tables were never analyzed; then the inbox and one session's events grow to 20,000
// rows and more batches run. Their completions, duplicate checks and Gets must not scan either
// table whole (pg_stat_user_tables.seq_scan, flushed, stays put), and the batched Get's kept
// plan has no sequential scan of the events. It guards the statements' shape: the statements
// before it (21dcf12) pass it too, as their bad plans came from conditions it does not make
// (the stores scenario's: 40 connections, batches of about 30, 1,000 sessions; see
// BENCHMARKS.md). Tables analyzed while small get plans that scan, which later analyzes
// replace (docs/DESIGN.md, "Store writes batched across turns").
func TestPostgresBatchesProbeIndexesAsTablesGrow(t *testing.T) {
	sqltest.OpenPostgres(t) // skips when PostgreSQL is unreachable
	// Generic plans from the first execution on (plan_cache_mode, a run-time parameter pgx
	// sends from the DSN), made once the tables hold a few hundred rows, below.
	sqlDB, err := sql.Open("pgx", sqltest.PostgresDSN()+"&plan_cache_mode=force_generic_plan")
	require.NoError(t, err)
	t.Cleanup(func() { sqlDB.Close() })
	sqlDB.SetMaxOpenConns(2)
	s, b := newPairWith(t, sqltest.PostgresDB, sqlDB, 2, sqlsession.Batching{Size: 8})
	ctx := context.Background()
	const conversations = 8
	keys := make([]session.Key, conversations)
	for i := range keys {
		keys[i] = session.Key{App: "plans", User: "user", Conversation: fmt.Sprintf("conv-%d", i)}
		_, err := s.Create(ctx, keys[i], nil)
		require.NoError(t, err)
	}
	version := 0
	turns := func(n int) {
		for range n {
			var wg sync.WaitGroup
			errs := make([]error, conversations)
			for i := range conversations {
				wg.Go(func() {
					if errs[i] = jointTurn(ctx, s, b, keys[i], int64(version), uuid.NewString()); errs[i] == nil {
						_, errs[i] = s.Get(ctx, keys[i], 20)
					}
				})
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "conversation %d", i)
			}
			version++
		}
	}
	prefix := s.TablePrefix()
	fill := func(n int) {
		_, err := sqlDB.ExecContext(ctx, `INSERT INTO `+prefix+`inbox (request_id, conversation, status, attempts,
				deliveries, result, reason, topic, kafka_partition, kafka_offset, created_at, updated_at)
			SELECT 'early-' || g, 'filler', 'done', 1, 1, '\x00', '', 'requests', 0, g, now(), now()
			FROM generate_series(1, $1) g`, n)
		require.NoError(t, err)
	}
	fill(400)
	turns(2) // the plans, made with the inbox at 400 rows
	_, err = sqlDB.ExecContext(ctx, `INSERT INTO `+prefix+`inbox (request_id, conversation, status, attempts,
			deliveries, result, reason, topic, kafka_partition, kafka_offset, created_at, updated_at)
		SELECT 'filler-' || g, 'filler', 'done', 1, 1, '\x00', '', 'requests', 0, g, now(), now()
		FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	filler := session.Key{App: "plans", User: "user", Conversation: "filler"}
	_, err = s.Create(ctx, filler, nil)
	require.NoError(t, err)
	_, err = sqlDB.ExecContext(ctx, `WITH s AS (SELECT id FROM `+prefix+`sessions WHERE conversation = 'filler')
		INSERT INTO `+prefix+`events (session_id, seq, request_id, idx, event_id, author, body, at)
		SELECT s.id, g, 'filler-' || g, 0, 'e-' || g, 'user', 'x', now() FROM s, generate_series(1, 20000) g`)
	require.NoError(t, err)
	seqScans := func() (inboxScans, eventScans int64) {
		return flushedSeqScans(t, sqlDB, 2, prefix)
	}
	inboxBefore, eventsBefore := seqScans()
	turns(6)
	inboxAfter, eventsAfter := seqScans()
	plans := getManyPlans(t, sqlDB, 2)
	var mode string
	require.NoError(t, sqlDB.QueryRowContext(ctx, `SHOW plan_cache_mode`).Scan(&mode))
	t.Logf("plan_cache_mode %s; seq scans: inbox %d -> %d, events %d -> %d", mode, inboxBefore, inboxAfter, eventsBefore, eventsAfter)
	for _, plan := range plans { // the batched Get's plan on each connection that prepared it
		require.NotContains(t, plan, "Seq Scan on "+prefix+"events", "the batched Get's generic plan:\n%s", plan)
	}
	require.Equal(t, inboxBefore, inboxAfter, "scans of the whole inbox by the batches")
	require.Equal(t, eventsBefore, eventsAfter, "scans of the whole events table by the batches")
}

// getManyPlans returns the plan of the batched Get (the prepared statement with LATERAL) on
// each of the pool's conns connections that prepared it, as EXPLAIN EXECUTE shows it.
func getManyPlans(t *testing.T, sqlDB *sql.DB, conns int) []string {
	t.Helper()
	ctx := context.Background()
	var plans []string
	held := make([]*sql.Conn, 0, conns)
	for range conns {
		c, err := sqlDB.Conn(ctx)
		require.NoError(t, err)
		held = append(held, c)
		var names []string
		rows, err := c.QueryContext(ctx, `SELECT name FROM pg_prepared_statements WHERE statement LIKE '%LATERAL%'`)
		require.NoError(t, err)
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			names = append(names, n)
		}
		require.NoError(t, rows.Close())
		for _, n := range names {
			rows, err := c.QueryContext(ctx, `EXPLAIN (COSTS OFF) EXECUTE "`+n+`"('{0}', '{plans}', '{conv-0}', '{user}', '{20}', '{0}', '{0}', '{0}')`)
			require.NoError(t, err)
			var plan []string
			for rows.Next() {
				var line string
				require.NoError(t, rows.Scan(&line))
				plan = append(plan, line)
			}
			require.NoError(t, rows.Close())
			plans = append(plans, strings.Join(plan, "\n"))
		}
	}
	for _, c := range held {
		require.NoError(t, c.Close())
	}
	return plans
}

// flushedSeqScans returns pg_stat_user_tables.seq_scan of prefix's inbox and events once every
// one of the pool's conns connections (all of them: the pool is full) has reported its counts.
// A PostgreSQL 15 backend that reported less than a second ago keeps its counts pending until
// it has been idle for PGSTAT_IDLE_INTERVAL (10 s), so a fixed sleep of a few seconds may miss
// the last batches' scans; pg_stat_force_next_flush makes the backend report them as it goes
// idle after that statement, before its reply.
func flushedSeqScans(t *testing.T, sqlDB *sql.DB, conns int, prefix string) (inboxScans, eventScans int64) {
	t.Helper()
	ctx := context.Background()
	held := make([]*sql.Conn, 0, conns)
	for range conns {
		c, err := sqlDB.Conn(ctx)
		require.NoError(t, err)
		held = append(held, c)
		_, err = c.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
	}
	require.NoError(t, held[0].QueryRowContext(ctx, `SELECT
			(SELECT seq_scan FROM pg_stat_user_tables WHERE relname = $1),
			(SELECT seq_scan FROM pg_stat_user_tables WHERE relname = $2)`,
		prefix+"inbox", prefix+"events").Scan(&inboxScans, &eventScans))
	for _, c := range held {
		require.NoError(t, c.Close())
	}
	return inboxScans, eventScans
}
