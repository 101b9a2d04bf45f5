package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// Defaults of BridgeOptions.
const (
	DefaultIDPrefix = "turnstile-"
	// DefaultMaxPayloadBytes keeps a signal's payload under the server's default blob size
	// limit (2 MiB, limit.blobSize.error) with room for the event's own fields.
	DefaultMaxPayloadBytes = 1536 << 10
)

// BridgeOptions configure a Bridge. TaskQueue is required.
type BridgeOptions struct {
	// TaskQueue is the task queue of the conversation workflows; the workers poll it.
	TaskQueue string
	// IDPrefix is prepended to the conversation id to make the workflow id; default
	// DefaultIDPrefix.
	IDPrefix string
	// Headers names the record headers carried into Temporal (and to the model's input);
	// default DefaultHeaders. The bridge reads them from turn.Request.Headers, which the
	// consumer sets from the record, or from Tap for a request without them.
	Headers []string
	// Tap, when set, supplies the record headers of requests that come without
	// turn.Request.Headers: add it to the consumer's Sarama.Consumer.Interceptors. The consumer
	// sets Request.Headers, so the bridge it calls needs no Tap; one is kept for requests
	// handed to the bridge by other code.
	Tap *HeaderTap
	// Ledger, when set, records every request handed off, so that Reconcile can re-send a
	// gap from it.
	Ledger Ledger
	// Config is the configuration of the conversation runs the bridge starts.
	Config Config
	// MaxPayloadBytes bounds a signal's encoded payload; a request over it is permanent (it
	// is dead-lettered). Default DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// Logger gets a line per refused hand-off; default slog.Default().
	Logger *slog.Logger
	// Telemetry's Propagator (default W3C trace context) writes the trace context of the
	// Handler's context (the consumer's process span, when the consumer traces) into each
	// envelope's headers, in place of the producer's, so the turn's spans in the activity
	// hang under the hand-off. Without a span in the context the headers go as they came.
	Telemetry turnotel.Options
}

// Bridge hands requests from the consumer to their conversation workflows: the Temporal
// mode's consumer.Handler. Handle returns once the server has accepted the request (a
// SignalWithStart on the conversation's workflow id), with a nil Result, so the consumer
// commits the record's offset only after the durable hand-off (G2): transport progress. The
// workflow decides when the request is applied: semantic progress.
type Bridge struct {
	c    client.Client
	opts BridgeOptions
	// resubmits counts submit updates turned away by a run continuing as new and sent again.
	resubmits atomic.Int64
}

// NewBridge returns a Bridge on the client c. Give c a ContextPropagator
// (client.Options.ContextPropagators) so that the headers reach the activities' contexts.
// Errors: a missing TaskQueue, a nil client, a Config.MaxCarriedBytes over
// MaxCarriedBytesLimit, a Config.DedupWindow over MaxDedupWindow.
func NewBridge(c client.Client, opts BridgeOptions) (*Bridge, error) {
	switch {
	case c == nil:
		return nil, errors.New("workflow: NewBridge: nil client")
	case opts.TaskQueue == "":
		return nil, errors.New("workflow: BridgeOptions.TaskQueue: empty")
	case opts.Config.MaxCarriedBytes > MaxCarriedBytesLimit:
		return nil, fmt.Errorf("workflow: BridgeOptions.Config.MaxCarriedBytes = %d, over the limit of %d", opts.Config.MaxCarriedBytes, MaxCarriedBytesLimit)
	case opts.Config.DedupWindow > MaxDedupWindow:
		return nil, fmt.Errorf("workflow: BridgeOptions.Config.DedupWindow = %d, over the limit of %d", opts.Config.DedupWindow, MaxDedupWindow)
	}
	if opts.IDPrefix == "" {
		opts.IDPrefix = DefaultIDPrefix
	}
	if len(opts.Headers) == 0 {
		opts.Headers = DefaultHeaders
	}
	if opts.MaxPayloadBytes <= 0 {
		opts.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Bridge{c: c, opts: opts}, nil
}

// WorkflowID returns the workflow id of a conversation: IDPrefix + conversation id.
func (b *Bridge) WorkflowID(conversationID string) string { return b.opts.IDPrefix + conversationID }

// Handle hands req to its conversation's workflow and returns a nil Result once the server
// accepted it. Its errors steer the consumer (turn.Classify): a transient Temporal failure
// (unavailable, resource exhausted, deadline exceeded, a run closing or over its signal
// limit) is turn.Unavailable, retried with no attempt spent and never dead-lettered; a request
// Temporal can never accept (over MaxPayloadBytes, an invalid argument) is turn.Permanent; a
// context ended by the consumer is turn.ErrAbandoned.
func (b *Bridge) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	return nil, b.send(ctx, req.ConversationID, []Envelope{b.envelope(ctx, req)})
}

