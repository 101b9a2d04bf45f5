package main

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, turntest.LeakOptions()...) }

const wait = time.Minute

// cli runs the command line in process, in an empty environment, and returns its exit code
// and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cliEnv(t, nil, args...)
}

// cliEnv runs the command line in process with the environment variables vars.
func cliEnv(t *testing.T, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut, func(k string) string { return vars[k] })
	return code, out.String(), errOut.String()
}

// ok runs the command line and fails the test unless it exits 0. A --json output is checked
// for its casing (requireSnakeCase) and counted for jsonCovered.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, args...)
	require.Equal(t, exitOK, code, "turnstile %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
	if slices.Contains(args, "--json") {
		requireSnakeCase(t, out)
		c, _, found := find(args)
		require.True(t, found)
		jsonSeen.Store(t.Name()+"|"+c.name, true)
	}
	return out
}

// jsonSeen holds "TEST|COMMAND" for each command whose --json output a test checked.
var jsonSeen sync.Map

// jsonCommands returns the commands that take --json.
func jsonCommands(t *testing.T) []string {
	var out []string
	for _, c := range commands {
		_, help, _ := cli(t, append(strings.Fields(c.name), "--help")...)
		if strings.Contains(help, "  -json\n") {
			out = append(out, c.name)
		}
	}
	require.NotEmpty(t, out)
	return out
}

// jsonOwners names the test that runs and checks the --json output of the commands that
// TestCommands cannot run (they need a Temporal server, which it has not), or that a test of
// their own covers (the outbox's, which need no Kafka). Every other command
// with --json is TestCommands'. TestJSONOwners checks that each test named here exists and
// calls requireJSONCovered.
var jsonOwners = map[string]string{
	"held":        "TestHeldAndRelease",
	"release":     "TestHeldAndRelease",
	"outbox list": "TestOutboxCommands",
	"inbox steps": "TestOutboxCommands",
}

// jsonOwner returns the test that must check the --json output of the command name.
func jsonOwner(name string) string { return cmp.Or(jsonOwners[name], "TestCommands") }

// requireJSONCovered fails the test unless it checked the --json output of every command that
// has one and that it owns (jsonOwner: its top-level test's name).
func requireJSONCovered(t *testing.T) {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	owned := 0
	for _, name := range jsonCommands(t) {
		if jsonOwner(name) != top {
			continue
		}
		owned++
		_, seen := jsonSeen.Load(t.Name() + "|" + name)
		require.True(t, seen, "%s --json was not run and checked in %s", name, t.Name())
	}
	require.NotZero(t, owned, "%s owns no command's --json output (jsonOwners)", top)
}

// Each test that jsonOwners names exists in this package, calls requireJSONCovered, and owns
// a command that takes --json: an entry there moves a command's check, never drops it.
func TestJSONOwners(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	checks := map[string]bool{} // test function name: whether it calls requireJSONCovered
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil {
				continue
			}
			calls := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "requireJSONCovered" {
						calls = true
					}
				}
				return !calls
			})
			checks[fn.Name.Name] = calls
		}
	}
	withJSON := jsonCommands(t)
	for cmd, test := range jsonOwners {
		require.Contains(t, withJSON, cmd, "jsonOwners names %s, which takes no --json", cmd)
		calls, found := checks[test]
		require.True(t, found, "jsonOwners names %s for %s: no such test", test, cmd)
		require.True(t, calls, "%s owns %s --json but does not call requireJSONCovered", test, cmd)
	}
	require.True(t, slices.ContainsFunc(withJSON, func(c string) bool { return jsonOwner(c) == "TestCommands" }))
}

// serviceData are the keys whose values are the service's own content (record headers,
// session state, event data, a stored result), named as the service chose: their insides
// are not the CLI's to case.
var serviceData = map[string]bool{"headers": true, "state": true, "data": true, "result": true}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// requireSnakeCase fails unless every key of the JSON document out is snake_case.
func requireSnakeCase(t *testing.T, out string) {
	t.Helper()
	var doc any
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				require.Regexp(t, snakeCase, k, "key %s%s in:\n%s", path, k, out)
				if !serviceData[k] {
					walk(path+k+".", x)
				}
			}
		case []any:
			for _, x := range v {
				walk(path, x)
			}
		}
	}
	walk("", doc)
}

// database is where a service keeps its stores: the --db value, and a pool for the service.
type database struct {
	name, dsn string
	open      func(t *testing.T) *sql.DB
	dialect   sqlinbox.Dialect
}

