package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// MaxAttempts is how many attempts an email gets before it is dead-lettered.
const MaxAttempts = 3

// fleet is the group's members, each a worker of the support platform (demo.Fleet); in
// production each would be a process (a pod) of its own, wired as start wires it.
type fleet struct {
	*demo.Fleet
	brokers  []string
	group    string
	sessions session.Store
	inbox    inbox.Inbox
	support  *support
	log      *slog.Logger
}

// start starts a member named m<N>.
func (f *fleet) start() (string, error) {
	name := fmt.Sprintf("m%d", f.Len()+1)
	log := f.log.With("member", name)
	// The text limit must admit the 6 MB email, or it would be dead-lettered as undecodable
	// instead of refused by the Runner's context budget.
	dec := turn.Decoder{MaxTextBytes: MaxRecordBytes}
	runner := &turn.Runner{
		Model: f.support.desk(name), Sessions: f.sessions, Inbox: f.inbox, App: "support",
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
	f.Run(name, c)
	return name, nil
}
