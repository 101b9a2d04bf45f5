package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turntest"
)

// memory: a backlog of small records (1,000,000 by default) and a 50 ms model for -duration,
// for each partition count of -memory-partitions. The broker runs in a child process (this
// program with -broker), so the figures are the consumer's own: peak RSS (getrusage), the
// most records one partition held (Stats.PeakBuffered) and the most goroutines seen.
func memory(ctx context.Context, o options) error {
	n := orDefault(o.records, 1_000_000)
	fmt.Printf("memory: %d-record backlog, %v model, default Config (MaxInFlight %d, MaxBuffered %d), SQLite file stores, %v per run, broker in a child process\n",
		n, 50*time.Millisecond, consumer.DefaultMaxInFlight, consumer.DefaultMaxBuffered, o.duration)
	row("partitions", "turns", "peak RSS MiB", "peak buffered/partition", "peak goroutines", "goroutines at start")
	for _, ps := range strings.Split(o.memPartitions, ",") {
		parts, err := strconv.Atoi(ps)
		if err != nil {
			return fmt.Errorf("-memory-partitions: %w", err)
		}
		// One consumer process per partition count, so that each peak RSS is its own.
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, self, "-scenario", "memory-one", "-records", strconv.Itoa(n),
			"-partitions", ps, "-duration", o.duration.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("memory run with %d partitions: %w", parts, err)
		}
		fmt.Print(string(out))
	}
	return nil
}

// memoryOne is one partition count of the memory scenario, in a process of its own.
func memoryOne(ctx context.Context, o options) error {
	topic := fmt.Sprintf("backlog-%d", o.partitions)
	brokers, stopBroker, err := brokerProcess(ctx, topic, o)
	if err != nil {
		return err
	}
	defer stopBroker()

	// The stores live in a SQLite file: in-memory stores would keep every turn in this
	// process and measure the data, not the consumer.
	dir, err := os.MkdirTemp("", "consumerbench-memory-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m, cleanup, err := durable(ctx, "sqlite", "file:"+filepath.Join(dir, "turnstile.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)",
		sqlsession.SQLite, consumer.DefaultMaxInFlight, consumer.DefaultMaxInFlight)
	if err != nil {
		return err
	}
	defer cleanup()
	m.model = sleeper(50*time.Millisecond, false)
	runtime.GC()
	startGoroutines := runtime.NumGoroutine()
	var peakG int
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peakG = max(peakG, runtime.NumGoroutine())
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	// Serve for o.duration: the backlog is far larger than 64 turns / 50 ms can drain.
	cctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	_, st, err := runTurnstile(cctx, brokers, topic, topic+".results", o.records, m)
	close(stop)
	<-sampled
	if err != nil && cctx.Err() == nil {
		return err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return err
	}
	row(o.partitions, st.Turns, fmt.Sprintf("%.1f", float64(ru.Maxrss)/1024), st.PeakBuffered, peakG, startGoroutines)
	return nil
}

// brokerProcess starts the broker in a child process (this program with -broker) with
// o.records records of o.keys keys on topic's o.partitions partitions, and returns its
// addresses; stop ends it.
func brokerProcess(ctx context.Context, topic string, o options) (brokers []string, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	broker := exec.CommandContext(ctx, self, "-broker", "-backlog-topic", topic,
		"-records", strconv.Itoa(o.records), "-partitions", strconv.Itoa(o.partitions), "-keys", strconv.Itoa(o.keys))
	broker.Stderr = os.Stderr
	stdin, err := broker.StdinPipe() // closing it stops the broker
	if err != nil {
		return nil, nil, err
	}
	stdout, err := broker.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := broker.Start(); err != nil {
		return nil, nil, err
	}
	stop = func() {
		stdin.Close()
		_ = broker.Wait()
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("broker process: %w", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "READY ")
	if !ok {
		stop()
		return nil, nil, fmt.Errorf("broker process said %q", line)
	}
	return strings.Split(addr, ","), stop, nil
}

// runBroker is the broker process of the memory scenario: it starts kfake, creates the
// topics, fills the backlog, prints "READY <brokers>" and serves until stdin closes.
func runBroker(ctx context.Context, o options) error {
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	topic := o.backlogTopic
	if _, err := turntest.CreateTopics(ctx, brokers, nil,
		turntest.Topic{Name: topic, Partitions: int32(o.partitions)},
		turntest.Topic{Name: topic + ".results", Partitions: int32(o.partitions)},
		turntest.Topic{Name: topic + ".dlq", Partitions: int32(o.partitions)}); err != nil {
		return err
	}
	if _, err := produce(brokers, topic, o.records, o.keys, 0); err != nil {
		return err
	}
	fmt.Println("READY " + strings.Join(brokers, ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
