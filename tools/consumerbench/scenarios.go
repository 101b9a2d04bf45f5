package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// extraTune, when set (by -tune), adjusts every turnstile member's Config.
var extraTune func(*consumer.Config)

// member is what one turnstile run needs besides the topics.
type member struct {
	model    turn.ModelClient
	sessions session.Store
	inbox    inbox.Inbox
	tune     func(*consumer.Config)
	onClaim  func()                    // called once, when the member first holds a partition
	until    func(consumer.Stats) bool // when the run is over; nil: every record received
	inline   bool                      // turn.Runner.InlineModel
}

// runTurnstile serves n records of requests with one turnstile member and returns the time
// from its first claim to the last record's offset becoming committable (or to m.until), and
// its stats.
func runTurnstile(ctx context.Context, brokers []string, requests, results string, n int, m member) (time.Duration, consumer.Stats, error) {
	if m.sessions == nil {
		m.sessions, m.inbox = session.NewMemoryStore(), inbox.NewMemoryInbox()
	}
	r := &turn.Runner{Model: m.model, Sessions: m.sessions, Inbox: m.inbox, InlineModel: m.inline}
	cfg := consumer.Config{
		Brokers: brokers, GroupID: fmt.Sprintf("turnstile-%d", topicSeq.Add(1)), RequestsTopic: requests,
		ResultsTopic: results, DeadLetterTopic: requests + ".dlq", CommitInterval: 100 * time.Millisecond,
		Logger: quiet,
	}
	sc := sarama.NewConfig()
	sc.Version = turntest.Version
	cfg.Sarama = sc
	if m.tune != nil {
		m.tune(&cfg)
	}
	if extraTune != nil {
		extraTune(&cfg)
	}
	h := consumer.RunnerHandler(r)
	if os.Getenv("CONSUMERBENCH_BARE") != "" { // the engine alone: no Runner, no stores
		h = consumer.HandlerFunc(func(_ context.Context, req turn.Request) (*turn.Result, error) {
			return &turn.Result{Schema: turn.SchemaVersion, RequestID: req.ID, ConversationID: req.ConversationID, Text: "ok"}, nil
		})
	}
	c, err := consumer.New(cfg, h)
	if err != nil {
		return 0, consumer.Stats{}, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	var start, lastProgress time.Time
	progress := os.Getenv("CONSUMERBENCH_PROGRESS") != ""
	cpuStart := cpuTime()
	for {
		st := c.Stats()
		if start.IsZero() && st.Claims > 0 {
			start = time.Now()
			if m.onClaim != nil {
				m.onClaim()
			}
		}
		if (m.until == nil && st.Records >= int64(n)) || (m.until != nil && m.until(st)) {
			break
		}
		if progress && !start.IsZero() && time.Since(lastProgress) >= 100*time.Millisecond {
			lastProgress = time.Now()
			fmt.Fprintf(os.Stderr, "%6.2fs records %d turns %d peak %d\n", time.Since(start).Seconds(), st.Records, st.Turns, st.PeakBuffered)
		}
		select {
		case err := <-done:
			cancel()
			return 0, st, fmt.Errorf("turnstile stopped early: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	if os.Getenv("CONSUMERBENCH_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "turnstile: %v, %.2f cores, %.1f µs of CPU per record\n", elapsed,
			(cpuTime()-cpuStart).Seconds()/elapsed.Seconds(), float64((cpuTime()-cpuStart).Microseconds())/float64(n))
	}
	cancel()
	err = <-done
	return elapsed, c.Stats(), err
}

// overhead: instant model, memory stores; turnstile against the raw loop on the same records.
func overhead(ctx context.Context, o options) error {
	n := orDefault(o.records, 100_000)
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	fmt.Printf("overhead: %d records, %d partitions, %d keys, instant model, memory stores\n", n, o.partitions, o.keys)
	row("run", "raw records/s", "turnstile records/s", "ratio")
	var ratios []float64
	for run := 1; run <= o.runs; run++ {
		var rates [2]float64
		for side := range 2 {
			if only := os.Getenv("CONSUMERBENCH_ONLY"); (only == "raw" && side == 1) || (only == "turnstile" && side == 0) {
				rates[side] = 1 // profiling one side: the other is skipped and its rate is meaningless
				continue
			}
			requests, results, err := topics(ctx, brokers, o.partitions)
			if err != nil {
				return err
			}
			if _, err := produce(brokers, requests, n, o.keys, 0); err != nil {
				return err
			}
			var d time.Duration
			if side == 0 {
				d, err = runRaw(ctx, brokers, requests, results, n)
			} else {
				d, _, err = runTurnstile(ctx, brokers, requests, results, n, member{model: turn.ModelFunc(instant)})
			}
			if err != nil {
				return err
			}
			rates[side] = float64(n) / d.Seconds()
		}
		ratios = append(ratios, rates[1]/rates[0])
		row(run, fmt.Sprintf("%.0f", rates[0]), fmt.Sprintf("%.0f", rates[1]), fmt.Sprintf("%.2f", rates[1]/rates[0]))
	}
	fmt.Printf("ratio turnstile/raw: median %.2f\n", median(ratios))
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// slow: a 50 ms model with MaxInFlight 64: by key against the bound 64/50 ms and against by
// partition, on the same records.
func slow(ctx context.Context, o options) error {
	n := orDefault(o.records, 3000)
	const modelTime, inFlight = 50 * time.Millisecond, 64
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	bound := float64(inFlight) / modelTime.Seconds()
	fmt.Printf("slow: %d records, %d partitions, %d keys, %v model, MaxInFlight %d (bound %.0f turns/s)\n", n, o.partitions, o.keys, modelTime, inFlight, bound)
	row("run", "by-key turns/s", "by-partition turns/s", "by-key / bound", "by-key / by-partition")
	for run := 1; run <= o.runs; run++ {
		var rates [2]float64
		for side, ord := range []consumer.Ordering{consumer.OrderByKey, consumer.OrderByPartition} {
			requests, results, err := topics(ctx, brokers, o.partitions)
			if err != nil {
				return err
			}
			if _, err := produce(brokers, requests, n, o.keys, 0); err != nil {
				return err
			}
			d, _, err := runTurnstile(ctx, brokers, requests, results, n, member{model: sleeper(modelTime, false),
				tune: func(c *consumer.Config) { c.Ordering, c.MaxInFlight = ord, inFlight }})
			if err != nil {
				return err
			}
			rates[side] = float64(n) / d.Seconds()
		}
		row(run, fmt.Sprintf("%.0f", rates[0]), fmt.Sprintf("%.0f", rates[1]), fmt.Sprintf("%.2f", rates[0]/bound), fmt.Sprintf("%.1fx", rates[0]/rates[1]))
	}
	return nil
}

// parallelConsumer: Confluent Parallel Consumer's published comparison: 10,000 records in
// one partition, 100 keys, 0-5 ms per record; by key against by partition.
func parallelConsumer(ctx context.Context, o options) error {
	n := orDefault(o.records, 10_000)
	const keys = 100
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	fmt.Printf("pc: %d records, 1 partition, %d keys, 0-5 ms per record\n", n, keys)
	row("run", "by-key s", "by-partition s", "speed-up")
	for run := 1; run <= o.runs; run++ {
		var secs [2]float64
		for side, ord := range []consumer.Ordering{consumer.OrderByKey, consumer.OrderByPartition} {
			requests, results, err := topics(ctx, brokers, 1)
			if err != nil {
				return err
			}
			if _, err := produce(brokers, requests, n, keys, 0); err != nil {
				return err
			}
			d, _, err := runTurnstile(ctx, brokers, requests, results, n, member{model: sleeper(5*time.Millisecond, true),
				tune: func(c *consumer.Config) { c.Ordering = ord }})
			if err != nil {
				return err
			}
			secs[side] = d.Seconds()
		}
		row(run, fmt.Sprintf("%.2f", secs[0]), fmt.Sprintf("%.2f", secs[1]), fmt.Sprintf("%.1fx", secs[1]/secs[0]))
	}
	return nil
}

// latency: requests paced at half the by-partition maximum (partitions / model time / 2);
// added latency = result timestamp - request send time - model time, p50 and p99, per ordering.
func latency(ctx context.Context, o options) error {
	const modelTime = 50 * time.Millisecond
	rate := float64(o.partitions) / modelTime.Seconds() / 2
	n := orDefault(o.records, int(rate*10))
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	fmt.Printf("latency: %d records at %.0f/s, %d partitions, %d keys, %v model\n", n, rate, o.partitions, o.keys, modelTime)
	row("run", "ordering", "p50 added", "p99 added")
	for run := 1; run <= o.runs; run++ {
		for _, ord := range []consumer.Ordering{consumer.OrderByKey, consumer.OrderByPartition} {
			requests, results, err := topics(ctx, brokers, o.partitions)
			if err != nil {
				return err
			}
			var (
				sent    []time.Time
				perr    error
				wg      sync.WaitGroup
				started = make(chan struct{})
			)
			wg.Go(func() {
				<-started // the member has joined: its join is not the requests' latency
				sent, perr = produce(brokers, requests, n, o.keys, rate)
			})
			_, _, err = runTurnstile(ctx, brokers, requests, results, n, member{model: sleeper(modelTime, false),
				tune: func(c *consumer.Config) { c.Ordering = ord }, onClaim: func() { close(started) }})
			wg.Wait()
			if err != nil {
				return err
			}
			if perr != nil {
				return perr
			}
			added, err := addedLatency(ctx, brokers, results, sent, modelTime)
			if err != nil {
				return err
			}
			row(run, ord, pct(added, 50), pct(added, 99))
		}
	}
	return nil
}

func pct(d []time.Duration, p int) string {
	return d[min(len(d)-1, len(d)*p/100)].Round(100 * time.Microsecond).String()
}

// addedLatency reads the n results of the latency scenario and returns, sorted, each one's
// result timestamp less its request's send time and the model time. The request's index is
// in the result's text ("ok: message <i>").
func addedLatency(ctx context.Context, brokers []string, results string, sent []time.Time, model time.Duration) ([]time.Duration, error) {
	sc := turntest.Config()
	c, err := sarama.NewConsumer(brokers, sc)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	parts, err := c.Partitions(results)
	if err != nil {
		return nil, err
	}
	msgs := make(chan *sarama.ConsumerMessage)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range parts {
		pc, err := c.ConsumePartition(results, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			defer pc.AsyncClose()
			for {
				select {
				case m := <-pc.Messages():
					select {
					case msgs <- m:
					case <-cctx.Done():
						return
					}
				case <-cctx.Done():
					return
				}
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	seen := make(map[int]time.Duration, len(sent))
	for len(seen) < len(sent) {
		select {
		case m := <-msgs:
			res, err := turn.DecodeResult(m.Value)
			if err != nil {
				return nil, err
			}
			var i int
			if _, err := fmt.Sscanf(res.Text, "ok: message %d", &i); err != nil || i < 0 || i >= len(sent) {
				return nil, fmt.Errorf("result text %q: no request index", res.Text)
			}
			if _, dup := seen[i]; !dup {
				seen[i] = m.Timestamp.Sub(sent[i]) - model
			}
		case <-cctx.Done():
			return nil, fmt.Errorf("read %d of %d results", len(seen), len(sent))
		}
	}
	out := make([]time.Duration, 0, len(seen))
	for _, d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out, nil
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
