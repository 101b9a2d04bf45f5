package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// errHelp is returned after --help printed the usage: exit code 0.
var errHelp = errors.New("help")

// flags is one command's flag set and the common flags it chose.
type flags struct {
	*flag.FlagSet
	e       *env
	name    string
	brokers *string
	db      *string
	prefix  *string
	app     *string
	json    *bool
	timeout *time.Duration
	// temporal, namespace and idPrefix reach the Temporal mode's workflows (withTemporal).
	temporal, namespace, idPrefix *string
	// createsDB: the command may create a SQLite database file that does not exist (migrate).
	// Every other command refuses one, rather than leave an empty file behind a mistyped path.
	createsDB bool
}

// envPrefix starts the name of every flag's environment variable: --table-prefix is also
// TURNSTILE_TABLE_PREFIX.
const envPrefix = "TURNSTILE_"

// envName is the environment variable of the flag name: TURNSTILE_ and the name in upper
// case, dashes as underscores.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// newFlags makes the flag set of a command; its usage is usage followed by the flags, each
// with its environment variable. It becomes e's current flag set, which run reads for the
// hints it adds to an error.
func newFlags(e *env, name, usage string) *flags {
	fs := flag.NewFlagSet("turnstile "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{FlagSet: fs, e: e, name: name}
	e.flags = f
	f.timeout = fs.Duration("timeout", 30*time.Second, "give up after this long (a Go duration: 30s, 2m)")
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: turnstile %s [flags]\n\n%s\nFlags (each also from its environment variable; the command line wins):\n",
			name, strings.TrimSpace(usage)+"\n")
		fs.SetOutput(e.stdout)
		fs.VisitAll(func(fl *flag.Flag) {
			if env := " [$" + envName(fl.Name) + "]"; !strings.HasSuffix(fl.Usage, env) {
				fl.Usage += env
			}
		})
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return f
}

func (f *flags) withKafka() *flags {
	f.brokers = f.String("brokers", "", "Kafka bootstrap brokers, host:port,host:port")
	return f
}

func (f *flags) withDB() *flags {
	f.db = f.String("db", "", "the stores' database: postgres://user@host:5432/db or sqlite:/path/file.db")
	f.prefix = f.String("table-prefix", sqlinbox.DefaultTablePrefix, "the stores' table prefix, as the service's Options.TablePrefix")
	return f
}

func (f *flags) withApp() *flags {
	f.app = f.String("app", turn.DefaultApp, "the service's app (turn.Runner.App), which scopes sessions and inbox keys")
	return f
}

func (f *flags) withJSON() *flags {
	f.json = f.Bool("json", false, "print JSON instead of a table")
	return f
}

// parse sets each flag from its environment variable (envName) when that is set and not
// empty, then parses args, which win; --help prints the usage and returns errHelp. A bad flag
// or environment value is a usage error of one line (the flag package would print the whole
// usage with it). Positional arguments are refused.
func (f *flags) parse(args []string) error {
	var envErr error
	f.VisitAll(func(fl *flag.Flag) {
		v := f.e.getenv(envName(fl.Name))
		if v == "" || envErr != nil {
			return
		}
		if err := f.Set(fl.Name, v); err != nil {
			envErr = usagef("invalid value %q in %s (--%s): %v", v, envName(fl.Name), fl.Name, err)
		}
	})
	if envErr != nil {
		return envErr
	}
	usage := f.Usage
	f.Usage = func() {}
	err := f.Parse(args)
	f.Usage = usage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return errHelp
		}
		return usageError{err.Error()}
	}
	if f.NArg() > 0 {
		return usagef("unexpected argument %q", f.Arg(0))
	}
	return nil
}

// require reports the first of the named flags left empty.
func (f *flags) require(names ...string) error {
	for _, n := range names {
		if fl := f.Lookup(n); fl != nil && fl.Value.String() == "" {
			return usagef("--%s is required", n)
		}
	}
	return nil
}

