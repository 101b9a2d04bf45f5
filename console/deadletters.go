package console

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/turnstile-go/turnstile/deadletter"
)

// dlqCache keeps the dead letters last read from the topic: a page older than
// Config.DeadLetterTTL gets them as they were and starts a read in the background, so that
// no page waits for the topic but the first one (a read costs about a second for a thousand
// dead letters: BENCHMARKS.md).
type dlqCache struct {
	mu         sync.Mutex
	at         time.Time
	letters    []deadletter.Letter
	refreshing bool
	err        error // the last background read's, until a read succeeds
}

// deadLetterSnapshot returns the dead letters of the topic and when they were read. It reads
// the topic now when nothing was read yet or fresh is set; when the last read is older than
// the TTL, it returns that read and reads again in the background.
func (h *Handler) deadLetterSnapshot(ctx context.Context, fresh bool) ([]deadletter.Letter, time.Time, error) {
	c := &h.dlq
	c.mu.Lock()
	if !fresh && !c.at.IsZero() {
		letters, at, err := c.letters, c.at, c.err
		if time.Since(at) >= h.cfg.DeadLetterTTL && !c.refreshing {
			c.refreshing = true
			go h.readDeadLetters(context.Background())
		}
		c.mu.Unlock()
		if err != nil {
			return nil, time.Time{}, err
		}
		return letters, at, nil
	}
	c.mu.Unlock()
	return h.readDeadLetters(ctx)
}

// readDeadLetters reads the topic, bounded by Config.Timeout, and keeps what it read.
func (h *Handler) readDeadLetters(ctx context.Context) ([]deadletter.Letter, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	start := time.Now()
	letters, err := deadletter.Read(ctx, h.cfg.Kafka, h.cfg.DeadLetterTopic, deadletter.Filter{})
	c := &h.dlq
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	if err != nil {
		c.err = err
		return nil, time.Time{}, err
	}
	if start.After(c.at) {
		c.letters, c.at, c.err = letters, start, nil
	}
	return letters, start, nil
}

// forget makes the next page read the dead letters again, after an action changed them.
func (h *Handler) forget() {
	h.dlq.mu.Lock()
	h.dlq.at, h.dlq.letters = time.Time{}, nil
	h.dlq.mu.Unlock()
}

func (h *Handler) dlqConfigured() bool { return h.cfg.Kafka != nil && h.cfg.DeadLetterTopic != "" }

// Reasons vary by request: the consumer's name the request id and the attempt ("turn ID
// attempt 3: model: ..."). Letters are grouped by their reason with each UUID and number
// replaced, so that one cause is one group.
var (
	reasonUUID   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	reasonNumber = regexp.MustCompile(`\b[0-9]+\b`)
)

// reasonKey is the group of a dead letter's reason: the reason with its UUIDs as "ID" and
// its numbers as "N".
func reasonKey(reason string) string {
	return reasonNumber.ReplaceAllString(reasonUUID.ReplaceAllString(reason, "ID"), "N")
}

// reasonGroup is the dead letters of one reason, newest first, cut at the page's limit.
type reasonGroup struct {
	Reason  string
	Count   int
	Letters []deadletter.Letter
	Cut     int // letters not shown
}

type deadLettersPage struct {
	Configured bool
	Topic      string
	ReadAt     time.Time
	Total      int
	Reason     string // the reason shown alone, "" for every reason
	Groups     []reasonGroup
}

