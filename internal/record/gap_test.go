package record_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/record"
)

// A gap dead letter's id is a version 5 UUID in canonical text, the same for the same workflow
// and sequence (pinned, as Python's uuid.uuid5 computes it: readers may have stored it), another for another sequence or workflow,
// and the split between workflow id and sequence is unambiguous.
func TestGapRequestID(t *testing.T) {
	t.Parallel()
	id := record.GapRequestID("turnstile-c-7731", 2)
	require.Equal(t, "9723bc5a-cf08-50dc-b1a9-b2d1a34bb15d", id)
	require.Equal(t, id, record.GapRequestID("turnstile-c-7731", 2), "deterministic")
	u, err := uuid.Parse(id)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(5), u.Version())
	require.Equal(t, u.String(), id, "canonical lower-case text")
	seen := map[string]bool{}
	for _, c := range []struct {
		wf  string
		seq int64
	}{{"turnstile-c-7731", 2}, {"turnstile-c-7731", 3}, {"turnstile-c-7732", 2}, {"a/1", 2}, {"a", 12}, {"a/12", 0}} {
		seen[record.GapRequestID(c.wf, c.seq)] = true
	}
	require.Len(t, seen, 6, "distinct workflows and sequences give distinct ids")
}
