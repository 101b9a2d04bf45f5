package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/sync/errgroup"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/workflow"
)

type overviewPage struct {
	Sessions, Inbox, Journal, Outbox, DeadLetters, Lag, Held bool
	DeadLetterTopic, RequestsTopic, Group                    string
}

func (h *Handler) overview(context.Context, *http.Request) (page, error) {
	_, journal := h.cfg.Inbox.(inbox.Journal)
	_, outbox := h.cfg.Inbox.(inbox.Outbox)
	return page{name: "overview", title: "Overview", data: overviewPage{
		Sessions: h.cfg.Sessions != nil, Inbox: h.cfg.Inbox != nil, Journal: journal, Outbox: outbox,
		DeadLetters: h.dlqConfigured(), Lag: h.lagConfigured(), Held: h.cfg.Held != nil,
		DeadLetterTopic: h.cfg.DeadLetterTopic, RequestsTopic: h.cfg.RequestsTopic, Group: h.cfg.Group,
	}}, nil
}

type conversationsPage struct {
	Configured bool
	Query, By  string
	Searched   bool
	Sessions   []sqlsession.Summary
	Cut        bool
	Limit      int
	// DeadOnly is the conversation searched by id when no session holds it but the dead
	// letters do (its first request was dead-lettered).
	DeadOnly bool
}

// conversations searches sessions by conversation id (?by=id, the default) or by owner
// (?by=user), through the session store's indexes.
func (h *Handler) conversations(ctx context.Context, r *http.Request) (page, error) {
	q := r.URL.Query()
	p := conversationsPage{Configured: h.cfg.Sessions != nil, Query: strings.TrimSpace(q.Get("q")), By: q.Get("by")}
	pg := page{name: "conversations", title: "Conversations", data: &p}
	if p.By == "" {
		p.By = "id"
	}
	if p.By != "id" && p.By != "user" {
		return page{}, errorf(http.StatusBadRequest, "?by=%q: want id or user", p.By)
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return page{}, err
	}
	p.Limit = limit
	if !p.Configured || p.Query == "" {
		return pg, nil
	}
	p.Searched = true
	f := sqlsession.ListFilter{App: h.cfg.App, Limit: limit + 1}
	if p.By == "id" {
		f.Conversation = p.Query
	} else {
		f.User = p.Query
	}
	if p.Sessions, err = h.cfg.Sessions.List(ctx, f); err != nil {
		return page{}, err
	}
	if len(p.Sessions) > limit {
		p.Sessions, p.Cut = p.Sessions[:limit], true
	}
	if len(p.Sessions) == 0 && p.By == "id" && h.dlqConfigured() {
		letters, _, err := h.deadLetterSnapshot(ctx, false)
		if err != nil {
			return page{}, err
		}
		p.DeadOnly = slices.ContainsFunc(letters, func(l deadletter.Letter) bool { return letterConversation(l) == p.Query })
	}
	return pg, nil
}

// letterConversation is the conversation of a dead letter: its header's, else its key.
func letterConversation(l deadletter.Letter) string {
	if l.ConversationID != "" {
		return l.ConversationID
	}
	return string(l.Key)
}

// stepView is one step of a turn's journal with its idempotency key.
type stepView struct {
	inbox.Step
	Key string
}

// turnView is one turn of a timeline.
type turnView struct {
	RequestID string
	InboxKey  string
	Text      string
	Events    []session.Event
	Entry     *inbox.Entry
	Steps     []stepView
	Intents   []inbox.Intent
	Letters   []deadletter.Letter
	Start     time.Time
	// Stored is false for a request whose turn is not in the session (dead-lettered, or not
	// run yet): it comes from a dead letter.
	Stored bool
}

type timelinePage struct {
	Conversation string
	Key          session.Key
	Session      bool
	EventCount   int64
	Shown        int
	Events       int // the ?events= the page read
	MoreEvents   int // the next ?events= for older turns, 0 when every event is shown
	Turns        []turnView
	IntentsCut   bool
	Notes        []string // sources not configured or that failed
}

