package workflow

import (
	"time"

	"github.com/turnstile-go/turnstile/turn"
)

// Names under which the conversation workflow, its activity and its handlers are registered.
// They are part of the recorded histories: renaming one breaks running workflows.
const (
	// WorkflowName is the conversation workflow's type name.
	WorkflowName = "turnstile.Conversation"
	// ActivityName is the activity that runs one turn and publishes its outcome.
	ActivityName = "turnstile.ApplyTurn"
	// SignalName is the signal that carries a Batch of requests into a conversation.
	SignalName = "turnstile.requests"
	// UpdateName is the update that submits one request and returns its Result.
	UpdateName = "submit"
	// QueryLastAppliedSequence answers the highest Sequence applied (0 before any), an int64.
	QueryLastAppliedSequence = "lastAppliedSequence"
	// QueryStatus answers a Status.
	QueryStatus = "status"
	// ReleaseUpdateName is the update that releases a conversation held at a sequence gap
	// now (Bridge.Release): its argument is a Release, its answer a Released.
	ReleaseUpdateName = "release"
	// GapActivityName is the activity that reports the sequences a release skipped, one dead
	// letter each with the reason GapReason.
	GapActivityName = "turnstile.ReportGap"
)

// Envelope is one request as it travels into Temporal: the request (with its Source, which the
// JSON envelope of a record leaves out) and the record headers named in
// BridgeOptions.Headers. It carries ids, the user's text and the references of the request's
// attachments (turn.Request.Attachments: their content stays in the attachment store), never
// the conversation's transcript or a summary of it: the session store holds the context, so
// histories stay small.
type Envelope struct {
	Request turn.Request      `json:"request"`
	Source  turn.Source       `json:"source"`
	Headers map[string]string `json:"headers,omitempty"`
	// DeadLettered, when set, is the reason the consumer dead-lettered the request itself,
	// before any hand-off (Bridge.DeadLettered, a consumer.DeadLetterNotifier): the consumer
	// published its dead letter, so the workflow never runs the request nor publishes one;
	// when its Sequence comes up it advances the applied mark past it, so that the
	// conversation goes on (G5). Such an envelope carries the request's ids and Sequence, not
	// its text, metadata or attachment references. A pending envelope of the same request is
	// marked so too.
	DeadLettered string `json:"dead_lettered,omitempty"`
	// RedrivenFrom, when set, is the dead letter this request was re-driven from (the
	// redriven-from header that package deadletter's Redrive adds, "TOPIC/PARTITION/OFFSET";
	// the bridge copies it from the record's headers). The workflow tells a re-drive from a
	// duplicate by it: a re-driven request it applied before (dead-lettered) is queued again
	// rather than dropped, applied in arrival order when its sequence is below the applied
	// mark (the conversation moved on past its dead letter), and the inbox decides whether it
	// runs: the activity runs the request when its entry is runnable (re-driven, or never
	// begun) and publishes nothing when it is done already (a second copy of the re-drive).
	RedrivenFrom string `json:"redriven_from,omitempty"`
	// Origin, when set, says where the request came from when not from a record of the
	// requests topic: "submit" (Bridge.Submit sets it; Source says nothing then), or "gap" on
	// the envelope of a gap dead letter (GapActivityName: no request). A dead letter carries
	// it in the request-origin header (consumer.HeaderOrigin), which deadletter.Redrive reads: it
	// sends a Submit's request back to the requests topic on its key's partition and refuses
	// a gap's.
	Origin string `json:"origin,omitempty"`
}

// Batch is the payload of one SignalName signal: requests of one conversation, in the order
// they were read.
type Batch struct {
	Envelopes []Envelope `json:"envelopes"`
}

