package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// lineWriter is an io.Writer safe for concurrent use that reports the first URL written.
type lineWriter struct {
	mu  sync.Mutex
	buf strings.Builder
	url chan string
}

var consoleURL = regexp.MustCompile(`http://\S+/`)

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if u := consoleURL.FindString(w.buf.String()); u != "" {
		select {
		case w.url <- u:
		default:
		}
	}
	return len(p), nil
}

// startConsole runs `turnstile console` with args until the test ends and returns its URL.
func startConsole(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &lineWriter{url: make(chan string, 1)}
	var errOut strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"console", "--listen=127.0.0.1:0"}, args...), out, &errOut, func(string) string { return "" })
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, exitOK, <-code)
	})
	select {
	case u := <-out.url:
		return u
	case c := <-code:
		t.Fatalf("console exited with %d: %s", c, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the console did not start")
	}
	return ""
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if len(hdr) == 2 {
		req.Header.Set(hdr[0], hdr[1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// `turnstile console` serves the console on the stores of --db, read-only by default; with
// --actions it needs --token, and then every page needs the token, as a bearer header or
// the cookie that ?token= sets.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.db")
	ok(t, "migrate", "--db=sqlite:"+path)
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	ss, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	key := session.Key{App: "shop", User: "u-1", Conversation: "c-1"}
	_, err = ss.Create(context.Background(), key, nil)
	require.NoError(t, err)
	_, err = ss.Append(context.Background(), key, 0, session.Turn{RequestID: "r-1", Events: []session.Event{{Author: "user", Text: "where is my parcel?"}}})
	require.NoError(t, err)

	code, _, errOut := cli(t, "console", "--db=sqlite:"+path, "--actions")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--actions needs --token")
	code, _, errOut = cli(t, "console", "--temporal=127.0.0.1:1")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--temporal needs --task-queue")
	code, _, errOut = cli(t, "console", "--db=sqlite:"+path, "--actions", "--token=  short  ")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--token must be at least 16 characters")
	code, _, errOut = cli(t, "console", "--db=sqlite:"+path, "--table-prefix=other_")
	require.Equal(t, exitFailed, code, "a mistyped prefix is refused at start, not served as errors")
	require.Contains(t, errOut, "hint: a table is missing under the table prefix")

	base := startConsole(t, "--db=sqlite:"+path, "--app=shop")
	status, body := get(t, http.DefaultClient, base+"conversations/c-1")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "where is my parcel?")
	require.Contains(t, body, "read-only")
	status, body = get(t, http.DefaultClient, base+"deadletters")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "not configured")

	base = startConsole(t, "--db=sqlite:"+path, "--app=shop", "--actions", "--token=s3cret-s3cret-s3cret")
	status, body = get(t, http.DefaultClient, base+"conversations/c-1")
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "no token")
	status, _ = get(t, http.DefaultClient, base+"conversations/c-1", "Authorization", "Bearer nope")
	require.Equal(t, http.StatusForbidden, status)
	status, body = get(t, http.DefaultClient, base+"conversations/c-1", "Authorization", "Bearer s3cret-s3cret-s3cret")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "actions on")
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	status, body = get(t, browser, base+"conversations/c-1?token=s3cret-s3cret-s3cret")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "where is my parcel?")
	status, _ = get(t, http.DefaultClient, base+"?token=wrong")
	require.Equal(t, http.StatusForbidden, status)
}