// maxTimelineTurns bounds the turns whose inbox entries and steps one timeline reads;
// timelineReaders of them are read at once.
const (
	maxTimelineTurns = 100
	timelineReaders  = 8
)

// timeline shows a conversation's turns: from the session's most recent events (each
// carries its request id), and the conversation's dead letters, each turn with its inbox
// entry, steps, intents and dead letters.
func (h *Handler) timeline(ctx context.Context, r *http.Request) (page, error) {
	conv := r.PathValue("id")
	p := timelinePage{Conversation: conv}
	pg := page{name: "timeline", title: "Conversation " + conv, data: &p}
	events, err := intParam(r, "events", h.cfg.TimelineEvents, maxTimelineEvents)
	if err != nil {
		return page{}, err
	}
	p.Events = events
	turns := map[string]*turnView{}
	var order []string
	add := func(id string) *turnView {
		t := turns[id]
		if t == nil {
			t = &turnView{RequestID: id}
			turns[id] = t
			order = append(order, id)
		}
		return t
	}
	if h.cfg.Sessions == nil {
		p.Notes = append(p.Notes, "The session store is not configured: turns come from the dead letters alone.")
	} else {
		found, err := h.cfg.Sessions.List(ctx, sqlsession.ListFilter{App: h.cfg.App, Conversation: conv, Limit: 1})
		if err != nil {
			return page{}, err
		}
		if len(found) == 1 {
			p.Key, p.Session = found[0].Key, true
			s, err := h.cfg.Sessions.Get(ctx, p.Key, events)
			if err != nil {
				return page{}, err
			}
			p.EventCount, p.Shown = s.EventCount, len(s.Events)
			if p.EventCount > int64(p.Shown) && events < maxTimelineEvents {
				p.MoreEvents = min(events*4, maxTimelineEvents)
			}
			for _, e := range s.Events {
				t := add(e.RequestID)
				t.Stored = true
				t.Events = append(t.Events, e)
				if t.Start.IsZero() {
					t.Start = e.Time
				}
				if e.Author == "user" && t.Text == "" {
					t.Text = e.Text
				}
			}
		}
	}
	if h.dlqConfigured() {
		letters, _, err := h.deadLetterSnapshot(ctx, false)
		if err != nil {
			p.Notes = append(p.Notes, "The dead letters could not be read: "+err.Error())
		}
		for _, l := range letters {
			if letterConversation(l) != conv || l.RequestID == "" {
				continue
			}
			t := add(l.RequestID)
			t.Letters = append(t.Letters, l)
			if !t.Stored {
				if req, err := h.cfg.Decoder.Decode(l.Value); err == nil {
					t.Text = req.Text
					if p.Key.User == "" {
						p.Key = session.Key{App: h.cfg.App, User: req.UserID, Conversation: conv}
					}
				}
				if t.Start.IsZero() {
					t.Start = l.Timestamp
				}
			}
		}
	} else {
		p.Notes = append(p.Notes, "Kafka or the dead-letter topic is not configured: no dead letters shown.")
	}
	switch {
	case len(order) > 0:
	case !p.Session && (h.cfg.Sessions != nil || h.dlqConfigured()):
		return page{}, errorf(http.StatusNotFound, "no conversation %q in app %q (no session, no dead letter)", conv, h.cfg.App)
	case p.Session:
		// A session with no turn stored: its first requests failed (their entries are dead)
		// or are running; their dead letters show them once the topic is configured.
		p.Notes = append(p.Notes, "The session has no turn stored yet: a request whose turn failed before storing anything shows here through its dead letter.")
	}
	if len(order) > maxTimelineTurns {
		order = order[len(order)-maxTimelineTurns:]
	}
	if err := h.fillTurns(ctx, &p, turns, order); err != nil {
		return page{}, err
	}
	for _, id := range order {
		p.Turns = append(p.Turns, *turns[id])
	}
	slices.SortStableFunc(p.Turns, func(a, b turnView) int { return a.Start.Compare(b.Start) })
	return pg, nil
}

