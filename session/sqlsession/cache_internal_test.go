package sqlsession

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
)

// turnEvents returns n events named after turn.
func turnEvents(turn string, n int) []session.Event {
	out := make([]session.Event, n)
	for i := range out {
		out[i] = session.Event{ID: fmt.Sprintf("%s-%d", turn, i), Text: turn}
	}
	return out
}

// TestCacheAppendsInPlaceOnlyIntoRoomItClaimed: successive appends write into one array while
// it has room, and an entry whose end is not the array's claimed end (an older entry put back
// by a Get that read before the last append) makes a new array: the events of the newer
// entries, which readers may hold, are never overwritten. A window under roomFrom events takes
// no more memory than its events.
func TestCacheAppendsInPlaceOnlyIntoRoomItClaimed(t *testing.T) {
	t.Parallel()
	c := newRecentCache(8)
	key := session.Key{App: "a", User: "u", Conversation: "c"}
	created := time.Now()
	const keep = 2 * roomFrom
	count := int64(roomFrom)
	c.got(key, 1, created, count, keep, turnEvents("r0", roomFrom), nil)
	count += 2
	c.appended(key, 1, count, turnEvents("r1", 2)) // a new array: got's is clipped
	first := c.lookup(key)
	require.Equal(t, count, first.count)
	require.Len(t, first.events, roomFrom+2)
	require.NotNil(t, first.room)
	require.Positive(t, cap(first.events)-len(first.events), "room left for the next append")

	count++
	c.appended(key, 1, count, turnEvents("r2", 1))
	second := c.lookup(key)
	require.Len(t, second.events, roomFrom+3)
	last := len(second.events) - 1
	require.Same(t, &first.events[len(first.events)-1], &second.events[last-1], "the next append went into the same array")
	require.Equal(t, "r2", second.events[last].Text)

	// A Get that finds nothing newer than the cache holds keeps the entry on its array, and the
	// next append still goes into it.
	held := c.lookup(key)
	events, room := held.merged(held.hint(), 1, count, keep, nil)
	require.Same(t, second.room, room)
	c.got(key, 1, created, count, keep, events, room)
	c.appended(key, 1, count+1, turnEvents("r3", 1))
	require.Same(t, &second.events[last], &c.lookup(key).events[last], "in place after a Get")
	c.lru.Add(batchKey(key), second) // as it was, for what follows

	// A Get that looked the session up before the last append puts the older entry back; an
	// append from it must not write where the second entry's last event is.
	c.lru.Add(batchKey(key), first)
	c.appended(key, 1, count, turnEvents("other", 1))
	third := c.lookup(key)
	require.Equal(t, "other", third.events[last].Text)
	require.Equal(t, "r2", second.events[last].Text, "the newer entry's events are as they were")
	require.NotSame(t, &second.events[0], &third.events[0])

	// Appends larger than the whole window keep its newest events.
	count += 3 * keep
	c.appended(key, 1, count, turnEvents("big", 3*keep))
	got := c.lookup(key)
	require.Len(t, got.events, keep)
	require.Equal(t, fmt.Sprintf("big-%d", 3*keep-1), got.events[keep-1].ID)

	// A short session's window is its events, without room.
	small := session.Key{App: "a", User: "u", Conversation: "small"}
	c.got(small, 2, created, 2, 50, turnEvents("s0", 2), nil)
	c.appended(small, 2, 4, turnEvents("s1", 2))
	got = c.lookup(small)
	require.Len(t, got.events, 4)
	require.Equal(t, 4, cap(got.events))
}

// BenchmarkCacheTurn is the cache's work for one turn of two events on a session that keeps
// its 50 newest (a turn's default history), when the member's cache holds the session up to
// date, as it does for the conversations of its partitions: the Get served from the cache
// (merged, got, and the caller's copy), then the append recorded.
func BenchmarkCacheTurn(b *testing.B) {
	c := newRecentCache(8)
	key := session.Key{App: "a", User: "u", Conversation: "c"}
	const keep = 50
	count := int64(keep)
	created := time.Now()
	c.got(key, 1, created, count, keep, turnEvents("start", keep), nil)
	events := turnEvents("turn", 2)
	b.ReportAllocs()
	for b.Loop() {
		held := c.lookup(key)
		got, room := held.merged(held.hint(), 1, count, keep, nil)
		if len(c.got(key, 1, created, count, keep, got, room)) != keep {
			b.Fatal("a Get did not find the window")
		}
		count += int64(len(events))
		c.appended(key, 1, count, events)
	}
	if got := c.lookup(key); got == nil || got.count != count {
		b.Fatal("the cache lost the session")
	}
}
