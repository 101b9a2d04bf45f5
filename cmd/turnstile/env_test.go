package main

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
)

// Every flag of every command is also read from its environment variable, which --help names
// once per flag, with the default shown once; the command line wins over the environment.
func TestFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		code, help, _ := cli(t, append(strings.Fields(c.name), "--help")...)
		require.Equal(t, exitOK, code)
		e := &env{stdout: new(strings.Builder), stderr: new(strings.Builder), getenv: func(string) string { return "" }}
		// The command's flag set, as the command makes it: run it for its help.
		require.NoError(t, func() error {
			err := c.run(t.Context(), e, []string{"--help"})
			if err == errHelp {
				return nil
			}
			return err
		}())
		n := 0
		e.flags.VisitAll(func(fl *flag.Flag) {
			n++
			name := envName(fl.Name)
			require.Equal(t, 1, strings.Count(help, "$"+name+"]"), "%s --%s names %s once:\n%s", c.name, fl.Name, name, help)
		})
		require.NotZero(t, n, c.name)
		for _, line := range strings.Split(help, "\n") {
			require.LessOrEqual(t, strings.Count(line, "(default"), 1, "%s: %s", c.name, line)
			require.NotContains(t, line, "(default $", "%s: %s", c.name, line)
		}
	}

	code, _, errOut := cliEnv(t, map[string]string{"TURNSTILE_BROKERS": "127.0.0.1:1"}, "lag", "--group=g", "--topic=t")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "connect to Kafka at 127.0.0.1:1", "--brokers from TURNSTILE_BROKERS")
	code, _, errOut = cliEnv(t, map[string]string{"TURNSTILE_BROKERS": "127.0.0.1:2", "TURNSTILE_GROUP": "g", "TURNSTILE_TOPIC": "t"},
		"lag", "--brokers=127.0.0.1:1")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "connect to Kafka at 127.0.0.1:1", "the command line wins")
	code, _, errOut = cliEnv(t, map[string]string{"TURNSTILE_SINCE": "yesterday"}, "dlq", "list", "--topic=x", "--brokers=127.0.0.1:1")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `invalid value "yesterday" in TURNSTILE_SINCE (--since)`)
	code, _, errOut = cliEnv(t, map[string]string{"TURNSTILE_PRODUCTION_TOPIC": "a.results,a.dlq"}, "replay",
		"--brokers=127.0.0.1:1", "--from=a.requests", "--to=a.dlq")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `--to "a.dlq" is a production topic`, "a list from one variable, comma-separated")
}

// A table that is not there (the tables migrated under another --table-prefix) gets a hint
// that names --table-prefix and its environment variable; inbox purge reports the error
// alone, not "purged 0 entries" before it; the prefix from the environment finds the tables.
func TestMissingTableHint(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			prefix := sqltest.Prefix(t, db, d.dialect == sqlinbox.PostgreSQL)
			ok(t, "migrate", "--db="+d.dsn, "--table-prefix="+prefix)
			wrong := sqltest.Prefix(t, db, d.dialect == sqlinbox.PostgreSQL)
			for _, args := range [][]string{
				{"session", "show", "--conversation=c-1"},
				{"session", "show", "--user=u-1", "--conversation=c-1"},
				{"session", "delete", "--user=u-1", "--dry-run"},
				{"inbox", "get", "--key=k"},
				{"inbox", "purge", "--older-than=1h"},
			} {
				code, out, errOut := cli(t, append(args, "--db="+d.dsn, "--table-prefix="+wrong)...)
				require.Equal(t, exitFailed, code, "%v\nstdout: %s\nstderr: %s", args, out, errOut)
				require.Contains(t, errOut, "--table-prefix", args)
				require.Contains(t, errOut, "TURNSTILE_TABLE_PREFIX", args)
				require.Contains(t, errOut, fmt.Sprintf("%q", wrong), "the hint names the prefix it used")
				require.NotContains(t, errOut, "purged 0", args)
			}
			vars := map[string]string{"TURNSTILE_DB": d.dsn, "TURNSTILE_TABLE_PREFIX": prefix}
			code, _, errOut := cliEnv(t, vars, "session", "show", "--conversation=c-1")
			require.Equal(t, exitNotFound, code, errOut)
			require.NotContains(t, errOut, "hint")
			code, out, errOut := cliEnv(t, vars, "inbox", "purge", "--older-than=1h")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "purged 0 inbox entries")
		})
	}
}
