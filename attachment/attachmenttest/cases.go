package attachmenttest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
)

// testPutThenStat: Put returns the content's id and size and the labels given; Stat and a
// whole read give them back.
func testPutThenStat(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	owner := newOwner(t)
	data := content(t, 70_000)
	ref, err := s.Put(ctx, owner, "server.log", "text/plain; charset=utf-8", bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, attachment.Ref{ID: attachment.IDOf(data), Size: 70_000, Name: "server.log", MediaType: "text/plain; charset=utf-8"}, ref)
	require.NoError(t, ref.Validate())
	got, err := s.Stat(ctx, owner, ref.ID)
	require.NoError(t, err)
	require.Equal(t, ref, got)
	require.Equal(t, data, readAll(t, s, owner, ref.ID))

	unlabelled, err := s.Put(ctx, owner, "", "", strings.NewReader("no name"))
	require.NoError(t, err)
	require.Equal(t, attachment.Ref{ID: attachment.IDOf([]byte("no name")), Size: 7}, unlabelled)
	got, err = s.Stat(ctx, owner, unlabelled.ID)
	require.NoError(t, err)
	require.Equal(t, unlabelled, got)
}

// testPutAgain: the same bytes put again return the stored Ref, the first Put's labels
// included, and are stored once.
func testPutAgain(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	owner := newOwner(t)
	data := content(t, 1000)
	first := put(t, s, owner, "first.bin", data)
	again, err := s.Put(ctx, owner, "second.bin", "text/plain", bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, first, again, "a second Put of the same bytes returns the stored Ref")
	got, err := s.Stat(ctx, owner, first.ID)
	require.NoError(t, err)
	require.Equal(t, first, got)
	require.NoError(t, s.Delete(ctx, owner, first.ID))
	requireNotFound(t, s, owner, first.ID) // one entry: one Delete removes it
}

// testPutEmpty: empty content is an attachment of size 0, read empty.
func testPutEmpty(t *testing.T, s attachment.Store) {
	owner := newOwner(t)
	ref := put(t, s, owner, "empty", nil)
	require.Equal(t, attachment.IDPrefix+"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", ref.ID)
	require.Empty(t, read(t, s, owner, ref.ID, 0, 10))
	require.Empty(t, read(t, s, owner, ref.ID, 0, 0))
	_, err := s.Read(context.Background(), owner, ref.ID, 1, 1)
	require.ErrorIs(t, err, attachment.ErrInvalid, "offset past the end of an empty attachment")
}

// testReadRanges: ranges anywhere, across the 256 KiB boundaries stores chunk at, and short at
// the end.
func testReadRanges(t *testing.T, s attachment.Store) {
	owner := newOwner(t)
	const size = 600 << 10
	data := content(t, size)
	ref := put(t, s, owner, "big", data)
	const chunk = 256 << 10
	for _, r := range []struct{ offset, length int64 }{
		{0, 1}, {0, 8192}, {1, 10}, {chunk - 1, 2}, {chunk, 1}, {chunk - 5, chunk + 10}, {2*chunk - 3, 3},
		{2 * chunk, 100}, {size - 1, 1}, {size - 10, 100}, {size - 8192, 8192}, {0, size}, {12345, 0},
	} {
		end := min(r.offset+r.length, size)
		got := read(t, s, owner, ref.ID, r.offset, r.length)
		require.Equal(t, data[r.offset:end], got, "read %d bytes at %d", r.length, r.offset)
	}
	require.Empty(t, read(t, s, owner, ref.ID, size, 10), "a read at the end is empty")
	require.Equal(t, data, readAll(t, s, owner, ref.ID))
}

// testReadBadRanges: a negative offset or length, an offset past the end and a length over
// MaxReadBytes are ErrInvalid.
func testReadBadRanges(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	owner := newOwner(t)
	ref := put(t, s, owner, "small", content(t, 100))
	for _, r := range []struct{ offset, length int64 }{
		{-1, 10}, {0, -1}, {101, 1}, {1 << 40, 1}, {0, attachment.MaxReadBytes + 1},
	} {
		_, err := s.Read(ctx, owner, ref.ID, r.offset, r.length)
		require.ErrorIs(t, err, attachment.ErrInvalid, "read %d bytes at %d", r.length, r.offset)
	}
}

