package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// scaleInFlight is the scale scenario's MaxInFlight and MaxInFlightPerPartition (issue: 4,096
// turns in flight per member).
const scaleInFlight = 4096

// scaleModel is the scale scenario's model time: Little's law bounds a member at
// scaleInFlight / scaleModel turns/s (2,048 for 4,096 and 2 s).
const scaleModel = 2 * time.Second

// scaleBatch is the batching of the scale scenario's PostgreSQL stores (Options.Batch): at
// 4,096 turns in flight their reads and writes go in batches of up to 256.
var scaleBatch = sqlsession.Batching{Size: 256}

// scale: thousands of turns in flight in one member (MaxInFlight 4,096), a 2 s model, over
// memory stores and over PostgreSQL (a pool of 64 connections, the stores batched: scaleBatch), each side in a process of its
// own with the broker in another, so that peak RSS and goroutines are the member's. It prints
// the steady turns/s (from the first tenth of the turns to the last tenth) against Little's
// bound, peak RSS, the most turns in flight and goroutines seen, and goroutines per turn in
// flight.
func scale(ctx context.Context, o options) error {
	n := orDefault(o.records, 40_000)
	if o.keys == 1000 { // the flag's default: the figure is 20,000 conversations
		o.keys = 20_000
	}
	fmt.Printf("scale: %d records, %d partitions, %d conversations, %v model (honours cancellation: Runner.InlineModel), MaxInFlight %d, PostgreSQL pool 64 with Batching{Size: %d}, broker in a child process; Little's bound %.0f turns/s\n",
		n, o.partitions, o.keys, scaleModel, scaleInFlight, scaleBatch.Size, float64(scaleInFlight)/scaleModel.Seconds())
	row("stores", "turns/s", "of the bound", "peak RSS MiB", "peak in flight", "peak goroutines", "goroutines per turn in flight")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for run := 0; run < o.runs; run++ {
		for _, side := range []string{"memory", "postgres"} {
			cmd := exec.CommandContext(ctx, self, "-scenario", "scale-one", "-stores", side, "-records", strconv.Itoa(n),
				"-partitions", strconv.Itoa(o.partitions), "-keys", strconv.Itoa(o.keys), "-postgres", o.postgres)
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("scale run on %s stores: %w", side, err)
			}
			fmt.Print(string(out))
		}
	}
	return nil
}

// scaleOne is one side of the scale scenario, in a process of its own.
func scaleOne(ctx context.Context, o options) error {
	topic := fmt.Sprintf("scale-%d", time.Now().UnixNano())
	brokers, stopBroker, err := brokerProcess(ctx, topic, o)
	if err != nil {
		return err
	}
	defer stopBroker()
	m := member{}
	if o.stores == "postgres" {
		var cleanup func()
		m, cleanup, err = durableBatched(ctx, "pgx", o.postgres, sqlsession.PostgreSQL, scaleInFlight, 64, scaleBatch)
		if err != nil {
			return err
		}
		defer cleanup()
	}
	m.model, m.inline = sleeper(scaleModel, false), true
	m.tune = func(c *consumer.Config) {
		c.MaxInFlight, c.MaxInFlightPerPartition = scaleInFlight, scaleInFlight
		c.MaxBuffered = 2 * scaleInFlight
	}
	// The steady rate: from the turn that ends the first tenth to the one that ends the last.
	var tenth, ninth atomic.Int64
	m.until = func(st consumer.Stats) bool {
		now := time.Now().UnixNano()
		if st.Records >= int64(o.records)/10 {
			tenth.CompareAndSwap(0, now)
		}
		if st.Records >= int64(o.records)*9/10 {
			ninth.CompareAndSwap(0, now)
		}
		return st.Records >= int64(o.records)
	}
	var peakG, peakInFlight, running atomic.Int64
	m.model = countingModel{m.model, &running}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peakG.Store(max(peakG.Load(), int64(runtime.NumGoroutine())))
			peakInFlight.Store(max(peakInFlight.Load(), running.Load()))
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	_, _, err = runTurnstile(ctx, brokers, topic, topic+".results", o.records, m)
	close(stop)
	<-sampled
	if err != nil {
		return err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return err
	}
	steady := time.Duration(ninth.Load() - tenth.Load())
	rate := float64(o.records*8/10) / steady.Seconds()
	bound := float64(scaleInFlight) / scaleModel.Seconds()
	row(o.stores, fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.2f", rate/bound), fmt.Sprintf("%.1f", float64(ru.Maxrss)/1024),
		peakInFlight.Load(), peakG.Load(), fmt.Sprintf("%.2f", float64(peakG.Load())/float64(max(1, peakInFlight.Load()))))
	return nil
}

// countingModel counts the model calls in progress: the turns in flight.
type countingModel struct {
	turn.ModelClient
	running *atomic.Int64
}

func (m countingModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	m.running.Add(1)
	defer m.running.Add(-1)
	return m.ModelClient.Respond(ctx, in)
}