// fillTurns reads each turn's inbox entry and steps by its inbox key, and the conversation's
// outbox intents when a step was deferred (the outbox lists intents by conversation without
// an index of its own: the read is skipped when it cannot find any).
func (h *Handler) fillTurns(ctx context.Context, p *timelinePage, turns map[string]*turnView, order []string) error {
	if h.cfg.Inbox == nil {
		p.Notes = append(p.Notes, "The inbox is not configured: no entries, steps or intents shown.")
		return nil
	}
	journal, _ := h.cfg.Inbox.(inbox.Journal)
	byKey := map[string]*turnView{}
	var deferred atomic.Bool
	deferred.Store(journal == nil) // without the journal, look for intents anyway
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(timelineReaders)
	for _, id := range order {
		t := turns[id]
		if p.Key.User == "" {
			continue // no owner known: no inbox key
		}
		t.InboxKey = turn.InboxKey(h.cfg.App, turn.Request{ID: id, UserID: p.Key.User, ConversationID: p.Conversation})
		byKey[t.InboxKey] = t
		g.Go(func() error {
			e, err := h.cfg.Inbox.Get(gctx, t.InboxKey)
			switch {
			case errors.Is(err, inbox.ErrNotFound):
			case err != nil:
				return err
			default:
				t.Entry = &e
			}
			if journal == nil {
				return nil
			}
			steps, err := journal.Steps(gctx, t.InboxKey)
			if err != nil {
				return err
			}
			for _, s := range steps {
				if s.Deferred {
					deferred.Store(true)
				}
				t.Steps = append(t.Steps, stepView{Step: s, Key: turn.SessionToolKey(p.Key, id, fmt.Sprintf("%s#%d", s.Name, s.Ordinal))})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	outbox, ok := h.cfg.Inbox.(inbox.Outbox)
	if !ok || !deferred.Load() {
		return nil // an intent is a deferred step's: none among the steps, none to look for
	}
	intents, err := outbox.Intents(ctx, inbox.IntentFilter{Conversation: p.Conversation, Limit: maxLimit + 1})
	if err != nil {
		return err
	}
	if len(intents) > maxLimit {
		intents, p.IntentsCut = intents[:maxLimit], true
	}
	for _, in := range intents {
		if t := byKey[in.Key]; t != nil {
			t.Intents = append(t.Intents, in)
		}
	}
	return nil
}

type outboxPage struct {
	Configured bool
	State      string
	States     []string
	Intents    []inbox.Intent
	Cut        bool
	Limit      int
}

// outbox lists the intents of one state (?state=, dead by default), oldest first.
func (h *Handler) outbox(ctx context.Context, r *http.Request) (page, error) {
	ob, ok := h.cfg.Inbox.(inbox.Outbox)
	p := outboxPage{Configured: ok, State: r.URL.Query().Get("state"), States: []string{"dead", "pending", "delivered"}}
	pg := page{name: "outbox", title: "Outbox", data: &p}
	if p.State == "" {
		p.State = "dead"
	}
	st, err := inbox.ParseIntentStatus(p.State)
	if err != nil {
		return page{}, errorf(http.StatusBadRequest, "?state=%q: want dead, pending or delivered", p.State)
	}
	if p.Limit, err = h.limitParam(r); err != nil {
		return page{}, err
	}
	if !ok {
		return pg, nil
	}
	if p.Intents, err = ob.Intents(ctx, inbox.IntentFilter{Status: st, Limit: p.Limit + 1}); err != nil {
		return page{}, err
	}
	if len(p.Intents) > p.Limit {
		p.Intents, p.Cut = p.Intents[:p.Limit], true
	}
	return pg, nil
}

func (h *Handler) lagConfigured() bool {
	return h.cfg.Kafka != nil && h.cfg.Group != "" && h.cfg.RequestsTopic != ""
}

type lagPage struct {
	Configured   bool
	Group, Topic string
	Partitions   []consumer.PartitionLag
	Total        int64
}

// lag shows the group's lag per partition of the requests topic (consumer.GroupLag).
func (h *Handler) lag(_ context.Context, _ *http.Request) (page, error) {
	p := lagPage{Configured: h.lagConfigured(), Group: h.cfg.Group, Topic: h.cfg.RequestsTopic}
	pg := page{name: "lag", title: "Consumer lag", data: &p}
	if !p.Configured {
		return pg, nil
	}
	admin, err := h.clusterAdmin()
	if err != nil {
		return page{}, err
	}
	parts, err := consumer.GroupLag(h.cfg.Kafka, admin, h.cfg.Group, h.cfg.RequestsTopic)
	if err != nil {
		if errors.Is(err, consumer.ErrNoCommittedOffsets) {
			return page{}, errorf(http.StatusNotFound, "%v", err)
		}
		return page{}, err
	}
	p.Partitions = parts
	for _, pl := range parts {
		p.Total += pl.Lag
	}
	return pg, nil
}

// clusterAdmin returns the admin on Config.Kafka, made once. It is never closed: closing it
// would close the caller's client.
func (h *Handler) clusterAdmin() (sarama.ClusterAdmin, error) {
	h.adminMu.Lock()
	defer h.adminMu.Unlock()
	if h.admin == nil {
		a, err := sarama.NewClusterAdminFromClient(h.cfg.Kafka)
		if err != nil {
			return nil, err
		}
		h.admin = a
	}
	return h.admin, nil
}

type heldPage struct {
	Configured bool
	Held       []workflow.HeldConversation
	Cut        bool
	Asked      int
	Unanswered []workflow.Unanswered
	Pollers    int
}

// held lists the conversations held at a sequence gap, longest-held first.
func (h *Handler) held(ctx context.Context, r *http.Request) (page, error) {
	p := heldPage{Configured: h.cfg.Held != nil}
	pg := page{name: "held", title: "Held conversations", data: &p}
	if !p.Configured {
		return pg, nil
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return page{}, err
	}
	rep, err := h.cfg.Held.HeldReport(ctx, workflow.HeldOptions{})
	if err != nil {
		return page{}, err
	}
	p.Held, p.Asked, p.Unanswered, p.Pollers = rep.Held, rep.Asked, rep.Unanswered, rep.Pollers
	if len(p.Unanswered) > limit {
		p.Unanswered, p.Cut = p.Unanswered[:limit], true
	}
	if len(p.Held) > limit {
		p.Held, p.Cut = p.Held[:limit], true
	}
	return pg, nil
}

type releasedPage struct {
	Conversation string
	Released     workflow.Released
}

// release releases the held conversation of the form (conversation=ID, reason=TEXT).
func (h *Handler) release(ctx context.Context, r *http.Request) (page, error) {
	if h.cfg.Held == nil {
		return page{}, errorf(http.StatusNotImplemented, "release is not configured: it needs Temporal mode's bridge (Config.Held)")
	}
	conv := strings.TrimSpace(r.PostForm.Get("conversation"))
	if conv == "" {
		return page{}, errorf(http.StatusBadRequest, "name the conversation to release: conversation=ID")
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		reason = "released from the turnstile console"
	}
	out, err := h.cfg.Held.Release(ctx, conv, reason)
	h.cfg.Logger.Info("console: release", "conversation", conv, "skipped", out.Skipped, "err", err, "remote", r.RemoteAddr)
	if err != nil {
		return page{}, err
	}
	h.forget()
	return page{name: "released", title: "Released", data: releasedPage{Conversation: conv, Released: out}}, nil
}
