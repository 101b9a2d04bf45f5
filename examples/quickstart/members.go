package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
)

// fleet is the consumer group's members, all in this process. In production each would be a
// process of its own, with the same wiring as start.
type fleet struct {
	brokers []string
	group   string
	stores  *stores
	model   turn.ModelClient
	log     *slog.Logger

	mu      sync.Mutex
	members []*member
}

// member is one consumer of the group.
type member struct {
	name    string
	c       *consumer.Consumer
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run returned
	err     error         // Run's error, set before done closes
	stopped bool
}

// start wires a new member, the way a host's main.go does, and runs it until stopped.
func (f *fleet) start() error {
	f.mu.Lock()
	name := fmt.Sprintf("m%d", len(f.members)+1)
	f.mu.Unlock()
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
	}, consumer.RunnerHandler(runner))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		if err := c.Run(ctx); err != nil {
			m.err = err
			log.Error("member stopped", "err", err)
		}
	}()
	f.mu.Lock()
	f.members = append(f.members, m)
	f.mu.Unlock()
	return nil
}

// stop shuts m down gracefully: Run drains the turns in flight, commits and leaves the group.
func (m *member) stop() {
	m.cancel()
	<-m.done
}

// replace stops the first running member gracefully and starts a new one: two rebalances
// while requests keep flowing. It returns a line saying what happened.
func (f *fleet) replace(atResults int) string {
	f.mu.Lock()
	var old *member
	for _, m := range f.members {
		if !m.stopped {
			old = m
			break
		}
	}
	old.stopped = true
	f.mu.Unlock()
	began := time.Now()
	old.stop()
	st := old.c.Stats()
	if err := f.start(); err != nil {
		return fmt.Sprintf("rebalance at %d results: %s left, but its replacement failed to start: %v", atResults, old.name, err)
	}
	f.mu.Lock()
	joined := f.members[len(f.members)-1].name
	f.mu.Unlock()
	return fmt.Sprintf("rebalance at %d results: %s left the group gracefully in %s (%d turns done, %d abandoned and left to the next owner); %s joined",
		atResults, old.name, time.Since(began).Round(time.Millisecond), st.Turns, st.Abandoned, joined)
}

// describe lists the members with the turns each completed, "-" marking one that stopped.
func (f *fleet) describe() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := make([]string, len(f.members))
	for i, m := range f.members {
		mark := ""
		if m.stopped {
			mark = "-"
		}
		parts[i] = fmt.Sprintf("%s%s:%d", m.name, mark, m.c.Stats().Turns)
	}
	return strings.Join(parts, " ")
}

// failed returns the first error a member's Run returned, if any.
func (f *fleet) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		select {
		case <-m.done:
			if m.err != nil {
				return fmt.Errorf("member %s: %w", m.name, m.err)
			}
		default:
		}
	}
	return nil
}

// stopAll stops every member still running, all at once, and waits for them.
func (f *fleet) stopAll() {
	f.mu.Lock()
	members := append([]*member(nil), f.members...)
	for _, m := range members {
		m.stopped = true
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(m.stop)
	}
	wg.Wait()
}

// stats sums the members' counters.
func (f *fleet) stats() consumer.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s consumer.Stats
	for _, m := range f.members {
		s = s.Add(m.c.Stats())
	}
	return s
}
