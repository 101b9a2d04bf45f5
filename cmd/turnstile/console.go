package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/console"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

const consoleUsage = `
Serves the web console (package console) at --listen: conversations searched by id or user,
each conversation's timeline (turns, steps with their keys, results, dead letters, outbox
intents), the dead letters by reason, the outbox by state, the group's lag per partition and,
with --temporal, the conversations held at a sequence gap. Each source is optional: --db for
the stores, --brokers with --dlq-topic for the dead letters, --group and --requests-topic for
the lag, --temporal and --task-queue for the held conversations; a page whose source is not
given says so. It is read-only unless --actions, which turns on re-drive and release and
requires --token: every page and action then needs the token, as "Authorization: Bearer
TOKEN" or from a browser by opening the console once with ?token=TOKEN (it sets a cookie).
--token alone guards a read-only console.

Examples:
  turnstile console --listen 127.0.0.1:8080 --db postgres://turnstile@db:5432/agent \
      --brokers kafka:9092 --dlq-topic agent.requests.dlq --requests-topic agent.requests --group agent
  TURNSTILE_TOKEN=s3cret turnstile console --listen :8080 --db sqlite:/var/lib/agent.db --actions
`

// consoleCookie holds the --token a browser gave with ?token=.
const consoleCookie = "turnstile_console_token"

func consoleCmd(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "console", consoleUsage).withKafka().withDB().withApp()
	tf := withTemporal(f)
	listen := f.String("listen", "127.0.0.1:8080", "the address to serve the console at, host:port")
	dlqTopic := f.String("dlq-topic", "", "the dead-letter topic (the dead-letter page and re-drive)")
	requests := f.String("requests-topic", "", "the requests topic (the lag page; re-drives of submitted requests)")
	group := f.String("group", "", "the consumer group whose lag the lag page shows")
	actions := f.Bool("actions", false, "turn on the actions (re-drive, release); needs --token")
	token := f.String("token", "", "the bearer token every page and action needs (required with --actions)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *actions && *token == "" {
		return usagef("--actions needs --token (or %s): actions must be authenticated", envName("token"))
	}
	if *token != "" && len(strings.TrimSpace(*token)) < minTokenLen {
		return usagef("--token must be at least %d characters (not counting spaces at its ends): it is all that guards the console", minTokenLen)
	}
	cfg := console.Config{App: *f.app, DeadLetterTopic: *dlqTopic, RequestsTopic: *requests, Group: *group,
		Actions: *actions, Timeout: *f.timeout, Logger: discard}
	if *token != "" {
		cfg.Authorize = bearer(*token)
	}
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	if *f.db != "" {
		db, ss, ib, err := f.stores()
		if err != nil {
			return err
		}
		closers = append(closers, func() { db.Close() })
		// Reach the tables now: a mistyped --table-prefix is refused with its hint at start,
		// not served as an error on every page.
		if _, err := ss.List(ctx, sqlsession.ListFilter{App: *f.app, Limit: 1}); err != nil {
			return err
		}
		if _, err := ib.Get(ctx, "turnstile-console-probe"); err != nil && !errors.Is(err, inbox.ErrNotFound) {
			return err
		}
		cfg.Sessions, cfg.Inbox = ss, ib
	}
	if *f.brokers != "" {
		client, err := f.kafka()
		if err != nil {
			return err
		}
		closers = append(closers, func() { client.Close() })
		cfg.Kafka = client
	}
	if *tf.hostPort != "" {
		if *tf.taskQueue == "" {
			return usagef("--temporal needs --task-queue (or %s): the held conversations are listed by it", envName("task-queue"))
		}
		b, closeClient, err := tf.bridge()
		if err != nil {
			return err
		}
		closers = append(closers, closeClient)
		cfg.Held = b
	}
	h, err := console.New(cfg)
	if err != nil {
		return usageError{err.Error()}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen at %s: %w", *listen, err)
	}
	srv := &http.Server{Handler: tokenCookie(*token, h), ReadHeaderTimeout: 10 * time.Second}
	mode := "read-only"
	if *actions {
		mode = "actions on"
	}
	fmt.Fprintf(e.stdout, "console at http://%s/ (%s)\n", ln.Addr(), mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// minTokenLen is the shortest --token the console takes.
const minTokenLen = 16

// bearer is the console's Authorize hook for --token: the request carries the token as
// "Authorization: Bearer TOKEN" or in the cookie tokenCookie sets.
func bearer(token string) func(*http.Request, console.Action) error {
	return func(r *http.Request, _ console.Action) error {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			if c, err := r.Cookie(consoleCookie); err == nil {
				got = c.Value
			}
		}
		if got == "" {
			return errors.New("no token: send Authorization: Bearer TOKEN, or open the console once with ?token=TOKEN")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return errors.New("wrong token")
		}
		return nil
	}
}

// tokenCookie wraps h: a GET with ?token=TOKEN (the right one) sets the token's cookie and
// redirects to the same page without it, so that a browser carries the token afterwards.
func tokenCookie(token string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if token == "" || r.Method != http.MethodGet || !q.Has("token") {
			h.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(q.Get("token")), []byte(token)) != 1 {
			http.Error(w, "wrong token", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		q.Del("token")
		u := *r.URL
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
	})
}