// testNotFound: a well-formed id nobody put is not found.
func testNotFound(t *testing.T, s attachment.Store) {
	requireNotFound(t, s, newOwner(t), attachment.IDOf([]byte("never put "+randID(t))))
}

// testOtherOwner: another user of the app, and the same user of another app, reach nothing of
// the owner's, and their calls change nothing (G7).
func testOtherOwner(t *testing.T, s attachment.Store) {
	owner := newOwner(t)
	data := content(t, 500)
	ref := put(t, s, owner, "mine", data)
	for _, other := range []attachment.Owner{
		{App: owner.App, User: "user-" + randID(t)},
		{App: "app-" + randID(t), User: owner.User},
	} {
		requireNotFound(t, s, other, ref.ID)
	}
	got, err := s.Stat(context.Background(), owner, ref.ID)
	require.NoError(t, err)
	require.Equal(t, ref, got)
	require.Equal(t, data, readAll(t, s, owner, ref.ID))
}

// testSameBytesTwoOwners: the same bytes put by two users are two entries: deleting one
// leaves the other.
func testSameBytesTwoOwners(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	a, b := newOwner(t), newOwner(t)
	b.App = a.App
	data := content(t, 300_000)
	ra := put(t, s, a, "a.log", data)
	rb := put(t, s, b, "b.log", data)
	require.Equal(t, ra.ID, rb.ID)
	require.Equal(t, "b.log", rb.Name, "b's entry has b's labels")
	require.NoError(t, s.Delete(ctx, b, rb.ID))
	requireNotFound(t, s, b, rb.ID)
	require.Equal(t, data, readAll(t, s, a, ra.ID), "a's entry stays whole")
}

// malformedIDs are ids ParseID refuses.
var malformedIDs = []string{
	"", "sha256:", "sha256:abc", "md5:d41d8cd98f00b204e9800998ecf8427e",
	"SHA256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	"sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
	"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85g",
	"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 ",
	"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b8550",
	"sha256:../../../../etc/passwd/e3b0c44298fc1c149afbf4c8996fb92427ae41e46",
}

// testMalformedID: Stat, Read and Delete refuse a malformed id with ErrInvalid.
func testMalformedID(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	owner := newOwner(t)
	put(t, s, owner, "", nil)
	for _, id := range malformedIDs {
		_, err := s.Stat(ctx, owner, id)
		require.ErrorIs(t, err, attachment.ErrInvalid, "Stat %q", id)
		_, err = s.Read(ctx, owner, id, 0, 1)
		require.ErrorIs(t, err, attachment.ErrInvalid, "Read %q", id)
		require.ErrorIs(t, s.Delete(ctx, owner, id), attachment.ErrInvalid, "Delete %q", id)
	}
}

// testInvalidArguments: an empty or unstorable owner, and labels over their limits, are
// ErrInvalid, and such a Put stores nothing.
func testInvalidArguments(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	owner := newOwner(t)
	id := attachment.IDOf([]byte("x"))
	for _, bad := range []attachment.Owner{
		{User: owner.User}, {App: owner.App}, {App: owner.App, User: "u\x00"}, {App: "\xff", User: owner.User},
	} {
		_, err := s.Put(ctx, bad, "", "", strings.NewReader("x"))
		require.ErrorIs(t, err, attachment.ErrInvalid, "Put for %q", bad)
		_, err = s.Stat(ctx, bad, id)
		require.ErrorIs(t, err, attachment.ErrInvalid, "Stat for %q", bad)
		_, err = s.Read(ctx, bad, id, 0, 1)
		require.ErrorIs(t, err, attachment.ErrInvalid, "Read for %q", bad)
		require.ErrorIs(t, s.Delete(ctx, bad, id), attachment.ErrInvalid, "Delete for %q", bad)
	}
	for _, labels := range [][2]string{
		{strings.Repeat("n", attachment.MaxNameBytes+1), ""}, {"a\nb", ""}, {"\xff", ""},
		{"", strings.Repeat("m", attachment.MaxMediaTypeBytes+1)}, {"", "text/plain\r\nX: y"}, {"", "téxt/plain"},
	} {
		_, err := s.Put(ctx, owner, labels[0], labels[1], strings.NewReader("x"))
		require.ErrorIs(t, err, attachment.ErrInvalid, "Put named %q of type %q", labels[0], labels[1])
	}
	_, err := s.Stat(ctx, owner, id)
	require.ErrorIs(t, err, attachment.ErrNotFound, "a refused Put stores nothing")
}

