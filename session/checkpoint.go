package session

import (
	"encoding/json"
	"fmt"
)

// AuthorCheckpoint is the Author of a checkpoint event: a summary of the conversation's
// beginning that a compaction (turn.Runner) stored in a turn, beside the turn's own events.
// Its Text is the summary and its Data a CheckpointData. The package owns the format:
// NewCheckpointEvent writes it, CheckpointOf reads it.
const AuthorCheckpoint = "checkpoint"

// Checkpoint is a compaction's outcome as a session stores it: a summary that covers the
// session's events from seq 1 through Through. A model that sees the latest checkpoint and
// every event after Through (checkpoints excepted) has lost no event of the conversation
// from view (guarantee G4). Compaction deletes nothing: the covered events stay in the
// history for audit and retention.
type Checkpoint struct {
	// Summary is the summary's text.
	Summary string `json:"-"`
	CheckpointData
}

// CheckpointData is a checkpoint event's Data, as JSON:
//
//	{"from":41,"through":80,"policy":"p1-3f2a9c0d","tokens":612}
type CheckpointData struct {
	// From is the first seq this compaction folded into the summary: the previous
	// checkpoint's Through plus one (1 for the first checkpoint).
	From int64 `json:"from"`
	// Through is the last seq the summary covers; it covers every event from seq 1 on.
	Through int64 `json:"through"`
	// Policy identifies the summarization instruction and budget the summary was written
	// under (turn.Runner's compaction policy). A summary is only extended under its own
	// policy; under another, the next turn compacts again and records PreviousPolicy.
	Policy string `json:"policy"`
	// PreviousPolicy is the policy of the summary this one was folded from, when it differs
	// from Policy; "" otherwise.
	PreviousPolicy string `json:"previous_policy,omitempty"`
	// Tokens is the summary's size in tokens, as the compacting Runner counted it.
	Tokens int `json:"tokens"`
}

// NewCheckpointEvent returns the event that stores c: Author AuthorCheckpoint, Text the
// summary, Data c's CheckpointData. Errors: a range that is empty or does not start at 1 or
// later (From < 1 or Through < From).
func NewCheckpointEvent(c Checkpoint) (Event, error) {
	if c.From < 1 || c.Through < c.From {
		return Event{}, fmt.Errorf("%w: checkpoint covers seqs %d to %d", ErrInvalid, c.From, c.Through)
	}
	data, err := json.Marshal(c.CheckpointData)
	if err != nil {
		return Event{}, fmt.Errorf("session: encode checkpoint: %w", err)
	}
	return Event{Author: AuthorCheckpoint, Text: c.Summary, Data: data}, nil
}

// CheckpointOf returns the checkpoint e stores; ok is false when e is not a checkpoint event.
// Errors: a checkpoint event whose Data does not decode or holds an invalid range (a store
// that changed it, or a host event that took the author).
func CheckpointOf(e Event) (c Checkpoint, ok bool, err error) {
	if e.Author != AuthorCheckpoint {
		return Checkpoint{}, false, nil
	}
	if err := json.Unmarshal(e.Data, &c.CheckpointData); err != nil {
		return Checkpoint{}, true, fmt.Errorf("session: checkpoint event %s (seq %d): %w", e.ID, e.Seq, err)
	}
	if c.From < 1 || c.Through < c.From || (e.Seq > 0 && c.Through >= e.Seq) {
		return Checkpoint{}, true, fmt.Errorf("session: checkpoint event %s (seq %d) covers seqs %d to %d", e.ID, e.Seq, c.From, c.Through)
	}
	c.Summary = e.Text
	return c, true, nil
}

// LatestCheckpoint returns the latest checkpoint among events (oldest first) and its index
// in events; index is -1 when there is none. Errors: CheckpointOf's for the latest
// checkpoint event.
func LatestCheckpoint(events []Event) (c Checkpoint, index int, err error) {
	for i := len(events) - 1; i >= 0; i-- {
		c, ok, err := CheckpointOf(events[i])
		if ok {
			return c, i, err
		}
	}
	return Checkpoint{}, -1, nil
}
