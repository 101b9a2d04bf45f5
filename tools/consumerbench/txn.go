package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// txnScenario: the transactional mode (consumer.Config.Transactional, default batching)
// against the default mode, same records, sides alternating in one process. Throughput with
// an instant model on a backlog; latency at a steady rate, from a request's send to its
// result's arrival at a read_committed reader (a result is visible only once its transaction
// commits, so the record's own timestamp would hide the batching).
func txnScenario(ctx context.Context, o options) error {
	n := orDefault(o.records, 50_000)
	const rate, paced = 1000.0, 5000
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	fmt.Printf("txn: %d records (throughput) and %d at %.0f/s (latency), %d partitions, %d keys, instant model, memory stores\n",
		n, paced, rate, o.partitions, o.keys)
	row("run", "off records/s", "on records/s", "ratio on/off", "off p50/p99 latency", "on p50/p99 latency")
	var ratios []float64
	for run := 1; run <= o.runs; run++ {
		var rates [2]float64
		var lat [2]string
		for side := range 2 {
			m := member{model: turn.ModelFunc(instant)}
			if side == 1 {
				m.tune = func(c *consumer.Config) {
					c.Transactional = &consumer.Transactional{IDPrefix: fmt.Sprintf("bench-%d", topicSeq.Add(1))}
				}
			}
			requests, results, err := topics(ctx, brokers, o.partitions)
			if err != nil {
				return err
			}
			if _, err := produce(brokers, requests, n, o.keys, 0); err != nil {
				return err
			}
			d, _, err := runTurnstile(ctx, brokers, requests, results, n, m)
			if err != nil {
				return err
			}
			rates[side] = float64(n) / d.Seconds()

			if lat[side], err = txnLatency(ctx, brokers, o, m, rate, paced); err != nil {
				return err
			}
		}
		ratios = append(ratios, rates[1]/rates[0])
		row(run, fmt.Sprintf("%.0f", rates[0]), fmt.Sprintf("%.0f", rates[1]), fmt.Sprintf("%.2f", rates[1]/rates[0]), lat[0], lat[1])
	}
	fmt.Printf("ratio on/off: median %.2f\n", median(ratios))
	return nil
}

// txnLatency serves n requests produced at rate with member m and returns the p50 and p99 of
// the time from each request's send to its result's arrival at a read_committed reader.
func txnLatency(ctx context.Context, brokers []string, o options, m member, rate float64, n int) (string, error) {
	requests, results, err := topics(ctx, brokers, o.partitions)
	if err != nil {
		return "", err
	}
	arrived, stop, err := readArrivals(ctx, brokers, results, n)
	if err != nil {
		return "", err
	}
	defer stop()
	var (
		sent    []time.Time
		perr    error
		wg      sync.WaitGroup
		started = make(chan struct{})
	)
	m.onClaim = func() { close(started) }
	wg.Go(func() {
		<-started
		sent, perr = produce(brokers, requests, n, o.keys, rate)
	})
	_, _, err = runTurnstile(ctx, brokers, requests, results, n, m)
	wg.Wait()
	if err != nil {
		return "", err
	}
	if perr != nil {
		return "", perr
	}
	got, err := arrived()
	if err != nil {
		return "", err
	}
	lat := make([]time.Duration, 0, n)
	for i, t := range got {
		lat = append(lat, t.Sub(sent[i]))
	}
	slices.Sort(lat)
	return pct(lat, 50) + " / " + pct(lat, 99), nil
}

// readArrivals starts a read_committed reader of results; arrived waits for the results of n
// request indexes (from the text "ok: message <i>") and returns the first arrival time of each.
func readArrivals(ctx context.Context, brokers []string, results string, n int) (arrived func() ([]time.Time, error), stop func(), err error) {
	sc := turntest.Config()
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = 10 * time.Millisecond
	c, err := sarama.NewConsumer(brokers, sc)
	if err != nil {
		return nil, nil, err
	}
	parts, err := c.Partitions(results)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	type arrival struct {
		m  *sarama.ConsumerMessage
		at time.Time
	}
	msgs := make(chan arrival, 1024)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	var wg sync.WaitGroup
	for _, p := range parts {
		pc, err := c.ConsumePartition(results, p, sarama.OffsetOldest)
		if err != nil {
			cancel()
			c.Close()
			return nil, nil, err
		}
		wg.Go(func() {
			defer pc.AsyncClose()
			for {
				select {
				case m := <-pc.Messages():
					select {
					case msgs <- arrival{m, time.Now()}:
					case <-cctx.Done():
						return
					}
				case <-cctx.Done():
					return
				}
			}
		})
	}
	// One collector records arrivals as they come, so that a full channel never delays them.
	var (
		seen  = make([]time.Time, n)
		left  = n
		cerr  error
		ended = make(chan struct{})
	)
	go func() {
		defer close(ended)
		for left > 0 {
			select {
			case a := <-msgs:
				res, err := turn.DecodeResult(a.m.Value)
				if err != nil {
					cerr = err
					return
				}
				var i int
				if _, err := fmt.Sscanf(res.Text, "ok: message %d", &i); err != nil || i < 0 || i >= n {
					cerr = fmt.Errorf("result text %q: no request index", res.Text)
					return
				}
				if seen[i].IsZero() {
					seen[i] = a.at
					left--
				}
			case <-cctx.Done():
				cerr = fmt.Errorf("read %d of %d results", n-left, n)
				return
			}
		}
	}()
	stop = func() {
		cancel()
		<-ended
		wg.Wait()
		c.Close()
	}
	arrived = func() ([]time.Time, error) {
		<-ended
		return seen, cerr
	}
	return arrived, stop, nil
}
