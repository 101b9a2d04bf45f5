package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/turntest"
)

// Topic names and partition counts of the quickstart.
const (
	RequestsTopic   = "agent.requests"
	ResultsTopic    = "agent.results"
	DeadLetterTopic = "agent.requests.dlq"
	// Partitions is the partition count of the three topics the quickstart creates; results
	// and dead letters are co-partitioned with the requests.
	Partitions = 12
)

// Defaults of Config.
const (
	DefaultRequests      = 2000
	DefaultConversations = 200
	DefaultModelDelay    = 2 * time.Millisecond
	DefaultRate          = 400
	DefaultTimeout       = 5 * time.Minute
)

// Config configures one run of the quickstart. The zero value is the default run: an embedded
// broker, SQLite in a temporary directory, 2,000 requests over 200 conversations.
type Config struct {
	// Brokers names a real Kafka cluster; empty starts an embedded kfake broker.
	Brokers []string
	// Postgres is a PostgreSQL DSN for the stores; empty uses SQLite.
	Postgres string
	// DBPath is the SQLite database file; empty puts one in a temporary directory that the
	// run removes.
	DBPath string
	// TablePrefix is the stores' table prefix; empty is the stores' default.
	TablePrefix string
	// Requests and Conversations size the workload: Requests spread evenly over Conversations.
	Requests, Conversations int
	// ModelDelay is how long the demo model thinks per turn; default DefaultModelDelay, a
	// negative value means none.
	ModelDelay time.Duration
	// Rate is how many requests per second the producer sends, so that latency measures the
	// turns rather than a queue; default DefaultRate, a negative value means as fast as the
	// broker takes them.
	Rate float64
	// NoRebalance skips the member change halfway through.
	NoRebalance bool
	// Timeout bounds the wait for every request's outcome; default DefaultTimeout.
	Timeout time.Duration
	// Logger gets the consumers' and runners' logs; default: discarded.
	Logger *slog.Logger
	// Telemetry, when set, receives every member's and the producer's spans and metrics,
	// as JSON from the OpenTelemetry SDK's stdout exporters.
	Telemetry io.Writer
	// Transactional runs the members in the transactional mode (consumer.Transactional); the
	// results are then read as read_committed, and a repeated result record fails the run.
	Transactional bool
}

func (c *Config) setDefaults() {
	c.Requests = cmp.Or(c.Requests, DefaultRequests)
	c.Conversations = cmp.Or(c.Conversations, DefaultConversations)
	c.ModelDelay = cmp.Or(c.ModelDelay, DefaultModelDelay)
	c.Rate = cmp.Or(c.Rate, DefaultRate)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
}

func (c *Config) validate() error {
	switch {
	case c.Requests < 1:
		return fmt.Errorf("Requests: %d, want at least 1", c.Requests)
	case c.Conversations < 1 || c.Conversations > c.Requests:
		return fmt.Errorf("Conversations: %d, want 1 to Requests (%d)", c.Conversations, c.Requests)
	case c.Postgres != "" && c.DBPath != "":
		return errors.New("DBPath and Postgres: give one of them")
	}
	return nil
}

// Summary is what a run saw and checked.
type Summary struct {
	// Requests is the number of requests produced, over Conversations conversations.
	Requests, Conversations int
	// Turns counts the turns in the session histories; ModelCalls the demo model's calls,
	// which exceed Turns by the turns redone after a rebalance.
	Turns      int
	ModelCalls int64
	// Results counts the distinct request ids on the results topic; ResultRecords all its
	// records of this run, so ResultRecords-Results repeated a request id.
	Results, ResultRecords int
	// Replayed counts results the members republished from the inbox instead of running a turn.
	Replayed int64
	// DeadLetters counts the records of this run on the dead-letter topic.
	DeadLetters int
	// P50 and P99 are percentiles of the time from producing a request to reading its result.
	P50, P99 time.Duration
	// Rebalance says what happened at the member change, or is empty when none was made.
	Rebalance string
	// Elapsed is the run's wall time, from the first request produced to the last outcome read.
	Elapsed time.Duration
	// Checks are the run's checks, in order.
	Checks demo.Checks
}

// DuplicatesSuppressed counts the redeliveries of requests that were done already, which the
// inbox answered with the stored result instead of a second turn. (Result records whose
// request id repeats were published, not suppressed: readers dedup them on the request-id
// header; the summary shows them apart.)
func (s Summary) DuplicatesSuppressed() int64 { return s.Replayed }

