package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/turn"
)

// fleet is the consumer group's members, all in this process (demo.Fleet). In production each
// would be a process of its own, with the same wiring as start.
type fleet struct {
	*demo.Fleet
	brokers []string
	group   string
	stores  *stores
	model   turn.ModelClient
	log     *slog.Logger
	tel     *telemetry // nil: no telemetry

	transactional bool // members run in the transactional mode
}

// txn is a member's transactional mode, nil when it is off: ids are the group's name and the
// member's.
func (f *fleet) txn(name string) *consumer.Transactional {
	if !f.transactional {
		return nil
	}
	return &consumer.Transactional{IDPrefix: f.group, InstanceID: name}
}

// start wires a new member, the way a host's main.go does, and runs it until stopped.
func (f *fleet) start() error {
	name := fmt.Sprintf("m%d", f.Len()+1)
	log := f.log.With("member", name)
	runner := &turn.Runner{
		Model:       f.model,
		Sessions:    f.stores.sessions,
		Inbox:       f.stores.inbox,
		App:         "quickstart",
		TurnTimeout: 30 * time.Second,
		MaxAttempts: turn.DefaultMaxAttempts, // the consumer takes it from the Runner
		Logger:      log,
	}
	tel, err := f.tel.options(name)
	if err != nil {
		return err
	}
	c, err := consumer.New(consumer.Config{
		Brokers:         f.brokers,
		GroupID:         f.group,
		RequestsTopic:   RequestsTopic,
		ResultsTopic:    ResultsTopic,
		DeadLetterTopic: DeadLetterTopic,
		RevokeGrace:     2 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		CommitInterval:  250 * time.Millisecond,
		Sarama:          saramaConfig(),
		Logger:          log,
		Telemetry:       tel,
		Transactional:   f.txn(name),
	}, consumer.RunnerHandler(runner))
	if err != nil {
		return err
	}
	f.Run(name, c)
	return nil
}

// replace stops the first running member gracefully and starts a new one: two rebalances
// while requests keep flowing. It returns a line saying what happened.
func (f *fleet) replace(atResults int) string {
	old := f.FirstRunning()
	began := time.Now()
	st := f.Stop(old)
	if err := f.start(); err != nil {
		return fmt.Sprintf("rebalance at %d results: %s left, but its replacement failed to start: %v", atResults, old, err)
	}
	return fmt.Sprintf("rebalance at %d results: %s left the group gracefully in %s (%d turns done, %d abandoned and left to the next owner); m%d joined",
		atResults, old, time.Since(began).Round(time.Millisecond), st.Turns, st.Abandoned, f.Len())
}
