package attachmenttest_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/attachmenttest"
)

// appScoped is a Store that scopes attachments by app alone, as a store keyed by content and
// app would: every user of an app reaches every other's.
type appScoped struct{ *attachment.MemoryStore }

func (s appScoped) owner(o attachment.Owner) attachment.Owner {
	if o.User != "" {
		o.User = "everyone"
	}
	return o
}

func (s appScoped) Put(ctx context.Context, o attachment.Owner, name, mediaType string, r io.Reader) (attachment.Ref, error) {
	return s.MemoryStore.Put(ctx, s.owner(o), name, mediaType, r)
}

func (s appScoped) Stat(ctx context.Context, o attachment.Owner, id string) (attachment.Ref, error) {
	return s.MemoryStore.Stat(ctx, s.owner(o), id)
}

func (s appScoped) Read(ctx context.Context, o attachment.Owner, id string, offset, length int64) ([]byte, error) {
	return s.MemoryStore.Read(ctx, s.owner(o), id, offset, length)
}

func (s appScoped) Delete(ctx context.Context, o attachment.Owner, id string) error {
	return s.MemoryStore.Delete(ctx, s.owner(o), id)
}

// The suite must fail a store that lets one user reach another's attachments (G7). It runs
// against appScoped in a child process, whose failure is the expected outcome.
func TestSuiteCatchesAStoreScopedByApp(t *testing.T) {
	if os.Getenv("ATTACHMENTTEST_BROKEN_STORE") == "1" {
		attachmenttest.Run(t, func(*testing.T) attachment.Store { return appScoped{attachment.NewMemoryStore()} })
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesAStoreScopedByApp$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "ATTACHMENTTEST_BROKEN_STORE=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite passed a store scoped by app:\n%s", out)
	require.Contains(t, string(out), "--- FAIL: TestSuiteCatchesAStoreScopedByApp/OtherOwnerGetsNotFound")
	require.Contains(t, string(out), "--- FAIL: TestSuiteCatchesAStoreScopedByApp/SameBytesTwoOwners")
}