// OK reports whether every check passed.
func (s Summary) OK() bool { return s.Checks.OK() }

// run is the quickstart: it sets up Kafka and the stores, runs the members, produces the
// workload, waits for every outcome, checks them and prints the summary to stdout, with a
// progress line on stderr. The error is for a run that could not finish (a broker or database
// out of reach, ctx ended, the timeout passed); failed checks are in the Summary.
func run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (Summary, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Summary{}, fmt.Errorf("quickstart: %w", err)
	}
	runID := newRunID()
	brokers, where, closeKafka, err := startKafka(ctx, cfg)
	if err != nil {
		return Summary{}, err
	}
	defer closeKafka()
	st, err := openStores(ctx, cfg)
	if err != nil {
		return Summary{}, err
	}
	defer st.close()
	fmt.Fprintf(stdout, "turnstile quickstart: %d requests over %d conversations; Kafka at %s (%s); stores: %s\n",
		cfg.Requests, cfg.Conversations, strings.Join(brokers, ","), where, st.where)

	group := "turnstile-quickstart-" + runID
	if len(cfg.Brokers) > 0 {
		// A real cluster keeps earlier runs' records: start this run's group at the end.
		if err := pinGroupAtEnd(brokers, group, RequestsTopic); err != nil {
			return Summary{}, err
		}
	}
	// From the topics' current end: a real cluster keeps earlier runs' records.
	wsc := saramaConfig()
	if cfg.Transactional {
		wsc.Consumer.IsolationLevel = sarama.ReadCommitted
	}
	w, err := demo.NewWatcher(brokers, wsc, ResultsTopic, DeadLetterTopic, sarama.OffsetNewest)
	if err != nil {
		return Summary{}, err
	}
	defer w.Close()

	wl := newWorkload(runID, cfg.Requests, cfg.Conversations)
	model := &demoModel{delay: cfg.ModelDelay}
	var tel *telemetry
	if cfg.Telemetry != nil {
		tel = newTelemetry(cfg.Telemetry)
		defer func() { _ = tel.close(context.WithoutCancel(ctx)) }()
	}
	fleet := &fleet{Fleet: &demo.Fleet{Log: cfg.Logger}, brokers: brokers, group: group, stores: st, model: model, log: cfg.Logger, tel: tel, transactional: cfg.Transactional}
	defer fleet.StopAll()
	for range 2 {
		if err := fleet.start(); err != nil {
			return Summary{}, err
		}
	}

	start := time.Now()
	prodCtx, cancelProd := context.WithCancel(ctx)
	defer cancelProd()
	prod := &producer{rate: cfg.Rate}
	if tel != nil {
		o, err := tel.options("producer")
		if err != nil {
			return Summary{}, err
		}
		prod.tracer = o.Tracer()
	}
	prodDone := make(chan error, 1)
	go func() { prodDone <- prod.run(prodCtx, brokers, wl) }()

	rebalance, err := wait(ctx, cfg, wl, prod, prodDone, w, fleet, stderr, start)
	elapsed := time.Since(start)
	if err != nil {
		return Summary{}, err
	}
	fleet.StopAll()

	sum := Summary{
		Requests: cfg.Requests, Conversations: cfg.Conversations, ModelCalls: model.calls.Load(),
		Rebalance: rebalance, Elapsed: elapsed,
	}
	if err := check(ctx, &sum, wl, prod, w, fleet, st); err != nil {
		return Summary{}, err
	}
	sum.print(stdout)
	return sum, nil
}