// Config steers one conversation's runs. The bridge passes it when it starts a workflow and
// each run carries it into the next; zero fields take the defaults below.
type Config struct {
	// IdleTimeout ends a run that has had nothing to do for this long; the next request
	// starts a new run. Default DefaultIdleTimeout.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// MaxTurnsPerRun continues-as-new after this many turns in one run. Default
	// DefaultMaxTurnsPerRun.
	MaxTurnsPerRun int `json:"max_turns_per_run,omitempty"`
	// MaxHistoryEvents continues-as-new once the run's history has this many events, or
	// when the server suggests it (GetContinueAsNewSuggested). Default DefaultMaxHistoryEvents.
	MaxHistoryEvents int `json:"max_history_events,omitempty"`
	// MaxSignalsPerRun continues-as-new once a run has received this many signals, well
	// below the server's limit per run (10,000 by default, limit.numPendingSignals... the
	// server refuses more). Default DefaultMaxSignalsPerRun.
	MaxSignalsPerRun int `json:"max_signals_per_run,omitempty"`
	// DedupWindow is how many applied request ids a run remembers (and carries across
	// continue-as-new) to drop duplicates without running an activity. It is the only list of
	// the continue-as-new input that a conversation's length would grow, so it is a window:
	// an older duplicate runs an activity, and the Runner answers it from the durable record
	// instead of running a second turn (its inbox entry replays the stored result, and the
	// session keeps one turn per request id). At most MaxDedupWindow. Default
	// DefaultDedupWindow.
	DedupWindow int `json:"dedup_window,omitempty"`
	// MaxCarriedBytes steers how pending requests cross continue-as-new. With an
	// OverflowStore (WorkerOptions.States), a run stores every pending request there when it
	// continues as new and hands the next one their positions only, so the continue-as-new
	// input holds ids and counters, never a request's text: the dedup window (DedupWindow
	// request ids, about 40 bytes each) plus about 3 KB at most, whatever the backlog (about
	// 41 KB with the default window). The next runs load the requests back, oldest first, at
	// most MaxCarriedBytes/2 of them per LoadOverflow activity (one larger request alone).
	// Runs recorded before that change carried the oldest pending requests up to
	// MaxCarriedBytes and stored the rest. Without an OverflowStore the whole backlog travels
	// in the input, with a warning once it passes MaxCarriedBytes (about 260 bytes per
	// pending request: the server's 2 MB payload limit, limit.blobSize.error, is passed near
	// 8,000). At most MaxCarriedBytesLimit. Default DefaultMaxCarriedBytes.
	MaxCarriedBytes int `json:"max_carried_bytes,omitempty"`
	// SearchAttributes makes the workflow keep the typed search attributes of
	// SearchAttributeTypes up to date. The namespace must have them registered, or every
	// upsert fails the workflow task; off by default.
	SearchAttributes bool `json:"search_attributes,omitempty"`
	// GapTimeout, when positive, releases a conversation held at a sequence gap once it has
	// been held this long (Status.HeldSince): each missing sequence below the highest held
	// one is skipped (Status.Skipped) and reported as a dead letter with the reason GapReason,
	// and the held requests then apply in sequence order, as Bridge.Release does at once. A
	// request of a skipped sequence that comes later is dead-lettered (its sequence is below
	// the applied mark). Zero (the default) holds a gap until it is filled or released.
	GapTimeout time.Duration `json:"gap_timeout,omitempty"`
}

// Defaults of Config.
const (
	DefaultIdleTimeout      = 10 * time.Minute
	DefaultMaxTurnsPerRun   = 500
	DefaultMaxHistoryEvents = 10_000
	DefaultMaxSignalsPerRun = 2_000
	DefaultDedupWindow      = 1_000
	DefaultMaxCarriedBytes  = 256 << 10
	// MaxCarriedBytesLimit is the largest Config.MaxCarriedBytes NewBridge takes: half the
	// server's default payload limit of 2 MiB.
	MaxCarriedBytesLimit = 1 << 20
	// MaxDedupWindow is the largest Config.DedupWindow NewBridge takes: its request ids
	// (canonical UUIDs, 39 bytes each in the JSON input) keep the continue-as-new input
	// under 160 KiB.
	MaxDedupWindow = 4096
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	def(&c.MaxTurnsPerRun, DefaultMaxTurnsPerRun)
	def(&c.MaxHistoryEvents, DefaultMaxHistoryEvents)
	def(&c.MaxSignalsPerRun, DefaultMaxSignalsPerRun)
	def(&c.DedupWindow, DefaultDedupWindow)
	def(&c.MaxCarriedBytes, DefaultMaxCarriedBytes)
	return c
}

