package sqlsession

import (
	"slices"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/turnstile-go/turnstile/session"
)

// recentCache keeps the newest events of the sessions the store read or wrote last (see
// Options.Cache), so that Get reads from the database only the events a session gained since:
// a session's events are never changed once stored and are numbered 1 to its event_count
// without gaps (every append numbers them from the count it bumped), and a session deleted and
// created again is another row with another id, so the events held for (id, seq) are the
// stored ones for as long as that row lives. A row is known by its id and its created_at:
// SQLite gives a row created after the deletion of the newest one the same id again
// (INTEGER PRIMARY KEY without AUTOINCREMENT, https://www.sqlite.org/autoinc.html). The cache
// is never the only copy of anything: what it holds was read from a committed state or
// written by a committed transaction.
type recentCache struct {
	lru    *lru.Cache[string, *cachedSession] // by batchKey
	served atomic.Int64                       // events Gets took from the cache (for tests)
}

// cachedSession is what the cache holds of one session. It is never changed once in the
// cache: an update replaces it.
type cachedSession struct {
	id      int64     // the session row's id
	created time.Time // and its created_at, which tells a row that took the id of a deleted one
	app     string    // its app and user, so that DeleteUser can drop it
	owner   string
	count   int64 // the seq of the newest event held: the session's event_count when read or written
	keep    int   // how many events to hold: the recent of the last Get
	events  []session.Event
	// room is the room left past the claimed end of events' array (see appended), shared by
	// the entries on that array; nil for an entry whose array is never written (got's).
	room *atomic.Int64
}

// from is the seq before the first event held: the cache holds the events numbered from+1 to
// count.
func (c *cachedSession) from() int64 { return c.count - int64(len(c.events)) }

// newRecentCache returns a cache of up to size sessions, or nil for a size of 0 or less.
func newRecentCache(size int) *recentCache {
	if size <= 0 {
		return nil
	}
	c, err := lru.New[string, *cachedSession](size)
	if err != nil { // only for a size of 0 or less, refused above
		return nil
	}
	return &recentCache{lru: c}
}

// lookup returns what the cache holds of key's session, or nil; a nil cache holds nothing.
func (c *recentCache) lookup(key session.Key) *cachedSession {
	if c == nil {
		return nil
	}
	got, ok := c.lru.Get(batchKey(key))
	if !ok || got.owner != key.User {
		return nil
	}
	return got
}

// hint is what a Get tells the query of the events it holds already: the session's id (0, no
// session's, when it holds none), and the range of seqs held (from, count].
type hint struct{ id, from, count int64 }

func (c *cachedSession) hint() hint {
	if c == nil {
		return hint{}
	}
	return hint{id: c.id, from: c.from(), count: c.count}
}

// covers reports whether the held events serve a Get of the recent events of the session row
// id at event_count count: the same row, holding every event from count-recent on (or from
// the first). The get
// query makes the same test (see getMany's statement) to read only the events above those
// held.
func (h hint) covers(id, count int64, recent int) bool {
	return h.id != 0 && h.id == id && (h.from == 0 || h.from <= count-int64(recent)) && h.count <= count
}

// same reports whether what c holds is of the session row id created at created.
func (c *cachedSession) same(id int64, created time.Time) bool {
	return c != nil && c.id == id && c.created.Equal(created)
}

// got records a Get's outcome: the session row id of key created at created, at event_count
// count, whose newest events (up to recent of them) are events. room is the room counter of
// events' array when events ends where an entry on that array ends (merged's held events,
// see appended), else nil: the entry is then clipped, and the first append to it makes a new
// array rather than write into one that events may share with another entry. It returns
// events, as the caller may keep them: a copy whose capacity is its length, so that an append
// to it never writes into the cache's.
func (c *recentCache) got(key session.Key, id int64, created time.Time, count int64, recent int, events []session.Event, room *atomic.Int64) []session.Event {
	if c == nil {
		return events
	}
	if room == nil {
		events = slices.Clip(events)
	}
	c.lru.Add(batchKey(key), &cachedSession{id: id, created: created, app: key.App, owner: key.User, count: count, keep: recent,
		events: events, room: room})
	return slices.Clip(slices.Clone(events))
}