// DeadLettered implements consumer.DeadLetterNotifier: the consumer dead-lettered req itself
// (its hand-off failed Config.MaxAttempts times, panicked, was refused as permanent, ...), so
// its conversation's workflow would wait for its Sequence forever. DeadLettered signals the
// workflow (SignalWithStart, as Handle) with req marked Envelope.DeadLettered with reason, and
// without its text, metadata and attachment references, so that the signal stays small even
// when req was refused for its size; the workflow passes over the request when its Sequence comes up, without running
// it or publishing a second dead letter. The envelope is recorded in the Ledger as Handle's
// are (a ledger that keeps the first envelope of a sequence keeps an earlier hand-off's).
// Errors are Handle's; the consumer retries them before it publishes the dead letter.
func (b *Bridge) DeadLettered(ctx context.Context, req turn.Request, reason string) error {
	if reason == "" {
		reason = "dead-lettered by the consumer"
	}
	if len(reason) > maxReasonBytes {
		reason = strings.ToValidUTF8(reason[:maxReasonBytes], "") + "…"
	}
	env := b.envelope(ctx, req)
	env.Request.Text, env.Request.Metadata, env.Request.Attachments = "", nil, nil
	env.Headers = injectTrace(ctx, b.opts.Telemetry.TextMapPropagator(), nil) // no producer's headers: no turn runs
	env.DeadLettered = reason
	return b.send(ctx, req.ConversationID, []Envelope{env})
}

// maxReasonBytes bounds the reason a dead-letter notice carries into the workflow's history.
const maxReasonBytes = 4 << 10

// maxBatchSignalBytes bounds the estimated size (payloadSize) of one signal of a batched
// hand-off: a conversation's requests past it go in further signals, so that a batch keeps the
// payloads of the workflow's history small (issue 35: under 256 KiB each) whatever the
// consumer's MaxBatch; a single request larger than it goes alone, within MaxPayloadBytes.
const maxBatchSignalBytes = 128 << 10

// HandOff hands several requests over with one signal per conversation (a batch), in the order
// given within each conversation; a conversation's requests over maxBatchSignalBytes (128 KiB)
// go in several signals, one after the other. Under HandleBatch each request's envelope carries
// the trace of its own record's process span (consumer.BatchRequestContext). It returns the
// first error; signals sent before it stay handed off, and handing them off again is harmless
// (the workflow drops duplicates).
func (b *Bridge) HandOff(ctx context.Context, reqs []turn.Request) error {
	type batch struct {
		envs []Envelope
		size int // payloadSize(envs)
		last int // the index in reqs of the batch's last request
	}
	var order []string
	byConv := map[string][]batch{}
	for i, req := range reqs {
		env := b.envelope(consumer.BatchRequestContext(ctx, i), req)
		batches, ok := byConv[req.ConversationID]
		if !ok {
			order = append(order, req.ConversationID)
		}
		size := payloadSize([]Envelope{env})
		if n := len(batches); n == 0 || batches[n-1].size+size > maxBatchSignalBytes {
			batches = append(batches, batch{})
		}
		cur := &batches[len(batches)-1]
		cur.envs, cur.size, cur.last = append(cur.envs, env), cur.size+size, i
		byConv[req.ConversationID] = batches
	}
	for _, conv := range order {
		for _, bt := range byConv[conv] {
			// The signal goes under the span of its last request, as its headers do (send).
			if err := b.send(consumer.BatchRequestContext(ctx, bt.last), conv, bt.envs); err != nil {
				return err
			}
		}
	}
	return nil
}

// HandleBatch implements consumer.BatchHandler: the records of a conversation waiting in the
// consumer's window go to the conversation's workflow in one signal, or several of at most
// 128 KiB each (HandOff), and their offsets commit once the server accepted them. A request
// too large for a signal (MaxPayloadBytes) is refused as permanent, and the consumer then
// hands the records off one by one. Errors are Handle's.
func (b *Bridge) HandleBatch(ctx context.Context, reqs []turn.Request) error {
	return b.HandOff(ctx, reqs)
}