func databases(t *testing.T) []database {
	dir := t.TempDir()
	return []database{
		{name: "postgres", dsn: sqltest.PostgresDSN(), dialect: sqlinbox.PostgreSQL, open: func(t *testing.T) *sql.DB {
			return sqltest.OpenPostgres(t)
		}},
		{name: "sqlite", dsn: "sqlite:" + filepath.Join(dir, "svc.db"), dialect: sqlinbox.SQLite, open: func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "svc.db")+"?"+sqltest.SQLitePragmas+"&_pragma=journal_mode(WAL)")
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			return db
		}},
	}
}

// service is a production service on a real broker and a real database whose model has a
// bug until fixed: it refuses requests that mention "refund".
type service struct {
	kc                     *turntest.Cluster
	requests, results, dlq string
	group                  string
	mu                     sync.Mutex
	fixed                  bool
	calls                  map[string]int
	stop                   func()
}

func (s *service) callsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

func (s *service) fix() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fixed = true
}

func startService(t *testing.T, kc *turntest.Cluster, db *sql.DB, dialect sqlinbox.Dialect, prefix string) *service {
	t.Helper()
	s := &service{kc: kc, requests: kc.CreateTopic(t, "requests", 3), results: kc.CreateTopic(t, "results", 3),
		dlq: kc.CreateTopic(t, "dlq", 3), group: kc.Unique("svc"), calls: map[string]int{}}
	ss, err := sqlsession.New(db, sqlsession.Dialect(dialect), sqlsession.Options{TablePrefix: prefix})
	require.NoError(t, err)
	ib, err := sqlinbox.New(db, dialect, sqlinbox.Options{TablePrefix: prefix})
	require.NoError(t, err)
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.fixed && strings.Contains(in.Request.Text, "refund") {
			return turn.Output{}, turn.Permanent(errors.New("bug 42: the refund tool is misconfigured"))
		}
		s.calls[in.Request.ID]++
		return turn.Output{Events: []session.Event{{Text: "answered " + in.Request.Text}}}, nil
	})
	quiet := slog.New(slog.DiscardHandler)
	r := &turn.Runner{Model: model, Sessions: ss, Inbox: ib, Logger: quiet}
	c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: s.group, RequestsTopic: s.requests,
		ResultsTopic: s.results, DeadLetterTopic: s.dlq, Sarama: kc.Config(), CommitInterval: 50 * time.Millisecond,
		Logger: quiet, MaxInFlight: 4}, consumer.RunnerHandler(r))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	s.stop = func() { once.Do(func() { cancel(); require.NoError(t, <-done) }) }
	t.Cleanup(s.stop)
	return s
}

// Every command against a real broker (kfake over TCP) and a real database, PostgreSQL and
// SQLite: an operator's day after a bug dead-lettered requests.
func TestCommands(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			testCommands(t, d)
		})
	}
}

