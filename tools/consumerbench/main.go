// Command consumerbench measures turnstile's consumer side by side with a baseline in one
// run, on one kfake broker, and prints ratios (BENCHMARKS.md records them with the command).
//
//	go run ./tools/consumerbench -scenario overhead   # instant model, memory stores, vs a raw async sarama loop
//	go run ./tools/consumerbench -scenario slow       # 50 ms model: by key vs by partition vs MaxInFlight / latency
//	go run ./tools/consumerbench -scenario pc         # Confluent Parallel Consumer's comparison: 1 partition, 100 keys
//	go run ./tools/consumerbench -scenario latency    # added latency at half the by-partition maximum rate
//	go run ./tools/consumerbench -scenario stores     # PostgreSQL and SQLite stores, batched and not, vs memory stores; instant model
//	go run ./tools/consumerbench -scenario memory     # peak RSS with a 1,000,000-record backlog (broker in a child process)
//	go run ./tools/consumerbench -scenario scale      # 4,096 turns in flight, 2 s model, memory and PostgreSQL stores: turns/s, RSS, goroutines
//	go run ./tools/consumerbench -scenario txn        # transactional mode vs default: throughput and read_committed latency
//	go run ./tools/consumerbench -scenario ratelimit  # 150 requests: control vs with one always rate-limited request
//	go run ./tools/consumerbench -scenario telemetry  # tracing and metrics on (OpenTelemetry SDK, no-op exporter) vs off;
//	                                                    # -model 5ms for a model that takes time, CONSUMERBENCH_TELEMETRY=traces (or metrics) for one alone
//
// The baseline is the best plain sarama program a user would write instead of turnstile: an
// async idempotent producer, each record's offset marked once its result is acknowledged, and
// commits every 100 ms. No figure here is asserted by a test; the machine is shared.
//
// For looking into a figure: -tune overrides the members' Config sizes, -cpuprofile,
// -memprofile and -blockprofile write profiles, -trace an execution trace, CONSUMERBENCH_DEBUG=1 logs at info level and
// prints the cores turnstile used during its run, and CONSUMERBENCH_BARE=1 replaces the
// Runner with a Handler that returns a fixed Result (the engine alone, no stores).
// CONSUMERBENCH_ONLY=turnstile (or raw) runs one side of -scenario overhead, for a profile of
// that side alone; its ratio is then meaningless. CONSUMERBENCH_KEEP_TABLES=1 leaves the
// PostgreSQL sides' tables in place after the run (they are dropped otherwise), for looking
// into their plans and sizes; their prefix starts with "bench_".
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"

	"github.com/turnstile-go/turnstile/consumer"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"
)

type options struct {
	scenario      string
	records       int
	partitions    int
	keys          int
	runs          int
	postgres      string
	duration      time.Duration
	brokerMode    bool
	backlogTopic  string
	memPartitions string
	modelDelay    time.Duration
	stores        string
	sides         string
	batchSize     int
}

// quiet logs errors only: a benchmark's output is its table.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: consumerbenchLevel()}))

