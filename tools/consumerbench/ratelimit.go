package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// rateLimitScenario: 150 requests over the partitions with a short model, side by side:
// control (no limited request) against the same 150 plus one request the model always answers
// with turn.RetryAfter (a per-tenant limit at a gateway), produced first. The figure is the
// throughput of the 150 others: from the member's first claim to their 150th turn.
//
// It runs with a 20 ms model (a cached or tiny model: the whole control run takes a fifth of a
// second, so one pause of every partition for the limited request's first 100 ms weighs a
// third of it) and a 200 ms model (still fast for an LLM), or with -model alone when set.
func rateLimitScenario(ctx context.Context, o options) error {
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	models := []time.Duration{20 * time.Millisecond, 200 * time.Millisecond}
	if o.modelDelay > 0 {
		models = []time.Duration{o.modelDelay}
	}
	for _, m := range models {
		if err := rateLimitRuns(ctx, o, cluster.Brokers(), m); err != nil {
			return err
		}
	}
	return nil
}

func rateLimitRuns(ctx context.Context, o options, brokers []string, modelTime time.Duration) error {
	n := orDefault(o.records, 150)
	const retryAfter = 100 * time.Millisecond
	fmt.Printf("ratelimit: %d requests, %d partitions, %d keys, %v model; limited side: one more request, always RetryAfter(%v)\n",
		n, o.partitions, n+1, modelTime, retryAfter)
	row("run", "control req/s", "with limited req/s", "ratio", "pauses", "limited model calls")
	slow := sleeper(modelTime, false)
	var ratios []float64
	for run := 1; run <= o.runs; run++ {
		var (
			rates [2]float64
			st    consumer.Stats
		)
		for side := range 2 {
			requests, results, err := topics(ctx, brokers, o.partitions)
			if err != nil {
				return err
			}
			records, model := n, turn.ModelClient(slow)
			if side == 1 {
				records++ // "message 0", first, is the limited one
				model = turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
					if in.Request.Text == "message 0" {
						return turn.Output{}, turn.RetryAfter(retryAfter, errors.New("HTTP 429: tenant limit"))
					}
					return slow(ctx, in)
				})
			}
			if _, err := produce(brokers, requests, records, records, 0); err != nil {
				return err
			}
			var d time.Duration
			d, st, err = runTurnstile(ctx, brokers, requests, results, records, member{model: model,
				until: func(st consumer.Stats) bool { return st.Turns >= int64(n) }})
			if err != nil {
				return err
			}
			rates[side] = float64(n) / d.Seconds()
		}
		ratios = append(ratios, rates[1]/rates[0])
		row(run, fmt.Sprintf("%.0f", rates[0]), fmt.Sprintf("%.0f", rates[1]), fmt.Sprintf("%.2f", rates[1]/rates[0]), st.Pauses, st.RateLimited)
	}
	fmt.Printf("ratio with-limited/control: median %.2f\n", median(ratios))
	return nil
}
