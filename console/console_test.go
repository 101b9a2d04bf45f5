package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
	"github.com/turnstile-go/turnstile/workflow"
)

// seeded returns stores holding one conversation (c-1 of u-1) whose turn ran a step and
// deferred an intent, and the request.
func seeded(t *testing.T) (stores, turn.Request) {
	t.Helper()
	st := openStores(t, sqltest.SQLiteMemory(t), sqlinbox.SQLite, "")
	r := &turn.Runner{Model: &testModel{}, Sessions: st.sessions, Inbox: st.inbox, App: "shop"}
	req := turntest.NewRequest("c-1", "u-1", "where is my order?")
	_, err := r.Run(context.Background(), req)
	require.NoError(t, err)
	return st, req
}

// do sends a request to h and returns the status and body.
func do(t *testing.T, h http.Handler, method, target string, form url.Values, hdr map[string]string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, target, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestNewRefusesActionsWithoutAuthorize(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Actions: true})
	require.ErrorContains(t, err, "Config.Authorize")
	_, err = New(Config{BasePath: "console/"})
	require.ErrorContains(t, err, "BasePath")
	_, err = New(Config{Limit: -1})
	require.ErrorContains(t, err, "Limit")
}

// The timeline of a conversation shows its turn's request, answer, inbox entry, steps with
// their idempotency keys and its outbox intent.
func TestTimeline(t *testing.T) {
	t.Parallel()
	st, req := seeded(t)
	h, err := New(Config{App: "shop", Sessions: st.sessions, Inbox: st.inbox, BasePath: "/console"})
	require.NoError(t, err)
	code, body := do(t, h, "GET", "/console/conversations?by=user&q=u-1", nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `href="/console/conversations/c-1"`)
	code, body = do(t, h, "GET", "/console/conversations/c-1", nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	key := turn.InboxKey("shop", req)
	stepKey := turn.SessionToolKey(session.Key{App: "shop", User: req.UserID, Conversation: req.ConversationID}, req.ID, "tool:lookup#1")
	for _, want := range []string{"where is my order?", "Order o-17", key, "tool:lookup", stepKey, "tool:email",
		"deferred", key + "#2", "pending", "Kafka or the dead-letter topic is not configured"} {
		require.Contains(t, body, want)
	}
}

func TestSadPaths(t *testing.T) {
	t.Parallel()
	st, _ := seeded(t)
	allow := func(*http.Request, Action) error { return nil }
	refuseRedrive := func(_ *http.Request, a Action) error {
		if a == ActionRedrive {
			return errors.New("operators only")
		}
		return nil
	}
	refuseAll := func(*http.Request, Action) error { return errors.New("who are you?") }
	full := Config{App: "shop", Sessions: st.sessions, Inbox: st.inbox}
	// A session whose first request failed before its turn stored anything: no event.
	_, err := st.sessions.Create(context.Background(), session.Key{App: "shop", User: "u-2", Conversation: "c-empty"}, nil)
	require.NoError(t, err)
	with := func(c Config, f func(*Config)) Config { f(&c); return c }
	letter := url.Values{"letter": {"dlq/0/3"}}
	cases := []struct {
		name        string
		cfg         Config
		method, url string
		form        url.Values
		token       bool
		hdr         map[string]string
		status      int
		want        string
	}{
		{"unknown conversation", full, "GET", "/conversations/c-404", nil, false, nil, 404, "no conversation"},
		{"unknown conversation by id search", full, "GET", "/conversations?q=c-404", nil, false, nil, 200, "No session of conversation"},
		{"actions off", full, "POST", "/deadletters/redrive", letter, true, nil, 403, "read-only"},
		{"actions off, release", full, "POST", "/held/release", url.Values{"conversation": {"c-1"}}, true, nil, 403, "read-only"},
		{"GET of an action", full, "GET", "/deadletters/redrive", nil, false, nil, 405, ""},
		{"hook refuses a page", with(full, func(c *Config) { c.Authorize = refuseAll }), "GET", "/conversations/c-1", nil, false, nil, 403, "who are you?"},
		{"hook refuses the overview", with(full, func(c *Config) { c.Authorize = refuseAll }), "GET", "/", nil, false, nil, 403, "not authorized to view"},
		{"hook refuses the action", with(full, func(c *Config) { c.Actions, c.Authorize = true, refuseRedrive }), "POST", "/deadletters/redrive", letter, true, nil, 403, "operators only"},
		{"no token", with(full, func(c *Config) { c.Actions, c.Authorize = true, allow }), "POST", "/deadletters/redrive", letter, false, nil, 403, "token"},
		{"cross-site", with(full, func(c *Config) { c.Actions, c.Authorize = true, allow }), "POST", "/deadletters/redrive", letter, true,
			map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "refused"},
		{"bad search", full, "GET", "/conversations?by=email&q=x", nil, false, nil, 400, "want id or user"},
		{"bad limit", full, "GET", "/conversations?q=c-1&limit=0", nil, false, nil, 400, "limit"},
		{"bad events", full, "GET", "/conversations/c-1?events=lots", nil, false, nil, 400, "events"},
		{"bad state", full, "GET", "/outbox?state=lost", nil, false, nil, 400, "want dead, pending or delivered"},
		{"redrive not configured", with(full, func(c *Config) { c.Actions, c.Authorize = true, allow }), "POST", "/deadletters/redrive", letter, true, nil, 501, "not configured"},
		{"release not configured", with(full, func(c *Config) { c.Actions, c.Authorize = true, allow }), "POST", "/held/release", url.Values{"conversation": {"c-1"}}, true, nil, 501, "not configured"},
		{"nothing configured: conversations", Config{}, "GET", "/conversations?q=c-1", nil, false, nil, 200, "The session store is not configured"},
		{"nothing configured: dead letters", Config{}, "GET", "/deadletters", nil, false, nil, 200, "dead-letter topic is not configured"},
		{"nothing configured: outbox", Config{}, "GET", "/outbox", nil, false, nil, 200, "The outbox is not configured"},
		{"nothing configured: lag", Config{}, "GET", "/lag", nil, false, nil, 200, "is not configured"},
		{"nothing configured: held", Config{}, "GET", "/held", nil, false, nil, 200, "Temporal mode is not configured"},
		{"nothing configured: timeline", Config{}, "GET", "/conversations/c-1", nil, false, nil, 200, "The session store is not configured"},
		{"a session with no turn stored", full, "GET", "/conversations/c-empty", nil, false, nil, 200, "The session has no turn stored yet"},
		{"the stylesheet", Config{}, "GET", "/static/console.css", nil, false, nil, 200, "body"},
		{"no listing of the assets", Config{}, "GET", "/static/", nil, false, nil, 404, "not found"},
		{"nothing configured: overview", Config{}, "GET", "/", nil, false, nil, 200, "not configured"},
		{"unknown page", full, "GET", "/nope", nil, false, nil, 404, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := New(tc.cfg)
			require.NoError(t, err)
			form := tc.form
			if form != nil && tc.token {
				form = url.Values{"token": {h.token}}
				for k, v := range tc.form {
					form[k] = v
				}
			}
			code, body := do(t, h, tc.method, tc.url, form, tc.hdr)
			require.Equal(t, tc.status, code, body)
			require.Contains(t, body, tc.want)
		})
	}
}

