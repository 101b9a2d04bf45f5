// Package attachmenttest is the conformance suite for attachment.Store: every rule of the
// Store contract (the doc comments of package attachment) as a subtest. turnstile runs it
// against each of its stores; run it against your own:
//
//	func TestMyStore(t *testing.T) {
//		attachmenttest.Run(t, func(t *testing.T) attachment.Store { return mystore.New(...) })
//	}
//
// Run calls newStore once in each subtest, and the subtests run in parallel (t.Parallel).
// Every subtest uses its own random app and user ids, so newStore may hand out one shared
// store or a fresh one each time; register cleanup with t.Cleanup.
//
// What the suite requires beyond the doc comments:
//   - Stores take attachments of at least 1 MiB (the suite puts up to 600 KiB at once).
//   - Under contention (16 goroutines putting the same bytes for one owner) no call fails: a
//     store must wait for its locks rather than fail fast.
//   - A call whose context is already cancelled returns an error and changes nothing.
//   - Entry times (Retention.DeleteIdle) are kept to the millisecond at least: the suite
//     leaves 20 ms between a Put and the cutoff it gives DeleteIdle.
//
// When the store implements attachment.Retention, Run also checks DeleteUser and DeleteIdle
// (the subtests under "Retention"), each in apps of its own.
package attachmenttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/internal/suite"
)

// Run runs the conformance suite against the stores newStore returns. See the package doc
// for what newStore may share between subtests.
func Run(t *testing.T, newStore func(t *testing.T) attachment.Store) {
	t.Helper()
	suite.Run(t, newStore, cases)
	suite.RunOptional(t, "Retention", newStore, retentionCases)
}

// cases lists the subtests, one rule (or one family of rules) each.
var cases = []suite.Case[attachment.Store]{
	{Name: "PutThenStat", Run: testPutThenStat},
	{Name: "PutSameBytesAgain", Run: testPutAgain},
	{Name: "PutEmpty", Run: testPutEmpty},
	{Name: "ReadRanges", Run: testReadRanges},
	{Name: "ReadBadRanges", Run: testReadBadRanges},
	{Name: "NotFound", Run: testNotFound},
	{Name: "OtherOwnerGetsNotFound", Run: testOtherOwner},
	{Name: "SameBytesTwoOwners", Run: testSameBytesTwoOwners},
	{Name: "MalformedID", Run: testMalformedID},
	{Name: "InvalidArguments", Run: testInvalidArguments},
	{Name: "Delete", Run: testDelete},
	{Name: "NoAliasing", Run: testNoAliasing},
	{Name: "ConcurrentPuts", Run: testConcurrentPuts},
	{Name: "ReaderFails", Run: testReaderFails},
	{Name: "CancelledContext", Run: testCancelledContext},
}

// newOwner returns an owner no other subtest uses.
func newOwner(t *testing.T) attachment.Owner {
	t.Helper()
	return attachment.Owner{App: "app-" + randID(t), User: "user-" + randID(t)}
}

func randID(t *testing.T) string {
	t.Helper()
	var b [8]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

// content returns n random bytes.
func content(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// put stores data for owner and checks the Ref it gets.
func put(t *testing.T, s attachment.Store, owner attachment.Owner, name string, data []byte) attachment.Ref {
	t.Helper()
	ref, err := s.Put(context.Background(), owner, name, "application/octet-stream", bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, attachment.IDOf(data), ref.ID)
	require.EqualValues(t, len(data), ref.Size)
	return ref
}

// read returns [offset, offset+length) of owner's attachment id.
func read(t *testing.T, s attachment.Store, owner attachment.Owner, id string, offset, length int64) []byte {
	t.Helper()
	b, err := s.Read(context.Background(), owner, id, offset, length)
	require.NoError(t, err, "read %d bytes at %d", length, offset)
	return b
}

// readAll reads owner's attachment id whole, in reads of at most MaxReadBytes.
func readAll(t *testing.T, s attachment.Store, owner attachment.Owner, id string) []byte {
	t.Helper()
	var out []byte
	for {
		b := read(t, s, owner, id, int64(len(out)), attachment.MaxReadBytes)
		if len(b) == 0 {
			return out
		}
		out = append(out, b...)
	}
}

// requireNotFound checks that owner reaches no attachment id: Stat, Read and Delete all get
// ErrNotFound.
func requireNotFound(t *testing.T, s attachment.Store, owner attachment.Owner, id string) {
	t.Helper()
	ctx := context.Background()
	_, err := s.Stat(ctx, owner, id)
	require.ErrorIs(t, err, attachment.ErrNotFound, "Stat")
	_, err = s.Read(ctx, owner, id, 0, 1)
	require.ErrorIs(t, err, attachment.ErrNotFound, "Read")
	require.ErrorIs(t, s.Delete(ctx, owner, id), attachment.ErrNotFound, "Delete")
}
