// Package console is turnstile's web console: an http.Handler a service mounts (or `turnstile
// console --listen` runs) that shows an operator what the stores and Kafka hold, on
// server-rendered pages whose templates and stylesheet are embedded in the binary:
//
//   - conversations, searched by conversation id or by user (the session store's List);
//   - a conversation's timeline: each turn with its request, its events, its inbox entry, its
//     steps (the inbox's step journal) with their idempotency keys, its dead letters and its
//     outbox intents, with their times;
//   - the dead letters, grouped by reason, with re-drive (package deadletter);
//   - the outbox's intents by state, dead first;
//   - the consumer group's lag per partition (consumer.GroupLag);
//   - in Temporal mode, the conversations held at a sequence gap, with release.
//
// Every source in Config is optional: a page whose source is nil says it is not configured.
// The console is read-only unless Config.Actions is set, and then Config.Authorize, which it
// consults for every page and every action, is required. Actions are POSTed forms that carry
// a token of the handler and pass Go's cross-origin protection (Sec-Fetch-Site, Origin), so
// that another site cannot make an operator's browser re-drive anything.
//
// Every list is bounded and says when it is cut; the store lookups are by key or by index
// (the session store's (app, conversation) and (app, user) indexes, the inbox's keys), so that
// the pages answer in milliseconds with a hundred thousand turns stored (BENCHMARKS.md). Two
// reads grow with the outbox instead: inbox/sqlinbox's outbox has no index by conversation, so
// a timeline reads its conversation's intents only when one of its turns deferred a step, and
// the outbox page's oldest intents of a rare state (dead) are found by walking the outbox in
// creation order. The dead letters are read from the dead-letter topic (deadletter.Read) and
// kept for Config.DeadLetterTTL.
//
// Mount it under a path prefix with Config.BasePath:
//
//	h, err := console.New(console.Config{BasePath: "/console", Sessions: sessions, Inbox: ib})
//	mux.Handle("/console/", h)
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/workflow"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Action is what an operator asks of the console, as Config.Authorize sees it.
type Action string

const (
	// ActionView is reading any page.
	ActionView Action = "view"
	// ActionRedrive is re-driving dead letters (deadletter.Redrive).
	ActionRedrive Action = "redrive"
	// ActionRelease is releasing a conversation held at a sequence gap (Temporal mode).
	ActionRelease Action = "release"
)

// Sessions is the session store the console reads: a session.Store that lists sessions by
// conversation and by owner. session/sqlsession's Store implements it.
type Sessions interface {
	session.Store
	List(ctx context.Context, f sqlsession.ListFilter) ([]sqlsession.Summary, error)
}

// Held is what the held-conversations page needs of Temporal mode: *workflow.Bridge
// implements it.
type Held interface {
	// HeldReport lists the conversations held at a sequence gap and the workflows that did
	// not answer the status query (workflow.Bridge.HeldReport): the page shows both, since
	// a workflow whose worker is down may be held.
	HeldReport(ctx context.Context, opts workflow.HeldOptions) (workflow.HeldReport, error)
	// Release releases one now (workflow.Bridge.Release).
	Release(ctx context.Context, conversationID, reason string) (workflow.Released, error)
}

// Config configures a console. Every source is optional: nil (or an empty topic) leaves its
// page saying that it is not configured.
type Config struct {
	// App is the service's Runner.App, which scopes sessions and inbox keys; default
	// turn.DefaultApp.
	App string
	// BasePath is the path the handler is mounted at ("/console"), without a trailing slash;
	// "" for the root. Its links and forms start with it.
	BasePath string
	// Sessions is the session store (conversations, timelines).
	Sessions Sessions
	// Inbox is the service's inbox: the timeline's entries, its step journal when it is an
	// inbox.Journal, the outbox page when it is an inbox.Outbox, and the inbox of re-drives.
	Inbox inbox.Inbox
	// Kafka reaches the cluster (dead letters, re-drive, lag); the console leaves it open.
	Kafka sarama.Client
	// DeadLetterTopic is the consumer's dead-letter topic (the dead-letter page).
	DeadLetterTopic string
	// RequestsTopic is the requests topic: where re-drives of Bridge.Submit's dead letters
	// go (deadletter.Options.RequestsTopic), and the topic of the lag page.
	RequestsTopic string
	// Group is the consumer group whose lag the lag page shows (consumer.Config.GroupID).
	Group string
	// Decoder decodes requests as the service does (give it the service's limits).
	Decoder turn.Decoder
	// Held is Temporal mode's bridge (a *workflow.Bridge), for the held-conversations page.
	Held Held
	// Actions turns the actions on (re-drive, release). Off, the console is read-only and
	// refuses every POST with 403.
	Actions bool
	// Authorize is consulted before every page (ActionView) and every action, with the
	// request; an error refuses it with 403 and the error's text. Required when Actions is
	// set; nil otherwise lets every page be read.
	Authorize func(r *http.Request, a Action) error
	// Limit is the most rows of each list on a page; default 50, at most 1,000.
	Limit int
	// TimelineEvents is the most recent events a timeline reads; default 200, at most
	// 5,000. A page asks for more with ?events=N, up to that.
	TimelineEvents int
	// DeadLetterTTL is how long the dead letters read from the topic are kept before the
	// next page reads them again; default 10s. A re-drive reads them again.
	DeadLetterTTL time.Duration
	// Timeout bounds each page's reads and each action; default 20s.
	Timeout time.Duration
	// Logger gets a line per action; default slog.Default().
	Logger *slog.Logger
}