// A redrive form needs letters named as TOPIC/PARTITION/OFFSET of the dead-letter topic; the
// lag of a group that never committed is not found.
func TestRedriveBadLetter(t *testing.T) {
	t.Parallel()
	st, _ := seeded(t)
	kc := turntest.NewCluster(t, turntest.Options{})
	dlq := kc.CreateTopic(t, "dlq", 1)
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	h, err := New(Config{App: "shop", Sessions: st.sessions, Inbox: st.inbox, Kafka: client, DeadLetterTopic: dlq,
		RequestsTopic: dlq, Group: "nope", Actions: true, Authorize: func(*http.Request, Action) error { return nil }})
	require.NoError(t, err)
	code, body := do(t, h, "GET", "/lag", nil, nil)
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, "has no committed offsets")
	for _, tc := range []struct {
		form   url.Values
		status int
		want   string
	}{
		{url.Values{}, 400, "name the dead letters"},
		{url.Values{"letter": {"other/0/1"}}, 400, "want " + dlq + "/PARTITION/OFFSET"},
		{url.Values{"letter": {dlq + "/x/1"}}, 400, "with numbers"},
		{url.Values{"letter": {dlq + "/0/-1"}}, 400, "with numbers"},
		{url.Values{"letter": {dlq + "/0/7"}}, 404, "no dead letter at"},
		{url.Values{"reason": {"nothing like it"}}, 404, "no dead letter of reason"},
	} {
		tc.form.Set("token", h.token)
		code, body := do(t, h, "POST", "/deadletters/redrive", tc.form, nil)
		require.Equal(t, tc.status, code, "%v: %s", tc.form, body)
		require.Contains(t, body, tc.want)
	}
}

