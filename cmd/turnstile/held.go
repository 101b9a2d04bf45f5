package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/turnstile-go/turnstile/workflow"
)

const heldUsage = `
Temporal mode: lists the conversations held at a sequence gap (a request with a Sequence that
never arrived holds the later ones), longest-held first: conversation, workflow, last applied
sequence, the held sequences, the missing ones and how long it has been held. It lists the
running conversation workflows of --task-queue from the namespace's visibility store (only
those with TurnstilePending > 0 with --search-attributes, as the bridge's
Config.SearchAttributes) and asks each one's status query, which says whether it is held:
visibility lags the workflows by a second or so. --json prints each one's status instead of
the table. 'turnstile release' releases one.

A workflow that does not answer its status query within --query-timeout (no worker running,
a worker down or too slow) is reported, by workflow id, and held exits 1: whether it is held
is not known. With no worker polling --task-queue the workflows are not asked (nothing would
answer) and each is reported. A --task-queue that no worker polls and no running conversation
workflow uses (mistyped?) exits 3, naming the task queues the running conversation workflows
use.

Examples:
  turnstile held --temporal temporal:7233 --task-queue turnstile
  turnstile held --temporal temporal:7233 --task-queue turnstile --search-attributes --json
`

const releaseUsage = `
Temporal mode: releases a conversation held at a sequence gap now: its workflow skips every
missing sequence below its highest held one, reports each as a dead letter with the reason
"gap" (its error header says why, with --reason), and applies the held requests in order. A
request of a skipped sequence that comes later is dead-lettered. BridgeOptions.Config.GapTimeout
does the same by itself once a conversation has been held that long. --json prints the
conversation, the skipped sequences, their count and the applied mark after them. A
conversation without a running workflow, or a --task-queue (optional here) that no worker
polls and no conversation workflow uses, exits 3.

Examples:
  turnstile release --temporal temporal:7233 --conversation c-7731 --reason "producer lost 2 (ops: ada)"
  turnstile release --temporal temporal:7233 --conversation c-7731 --json
`

// temporalFlags are the flags that reach the conversation workflows.
type temporalFlags struct {
	hostPort, namespace, taskQueue, idPrefix *string
	searchAttributes                         *bool
}

func withTemporal(f *flags) temporalFlags {
	return temporalFlags{
		hostPort:         f.String("temporal", "", "the Temporal frontend, host:port"),
		namespace:        f.String("namespace", "default", "the Temporal namespace of the conversation workflows"),
		taskQueue:        f.String("task-queue", "", "the conversation workflows' task queue (BridgeOptions.TaskQueue)"),
		idPrefix:         f.String("id-prefix", workflow.DefaultIDPrefix, "the workflow id prefix (BridgeOptions.IDPrefix)"),
		searchAttributes: f.Bool("search-attributes", false, "the workflows keep turnstile's search attributes (Config.SearchAttributes)"),
	}
}

