package main

// The TestReview tests are regression tests of the bugs a review of the step journal, the
// outbox and the agent loop found on 2026-12-02: each comment describes a bug as it was found;
// the test asserts the behaviour of its fix.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
)

// The usage examples of outbox redrive and inbox steps put --db before the id or key
// ("turnstile outbox redrive --db postgres://... "0b9c.../5f0e...#2" --note ..."), but
// parseNamed takes the id only from the first argument, and flags.parse then refuses it as
// "unexpected argument": the documented commands fail with a usage error.
func TestReviewDocumentedArgumentOrderIsRefused(t *testing.T) {
	t.Parallel()
	d := databases(t)[1] // sqlite
	require.Equal(t, "sqlite", d.name)
	ctx := context.Background()
	db := d.open(t)
	ok(t, "migrate", "--db="+d.dsn)
	ib, err := sqlinbox.New(db, d.dialect, sqlinbox.Options{Concurrency: -1})
	require.NoError(t, err)
	const key = "app/u-1/c-1/req-1"
	_, err = ib.Begin(ctx, inbox.Delivery{Key: key, Conversation: "c-1", Topic: "requests"})
	require.NoError(t, err)
	_, err = ib.RecordStep(ctx, key, inbox.Step{Ordinal: 1, Name: "tool:email", Output: []byte(`{"tool":"email","args":{},"key":"k"}`), Deferred: true})
	require.NoError(t, err)
	_, err = ib.Promote(ctx, key, 0)
	require.NoError(t, err)
	id := inbox.IntentID(key, 1)
	require.NoError(t, ib.Bury(ctx, id, 0, "400"))

	code, _, errOut := cli(t, "inbox", "steps", "--db", d.dsn, key)
	require.Equal(t, exitOK, code, "inbox steps as its usage shows it: %s", errOut)
	code, _, errOut = cli(t, "outbox", "redrive", "--db", d.dsn, id, "--note", "fixed (INC-1)")
	require.Equal(t, exitOK, code, "outbox redrive as its usage shows it: %s", errOut)
}
