package consumer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rec "github.com/turnstile-go/turnstile/internal/record"
)

// Health is a member's state for a Kubernetes probe: Ready for the readiness probe, Live for
// the liveness probe. Read it with Consumer.Health; serve it with Consumer.ReadyHandler and
// Consumer.LiveHandler.
type Health struct {
	// Running is true from the moment Run has connected to the brokers until it returns.
	Running bool `json:"running"`
	// InGroup is true while the member holds a consumer group session: it joined, got its
	// assignment, and the coordinator answers its heartbeats (sarama ends the session when it
	// stops answering for Consumer.Group.Session.Timeout).
	InGroup bool `json:"in_group"`
	// Generation is the group generation of the session, 0 before the first.
	Generation int32 `json:"generation,omitempty"`
	// Partitions are the partitions of the requests topic this member owns, ascending.
	Partitions []int32 `json:"partitions"`
	// Paused are those of Partitions whose fetching is paused, with the reason in
	// PauseReason: "rate_limit" when a rate-limited model paused every partition,
	// "backpressure" when only full windows (Config.MaxBuffered) are paused.
	Paused      []int32 `json:"paused,omitempty"`
	PauseReason string  `json:"pause_reason,omitempty"`
	// Progress is the last time the member was seen moving: a group session started, a
	// commit was made, or records reached their outcome (the brokers acknowledged them and
	// the Handler's stores answered). Checked every Config.CommitInterval; zero before.
	Progress time.Time `json:"progress,omitzero"`
	// Unavailable is the last time the Handler answered turn.KindUnavailable (a store or
	// model outage), with that error in UnavailableError; zero if never.
	Unavailable      time.Time `json:"unavailable,omitzero"`
	UnavailableError string    `json:"unavailable_error,omitempty"`
}

// Ready reports whether the member serves records: Run is running, the member is in its
// group, owns at least one partition, and not every one of them is paused. A member of a group
// with more members than partitions owns none and is not ready; neither is one whose model is
// rate limited (every partition paused) until the pause ends.
func (h Health) Ready() bool {
	return h.Running && h.InGroup && len(h.Partitions) > 0 && len(h.Paused) < len(h.Partitions)
}

// Live reports whether Run is running. An outage of the stores, the model or the brokers does
// not make a member dead: restarting it would not help, and it resumes by itself (Progress and
// Unavailable tell an operator how long it has been stuck).
func (h Health) Live() bool { return h.Running }

// Reason says in a few words why the member is not ready, "" when it is.
func (h Health) Reason() string {
	switch {
	case !h.Running:
		return "not running"
	case !h.InGroup:
		return "not in a consumer group session (joining, or rebalancing)"
	case len(h.Partitions) == 0:
		return "owns no partition"
	case len(h.Paused) == len(h.Partitions):
		return fmt.Sprintf("every partition paused (%s)", h.PauseReason)
	}
	return ""
}

// Health returns the member's state; safe to call at any time, from any goroutine.
func (c *Consumer) Health() Health {
	h := Health{Running: c.health.running.Load(), InGroup: c.health.inGroup.Load(),
		Generation: c.health.generation.Load()}
	if t := c.health.progress.Load(); t != 0 {
		h.Progress = time.Unix(0, t)
	}
	c.health.mu.Lock()
	h.Unavailable, h.UnavailableError = c.health.unavailable, c.health.unavailableErr
	c.health.mu.Unlock()
	h.Partitions = []int32{}
	for _, op := range c.owned() {
		h.Partitions = append(h.Partitions, op.p.t.partition)
		if reason := c.pauses.reason(op.p.t); reason != "" {
			h.Paused = append(h.Paused, op.p.t.partition)
			if h.PauseReason == "" || reason == PauseReasonRateLimit {
				h.PauseReason = reason
			}
		}
	}
	slices.Sort(h.Partitions)
	slices.Sort(h.Paused)
	return h
}

// ReadyHandler answers a readiness probe: 200 when Health().Ready(), else 503; the body is
// the Health as JSON, with "reason" when not ready.
func (c *Consumer) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { serveHealth(w, c.Health(), Health.Ready) })
}

// LiveHandler answers a liveness probe: 200 when Health().Live(), else 503, with the Health
// as JSON.
func (c *Consumer) LiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { serveHealth(w, c.Health(), Health.Live) })
}

func serveHealth(w http.ResponseWriter, h Health, ok func(Health) bool) {
	body := struct {
		Health
		Reason string `json:"reason,omitempty"`
	}{Health: h}
	status := http.StatusOK
	if !ok(h) {
		status, body.Reason = http.StatusServiceUnavailable, h.Reason()
		if body.Reason == "" {
			body.Reason = "not running"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// health is what Health reads, kept off the per-record path: flags set at start, stop and
// each rebalance, progress checked every CommitInterval, outages on their rare path.
type health struct {
	running    atomic.Bool
	inGroup    atomic.Bool
	generation atomic.Int32
	progress   atomic.Int64 // unix nanos

	mu             sync.Mutex
	unavailable    time.Time
	unavailableErr string
	lastRecords    int64 // Stats.Records at the last progress check

	partsMu sync.Mutex
	parts   map[tp]*ownedPartition
}

func (h *health) moved() { h.progress.Store(time.Now().UnixNano()) }

// sawUnavailable records an outage answer of the Handler.
func (h *health) sawUnavailable(err error) {
	h.mu.Lock()
	h.unavailable, h.unavailableErr = time.Now(), rec.Clip(err.Error())
	h.mu.Unlock()
}

// checkProgress notes progress when records reached their outcome since the last check.
func (c *Consumer) checkProgress() {
	n := c.stats.records.Load()
	c.health.mu.Lock()
	movedOn := n != c.health.lastRecords
	c.health.lastRecords = n
	c.health.mu.Unlock()
	if movedOn {
		c.health.moved()
	}
}

// reason says why a partition is paused: PauseReasonRateLimit, PauseReasonBackpressure, or
// "" when it fetches.
func (p *pauses) reason(t tp) string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.all {
		return PauseReasonRateLimit
	}
	if _, ok := p.full[t]; ok {
		return PauseReasonBackpressure
	}
	return ""
}