// Handler is the console, an http.Handler. Make one with New.
type Handler struct {
	cfg     Config
	mux     *http.ServeMux
	pages   map[string]*template.Template
	token   string
	cop     *http.CrossOriginProtection
	dlq     dlqCache
	adminMu sync.Mutex
	admin   sarama.ClusterAdmin
}

// Limits of Config's fields.
const (
	maxLimit          = 1000
	maxTimelineEvents = 5000
)

// New returns the console of cfg. Errors: Actions set without Authorize; a negative or too
// large Limit or TimelineEvents; a BasePath that does not start with "/" or ends with one.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Actions && cfg.Authorize == nil:
		return nil, errors.New("console: Config.Actions needs Config.Authorize: an action must be authorized")
	case cfg.Limit < 0 || cfg.Limit > maxLimit:
		return nil, fmt.Errorf("console: Config.Limit = %d, want 0 to %d", cfg.Limit, maxLimit)
	case cfg.TimelineEvents < 0 || cfg.TimelineEvents > maxTimelineEvents:
		return nil, fmt.Errorf("console: Config.TimelineEvents = %d, want 0 to %d", cfg.TimelineEvents, maxTimelineEvents)
	case cfg.BasePath != "" && (!strings.HasPrefix(cfg.BasePath, "/") || strings.HasSuffix(cfg.BasePath, "/")):
		return nil, fmt.Errorf("console: Config.BasePath %q: want \"\" or a path like /console", cfg.BasePath)
	case cfg.DeadLetterTTL < 0 || cfg.Timeout < 0:
		return nil, errors.New("console: Config.DeadLetterTTL and Config.Timeout must not be negative")
	}
	if cfg.App == "" {
		cfg.App = turn.DefaultApp
	}
	if cfg.Limit == 0 {
		cfg.Limit = 50
	}
	if cfg.TimelineEvents == 0 {
		cfg.TimelineEvents = 200
	}
	if cfg.DeadLetterTTL == 0 {
		cfg.DeadLetterTTL = 10 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var secret [24]byte
	_, _ = rand.Read(secret[:]) // crypto/rand.Read never fails
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), token: hex.EncodeToString(secret[:]), cop: http.NewCrossOriginProtection()}
	if err := h.parseTemplates(); err != nil {
		return nil, err
	}
	b := cfg.BasePath
	static, _ := fs.Sub(assets, "static")
	files := http.StripPrefix(b+"/static/", http.FileServerFS(static))
	h.mux.Handle("GET "+b+"/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // the assets, not a listing of them
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	h.mux.HandleFunc("GET "+b+"/{$}", h.view(h.overview))
	h.mux.HandleFunc("GET "+b+"/conversations", h.view(h.conversations))
	h.mux.HandleFunc("GET "+b+"/conversations/{id}", h.view(h.timeline))
	h.mux.HandleFunc("GET "+b+"/deadletters", h.view(h.deadLetters))
	h.mux.HandleFunc("GET "+b+"/outbox", h.view(h.outbox))
	h.mux.HandleFunc("GET "+b+"/lag", h.view(h.lag))
	h.mux.HandleFunc("GET "+b+"/held", h.view(h.held))
	h.mux.HandleFunc("POST "+b+"/deadletters/redrive", h.act(ActionRedrive, h.redrive))
	h.mux.HandleFunc("POST "+b+"/held/release", h.act(ActionRelease, h.release))
	return h, nil
}

// ServeHTTP serves the console's pages, actions and stylesheet.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
	w.Header().Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// httpError is an error with the status it answers.
type httpError struct {
	status int
	msg    string
}

func (e httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return httpError{status, fmt.Sprintf(format, args...)}
}

// page is what a page handler returns: its template and data.
type page struct {
	name  string
	title string
	data  any
}

// view wraps a page handler: the Authorize hook with ActionView, a timeout, the render.
func (h *Handler) view(fn func(ctx context.Context, r *http.Request) (page, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, ActionView, fn) }
}

// serve runs fn for r once the Authorize hook let a through, bounded by Config.Timeout, and
// renders its page or its error.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, a Action, fn func(ctx context.Context, r *http.Request) (page, error)) {
	if err := h.authorize(r, a); err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	p, err := fn(ctx, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, http.StatusOK, p)
}

// act wraps an action handler: actions on, cross-origin protection, the form's token, the
// Authorize hook with a, a timeout, the render.
func (h *Handler) act(a Action, fn func(ctx context.Context, r *http.Request) (page, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.cfg.Actions {
			h.fail(w, r, errorf(http.StatusForbidden, "this console is read-only: actions are off (Config.Actions, turnstile console --actions)"))
			return
		}
		if err := h.cop.Check(r); err != nil {
			h.fail(w, r, errorf(http.StatusForbidden, "refused: %v", err))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, errorf(http.StatusBadRequest, "bad form: %v", err))
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(h.token)) != 1 {
			h.fail(w, r, errorf(http.StatusForbidden, "refused: the form's token is missing or stale (reload the page)"))
			return
		}
		h.serve(w, r, a, fn)
	}
}

func (h *Handler) authorize(r *http.Request, a Action) error {
	if h.cfg.Authorize == nil {
		return nil
	}
	if err := h.cfg.Authorize(r, a); err != nil {
		return errorf(http.StatusForbidden, "not authorized to %s: %v", a, err)
	}
	return nil
}

// fail renders err's page with its status: an httpError's, 504 for a deadline, 500 else.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	var he httpError
	switch {
	case errors.As(err, &he):
		status = he.status
	case errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	}
	if status >= 500 {
		h.cfg.Logger.Warn("console: page failed", "path", r.URL.Path, "err", err)
	}
	h.render(w, status, page{name: "error", title: http.StatusText(status), data: err.Error()})
}