// wait watches the run until every request has an outcome, making the member change
// halfway, and keeps the progress line up to date. It returns what the member change did.
func wait(ctx context.Context, cfg Config, wl *workload, prod *producer, prodDone <-chan error,
	w *demo.Watcher, fl *fleet, stderr io.Writer, start time.Time) (string, error) {
	pl := newProgressLine(stderr)
	defer pl.finish()
	deadline := time.NewTimer(cfg.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pl.every)
	defer tick.Stop()

	var (
		mu        sync.Mutex
		rebalance string
		changing  sync.WaitGroup
		changed   = cfg.NoRebalance
	)
	defer changing.Wait()
	for {
		if err := fl.Failed(); err != nil {
			return "", err
		}
		results, dead := w.Counts()
		if !changed && results >= cfg.Requests/2 {
			changed = true
			changing.Go(func() {
				msg := fl.replace(results)
				mu.Lock()
				rebalance = msg
				mu.Unlock()
				pl.note(msg)
			})
		}
		pl.show(fmt.Sprintf("produced %d/%d  results %d  dead letters %d  members %s  %.1fs",
			prod.sent.Load(), cfg.Requests, results, dead, fl.Describe(), time.Since(start).Seconds()))
		if results+dead >= cfg.Requests {
			changing.Wait()
			mu.Lock()
			defer mu.Unlock()
			return rebalance, nil
		}
		select {
		case err := <-prodDone:
			if err != nil {
				return "", err
			}
			prodDone = nil
		case <-w.Changed():
		case <-tick.C:
		case <-deadline.C:
			return "", fmt.Errorf("quickstart: %d of %d requests have an outcome after %s", results+dead, cfg.Requests, cfg.Timeout)
		case <-ctx.Done():
			return "", fmt.Errorf("quickstart: interrupted: %w", ctx.Err())
		}
	}
}

func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// startKafka returns the brokers to use, a description and a function that releases them:
// the configured cluster, or an embedded one. Either way the topics exist when it returns.
func startKafka(ctx context.Context, cfg Config) (brokers []string, where string, closeFn func(), err error) {
	brokers, where, closeFn = cfg.Brokers, "external", func() {}
	if len(brokers) == 0 {
		kc, err := turntest.Start(turntest.Options{})
		if err != nil {
			return nil, "", nil, err
		}
		brokers, where, closeFn = kc.Brokers(), "embedded kfake", kc.Close
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = turntest.CreateTopics(tctx, brokers, saramaConfig(),
		turntest.Topic{Name: RequestsTopic, Partitions: Partitions},
		turntest.Topic{Name: ResultsTopic, Partitions: Partitions},
		turntest.Topic{Name: DeadLetterTopic, Partitions: Partitions})
	if err != nil {
		closeFn()
		return nil, "", nil, err
	}
	return brokers, where, closeFn, nil
}

// command is the quickstart's command line: its flags set a Config for run.
func command() demo.Command {
	cfg := Config{}
	var brokers, otelPath string
	flags := func(fs *flag.FlagSet) {
		fs.IntVar(&cfg.Requests, "requests", DefaultRequests, "requests to produce")
		fs.IntVar(&cfg.Conversations, "conversations", DefaultConversations, "conversations the requests belong to")
		fs.Float64Var(&cfg.Rate, "rate", DefaultRate, "requests produced per second; negative: as fast as possible")
		fs.StringVar(&brokers, "brokers", "", "comma separated host:port of a real Kafka cluster (default: an embedded broker)")
		fs.StringVar(&cfg.Postgres, "postgres", "", "PostgreSQL DSN for the session store and inbox (default: SQLite)")
		fs.StringVar(&cfg.DBPath, "db", "", "SQLite database file (default: in a temporary directory)")
		fs.BoolVar(&cfg.Transactional, "transactional", false, "transactional mode: results and offsets commit together; the check reads results as read_committed and allows no repeated result record")
		fs.StringVar(&otelPath, "otel", "", "write OpenTelemetry traces and metrics as JSON to this file (- for stderr)")
	}
	return demo.Command{Name: "quickstart", Flags: flags, Run: func(ctx context.Context, verbose bool, stdout, stderr io.Writer) (bool, error) {
		for b := range strings.SplitSeq(brokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				cfg.Brokers = append(cfg.Brokers, b)
			}
		}
		level := slog.LevelWarn
		if verbose {
			level = slog.LevelInfo
		}
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
		switch otelPath {
		case "":
		case "-":
			cfg.Telemetry = stderr
		default:
			f, err := os.Create(otelPath)
			if err != nil {
				return false, fmt.Errorf("-otel: %w", err)
			}
			defer func() {
				_ = f.Close()
				fmt.Fprintf(stdout, "telemetry: spans and metrics of every member and the producer in %s (OpenTelemetry JSON)\n", otelPath)
			}()
			cfg.Telemetry = f
		}
		sum, err := run(ctx, cfg, stdout, stderr)
		return sum.OK(), err
	}}
}
