package attachment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
)

const emptyID = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func TestParseID(t *testing.T) {
	t.Parallel()
	sum, err := attachment.ParseID(emptyID)
	require.NoError(t, err)
	require.Equal(t, emptyID, attachment.FormatID(sum))
	require.Equal(t, emptyID, attachment.IDOf(nil))
	require.Len(t, emptyID, attachment.IDLen)
	for _, id := range []string{"", "sha256:", emptyID[:70], emptyID + "0", strings.ToUpper(emptyID),
		"sha256:" + strings.ToUpper(emptyID[7:]), "sha512:" + emptyID[7:], " " + emptyID[:70], emptyID[:70] + "g"} {
		_, err := attachment.ParseID(id)
		require.ErrorIs(t, err, attachment.ErrInvalid, "%q", id)
	}
	_, err = attachment.ParseID(strings.Repeat("x", 1000))
	require.LessOrEqual(t, len(err.Error()), 200, "a long id is quoted short")
}

func TestRefValidate(t *testing.T) {
	t.Parallel()
	good := attachment.Ref{ID: emptyID, Size: 0, Name: "server log (2026).txt", MediaType: "text/plain; charset=utf-8"}
	require.NoError(t, good.Validate())
	require.NoError(t, attachment.Ref{ID: emptyID, Size: 6 << 20}.Validate())
	for _, bad := range []attachment.Ref{
		{ID: "sha256:x"}, {ID: emptyID, Size: -1}, {ID: emptyID, Name: "a\x00b"}, {ID: emptyID, Name: "a\u0085b"},
		{ID: emptyID, Name: strings.Repeat("é", 128)}, {ID: emptyID, MediaType: "text/plain\n"}, {ID: emptyID, MediaType: "ü"},
	} {
		require.ErrorIs(t, bad.Validate(), attachment.ErrInvalid, "%+v", bad)
	}
}

func TestCheckRange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ size, offset, length, end int64 }{
		{10, 0, 10, 10}, {10, 0, 100, 10}, {10, 10, 5, 10}, {10, 3, 0, 3}, {0, 0, 0, 0}, {10, 9, attachment.MaxReadBytes, 10},
	} {
		end, err := attachment.CheckRange(c.size, c.offset, c.length)
		require.NoError(t, err, "%+v", c)
		require.Equal(t, c.end, end, "%+v", c)
	}
	for _, c := range [][3]int64{{10, -1, 1}, {10, 0, -1}, {10, 11, 0}, {10, 0, attachment.MaxReadBytes + 1}} {
		_, err := attachment.CheckRange(c[0], c[1], c[2])
		require.ErrorIs(t, err, attachment.ErrInvalid, "%v", c)
	}
	_, err := attachment.CheckRange(10, 11, 1)
	require.ErrorContains(t, err, "offset 11 is past the end of the attachment (10 bytes)")
}

func TestReadChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var chunks []string
	id, size, err := attachment.ReadChunks(ctx, iotest.OneByteReader(strings.NewReader("abcdefg")), 3, 0, func(c []byte) error {
		chunks = append(chunks, string(c))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"abc", "def", "g"}, chunks)
	require.Equal(t, attachment.IDOf([]byte("abcdefg")), id)
	require.EqualValues(t, 7, size)

	none := func([]byte) error { return nil }
	_, _, err = attachment.ReadChunks(ctx, strings.NewReader("abcd"), 2, 3, none)
	require.ErrorIs(t, err, attachment.ErrTooLarge)
	// A body cut short is an error, never the end of the content.
	_, _, err = attachment.ReadChunks(ctx, io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(io.ErrUnexpectedEOF)), 8, 0, none)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	failed := errors.New("disk full")
	_, _, err = attachment.ReadChunks(ctx, strings.NewReader("ab"), 8, 0, func([]byte) error { return failed })
	require.ErrorIs(t, err, failed)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = attachment.ReadChunks(cancelled, strings.NewReader("ab"), 8, 0, none)
	require.ErrorIs(t, err, context.Canceled)
}

// Put, Stat, a range read, and another user who reaches nothing of it (G7).
func ExampleMemoryStore() {
	ctx := context.Background()
	store := attachment.NewMemoryStore()
	owner := attachment.Owner{App: "support", User: "u-12"}
	ref, err := store.Put(ctx, owner, "server.log", "text/plain", strings.NewReader("line 1\nline 2\nline 3\n"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ref.ID[:15], ref.Size, ref.Name)
	page, err := store.Read(ctx, owner, ref.ID, 7, 7)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", page)
	_, err = store.Stat(ctx, attachment.Owner{App: "support", User: "u-99"}, ref.ID)
	fmt.Println(errors.Is(err, attachment.ErrNotFound))
	// Output:
	// sha256:6ca9d5ed 21 server.log
	// "line 2\n"
	// true
}
