package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/turn"
)

// emailTool is the deferred tool of the agent's third step.
const emailTool = "email"

// emailArgs are the arguments of the deferred email: whom it is about.
type emailArgs struct {
	Conversation string `json:"conversation"`
	RequestID    string `json:"request_id"`
}

// emailRelay returns the relay of a process that runs turns (or of the checker's tail) on ob:
// it delivers each intent to the fake email service, a table of db keyed by the intent's
// idempotency key (turn.Intent.Key), as an email API dedups on one: a redelivery counts a
// call on the same row. Short Poll and Lease so that a run drains within seconds, and a short
// backoff so that a delivery cut by a killed connection is retried soon.
func emailRelay(db *sql.DB, ob inbox.Outbox, prefix string, log *slog.Logger) *inbox.Relay {
	send := `INSERT INTO ` + prefix + `chaos_emails AS e (tool_key, request_id, conversation) VALUES ($1, $2, $3)
		ON CONFLICT (tool_key) DO UPDATE SET calls = e.calls + 1`
	return &inbox.Relay{
		Outbox: ob,
		Deliver: func(ctx context.Context, it inbox.Intent) error {
			in, err := turn.DecodeIntent(it.Payload)
			if err != nil {
				return turn.Permanent(err)
			}
			var a emailArgs
			if in.Tool != emailTool {
				return turn.Permanent(fmt.Errorf("intent %s: tool %q, want %q", it.ID, in.Tool, emailTool))
			}
			if err := json.Unmarshal(in.Args, &a); err != nil || a.RequestID == "" {
				return turn.Permanent(fmt.Errorf("intent %s: arguments %s: %v", it.ID, in.Args, err))
			}
			if _, err := db.ExecContext(ctx, send, in.Key, a.RequestID, a.Conversation); err != nil {
				return fmt.Errorf("email service: %w", err)
			}
			return nil
		},
		Lease:   5 * time.Second,
		Poll:    100 * time.Millisecond,
		Backoff: inbox.RelayBackoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second},
		Logger:  log,
	}
}

// runRelay runs r until ctx ends, in a goroutine; the returned func waits for it to return.
func runRelay(ctx context.Context, r *inbox.Relay, log *slog.Logger) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			log.Error("relay", "err", err)
		}
	}()
	return func() { <-done }
}

// drainOutbox runs a relay on the run's outbox in this process until no intent is pending
// (the members' relays stopped with them, some intents may be promoted and not delivered, or
// claimed by a relay that was killed) or until timeout; it returns how many are left pending.
func drainOutbox(ctx context.Context, db *sql.DB, ob inbox.Outbox, prefix string, timeout time.Duration, log *slog.Logger) (int, error) {
	rctx, cancel := context.WithCancel(ctx)
	wait := runRelay(rctx, emailRelay(db, ob, prefix, log), log)
	defer wait()
	defer cancel()
	deadline := time.Now().Add(timeout)
	for {
		left, err := ob.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentPending, Limit: 100_000})
		if err != nil {
			return 0, fmt.Errorf("pending intents: %w", err)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return len(left), nil
		}
		select {
		case <-ctx.Done():
			return len(left), ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