// envelope wraps req with the headers named in BridgeOptions.Headers: from the request
// (turn.Request.Headers, which the consumer sets), else from the Tap; with the trace context
// of ctx's span written over the producer's. A request re-published by deadletter.Redrive
// (its redriven-from header, in turn.Request.Headers) is marked Envelope.RedrivenFrom.
func (b *Bridge) envelope(ctx context.Context, req turn.Request) Envelope {
	env := Envelope{Request: req, Source: req.Source}
	env.Request.Headers = nil // they travel in env.Headers, filtered
	switch {
	case req.Headers != nil:
		env.Headers = filterHeaders(req.Headers, b.opts.Headers)
		env.RedrivenFrom = req.Headers[record.HeaderRedrivenFrom]
	case b.opts.Tap != nil:
		env.Headers = b.opts.Tap.Take(req.Source, b.opts.Headers)
	}
	env.Headers = injectTrace(ctx, b.opts.Telemetry.TextMapPropagator(), env.Headers)
	return env
}

// send signals envs (one conversation's) with start, then records them in the ledger.
func (b *Bridge) send(ctx context.Context, conv string, envs []Envelope) error {
	batch := Batch{Envelopes: envs}
	if size := payloadSize(envs); size > b.opts.MaxPayloadBytes {
		return turn.Permanent(fmt.Errorf("workflow: hand-off of %d request(s) is about %d bytes, over the limit of %d", len(envs), size, b.opts.MaxPayloadBytes))
	}
	sctx := WithHeaders(ctx, envs[len(envs)-1].Headers)
	_, err := b.c.SignalWithStartWorkflow(sctx, b.WorkflowID(conv), SignalName, batch,
		client.StartWorkflowOptions{ID: b.WorkflowID(conv), TaskQueue: b.opts.TaskQueue,
			TypedSearchAttributes: b.startAttributes(conv, envs[0].Request.UserID)},
		WorkflowName, State{ConversationID: conv, Config: b.opts.Config})
	if err != nil {
		err = classifyTemporal(ctx, err)
		b.opts.Logger.Warn("hand-off refused", "conversation_id", conv, "requests", len(envs),
			"request_id", envs[0].Request.ID, "kind", turn.Classify(err).String(), "err", err)
		return err
	}
	if b.opts.Ledger != nil {
		if err := b.opts.Ledger.Record(ctx, envs...); err != nil {
			// The signal is in; the record comes again (no commit) and the workflow drops the
			// duplicate, while the ledger gets a second chance.
			return turn.Unavailable(fmt.Errorf("workflow: ledger record: %w", err))
		}
	}
	return nil
}

// payloadSize estimates the encoded size of envs from their variable-length fields plus a
// fixed allowance per envelope for names and numbers, without encoding them twice (the client
// encodes the signal). JSON escaping can make the payload larger; the server's own check then
// refuses it with InvalidArgument, which is permanent too.
func payloadSize(envs []Envelope) int {
	const perEnvelope = 512
	n := 0
	for _, e := range envs {
		r := e.Request
		n += perEnvelope + len(r.ID) + len(r.ConversationID) + len(r.UserID) + len(r.Text) + len(r.ReplyTo) + len(e.Source.Topic)
		for k, v := range r.Metadata {
			n += len(k) + len(v) + 6
		}
		for _, a := range r.Attachments { // references: the content is in the attachment store
			n += len(a.ID) + len(a.Name) + len(a.MediaType) + 64
		}
		for k, v := range e.Headers {
			n += len(k) + len(v) + 6
		}
	}
	return n
}

// classifyTemporal maps an error of a Temporal client call to the turn error kinds.
func classifyTemporal(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", turn.ErrAbandoned, err)
	}
	err = fmt.Errorf("workflow: temporal: %w", err)
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "limit") && strings.Contains(msg, "signal") {
		// A run over its signal limit: the workflow continues as new and takes more.
		return turn.Unavailable(err)
	}
	switch serviceerror.ToStatus(err).Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		return turn.Permanent(err)
	case codes.Unknown:
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return turn.Unavailable(err)
		}
		return err // counted as an attempt
	}
	// Unavailable, ResourceExhausted, DeadlineExceeded, Aborted, FailedPrecondition (a run
	// closing), NotFound (namespace), PermissionDenied, Internal: not the request's fault.
	return turn.Unavailable(err)
}
