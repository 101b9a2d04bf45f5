package workflow

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
)

// headerMap is a Temporal header in memory, both HeaderWriter and HeaderReader.
type headerMap map[string]*commonpb.Payload

func (h headerMap) Set(k string, v *commonpb.Payload) { h[k] = v }
func (h headerMap) Get(k string) (*commonpb.Payload, bool) {
	v, ok := h[k]
	return v, ok
}
func (h headerMap) ForEachKey(f func(string, *commonpb.Payload) error) error {
	for k, v := range h {
		if err := f(k, v); err != nil {
			return err
		}
	}
	return nil
}

// The propagator carries the named headers from a context through a Temporal header into
// another context, drops the others, and writes nothing when there is nothing to carry.
func TestContextPropagatorRoundTrip(t *testing.T) {
	t.Parallel()
	p := NewContextPropagator("traceparent", "tenant")
	h := headerMap{}
	ctx := WithHeaders(context.Background(), map[string]string{"traceparent": "00-abc-def-01", "tenant": "acme", "secret": "no"})
	require.NoError(t, p.Inject(ctx, h))
	got, err := p.Extract(context.Background(), h)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"traceparent": "00-abc-def-01", "tenant": "acme"}, Headers(got))

	empty := headerMap{}
	require.NoError(t, p.Inject(context.Background(), empty))
	require.Empty(t, empty)
	same, err := p.Extract(context.Background(), empty)
	require.NoError(t, err)
	require.Nil(t, Headers(same))
	require.Equal(t, DefaultHeaders, NewContextPropagator().names)
}