// State is the conversation workflow's input: what one run hands the next at
// continue-as-new. A new conversation starts from State{ConversationID: id, Config: cfg}.
type State struct {
	ConversationID string `json:"conversation_id"`
	Config         Config `json:"config"`
	// NextSequence is the Sequence the gate waits for next; 0 means 1.
	NextSequence int64 `json:"next_sequence,omitempty"`
	// Pending are the requests received but not applied yet, in arrival order. A run that
	// continues as new with an OverflowStore carries none (they wait there: Overflow);
	// without one, all of them.
	Pending []Envelope `json:"pending,omitempty"`
	// Overflow counts the pending requests a run stored in the workers' OverflowStore rather
	// than carry them here (see Config.MaxCarriedBytes), at positions OverflowFrom to
	// OverflowFrom+Overflow-1 of the conversation's queue. They arrived after Pending[:Older]
	// and before the rest of Pending, and apply in that order.
	Overflow     int64 `json:"overflow,omitempty"`
	OverflowFrom int64 `json:"overflow_from,omitempty"`
	Older        int   `json:"older,omitempty"`
	// Recent are the request ids applied most recently, oldest first, at most
	// Config.DedupWindow of them.
	Recent []string `json:"recent,omitempty"`
	// Applied counts the turns applied over all runs (dead letters included).
	Applied int64 `json:"applied,omitempty"`
	// LastErrorKind is the turn.Kind name of the last dead-lettered turn, "" if none.
	LastErrorKind string `json:"last_error_kind,omitempty"`
	// UserID is the conversation's user, once a request named it.
	UserID string `json:"user_id,omitempty"`
	// HeldSince is when the conversation last found nothing to apply while it held requests
	// behind a missing sequence (workflow time); zero when it is not held. Config.GapTimeout
	// counts from it.
	HeldSince time.Time `json:"held_since,omitzero"`
	// Skipped are the sequences releases skipped most recently (a gap released), ascending, at
	// most maxSkippedKept of them; SkippedTotal counts them all.
	Skipped      []int64 `json:"skipped,omitempty"`
	SkippedTotal int64   `json:"skipped_total,omitempty"`
}

// Status is the answer of the QueryStatus query.
type Status struct {
	ConversationID      string `json:"conversation_id"`
	LastAppliedSequence int64  `json:"last_applied_sequence"`
	// Applied counts the turns applied over all runs of the conversation.
	Applied int64 `json:"applied"`
	// Pending counts the requests received and not applied yet (held at a gap, or queued).
	Pending int `json:"pending"`
	// Overflow counts, of Pending, the requests waiting in the workers' OverflowStore
	// (State.Overflow); PendingSequences does not list theirs.
	Overflow int64 `json:"overflow,omitempty"`
	// PendingSequences are the sequences of the pending sequenced requests, ascending.
	PendingSequences []int64 `json:"pending_sequences,omitempty"`
	RunID            string  `json:"run_id"`
	// TurnsThisRun counts the turns this run applied.
	TurnsThisRun int `json:"turns_this_run"`
	// LastErrorKind is the turn.Kind name of the last dead-lettered turn, "" if none.
	LastErrorKind string `json:"last_error_kind,omitempty"`
	// Held is true when the conversation holds requests behind a missing sequence and has
	// nothing else to apply; HeldSince is when it became so (zero when not held) and Missing
	// the sequences it waits for, ascending: those from the applied mark up to the highest
	// held one that no pending request has, at most maxMissingListed of them (MissingCount
	// counts them all).
	Held         bool      `json:"held,omitempty"`
	HeldSince    time.Time `json:"held_since,omitzero"`
	Missing      []int64   `json:"missing,omitempty"`
	MissingCount int64     `json:"missing_count,omitempty"`
	// Skipped counts the sequences releases skipped over all runs (State.SkippedTotal).
	Skipped int64 `json:"skipped,omitempty"`
}