// deadLetters groups the topic's dead letters by reason (reasonKey), the largest group first,
// each with its newest letters; ?reason=R shows that group alone, with up to ?limit= letters.
func (h *Handler) deadLetters(ctx context.Context, r *http.Request) (page, error) {
	p := deadLettersPage{Configured: h.dlqConfigured(), Topic: h.cfg.DeadLetterTopic, Reason: r.URL.Query().Get("reason")}
	pg := page{name: "deadletters", title: "Dead letters", data: &p}
	if !p.Configured {
		return pg, nil
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return page{}, err
	}
	letters, at, err := h.deadLetterSnapshot(ctx, r.URL.Query().Has("refresh"))
	if err != nil {
		return page{}, err
	}
	p.ReadAt, p.Total = at, len(letters)
	byReason := map[string]*reasonGroup{}
	for i := len(letters) - 1; i >= 0; i-- {
		l := letters[i]
		key := reasonKey(l.Reason)
		if p.Reason != "" && key != p.Reason {
			continue
		}
		g := byReason[key]
		if g == nil {
			g = &reasonGroup{Reason: key}
			byReason[key] = g
		}
		g.Count++
		per := limit
		if p.Reason == "" {
			per = min(limit, 10)
		}
		if len(g.Letters) < per {
			g.Letters = append(g.Letters, l)
		} else {
			g.Cut++
		}
	}
	for _, g := range byReason {
		slices.SortStableFunc(g.Letters, func(a, b deadletter.Letter) int { return b.Timestamp.Compare(a.Timestamp) })
		p.Groups = append(p.Groups, *g)
	}
	slices.SortFunc(p.Groups, func(a, b reasonGroup) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return pg, nil
}

type redrivenPage struct {
	Outcomes []deadletter.Outcome
	DryRun   bool
}

// maxRedrive bounds the dead letters of one re-drive form.
const maxRedrive = 500

// redrive re-drives the dead letters the form names (letter=TOPIC/PARTITION/OFFSET, repeated),
// each read again from the topic by its offset, or every one of the reason group reason=R
// (reasonKey; up to maxRedrive).
func (h *Handler) redrive(ctx context.Context, r *http.Request) (page, error) {
	if !h.dlqConfigured() || h.cfg.Inbox == nil {
		return page{}, errorf(http.StatusNotImplemented, "re-drive is not configured: it needs Kafka, the dead-letter topic and the inbox")
	}
	ids, reason := r.PostForm["letter"], r.PostForm.Get("reason")
	if len(ids) == 0 && reason == "" {
		return page{}, errorf(http.StatusBadRequest, "name the dead letters to re-drive: letter=TOPIC/PARTITION/OFFSET or reason=REASON")
	}
	if len(ids) > maxRedrive {
		return page{}, errorf(http.StatusBadRequest, "%d dead letters in one form, over the limit of %d", len(ids), maxRedrive)
	}
	var letters []deadletter.Letter
	for _, id := range ids {
		p, off, err := h.parseLetterID(id)
		if err != nil {
			return page{}, err
		}
		got, err := deadletter.Read(ctx, h.cfg.Kafka, h.cfg.DeadLetterTopic, deadletter.Filter{Partition: &p, Offset: &off})
		if err != nil {
			return page{}, err
		}
		if len(got) == 0 {
			return page{}, errorf(http.StatusNotFound, "no dead letter at %s (retention may have removed it)", id)
		}
		letters = append(letters, got...)
	}
	if reason != "" {
		all, _, err := h.deadLetterSnapshot(ctx, true)
		if err != nil {
			return page{}, err
		}
		for _, l := range all {
			if reasonKey(l.Reason) == reason && l.Origin != deadletter.OriginGap {
				letters = append(letters, l)
			}
		}
		if len(letters) == 0 {
			return page{}, errorf(http.StatusNotFound, "no dead letter of reason %q", reason)
		}
		if len(letters) > maxRedrive {
			return page{}, errorf(http.StatusBadRequest, "%d dead letters of reason %q, over the limit of %d a re-drive: re-drive them with turnstile dlq redrive",
				len(letters), reason, maxRedrive)
		}
	}
	note := strings.TrimSpace(r.PostForm.Get("note"))
	if note == "" {
		note = "re-driven from the turnstile console"
	}
	out, err := deadletter.Redrive(ctx, deadletter.Options{Client: h.cfg.Kafka, Inbox: h.cfg.Inbox, App: h.cfg.App,
		RequestsTopic: h.cfg.RequestsTopic, Decoder: h.cfg.Decoder, Note: note, Logger: h.cfg.Logger}, letters)
	h.forget()
	for _, o := range out {
		h.cfg.Logger.Info("console: re-drive", "letter", o.Letter.ID(), "action", o.Action, "err", o.Err, "remote", r.RemoteAddr)
	}
	if err != nil && len(out) == 0 {
		return page{}, err
	}
	return page{name: "redriven", title: "Re-drive", data: redrivenPage{Outcomes: out}}, nil
}

// parseLetterID parses "TOPIC/PARTITION/OFFSET" of the dead-letter topic.
func (h *Handler) parseLetterID(id string) (int32, int64, error) {
	rest, ok := strings.CutPrefix(id, h.cfg.DeadLetterTopic+"/")
	ps, os, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return 0, 0, errorf(http.StatusBadRequest, "dead letter %q: want %s/PARTITION/OFFSET", id, h.cfg.DeadLetterTopic)
	}
	p, err1 := strconv.ParseInt(ps, 10, 32)
	off, err2 := strconv.ParseInt(os, 10, 64)
	if err1 != nil || err2 != nil || p < 0 || off < 0 {
		return 0, 0, errorf(http.StatusBadRequest, "dead letter %q: want %s/PARTITION/OFFSET with numbers", id, h.cfg.DeadLetterTopic)
	}
	return int32(p), off, nil
}

// limitParam reads ?limit=N (1 to the max), default Config.Limit.
func (h *Handler) limitParam(r *http.Request) (int, error) {
	return intParam(r, "limit", h.cfg.Limit, maxLimit)
}

// intParam reads the query parameter name as an integer from 1 to most, def when absent.
func intParam(r *http.Request, name string, def, most int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > most {
		return 0, errorf(http.StatusBadRequest, "?%s=%q: want a number from 1 to %d", name, s, most)
	}
	return n, nil
}