func testCommands(t *testing.T, d database) {
	db := d.open(t)
	kc := turntest.NewCluster(t, turntest.Options{})
	prefix := sqltest.Prefix(t, db, d.dialect == sqlinbox.PostgreSQL)
	brokers := "--brokers=" + kc.BrokerList()
	dbFlags := []string{"--db=" + d.dsn, "--table-prefix=" + prefix}

	// migrate creates the tables the service then uses; running it again is harmless.
	require.Contains(t, ok(t, append([]string{"migrate"}, dbFlags...)...), "this version's schema")
	ok(t, append([]string{"migrate"}, dbFlags...)...)
	s := startService(t, kc, db, d.dialect, prefix)

	bad := turntest.NewRequest("c-1", "u-1", "where is my refund?")
	good := turntest.NewRequest("c-2", "u-2", "hello")
	kc.ProduceRequest(t, s.requests, bad)
	kc.ProduceRequest(t, s.requests, good)
	kc.ReadDeadLetters(t, s.dlq, 1, wait)
	kc.ReadResults(t, s.results, 1, wait)

	// dlq list: a table, and JSON.
	out := ok(t, "dlq", "list", brokers, "--topic="+s.dlq)
	require.Contains(t, out, bad.ID)
	require.Contains(t, out, "bug 42")
	require.Contains(t, out, "REASON")
	require.Contains(t, out, "CONVERSATION")
	require.Contains(t, out, "c-1")
	var listed []letterJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "dlq", "list", brokers, "--topic="+s.dlq, "--json", "--reason=bug 42")), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, bad.ID, listed[0].RequestID)
	require.Equal(t, 1, listed[0].Attempts)
	require.Equal(t, s.requests, strings.Split(listed[0].Source, "/")[0])
	require.NoError(t, json.Unmarshal([]byte(ok(t, "dlq", "list", brokers, "--topic="+s.dlq, "--json", "--reason=nothing like it")), &listed))
	require.Empty(t, listed)

	// dlq show: the value and headers; by request id or location; not found; usage.
	out = ok(t, "dlq", "show", brokers, "--topic="+s.dlq, "--request-id="+bad.ID)
	require.Contains(t, out, "where is my refund?")
	require.Contains(t, out, "bug 42")
	var shown []letterJSON
	where := strings.Split(listed0(t, brokers, s.dlq).ID, "/")
	require.NoError(t, json.Unmarshal([]byte(ok(t, "dlq", "show", brokers, "--topic="+s.dlq, "--partition="+where[1], "--offset="+where[2], "--json")), &shown))
	require.Len(t, shown, 1)
	require.Contains(t, shown[0].Value, bad.ID)
	code, _, errOut := cli(t, "dlq", "show", brokers, "--topic="+s.dlq, "--request-id=00000000-0000-4000-8000-000000000000")
	require.Equal(t, exitNotFound, code, errOut)
	code, _, errOut = cli(t, "dlq", "show", brokers, "--topic="+s.dlq)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--request-id")

	// dlq redrive after the fix runs the request once; a second re-drive runs nothing.
	code, _, errOut = cli(t, append([]string{"dlq", "redrive", brokers, "--topic=" + s.dlq}, dbFlags...)...)
	require.Equal(t, exitUsage, code, "no filter, no --all")
	require.Contains(t, errOut, "--all")
	require.Contains(t, ok(t, append([]string{"dlq", "redrive", brokers, "--topic=" + s.dlq, "--reason=bug 42", "--dry-run"}, dbFlags...)...), "would be redriven")
	require.Zero(t, s.callsOf(bad.ID))
	s.fix()
	out = ok(t, append([]string{"dlq", "redrive", brokers, "--topic=" + s.dlq, "--reason=bug 42", "--note=fixed in v2"}, dbFlags...)...)
	require.Contains(t, out, "redriven")
	kc.ReadResults(t, s.results, 2, wait)
	require.Equal(t, 1, s.callsOf(bad.ID))
	published := kc.RecordCount(t, s.requests)
	var redriven []map[string]string
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"dlq", "redrive", brokers, "--topic=" + s.dlq, "--request-id=" + bad.ID, "--json"}, dbFlags...)...)), &redriven))
	require.Len(t, redriven, 1)
	require.Equal(t, "skipped: done", redriven[0]["action"])
	require.Equal(t, published, kc.RecordCount(t, s.requests), "the second re-drive published nothing")
	require.Equal(t, 1, s.callsOf(bad.ID))

	// inbox get: the audit keeps the old reason; not found; usage.
	var entry entryJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"inbox", "get", "--json", "--request-id=" + bad.ID, "--user=u-1", "--conversation=c-1"}, dbFlags...)...)), &entry))
	require.Equal(t, "done", entry.Status)
	require.Len(t, entry.Redrives, 1)
	require.Contains(t, entry.Redrives[0].Reason, "bug 42")
	require.Equal(t, "fixed in v2", entry.Redrives[0].Note)
	require.Contains(t, ok(t, append([]string{"inbox", "get", "--request-id=" + good.ID, "--user=u-2", "--conversation=c-2"}, dbFlags...)...), "done")
	goodKey := turn.InboxKey(turn.DefaultApp, good)
	require.Contains(t, ok(t, append([]string{"inbox", "get", goodKey}, dbFlags...)...), "done", "the raw key as an argument, as inbox steps takes it")
	code, _, errOut = cli(t, append([]string{"inbox", "get", "--key=" + goodKey, "--request-id=" + good.ID, "--user=u-1", "--conversation=c-2"}, dbFlags...)...)
	require.Equal(t, exitUsage, code, "a raw key and the flags that name another entry: which one was meant?")
	require.Contains(t, errOut, "not both")
	code, _, errOut = cli(t, append([]string{"session", "delete", "--user=u-2", "--conversation=c-2", "--vacuum"}, dbFlags...)...)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "go with --user alone", "the refusal names what is wrong, not --dry-run")
	code, _, _ = cli(t, append([]string{"inbox", "get", "--request-id=" + good.ID, "--user=u-1", "--conversation=c-2"}, dbFlags...)...)
	require.Equal(t, exitNotFound, code, "the key is scoped to the user")
	code, _, _ = cli(t, append([]string{"inbox", "get", "--request-id=" + good.ID}, dbFlags...)...)
	require.Equal(t, exitUsage, code)

	// session show, by user and conversation or by conversation alone; session delete of a
	// user, first as a dry run; the user's next request starts afresh.
	var sess sessionJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"session", "show", "--json", "--user=u-1", "--conversation=c-1"}, dbFlags...)...)), &sess))
	require.EqualValues(t, 1, sess.Version)
	require.Equal(t, "u-1", sess.User)
	require.Contains(t, ok(t, append([]string{"session", "show", "--user=u-1", "--conversation=c-1"}, dbFlags...)...), "answered where is my refund?")
	out = ok(t, append([]string{"session", "show", "--conversation=c-1"}, dbFlags...)...)
	require.Contains(t, out, "answered where is my refund?", "found by its conversation")
	require.Contains(t, out, "session "+turn.DefaultApp+"/u-1/c-1")
	code, _, errOut = cli(t, append([]string{"session", "show", "--conversation=c-404"}, dbFlags...)...)
	require.Equal(t, exitNotFound, code, errOut)
	code, _, _ = cli(t, append([]string{"session", "show", "--user=u-2", "--conversation=c-1"}, dbFlags...)...)
	require.Equal(t, exitNotFound, code, "c-1 is u-1's")
	code, out, errOut = cli(t, append([]string{"session", "delete", "--user=u-1", "--dry-run"}, dbFlags...)...)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "1 conversations (c-1)")
	require.Regexp(t, `sessions +session store +1\n`, out)
	require.Contains(t, errOut, "nothing was deleted")
	var wouldDelete []summaryJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"session", "delete", "--idle-for=1ns", "--dry-run", "--json"}, dbFlags...)...)), &wouldDelete))
	require.Len(t, wouldDelete, 2, "c-1 and c-2")
	ok(t, append([]string{"session", "show", "--user=u-1", "--conversation=c-1"}, dbFlags...)...)
	out = ok(t, append([]string{"session", "delete", "--user=u-1"}, dbFlags...)...)
	require.Regexp(t, `sessions +session store +1\n`, out)
	require.Regexp(t, `inbox entries +inbox +1\n`, out, "its request's result and journal go with it")
	code, _, _ = cli(t, append([]string{"session", "show", "--user=u-1", "--conversation=c-1"}, dbFlags...)...)
	require.Equal(t, exitNotFound, code)
	later := turntest.NewRequest("c-1", "u-1", "me again")
	kc.ProduceRequest(t, s.requests, later)
	kc.ReadResults(t, s.results, 3, wait)
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"session", "show", "--json", "--user=u-1", "--conversation=c-1"}, dbFlags...)...)), &sess))
	require.EqualValues(t, 1, sess.Version, "a fresh session: only the new turn")
	require.EqualValues(t, 2, sess.EventCount)
	require.Equal(t, later.ID, sess.Events[0].RequestID)
	require.Contains(t, ok(t, append([]string{"session", "delete", "--user=u-2", "--conversation=c-2"}, dbFlags...)...), "deleted session")
	code, _, _ = cli(t, append([]string{"inbox", "get", "--request-id=" + good.ID, "--user=u-2", "--conversation=c-2"}, dbFlags...)...)
	require.Equal(t, exitNotFound, code, "the conversation's inbox entry (its result) went with its session")
	code, _, _ = cli(t, append([]string{"session", "delete", "--user=u-2", "--conversation=c-2"}, dbFlags...)...)
	require.Equal(t, exitNotFound, code)
	code, _, _ = cli(t, append([]string{"session", "delete"}, dbFlags...)...)
	require.Equal(t, exitUsage, code)

	// lag against a stopped group, with records it has not read, equals an independent read.
	s.stop()
	for i := range 5 {
		kc.ProduceRequest(t, s.requests, turntest.NewRequest(fmt.Sprintf("c-%d", i), "u", "queued"))
	}
	var lags []consumer.PartitionLag
	require.NoError(t, json.Unmarshal([]byte(ok(t, "lag", brokers, "--group="+s.group, "--topic="+s.requests, "--json")), &lags))
	require.Len(t, lags, 3)
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	defer client.Close()
	var total int64
	for _, l := range lags {
		end, err := client.GetOffset(s.requests, l.Partition, sarama.OffsetNewest)
		require.NoError(t, err)
		committed := kc.CommittedOffset(t, s.group, s.requests, l.Partition)
		require.Equal(t, committed, l.Committed, "partition %d", l.Partition)
		require.Equal(t, end, l.End, "partition %d", l.Partition)
		require.Equal(t, end-max(committed, 0), l.Lag, "partition %d", l.Partition)
		total += l.Lag
	}
	require.EqualValues(t, 5, total, "the five queued records")
	require.Contains(t, ok(t, "lag", brokers, "--group="+s.group, "--topic="+s.requests), "total")

	// replay copies the recorded requests into a sandbox topic, never into production's.
	sandbox := kc.CreateTopic(t, "sandbox", 3)
	n := kc.RecordCount(t, s.requests)
	require.Contains(t, ok(t, "replay", brokers, "--from="+s.requests, "--to="+sandbox, "--from-offset=0"), fmt.Sprintf("copied %d records", n))
	copied := kc.ReadAll(t, sandbox, int(n), wait)
	require.Len(t, copied, int(n))
	require.Contains(t, turntest.HeaderMap(copied[0])[headerReplayedFrom], s.requests+"/")
	// The same copy again is refused: the sandbox holds it already.
	code, _, errOut = cli(t, "replay", brokers, "--from="+s.requests, "--to="+sandbox, "--from-offset=0")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "already holds a copy")
	require.Equal(t, n, kc.RecordCount(t, sandbox), "the refused replay copied nothing")
	code, _, errOut = cli(t, "replay", brokers, "--from="+s.requests, "--to="+sandbox, "--conversation=c-1", "--from-time=1h")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "--allow-duplicates")
	require.Contains(t, ok(t, "replay", brokers, "--from="+s.requests, "--to="+sandbox, "--conversation=c-1", "--from-time=1h", "--allow-duplicates"),
		"copied 4 records", "the bad request, its re-drive, the later one and a queued one")
	code, _, errOut = cli(t, "replay", brokers, "--from="+s.requests, "--to="+s.requests)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "sandbox topic of its own")
	code, _, _ = cli(t, "replay", brokers, "--from="+s.requests, "--to="+s.results, "--production-topic="+s.results)
	require.Equal(t, exitUsage, code)
	// A mistyped --to is caught without --production-topic: the results topic holds records
	// that replay did not write. A topic that only looks foreign takes the override.
	results := kc.RecordCount(t, s.results)
	code, _, errOut = cli(t, "replay", brokers, "--from="+s.requests, "--to="+s.results)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "replay did not write")
	require.Equal(t, results, kc.RecordCount(t, s.results), "the refused replay copied nothing")
	require.Contains(t, ok(t, "replay", brokers, "--from="+s.requests, "--to="+sandbox, "--conversation=c-1", "--allow-duplicates"), "copied 4 records",
		"a sandbox topic holds only replayed records")
	foreign := kc.CreateTopic(t, "foreign", 1)
	kc.Produce(t, foreign, "c-1", []byte("written by someone else"), nil)
	code, _, errOut = cli(t, "replay", brokers, "--from="+s.requests, "--to="+foreign, "--conversation=c-1")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--allow-foreign-records")
	require.Contains(t, ok(t, "replay", brokers, "--from="+s.requests, "--to="+foreign, "--conversation=c-1", "--allow-foreign-records"), "copied 4 records")

	// inbox purge keeps what is younger than the horizon, and purges the rest.
	require.Contains(t, ok(t, append([]string{"inbox", "purge", "--older-than=1h"}, dbFlags...)...), "purged 0 inbox entries")
	require.Contains(t, ok(t, append([]string{"inbox", "purge", "--older-than=1ns"}, dbFlags...)...), "purged 1 inbox entries", "u-1's first went with the user's deletion, c-2's with its session")
	code, _, _ = cli(t, append([]string{"inbox", "get", "--request-id=" + good.ID, "--user=u-2", "--conversation=c-2"}, dbFlags...)...)
	require.Equal(t, exitNotFound, code)
	require.Contains(t, ok(t, append([]string{"session", "delete", "--idle-for=1ns"}, dbFlags...)...), "deleted 1 sessions")

	// A dead letter whose inbox entry is gone (purged above, or another --app) is re-driven
	// with a warning that says why it may come back.
	code, _, errOut = cli(t, append([]string{"dlq", "redrive", brokers, "--topic=" + s.dlq, "--request-id=" + bad.ID}, dbFlags...)...)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "has no inbox entry under --app")

	// Every --json output above is snake_case (ok checks each one); size's too.
	ok(t, "size", "--turn-p50=20s", "--rate=30", "--json", "--plot=none")
	requireJSONCovered(t)
}