// kafka opens a client to --brokers.
func (f *flags) kafka() (sarama.Client, error) {
	if *f.brokers == "" {
		return nil, usagef("--brokers (or %s) is required", envName("brokers"))
	}
	var brokers []string
	for _, b := range strings.Split(*f.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.ClientID = "turnstile-cli"
	sc.Net.DialTimeout = 10 * time.Second
	sc.Metadata.Retry.Max = 3
	sc.Metadata.Retry.Backoff = 100 * time.Millisecond
	sc.Producer.Return.Successes = true
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("connect to Kafka at %s: %w", *f.brokers, err)
	}
	return client, nil
}

// database opens --db and returns it with its dialect.
func (f *flags) database() (*sql.DB, sqlinbox.Dialect, error) {
	dsn := *f.db
	var (
		driver  string
		dialect sqlinbox.Dialect
	)
	switch {
	case dsn == "":
		return nil, "", usagef("--db (or %s) is required", envName("db"))
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		driver, dialect = "pgx", sqlinbox.PostgreSQL
	case strings.HasPrefix(dsn, "sqlite:"):
		driver, dialect = "sqlite", sqlinbox.SQLite
		dsn = strings.TrimPrefix(dsn, "sqlite:")
		path, _, _ := strings.Cut(dsn, "?")
		if !f.createsDB && !strings.HasPrefix(path, ":memory:") {
			// Opening a missing file creates it (SQLite's default): a read or a repair on a
			// mistyped path would leave an empty database there and report no rows.
			if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
				return nil, "", fmt.Errorf("no SQLite database at %s (check --db; turnstile migrate creates one)", path)
			}
		}
		dsn = "file:" + dsn
		if !strings.Contains(dsn, "?") {
			dsn += "?_pragma=busy_timeout(5000)"
		}
	default:
		return nil, "", usagef("--db %q: want postgres://... or sqlite:PATH", dsn)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, "", fmt.Errorf("open the database: %w", err)
	}
	return db, dialect, nil
}

// stores opens the session store and the inbox on --db, leaving the pool as it is.
func (f *flags) stores() (*sql.DB, *sqlsession.Store, *sqlinbox.Inbox, error) {
	db, dialect, err := f.database()
	if err != nil {
		return nil, nil, nil, err
	}
	ss, err := sqlsession.New(db, sqlsession.Dialect(dialect), sqlsession.Options{TablePrefix: *f.prefix, Concurrency: -1})
	if err != nil {
		db.Close()
		return nil, nil, nil, usageError{err.Error()}
	}
	ib, err := sqlinbox.New(db, dialect, sqlinbox.Options{TablePrefix: *f.prefix, Concurrency: -1})
	if err != nil {
		db.Close()
		return nil, nil, nil, usageError{err.Error()}
	}
	return db, ss, ib, nil
}

// open opens the stores and bounds ctx by --timeout; done closes both.
func (f *flags) open(ctx context.Context) (context.Context, *sqlsession.Store, *sqlinbox.Inbox, func(), error) {
	db, ss, ib, err := f.stores()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	return ctx, ss, ib, func() { cancel(); db.Close() }, nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// optInt32 and optInt64 are flags that may be left unset.
type optInt32 struct{ v *int32 }

func (o *optInt32) String() string {
	if o.v == nil {
		return ""
	}
	return fmt.Sprint(*o.v)
}

func (o *optInt32) Set(s string) error {
	var v int32
	if _, err := fmt.Sscan(s, &v); err != nil {
		return fmt.Errorf("not a partition number: %q", s)
	}
	o.v = &v
	return nil
}

type optInt64 struct{ v *int64 }

func (o *optInt64) String() string {
	if o.v == nil {
		return ""
	}
	return fmt.Sprint(*o.v)
}

func (o *optInt64) Set(s string) error {
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil {
		return fmt.Errorf("not an offset: %q", s)
	}
	o.v = &v
	return nil
}

// timeFlag is an RFC 3339 time, or a duration before now ("2h" means two hours ago).
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Set(s string) error {
	if d, err := time.ParseDuration(s); err == nil {
		f.t = time.Now().Add(-d)
		return nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time (2026-11-30T05:00:00Z) or a duration ago (2h): %q", s)
	}
	f.t = t
	return nil
}
