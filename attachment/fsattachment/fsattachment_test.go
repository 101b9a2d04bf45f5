package fsattachment_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/attachmenttest"
	"github.com/turnstile-go/turnstile/attachment/fsattachment"
)

func newStore(t *testing.T, dir string, opts fsattachment.Options) *fsattachment.Store {
	t.Helper()
	s, err := fsattachment.New(dir, opts)
	require.NoError(t, err)
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	attachmenttest.Run(t, func(t *testing.T) attachment.Store { return newStore(t, t.TempDir(), fsattachment.Options{}) })
}

// Two Stores on one directory are one store, as two processes sharing a volume are.
func TestConformanceSharedDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	attachmenttest.Run(t, func(t *testing.T) attachment.Store { return newStore(t, dir, fsattachment.Options{}) })
}

func TestMaxSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newStore(t, dir, fsattachment.Options{MaxSize: 10})
	owner := attachment.Owner{App: "a", User: "u"}
	_, err := s.Put(context.Background(), owner, "", "", strings.NewReader("0123456789x"))
	require.ErrorIs(t, err, attachment.ErrTooLarge)
	tmp, err := os.ReadDir(filepath.Join(dir, "tmp"))
	require.NoError(t, err)
	require.Empty(t, tmp, "a refused Put leaves no temporary file")
	_, err = s.Put(context.Background(), owner, "", "", strings.NewReader("0123456789"))
	require.NoError(t, err)
	_, err = fsattachment.New(dir, fsattachment.Options{MaxSize: -1})
	require.Error(t, err)
	_, err = fsattachment.New("", fsattachment.Options{})
	require.Error(t, err)
}

// Owners whose ids look like paths store their files under the root all the same, each in a
// directory of its own, named by a hash.
func TestOwnerIDsAreNotPaths(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "root")
	s := newStore(t, dir, fsattachment.Options{})
	ctx := context.Background()
	owners := []attachment.Owner{{App: "..", User: ".."}, {App: "../../etc", User: "/passwd"}, {App: "a/b", User: "c"}, {App: "a", User: "b/c"}}
	for _, o := range owners {
		_, err := s.Put(ctx, o, "../name", "", strings.NewReader("content"))
		require.NoError(t, err)
	}
	var files []string
	require.NoError(t, filepath.WalkDir(parent, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if !d.IsDir() {
			files = append(files, path)
		}
		return nil
	}))
	require.Len(t, files, len(owners), "one file per owner: %v", files)
	for _, f := range files {
		require.True(t, strings.HasPrefix(f, dir+string(filepath.Separator)), f)
	}
	n, err := s.DeleteUser(ctx, "a", "b/c")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = s.Stat(ctx, attachment.Owner{App: "a/b", User: "c"}, attachment.IDOf([]byte("content")))
	require.NoError(t, err, "a/b's c is not a's b/c")
}

// New removes the temporary files a crashed Put left, once they are an hour old.
func TestNewRemovesStaleTemporaryFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	newStore(t, dir, fsattachment.Options{})
	stale, fresh := filepath.Join(dir, "tmp", "put-1"), filepath.Join(dir, "tmp", "put-2")
	for _, f := range []string{stale, fresh} {
		require.NoError(t, os.WriteFile(f, []byte("cut short"), 0o600))
	}
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(stale, old, old))
	newStore(t, dir, fsattachment.Options{})
	_, err := os.Stat(stale)
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Stat(fresh)
	require.NoError(t, err, "a Put may still be writing it")
}

// Labels at their limits, quoted in JSON at twice their length, fit the header.
func TestLongestLabels(t *testing.T) {
	t.Parallel()
	s := newStore(t, t.TempDir(), fsattachment.Options{})
	name, mediaType := strings.Repeat(`"`, attachment.MaxNameBytes), strings.Repeat(`\`, attachment.MaxMediaTypeBytes)
	ref, err := s.Put(context.Background(), attachment.Owner{App: "a", User: "u"}, name, mediaType, strings.NewReader("x"))
	require.NoError(t, err)
	require.Equal(t, name, ref.Name)
	require.Equal(t, mediaType, ref.MediaType)
	got, err := s.Read(context.Background(), attachment.Owner{App: "a", User: "u"}, ref.ID, 0, 10)
	require.NoError(t, err)
	require.Equal(t, "x", string(got))
}
