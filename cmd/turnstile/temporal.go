package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/turnstile-go/turnstile/workflow"
)

const ledgerPurgeUsage = `
Deletes the Temporal mode's hand-off ledger rows (workflow.SQLLedger, the requests the bridge
handed off, with their texts) recorded longer ago than --older-than. The idle runs' states
(each conversation's sequence mark) and the requests waiting in the overflow stay. Reconcile
re-sends a gap from the ledger: keep rows longer than a gap may stay open, and longer than the
requests topic's retention. Run it from cron, or call workflow.RunLedgerPurge in the service.

Examples:
  turnstile ledger purge --db postgres://turnstile@db:5432/agent --older-than 720h
`

// withTemporal adds the flags that reach the Temporal mode's workflows.
func (f *flags) withTemporal() *flags {
	f.temporal = f.String("temporal", "", "Temporal mode: the frontend host:port of the conversation workflows' server")
	f.namespace = f.String("namespace", "default", "with --temporal: the workflows' namespace")
	f.idPrefix = f.String("id-prefix", workflow.DefaultIDPrefix, "with --temporal: the bridge's workflow id prefix (BridgeOptions.IDPrefix)")
	return f
}

// temporalClient dials --temporal; the SDK's own log lines are dropped.
func (f *flags) temporalClient() (client.Client, error) {
	c, err := client.Dial(client.Options{HostPort: *f.temporal, Namespace: *f.namespace, Logger: tlog.NewStructuredLogger(discard)})
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s: %w", *f.temporal, err)
	}
	return c, nil
}

// ledger returns the hand-off ledger on the stores' database, under --table-prefix.
func (f *flags) ledger() (*workflow.SQLLedger, func(), error) {
	db, dialect, err := f.database()
	if err != nil {
		return nil, nil, err
	}
	l, err := workflow.NewSQLLedger(db, workflow.SQLDialect(dialect), *f.prefix)
	if err != nil {
		db.Close()
		return nil, nil, usageError{err.Error()}
	}
	return l, func() { db.Close() }, nil
}

func ledgerPurge(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "ledger purge", ledgerPurgeUsage).withDB()
	older := f.Duration("older-than", 0, "delete hand-offs recorded longer ago than this (required; 720h is 30 days)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *older <= 0 {
		return usagef("--older-than is required and must be positive")
	}
	l, done, err := f.ledger()
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	cutoff := time.Now().Add(-*older)
	n, err := l.Purge(ctx, cutoff)
	if err != nil {
		return partly(n, "purged %d ledger rows", err)
	}
	fmt.Fprintf(e.stdout, "purged %d ledger rows recorded before %s\n", n, cutoff.UTC().Format(time.RFC3339))
	return nil
}