func main() {
	var o options
	flag.StringVar(&o.scenario, "scenario", "overhead", "overhead, slow, pc, latency, stores, memory, scale, telemetry, txn or ratelimit")
	flag.IntVar(&o.records, "records", 0, "records per run (0: the scenario's default)")
	flag.IntVar(&o.partitions, "partitions", 12, "partitions of the requests topic")
	flag.IntVar(&o.keys, "keys", 1000, "conversations (record keys)")
	flag.IntVar(&o.runs, "runs", 3, "runs of each side, alternating")
	flag.StringVar(&o.postgres, "postgres", envOr("TURNSTILE_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN for -scenario stores")
	flag.DurationVar(&o.duration, "duration", time.Minute, "how long -scenario memory consumes")
	flag.StringVar(&o.memPartitions, "memory-partitions", "12,48", "partition counts for -scenario memory")
	flag.DurationVar(&o.modelDelay, "model", 0, "the model's time per turn in -scenario telemetry and stores (0: instant) and ratelimit (0: 20 ms, then 200 ms)")
	flag.IntVar(&o.batchSize, "batch-size", 0, "Batching.Size of the batched sides of -scenario stores (0: half the MaxInFlight, 32)")
	flag.StringVar(&o.sides, "sides", "", "comma-separated sides of -scenario stores to run (memory, postgres, postgres batched, sqlite, sqlite batched; empty: all); a side left out prints 0")
	flag.StringVar(&o.stores, "stores", "memory", "internal: the stores of a scale-one process (memory or postgres)")
	flag.BoolVar(&o.brokerMode, "broker", false, "internal: run as the broker process of -scenario memory")
	flag.StringVar(&o.backlogTopic, "backlog-topic", "", "internal: topic the broker process fills")
	traceFile := flag.String("trace", "", "write an execution trace of the run to this file (go tool trace -pprof=sched|sync|net)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the run to this file")
	blockprofile := flag.String("blockprofile", "", "write blocking and mutex profiles of the run to this file name plus .block and .mutex")
	tune := flag.String("tune", "", "Config overrides for every turnstile member, e.g. MaxBuffered=1024,MaxInFlight=128")
	flag.Parse()
	if *tune != "" {
		f, err := parseTune(*tune)
		if err != nil {
			fmt.Fprintln(os.Stderr, "consumerbench:", err)
			os.Exit(2)
		}
		extraTune = f
	}
	if *memprofile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			if f, err := os.Create(*memprofile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *blockprofile != "" {
		runtime.SetBlockProfileRate(10_000) // one event per 10 µs blocked
		runtime.SetMutexProfileFraction(10)
		defer func() {
			for _, name := range []string{"block", "mutex"} {
				if f, err := os.Create(*blockprofile + "." + name); err == nil {
					_ = pprof.Lookup(name).WriteTo(f, 0)
					f.Close()
				}
			}
		}()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "consumerbench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}

	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "consumerbench:", err)
			os.Exit(1)
		}
		defer trace.Stop()
	}

	ctx := context.Background()
	var err error
	switch {
	case o.brokerMode:
		err = runBroker(ctx, o)
	case o.scenario == "overhead":
		err = overhead(ctx, o)
	case o.scenario == "slow":
		err = slow(ctx, o)
	case o.scenario == "pc":
		err = parallelConsumer(ctx, o)
	case o.scenario == "latency":
		err = latency(ctx, o)
	case o.scenario == "stores":
		err = stores(ctx, o)
	case o.scenario == "memory":
		err = memory(ctx, o)
	case o.scenario == "telemetry":
		err = telemetryScenario(ctx, o)
	case o.scenario == "txn":
		err = txnScenario(ctx, o)
	case o.scenario == "ratelimit":
		err = rateLimitScenario(ctx, o)
	case o.scenario == "memory-one":
		err = memoryOne(ctx, o)
	case o.scenario == "scale":
		err = scale(ctx, o)
	case o.scenario == "scale-one":
		err = scaleOne(ctx, o)
	default:
		err = fmt.Errorf("unknown -scenario %q", o.scenario)
	}
	if err != nil {
		pprof.StopCPUProfile()
		trace.Stop()
		fmt.Fprintln(os.Stderr, "consumerbench:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// row prints one line of a result table.
func row(cols ...any) {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Println(strings.Join(parts, "\t"))
}

// parseTune turns "Field=int,..." into a Config adjustment, for the integer fields that size
// the consumer.
func parseTune(spec string) (func(*consumer.Config), error) {
	type set func(*consumer.Config, int)
	fields := map[string]set{
		"MaxBuffered":             func(c *consumer.Config, v int) { c.MaxBuffered = v },
		"MaxInFlight":             func(c *consumer.Config, v int) { c.MaxInFlight = v },
		"MaxInFlightPerPartition": func(c *consumer.Config, v int) { c.MaxInFlightPerPartition = v },
	}
	var sets []func(*consumer.Config)
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		f := fields[k]
		n, err := strconv.Atoi(v)
		if !ok || f == nil || err != nil {
			return nil, fmt.Errorf("-tune %q: want Field=int with Field one of MaxBuffered, MaxInFlight, MaxInFlightPerPartition", kv)
		}
		sets = append(sets, func(c *consumer.Config) { f(c, n) })
	}
	return func(c *consumer.Config) {
		for _, s := range sets {
			s(c)
		}
	}, nil
}

func consumerbenchLevel() slog.Level {
	if os.Getenv("CONSUMERBENCH_DEBUG") != "" {
		return slog.LevelInfo
	}
	return slog.LevelError
}