// merged returns the recent events of a session at event_count count that a Get finds: the
// held ones above count-recent, when h covers the read (see covers), then the ones the query
// read, which are all above those held. When they are the held ones alone, it returns their
// array's room counter too (for got), else nil.
func (c *cachedSession) merged(h hint, id, count int64, recent int, read []session.Event) ([]session.Event, *atomic.Int64) {
	if c == nil || !h.covers(id, count, recent) {
		return read, nil
	}
	lower := count - int64(recent)
	var held []session.Event
	if start := lower - c.from(); start < int64(len(c.events)) {
		held = c.events[max(start, 0):]
	}
	if len(read) == 0 {
		return held, c.room
	}
	return append(slices.Clip(held), read...), nil
}

// roomFrom is the fewest events a window holds before appended leaves room after it: a
// smaller one is copied whole at each append, which costs little, and takes no more memory
// than its events (the scale scenario caches 20,000 sessions of a few events each).
const roomFrom = 16

// appended records a committed append to key's session row id, now at event_count count,
// whose new events are events: a session the cache holds up to the append's first event gets
// them (the oldest dropped past its keep); any other is left as it is, since the events held
// are still the stored ones.
//
// The new events go after the held ones in the same array while it has room, so that a turn
// copies its own events, not the whole window: the window is copied only into a new array,
// with as much room again (to twice keep), when the array is full; a window of fewer than
// roomFrom events is copied whole. The room past the end of an array's slices is
// claimed with its room counter, shared by every entry on the array, before it is written:
// each slot is written once, by the append that claimed it, and a slice read (an entry's,
// or merged's, which got copies) never reaches a slot claimed after the slice was made. An
// entry whose end is no longer the array's claimed end (an older entry that got put back, or
// a session row that took the id of a deleted one) makes a new array instead.
func (c *recentCache) appended(key session.Key, id, count int64, events []session.Event) {
	if c == nil {
		return
	}
	prev, ok := c.lru.Peek(batchKey(key))
	if !ok || prev.id != id || prev.count != count-int64(len(events)) {
		return
	}
	keep, n := prev.keep, len(events)
	var (
		all  []session.Event
		room = prev.room
	)
	if free := cap(prev.events) - len(prev.events); room != nil && free >= n && room.CompareAndSwap(int64(free), int64(free-n)) {
		all = append(prev.events, events...) // into the room claimed: no new array
	} else {
		held := prev.events[min(max(len(prev.events)+n-keep, 0), len(prev.events)):] // the ones kept
		size := len(held) + n
		spare := 0 // room for the next appends: as much again as the window, to twice keep
		if size >= roomFrom {
			spare = max(min(size, 2*keep-size), 0)
		}
		all = make([]session.Event, 0, size+spare)
		all = append(append(all, held...), events...)
		room = new(atomic.Int64)
		room.Store(int64(cap(all) - len(all)))
	}
	// Cutting the front leaves cap-len, the room past the end, as it was.
	all = all[max(len(all)-keep, 0):]
	c.lru.Add(batchKey(key), &cachedSession{id: id, created: prev.created, app: prev.app, owner: prev.owner,
		count: count, keep: keep, events: all, room: room})
}

// forget drops what the cache holds of key's session.
func (c *recentCache) forget(key session.Key) {
	if c != nil {
		c.lru.Remove(batchKey(key))
	}
}

// forgetUser drops what the cache holds of user's sessions in app.
func (c *recentCache) forgetUser(app, user string) {
	if c == nil {
		return
	}
	for _, k := range c.lru.Keys() {
		if v, ok := c.lru.Peek(k); ok && v.owner == user && v.app == app {
			c.lru.Remove(k)
		}
	}
}

// purge drops everything the cache holds.
func (c *recentCache) purge() {
	if c != nil {
		c.lru.Purge()
	}
}
