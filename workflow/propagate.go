package workflow

import (
	"context"
	"maps"
	"slices"

	"go.temporal.io/sdk/converter"
	twf "go.temporal.io/sdk/workflow"
)

// DefaultHeaders are the Kafka record headers the bridge carries into Temporal when
// BridgeOptions.Headers is empty.
var DefaultHeaders = []string{"traceparent", "tracestate", "tenant"}

// temporalHeader is the Temporal header key under which the propagated headers travel, as one
// JSON object.
const temporalHeader = "turnstile-headers"

type headersKey struct{}

// WithHeaders returns ctx carrying the propagated headers h (name to value). The bridge sets
// them from each record; a ContextPropagator moves them across Temporal calls.
func WithHeaders(ctx context.Context, h map[string]string) context.Context {
	return context.WithValue(ctx, headersKey{}, h)
}

// Headers returns the propagated headers ctx carries, nil if none. In a model called by the
// turn activity they are the headers of the record the request came in (such as traceparent),
// which the activity also puts in the request's Metadata where that has no entry of the name.
func Headers(ctx context.Context) map[string]string {
	h, _ := ctx.Value(headersKey{}).(map[string]string)
	return h
}

// withHeaders returns a workflow context whose propagated headers are h, so that the activity
// scheduled with it carries them in its Temporal header.
func withHeaders(ctx twf.Context, h map[string]string) twf.Context {
	return twf.WithValue(ctx, headersKey{}, h)
}

func workflowHeaders(ctx twf.Context) map[string]string {
	h, _ := ctx.Value(headersKey{}).(map[string]string)
	return h
}

// ContextPropagator carries the propagated headers (the Kafka headers named in it, such as
// traceparent and tenant) across every Temporal call: from the bridge's context into the
// signal's header, from the workflow into each activity's header, and from there into the
// activity's context (Headers). Set it in client.Options.ContextPropagators of the bridge's and
// the workers' clients; it rests on the SDK's context propagation
// (go.temporal.io/sdk/workflow.ContextPropagator).
type ContextPropagator struct {
	names []string
}

// NewContextPropagator returns a propagator for the header names given (DefaultHeaders when
// none); other entries are dropped on the way.
func NewContextPropagator(names ...string) *ContextPropagator {
	if len(names) == 0 {
		names = DefaultHeaders
	}
	return &ContextPropagator{names: slices.Clone(names)}
}

// filter keeps the entries of h whose names the propagator carries; nil when none.
func (p *ContextPropagator) filter(h map[string]string) map[string]string {
	return filterHeaders(h, p.names)
}

func (p *ContextPropagator) write(w twf.HeaderWriter, h map[string]string) error {
	h = p.filter(h)
	if len(h) == 0 {
		return nil
	}
	payload, err := converter.GetDefaultDataConverter().ToPayload(h)
	if err != nil {
		return err
	}
	w.Set(temporalHeader, payload)
	return nil
}

func (p *ContextPropagator) read(r twf.HeaderReader) (map[string]string, error) {
	payload, ok := r.Get(temporalHeader)
	if !ok {
		return nil, nil
	}
	var h map[string]string
	if err := converter.GetDefaultDataConverter().FromPayload(payload, &h); err != nil {
		return nil, err
	}
	return p.filter(h), nil
}

// Inject writes the headers of ctx (WithHeaders) into a client call's Temporal header.
func (p *ContextPropagator) Inject(ctx context.Context, w twf.HeaderWriter) error {
	return p.write(w, Headers(ctx))
}

// Extract puts the headers of a Temporal header into the context of an activity (Headers).
func (p *ContextPropagator) Extract(ctx context.Context, r twf.HeaderReader) (context.Context, error) {
	h, err := p.read(r)
	if err != nil || h == nil {
		return ctx, err
	}
	return WithHeaders(ctx, h), nil
}

// InjectFromWorkflow writes the headers of a workflow context into the header of the
// activity (or child workflow) it schedules.
func (p *ContextPropagator) InjectFromWorkflow(ctx twf.Context, w twf.HeaderWriter) error {
	return p.write(w, workflowHeaders(ctx))
}

// ExtractToWorkflow puts the headers of the workflow's start header into its context; each
// request's own headers travel in its Envelope and replace them for its activity.
func (p *ContextPropagator) ExtractToWorkflow(ctx twf.Context, r twf.HeaderReader) (twf.Context, error) {
	h, err := p.read(r)
	if err != nil || h == nil {
		return ctx, err
	}
	return withHeaders(ctx, maps.Clone(h)), nil
}

// filterHeaders returns the entries of h named in names; nil when none.
func filterHeaders(h map[string]string, names []string) map[string]string {
	var out map[string]string
	for _, n := range names {
		if v, ok := h[n]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[n] = v
		}
	}
	return out
}