// Release is the argument of the ReleaseUpdateName update: who releases the gap and why, for
// the gap dead letters.
type Release struct {
	// Reason is kept in each gap dead letter's error header; default "released by an operator".
	Reason string `json:"reason,omitempty"`
}

// Released is the answer of a release: the sequences it skipped, ascending (at most
// maxGapLetters listed; Count counts them all), and the applied mark after them.
type Released struct {
	Skipped []int64 `json:"skipped,omitempty"`
	Count   int64   `json:"count"`
	// LastAppliedSequence is the applied mark once the gap was skipped: the held requests
	// apply from there, in order.
	LastAppliedSequence int64 `json:"last_applied_sequence"`
}

// GapReason is the reason of the dead letter of a sequence a release skipped (the "reason"
// header): the sequence never arrived, so there is no request to re-drive. Its request-id
// header is the gap's identity, derived from the workflow id and the sequence (the same on
// every copy a retried report publishes): readers dedup gap dead letters on it.
const GapReason = "gap"

// GapReport is the input of GapActivityName: the conversation and the sequences a release
// skipped. A gap of more than maxGapLetters sequences is reported as its first
// maxGapLetters-1 sequences, one dead letter each, and one dead letter for the rest (From to
// To).
type GapReport struct {
	ConversationID string  `json:"conversation_id"`
	UserID         string  `json:"user_id,omitempty"`
	WorkflowID     string  `json:"workflow_id,omitempty"`
	Sequences      []int64 `json:"sequences,omitempty"`
	// From and To, when To > 0, are a range of skipped sequences reported as one dead letter.
	From   int64  `json:"from,omitempty"`
	To     int64  `json:"to,omitempty"`
	Detail string `json:"detail"`
}

// TurnInput is the input of the turn activity: the request's envelope, and whether the
// workflow wants the Result back (a submit update waits for it). Without that, the activity
// returns no Result, so that a long answer is not copied into the history.
type TurnInput struct {
	Envelope   Envelope `json:"envelope"`
	WantResult bool     `json:"want_result,omitempty"`
	// Reject, when set, is why the request must not run: the activity dead-letters it with
	// this reason (a request sent to another conversation's workflow).
	Reject string `json:"reject,omitempty"`
	// Stale, when set, is why the request's sequence cannot apply (below the applied mark, or
	// pending as another request): the activity answers a request its inbox has done or dead
	// (a duplicate older than the dedup window) from there, as the Runner replays it, and
	// dead-letters any other with this reason, without running it.
	Stale string `json:"stale,omitempty"`
	// Redrive, when set, says the request is a re-drive (Envelope.RedrivenFrom) of a request
	// the conversation applied before: the activity publishes nothing when the inbox has it
	// done (Outcome.AlreadyDone), and otherwise runs it through the Runner as any request.
	Redrive bool `json:"redrive,omitempty"`
}

// Outcome is what the activity returns for one request: that it published a Result (and the
// Result itself when TurnInput.WantResult), or the reason it published a dead letter instead.
type Outcome struct {
	// Published is true when a Result was published.
	Published bool         `json:"published,omitempty"`
	Result    *turn.Result `json:"result,omitempty"`
	// DeadLettered is true when the request went to the dead-letter topic.
	DeadLettered bool   `json:"dead_lettered,omitempty"`
	Reason       string `json:"reason,omitempty"`
	// Kind is the turn.Kind name of the failure that dead-lettered it.
	Kind string `json:"kind,omitempty"`
	// Foreign is true when the request was dead-lettered because its conversation's session
	// belongs to another user (session.ErrOwnerMismatch, G7): the workflow leaves the
	// conversation's state as it was.
	Foreign bool `json:"foreign,omitempty"`
	// AlreadyDone is true when a re-drive (TurnInput.Redrive) found the request done in the
	// inbox: its result was published before, so nothing was published again.
	AlreadyDone bool `json:"already_done,omitempty"`
}
