package sessiontest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
)

// testRoundTrip: what a Store is given comes back byte for byte: state, data, text in any
// script, times to the microsecond in UTC, empty fields.
func testRoundTrip(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	// State and Data are stored as given: whitespace and key order survive.
	state := json.RawMessage("{ \"z\": 1,\n  \"a\": [true, null] }")
	created := create(t, s, key, state)

	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		paris = time.FixedZone("UTC+2", 2*3600)
	}
	tr := session.Turn{RequestID: "req-ü-1", Events: []session.Event{
		{ID: "e1", Author: "user", Text: "héllo, wörld — 你好 🙂", Time: time.Date(2025, 6, 7, 8, 9, 10, 123456789, paris)},
		{ID: "e2", Author: "tool", Data: json.RawMessage(`{"b": 2, "a": {"x": [1, 2.50, "s"]}}`), Time: time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{ID: "e3", Author: "assistant", Text: "no time, no data"},
		{ID: "", Author: "custom-role", Text: "", Data: json.RawMessage(`"just a string"`), Time: time.Unix(0, 1000).UTC()},
	}}
	ap := mustAppend(t, s, key, 0, tr)
	want := stored(tr, 1)
	requireSameEvents(t, want, ap.Events)

	got := get(t, s, key, 10)
	require.Equal(t, string(state), string(got.State))
	requireSameEvents(t, want, got.Events)
	require.True(t, got.Events[2].Time.IsZero(), "the zero time comes back zero, got %s", got.Events[2].Time)
	require.Empty(t, got.Events[2].Data)
	requireSameTime(t, created.CreatedAt, got.CreatedAt, "CreatedAt")
	require.False(t, got.UpdatedAt.Before(got.CreatedAt), "UpdatedAt %s before CreatedAt %s", got.UpdatedAt, got.CreatedAt)
	requireRecentTime(t, got.UpdatedAt, "UpdatedAt")

	found, err := s.FindTurn(ctx, key, "req-ü-1")
	require.NoError(t, err)
	requireSameEvents(t, want, found)
}

// testNoAliasing: the store copies what it is given, and a caller appending to what it
// returned does not change the store. (What a Store returns is read-only under the Store
// contract, so changing it in place is not checked: a Store may share it.)
func testNoAliasing(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	state := json.RawMessage(`{"v":1}`)
	create(t, s, key, state)
	state[2] = 'X'
	require.Equal(t, `{"v":1}`, string(get(t, s, key, 0).State), "Create kept the caller's state")

	tr := turn("r1", 1)
	tr.Events[0].Data = json.RawMessage(`{"d":1}`)
	tr.State = json.RawMessage(`{"v":2}`)
	mustAppend(t, s, key, 0, tr)
	tr.Events[0].Data[2] = 'X'
	tr.Events[0].Text = "changed after Append"
	tr.State[2] = 'X'

	got := get(t, s, key, 10)
	require.Equal(t, `{"v":2}`, string(got.State), "Append kept the caller's state")
	require.Equal(t, `{"d":1}`, string(got.Events[0].Data), "Append kept the caller's event data")
	require.NotEqual(t, "changed after Append", got.Events[0].Text, "Append kept the caller's events")

	// Appending to a returned slice makes the caller's own array: the store's next append
	// must not overwrite what the caller appended, nor the caller's append the store's.
	ap := mustAppend(t, s, key, 1, turn("r2", 2)) // 3 events: a Go slice grown one by one to 3 has room for 4
	mine := append(get(t, s, key, 10).Events, session.Event{ID: "appended-by-caller", Text: "x"})
	minedup := append(ap.Events, session.Event{ID: "appended-by-caller", Text: "x"})
	found, err := s.FindTurn(ctx, key, "r2")
	require.NoError(t, err)
	minefound := append(found, session.Event{ID: "appended-by-caller", Text: "x"})
	mustAppend(t, s, key, 2, turn("r3", 1))
	for _, m := range [][]session.Event{mine, minedup, minefound} {
		require.Equal(t, "appended-by-caller", m[len(m)-1].ID, "the store wrote into an array it returned")
	}
	all := get(t, s, key, 10)
	require.Len(t, all.Events, 4)
	for _, e := range all.Events {
		require.NotEqual(t, "appended-by-caller", e.ID, "a caller's append reached the store")
	}
}