// testDelete: Delete removes the entry; a second Delete is ErrNotFound; the bytes can be put
// again.
func testDelete(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	owner := newOwner(t)
	data := content(t, 280_000)
	ref := put(t, s, owner, "gone", data)
	kept := put(t, s, owner, "kept", content(t, 10))
	require.NoError(t, s.Delete(ctx, owner, ref.ID))
	requireNotFound(t, s, owner, ref.ID)
	_, err := s.Stat(ctx, owner, kept.ID)
	require.NoError(t, err, "Delete removes one attachment")

	again := put(t, s, owner, "back", data)
	require.Equal(t, "back", again.Name, "a deleted attachment put again is a new entry")
	require.Equal(t, data, readAll(t, s, owner, ref.ID))
}

// testNoAliasing: changing the bytes a Read returned, or the caller's buffer after Put,
// changes nothing stored.
func testNoAliasing(t *testing.T, s attachment.Store) {
	owner := newOwner(t)
	data := content(t, 64)
	want := bytes.Clone(data)
	ref, err := s.Put(context.Background(), owner, "", "", bytes.NewReader(data))
	require.NoError(t, err)
	for i := range data {
		data[i] ^= 0xff
	}
	got := read(t, s, owner, ref.ID, 0, 64)
	require.Equal(t, want, got)
	got[0] ^= 0xff
	require.Equal(t, want, read(t, s, owner, ref.ID, 0, 64))
}

// testConcurrentPuts: many Puts of the same bytes by one owner at once all succeed with the
// same Ref, and leave one whole entry.
func testConcurrentPuts(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	owner := newOwner(t)
	data := content(t, 300_000)
	const racers = 16
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		refs  [racers]attachment.Ref
		errs  [racers]error
	)
	for i := range racers {
		wg.Go(func() {
			<-start
			refs[i], errs[i] = s.Put(ctx, owner, "same.bin", "application/octet-stream", bytes.NewReader(data))
		})
	}
	close(start)
	wg.Wait()
	for i := range racers {
		require.NoError(t, errs[i], "Put %d", i)
		require.Equal(t, refs[0], refs[i], "Put %d", i)
	}
	require.Equal(t, data, readAll(t, s, owner, refs[0].ID))
	require.NoError(t, s.Delete(ctx, owner, refs[0].ID))
	requireNotFound(t, s, owner, refs[0].ID)
}

// failingReader yields n bytes, then fails.
type failingReader struct{ n int }

var errReader = errors.New("attachmenttest: the reader failed")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errReader
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// testReaderFails: a Put whose reader fails, even after 300 KiB, returns the reader's error
// and stores nothing.
func testReaderFails(t *testing.T, s attachment.Store) {
	ctx := context.Background()
	owner := newOwner(t)
	_, err := s.Put(ctx, owner, "cut", "", &failingReader{n: 300 << 10})
	require.ErrorIs(t, err, errReader)
	_, err = s.Stat(ctx, owner, attachment.IDOf(bytes.Repeat([]byte("x"), 300<<10)))
	require.ErrorIs(t, err, attachment.ErrNotFound)
}

// testCancelledContext: every method fails on an ended context and writes nothing.
func testCancelledContext(t *testing.T, s attachment.Store) {
	owner := newOwner(t)
	kept := put(t, s, owner, "kept", content(t, 100))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	data := content(t, 100)
	_, err := s.Put(ctx, owner, "", "", bytes.NewReader(data))
	require.Error(t, err, "Put")
	_, err = s.Stat(ctx, owner, kept.ID)
	require.Error(t, err, "Stat")
	_, err = s.Read(ctx, owner, kept.ID, 0, 1)
	require.Error(t, err, "Read")
	require.Error(t, s.Delete(ctx, owner, kept.ID), "Delete")

	_, err = s.Stat(context.Background(), owner, attachment.IDOf(data))
	require.ErrorIs(t, err, attachment.ErrNotFound, "a cancelled Put stores nothing")
	_, err = s.Stat(context.Background(), owner, kept.ID)
	require.NoError(t, err, "a cancelled Delete deletes nothing")
}
