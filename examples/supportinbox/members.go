package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// MaxAttempts is how many attempts an email gets before it is dead-lettered.
const MaxAttempts = 3

// fleet is the group's members, each a worker of the support platform; in production each
// would be a process (a pod) of its own, wired as start wires it.
type fleet struct {
	brokers  []string
	group    string
	sessions session.Store
	inbox    inbox.Inbox
	agent    *agent
	log      *slog.Logger

	mu      sync.Mutex
	members map[string]*member
	next    int
}

type member struct {
	name   string
	c      *consumer.Consumer
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// start starts a member named m<N>.
func (f *fleet) start() (string, error) {
	f.mu.Lock()
	f.next++
	name := fmt.Sprintf("m%d", f.next)
	f.mu.Unlock()
	log := f.log.With("member", name)
	// The text limit must admit the 6 MB email, or it would be dead-lettered at once as
	// undecodable instead of failing its three attempts in the model.
	dec := turn.Decoder{MaxTextBytes: MaxRecordBytes}
	runner := &turn.Runner{
		Model: f.agent.model(name), Sessions: f.sessions, Inbox: f.inbox, App: "support",
		TurnTimeout: 30 * time.Second, MaxAttempts: MaxAttempts, Decoder: dec, Logger: log,
	}
	c, err := consumer.New(consumer.Config{
		Brokers: f.brokers, GroupID: f.group,
		RequestsTopic: RequestsTopic, ResultsTopic: ResultsTopic, DeadLetterTopic: DeadLetterTopic,
		// MaxAttempts, TurnTimeout and Decoder come from the Runner (RunnerHandler).
		// Six partitions per member, each with one turn at a time.
		MaxInFlight: 6,
		RevokeGrace: 2 * time.Second,
		// A redeploy gives turns in flight a second to finish, then cancels them; their
		// records are redone by the partitions' next owners.
		ShutdownTimeout: time.Second,
		CommitInterval:  250 * time.Millisecond,
		RetryBackoff:    100 * time.Millisecond, MaxRetryBackoff: time.Second,
		Sarama: saramaConfig("support-" + name),
		Logger: log,
	}, consumer.RunnerHandler(runner))
	if err != nil {
		return "", err
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
	f.members[name] = m
	f.mu.Unlock()
	return name, nil
}

// stop stops the named member gracefully and waits until it left the group.
func (f *fleet) stop(name string) consumer.Stats {
	f.mu.Lock()
	m := f.members[name]
	f.mu.Unlock()
	m.cancel()
	<-m.done
	return m.c.Stats()
}

// stopAll stops every member at once and waits for them.
func (f *fleet) stopAll() {
	f.mu.Lock()
	var wg sync.WaitGroup
	for _, m := range f.members {
		wg.Go(func() {
			m.cancel()
			<-m.done
		})
	}
	f.mu.Unlock()
	wg.Wait()
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
