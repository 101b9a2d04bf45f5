// Command turnstile is the operator's tool for a service built on turnstile: it lists, shows
// and re-drives dead letters, reads and purges the inbox (and its step journals), lists and
// re-drives the outbox's intents, shows and deletes sessions, copies
// recorded requests into a sandbox topic for a replay, reports a consumer group's lag,
// migrates the stores' schema, sizes a service (turns in flight, members, partitions), and, in
// Temporal mode, lists the conversations held at a sequence gap and releases them.
//
// Install it from a checkout (there is no release yet): go install ./cmd/turnstile, at the
// repository's root.
//
// Usage:
//
//	turnstile <command> <subcommand> [flags]
//
//	dlq list        list dead letters oldest first (time, conversation, request id, attempts,
//	                age, source, reason), as a table or JSON; --conversation filters
//	dlq show        show one dead letter with its headers and value
//	dlq redrive     re-drive dead letters: inbox entries runnable again, requests published again;
//	                what can never pass (too large, refused by the consumer) is refused unless
//	                --force, by --dry-run too
//	inbox get       show a request's inbox entry
//	inbox purge     delete done and dead inbox entries older than a horizon
//	inbox steps     list a request's step journal (ordinal, name, deferred, bytes, time),
//	                found as inbox get finds the entry
//	outbox list     list the outbox's intents (id, status, attempts, name, conversation,
//	                next due, reason), dead first, then pending, then delivered, as a table
//	                or JSON; --status, --conversation filter; a cut listing says so
//	outbox redrive  make a dead intent pending again, due now with no attempts spent
//	ledger purge    delete Temporal mode's hand-off ledger rows older than a horizon
//	session show    show a session's state, checkpoints and recent events, by conversation (and user)
//	session delete  delete a session, all sessions of a user (with --temporal, also their
//	                conversation workflows and ledger rows), or sessions idle for too long;
//	                --dry-run lists them
//	replay          copy recorded requests into a sandbox requests topic; it refuses a
//	                production topic, and a copy the sandbox already holds
//	lag             committed offset, end offset and lag per partition for a group; a group
//	                with no committed offset on the topic is not found
//	migrate         create or upgrade the session, inbox and attachment tables
//	size            turns in flight (Little's law), members and partitions for a turn time
//	                and a rate, as a table, and a PNG or SVG plot when --plot names a file
//	held            Temporal mode: conversations held at a sequence gap (visibility, then
//	                each workflow's status query), with their missing sequences, as a
//	                table or JSON; workflows that do not answer are named, and exit 1
//	release         Temporal mode: release a held conversation now: its missing sequences
//	                dead-lettered with reason "gap", its held requests applied in order
//	console         serve the web console (package console) at --listen: conversations,
//	                timelines, dead letters, outbox, lag, held conversations; read-only
//	                unless --actions (with --token)
//
// Every command takes --help. Every flag is also read from an environment variable named
// TURNSTILE_ and the flag in upper case with underscores (--table-prefix is
// TURNSTILE_TABLE_PREFIX), which --help names; the command line wins. Kafka is reached at
// --brokers, the database at --db: postgres://... for PostgreSQL, sqlite:PATH for SQLite
// (a file that migrate alone creates: any other command fails on a missing one rather than
// leave an empty database behind a mistyped path). A table that is not there (another
// --table-prefix than the service's, or no migrate yet) gets a hint naming --table-prefix
// and its variable. --json output is snake_case, like
// turnstile's records.
//
// Exit codes: 0 done; 1 the command failed (an unreachable broker or database, a broker or
// database error, a dead letter not re-driven); 2 a usage error (unknown command, bad or
// missing flag, a replay refused); 3 not found (the entry, session or dead letter asked for
// is not there, a group without committed offsets, a topic or task queue that does not
// exist: the error names those that do).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitNotFound = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errNotFound marks what was asked for and is not there: exit code 3.
var errNotFound = errors.New("not found")