// fakeHeld holds one conversation until it is released.
type fakeHeld struct{ released []string }

func (f *fakeHeld) HeldReport(context.Context, workflow.HeldOptions) (workflow.HeldReport, error) {
	rep := workflow.HeldReport{Asked: 2, Pollers: 0,
		Unanswered: []workflow.Unanswered{{WorkflowID: "turnstile-c-dark", Error: "context deadline exceeded"}}}
	if len(f.released) > 0 {
		return rep, nil
	}
	rep.Held = []workflow.HeldConversation{{WorkflowID: "turnstile-c-9", Status: workflow.Status{ConversationID: "c-9",
		LastAppliedSequence: 1, PendingSequences: []int64{3}, Missing: []int64{2}, MissingCount: 1, Held: true}}}
	return rep, nil
}

func (f *fakeHeld) Release(_ context.Context, conv, _ string) (workflow.Released, error) {
	if conv != "c-9" {
		return workflow.Released{}, errors.New("not held")
	}
	f.released = append(f.released, conv)
	return workflow.Released{Skipped: []int64{2}, Count: 1, LastAppliedSequence: 3}, nil
}

// The held page lists the held conversations with a release form; release releases one.
func TestHeldAndRelease(t *testing.T) {
	t.Parallel()
	held := &fakeHeld{}
	h, err := New(Config{Held: held, Actions: true, Authorize: func(*http.Request, Action) error { return nil }})
	require.NoError(t, err)
	code, body := do(t, h, "GET", "/held", nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "turnstile-c-9")
	require.Contains(t, body, `action="/held/release"`)
	require.Contains(t, body, "1 of 2 workflows did not answer (no worker polls the task queue)")
	require.Contains(t, body, "turnstile-c-dark")
	code, body = do(t, h, "POST", "/held/release", url.Values{"token": {h.token}}, nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	code, body = do(t, h, "POST", "/held/release", url.Values{"token": {h.token}, "conversation": {"c-1"}}, nil)
	require.Equal(t, http.StatusInternalServerError, code, body)
	require.Contains(t, body, "not held")
	code, body = do(t, h, "POST", "/held/release", url.Values{"token": {h.token}, "conversation": {"c-9"}}, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "skipped 1 sequence(s) [2]")
	require.Equal(t, []string{"c-9"}, held.released)
}

// Dead letters are grouped by their reason without the request ids and numbers in it.
func TestReasonKey(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		"turn ffeeba82-c68d-4e18-a4e4-a71aff5c392e attempt 1: model: permanent: refused":  "turn ID attempt N: model: permanent: refused",
		"turn 0B0E3F0A-0000-4000-8000-000000000001 attempt 12: model: permanent: refused": "turn ID attempt N: model: permanent: refused",
		"decode: request_id: not a UUID": "decode: request_id: not a UUID",
		"gap":                            "gap",
		"value too large: 2097152 bytes": "value too large: N bytes",
	} {
		require.Equal(t, want, reasonKey(reason), reason)
	}
}