// listed0 returns the first dead letter of topic, through the CLI.
func listed0(t *testing.T, brokers, topic string) letterJSON {
	t.Helper()
	var l []letterJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "dlq", "list", brokers, "--topic="+topic, "--json")), &l))
	require.NotEmpty(t, l)
	return l[0]
}

// Clear errors and exit codes without a broker or a database.
func TestUsageAndFailures(t *testing.T) {
	t.Parallel()
	code, out, _ := cli(t)
	require.Equal(t, exitUsage, code)
	require.Contains(t, out, "Commands:")
	code, out, _ = cli(t, "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "Exit codes")
	for _, c := range commands {
		code, out, _ := cli(t, append(strings.Fields(c.name), "--help")...)
		require.Equal(t, exitOK, code, c.name)
		require.Contains(t, out, "Examples:", c.name)
		require.Contains(t, out, "turnstile "+c.name, c.name)
	}
	code, _, errOut := cli(t, "dlq", "frobnicate")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `unknown command "dlq frobnicate"`)
	code, _, errOut = cli(t, "dlq")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give a subcommand: list, show, redrive")
	code, _, errOut = cli(t, "dlq", "list", "--topic=x")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--brokers (or TURNSTILE_BROKERS) is required")
	code, out, errOut = cli(t, "dlq", "list", "--topic=x", "--brokers=127.0.0.1:1", "--since=yesterday")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `invalid value "yesterday" for flag -since`)
	require.Empty(t, out, "a bad flag is one line on stderr, not the whole usage")
	// Usage errors come before any connection: the broker here is unreachable.
	lite := "--db=sqlite:" + filepath.Join(t.TempDir(), "x.db")
	code, _, errOut = cli(t, "dlq", "redrive", "--topic=x", "--brokers=127.0.0.1:1", lite)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "--all")
	code, _, errOut = cli(t, "dlq", "redrive", "--topic=x", "--brokers=127.0.0.1:1", "--all")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "--db (or TURNSTILE_DB) is required")
	code, _, errOut = cli(t, "dlq", "show", "--topic=x", "--brokers=127.0.0.1:1")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "--request-id, or --partition and --offset")
	code, _, errOut = cli(t, "session", "delete", lite, "--idle-for=0s")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--idle-for must be positive")
	code, _, errOut = cli(t, "session", "delete", lite, "--idle-for=1h", "--user=u")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "not both")
	code, _, errOut = cli(t, "lag", "--brokers=127.0.0.1:1", "--group=g", "--topic=t")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "connect to Kafka at 127.0.0.1:1")
	code, _, errOut = cli(t, "migrate", "--db=mysql://x")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "want postgres://... or sqlite:PATH")
	code, _, errOut = cli(t, "inbox", "purge", "--db=sqlite:"+filepath.Join(t.TempDir(), "x.db"))
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--older-than is required")
	code, _, errOut = cli(t, "migrate", "--db=sqlite:"+filepath.Join(t.TempDir(), "x.db"), "--table-prefix=bad-prefix")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "table prefix")
	code, _, errOut = cli(t, "session", "show", "--db=sqlite:"+filepath.Join(t.TempDir(), "nope", "x.db"), "--user=u", "--conversation=c")
	require.Equal(t, exitFailed, code, errOut)
}

// TestMissingSQLiteFileIsRefusedNotCreated: a command other than migrate given a SQLite path
// with no file fails and says so, and leaves no file behind (SQLite creates one on open);
// migrate creates it, and the same command then runs.
func TestMissingSQLiteFileIsRefusedNotCreated(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range [][]string{
		{"outbox", "list"},
		{"inbox", "get", "--key=k/1"},
		{"session", "show", "--user=u", "--conversation=c"},
		{"inbox", "purge", "--older-than=24h"},
	} {
		code, _, errOut := cli(t, append(args, "--db=sqlite:"+path+"?_pragma=busy_timeout(1000)")...)
		require.Equal(t, exitFailed, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "no SQLite database at "+path, args)
		require.NoFileExists(t, path, args)
	}
	code, _, errOut := cli(t, "migrate", "--db=sqlite:"+path)
	require.Equal(t, 0, code, errOut)
	require.FileExists(t, path)
	code, _, errOut = cli(t, "outbox", "list", "--db=sqlite:"+path)
	require.Equal(t, 0, code, errOut)
}