const topUsage = `turnstile: the operator's tool for a service built on turnstile

Usage:
  turnstile <command> [<subcommand>] [flags]

Commands:
  dlq list        list dead letters oldest first (time, conversation, request id, reason), as a table or JSON
  dlq show        show one dead letter with its headers and value
  dlq redrive     re-drive dead letters: inbox entries runnable again, requests published again
  inbox get       show a request's inbox entry
  inbox purge     delete done and dead inbox entries older than a horizon
  inbox steps     list a request's step journal (the steps of its turn that completed)
  outbox list     list the outbox's intents (deferred side effects), dead first, as a table or JSON
  outbox redrive  make a dead intent pending again, due now with no attempts spent
  ledger purge    delete Temporal mode's hand-off ledger rows older than a horizon
  session show    show a session's state, checkpoints and recent events, by conversation (and user)
  session delete  delete a session, all sessions of a user (with --temporal, their workflows and ledger rows too),
                  or sessions idle for too long (--dry-run lists them)
  replay          copy recorded requests into a sandbox requests topic
  lag             committed offset, end offset and lag per partition for a consumer group
  migrate         create or upgrade the session, inbox and attachment tables
  size            turns in flight, members and partitions for a turn time and a rate (a plot with --plot)
  held            Temporal mode: conversations held at a sequence gap, with their missing sequences
  release         Temporal mode: release a held conversation now (gap dead letters, held requests applied)
  console         serve the web console: conversations, timelines, dead letters, outbox, lag (read-only unless --actions)

Run 'turnstile <command> [<subcommand>] --help' for a command's flags and examples.
Every flag also comes from an environment variable: --brokers from TURNSTILE_BROKERS, --db from
TURNSTILE_DB (postgres://user@host:5432/db or sqlite:/path/to/file.db), --table-prefix from
TURNSTILE_TABLE_PREFIX, and so on; the command line wins.

Exit codes: 0 done, 1 failed, 2 usage error, 3 not found.
`

// command is one runnable (sub)command.
type command struct {
	name  string // "dlq list"
	usage string // what it does, flags follow
	run   func(ctx context.Context, e *env, args []string) error
}

var commands = []command{
	{"dlq list", dlqListUsage, dlqList},
	{"dlq show", dlqShowUsage, dlqShow},
	{"dlq redrive", dlqRedriveUsage, dlqRedrive},
	{"inbox get", inboxGetUsage, inboxGet},
	{"inbox purge", inboxPurgeUsage, inboxPurge},
	{"inbox steps", inboxStepsUsage, inboxSteps},
	{"outbox list", outboxListUsage, outboxList},
	{"outbox redrive", outboxRedriveUsage, outboxRedrive},
	{"ledger purge", ledgerPurgeUsage, ledgerPurge},
	{"session show", sessionShowUsage, sessionShow},
	{"session delete", sessionDeleteUsage, sessionDelete},
	{"replay", replayUsage, replayCmd},
	{"lag", lagUsage, lagCmd},
	{"migrate", migrateUsage, migrateCmd},
	{"size", sizeUsage, sizeCmd},
	{"held", heldUsage, heldCmd},
	{"release", releaseUsage, releaseCmd},
	{"console", consoleUsage, consoleCmd},
}

// env is what a command writes to and reads its flags' environment variables from.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	flags          *flags // the command's flag set, once it made it
}

// run runs the command line args with the environment getenv and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	e := &env{stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, topUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, rest, ok := find(args)
	if !ok {
		if subs := subcommands(args[0]); len(subs) > 0 && (len(args) == 1 || strings.HasPrefix(args[1], "-")) {
			fmt.Fprintf(stderr, "turnstile %s: give a subcommand: %s\nRun 'turnstile %s %s --help' for its flags.\n",
				args[0], strings.Join(subs, ", "), args[0], subs[0])
			return exitUsage
		}
		fmt.Fprintf(stderr, "turnstile: unknown command %q\n\n%s", joinWords(args), topUsage)
		return exitUsage
	}
	err := cmd.run(ctx, e, rest)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "turnstile %s: %v\nRun 'turnstile %s --help' for its flags.\n", cmd.name, err, cmd.name)
		return exitUsage
	case errors.Is(err, errNotFound):
		fmt.Fprintf(stderr, "turnstile %s: %v\n", cmd.name, err)
		return exitNotFound
	}
	fmt.Fprintf(stderr, "turnstile %s: %v\n", cmd.name, err)
	if e.flags != nil && e.flags.prefix != nil && sqldialect.IsMissingTable(err) {
		fmt.Fprintf(stderr, "hint: a table is missing under the table prefix %q: give the service's prefix with --table-prefix (or %s), "+
			"or create the tables with 'turnstile migrate'\n", *e.flags.prefix, envName("table-prefix"))
	}
	return exitFailed
}

// find returns the command named by the first one or two words of args, and the rest.
func find(args []string) (command, []string, bool) {
	for _, c := range commands {
		if len(args) >= 2 && c.name == args[0]+" "+args[1] {
			return c, args[2:], true
		}
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c, args[1:], true
		}
	}
	return command{}, nil, false
}

// subcommands returns the subcommands of the command word, in the order of commands.
func subcommands(word string) []string {
	var out []string
	for _, c := range commands {
		if w, sub, ok := strings.Cut(c.name, " "); ok && w == word {
			out = append(out, sub)
		}
	}
	return out
}

func joinWords(args []string) string {
	if len(args) >= 2 && args[1] != "" && args[1][0] != '-' {
		return args[0] + " " + args[1]
	}
	return args[0]
}