// bridge dials Temporal and returns a bridge with the flags' task queue and prefix, and the
// client's Close.
func (t temporalFlags) bridge() (*workflow.Bridge, func(), error) {
	if *t.hostPort == "" {
		return nil, nil, usagef("--temporal (or %s) is required", envName("temporal"))
	}
	c, err := client.Dial(client.Options{HostPort: *t.hostPort, Namespace: *t.namespace,
		Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return nil, nil, fmt.Errorf("connect to Temporal at %s: %w", *t.hostPort, err)
	}
	queue := *t.taskQueue
	if queue == "" {
		queue = "-" // Release needs none; Held's command requires --task-queue
	}
	b, err := workflow.NewBridge(c, workflow.BridgeOptions{TaskQueue: queue, IDPrefix: *t.idPrefix, Logger: discard,
		Config: workflow.Config{SearchAttributes: *t.searchAttributes}})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return b, c.Close, nil
}

// open parses args into f, checks the required flags, dials Temporal and returns the bridge,
// ctx bounded by --timeout, and what closes them.
func (t temporalFlags) open(ctx context.Context, f *flags, args []string, required ...string) (*workflow.Bridge, context.Context, func(), error) {
	if err := f.parse(args); err != nil {
		return nil, nil, nil, err
	}
	if err := f.require(required...); err != nil {
		return nil, nil, nil, err
	}
	b, closeClient, err := t.bridge()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	return b, ctx, func() { cancel(); closeClient() }, nil
}

// knownTaskQueue returns a not-found error when b's task queue has no poller and no running
// conversation workflow (workflow.Bridge.TaskQueueUse), naming the task queues the running
// conversation workflows use.
func knownTaskQueue(ctx context.Context, b *workflow.Bridge, queue string) error {
	pollers, running, err := b.TaskQueueUse(ctx)
	if err != nil || pollers > 0 || running > 0 {
		return err
	}
	queues, err := b.TaskQueues(ctx, 20)
	if err != nil {
		return err
	}
	known := "none"
	if len(queues) > 0 {
		known = strings.Join(queues, ", ")
	}
	return fmt.Errorf("%w: task queue %q: no worker polls it and no conversation workflow runs on it (mistyped --task-queue?); "+
		"the running conversation workflows use: %s", errNotFound, queue, known)
}

func heldCmd(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "held", heldUsage).withJSON()
	tf := withTemporal(f)
	queryTimeout := f.Duration("query-timeout", workflow.DefaultHeldQueryTimeout, "how long each workflow's status query may wait for an answer")
	b, ctx, done, err := tf.open(ctx, f, args, "task-queue")
	if err != nil {
		return err
	}
	defer done()
	if *queryTimeout <= 0 {
		return usagef("--query-timeout must be positive")
	}
	rep, err := b.HeldReport(ctx, workflow.HeldOptions{QueryTimeout: *queryTimeout})
	if err != nil {
		return err
	}
	if rep.Asked == 0 {
		if err := knownTaskQueue(ctx, b, *tf.taskQueue); err != nil {
			return err
		}
	}
	if err := printHeld(e, *f.json, rep); err != nil {
		return err
	}
	if n := len(rep.Unanswered); n > 0 {
		for _, u := range rep.Unanswered {
			fmt.Fprintf(e.stderr, "no answer: %s: %s\n", u.WorkflowID, u.Error)
		}
		return fmt.Errorf("%d of %d conversation workflows did not answer their status query: whether they are held is not known", n, rep.Asked)
	}
	return nil
}

// printHeld prints the held conversations of rep as held's table (with their count, and of
// how many workflows that answered, on stderr) or JSON.
func printHeld(e *env, asJSON bool, rep workflow.HeldReport) error {
	held := rep.Held
	if asJSON {
		if held == nil {
			held = []workflow.HeldConversation{}
		}
		return printJSON(e.stdout, held)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONVERSATION\tWORKFLOW\tLAST APPLIED\tHELD\tMISSING\tHELD FOR")
	for _, h := range held {
		missing := joinInts(h.Missing)
		if n := int64(len(h.Missing)); h.MissingCount > n {
			missing += fmt.Sprintf(" (+%d more)", h.MissingCount-n)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", h.ConversationID, h.WorkflowID, h.LastAppliedSequence,
			joinInts(h.PendingSequences), missing, age(h.HeldSince))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := len(rep.Unanswered); n > 0 {
		fmt.Fprintf(e.stderr, "%d conversations held among the %d of %d workflows that answered\n", len(held), rep.Asked-n, rep.Asked)
		return nil
	}
	fmt.Fprintf(e.stderr, "%d conversations held\n", len(held))
	return nil
}

func releaseCmd(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "release", releaseUsage).withJSON()
	tf := withTemporal(f)
	conv := f.String("conversation", "", "the conversation to release (required)")
	reason := f.String("reason", "", "kept in the gap dead letters' error header: who released it and why")
	b, ctx, done, err := tf.open(ctx, f, args, "conversation")
	if err != nil {
		return err
	}
	defer done()
	if *tf.taskQueue != "" {
		if err := knownTaskQueue(ctx, b, *tf.taskQueue); err != nil {
			return err
		}
	}
	why := *reason
	if why == "" {
		why = "released with turnstile release"
	}
	out, err := b.Release(ctx, *conv, why)
	if errors.As(err, new(*serviceerror.NotFound)) {
		return fmt.Errorf("%w: no running workflow of conversation %q (workflow %s): %w", errNotFound, *conv, b.WorkflowID(*conv), err)
	}
	if err != nil {
		return err
	}
	if *f.json {
		return printJSON(e.stdout, releasedJSON{ConversationID: *conv, Released: out})
	}
	fmt.Fprintf(e.stdout, "released %s: skipped %d sequence(s) [%s]; last applied sequence %d\n", *conv, out.Count,
		joinInts(out.Skipped), out.LastAppliedSequence)
	return nil
}

// releasedJSON is release's --json output: the conversation and what its release skipped.
type releasedJSON struct {
	ConversationID string `json:"conversation_id"`
	workflow.Released
}

func joinInts(v []int64) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}
