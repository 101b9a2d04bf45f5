package console

import (
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// screenshots makes TestBrowser write docs/console-*.png (or TURNSTILE_CONSOLE_SCREENSHOTS=1).
var screenshots = flag.Bool("screenshots", false, "TestBrowser writes its screenshots to docs/console-*.png")

// chromium returns the path of the Chromium to drive: skipped without one, failed under
// CI=true, where .ci/run installs Debian's chromium.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH: .ci/run installs Debian's chromium")
	}
	t.Skip("no chromium on PATH (apt-get install chromium)")
	return ""
}

// TestBrowser opens the console in a headless Chromium on a running member (a consumer on
// turntest's broker with SQLite stores) whose model dead-lettered a request, finds the
// conversation by its user, opens its timeline and re-drives the dead letter from there once
// the model is fixed; the request goes back to the requests topic and its turn completes.
func TestBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	kc := turntest.NewCluster(t, turntest.Options{})
	requests, results, dlq := kc.CreateTopic(t, "requests", 3), kc.CreateTopic(t, "results", 3), kc.CreateTopic(t, "dlq", 1)
	st := openStores(t, sqltest.SQLiteFile(t), sqlinbox.SQLite, "")
	model := &testModel{}
	model.broken.Store(true)
	runner := &turn.Runner{Model: model, Sessions: st.sessions, Inbox: st.inbox, App: "shop"}
	group := kc.Unique("shop")
	c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: group, RequestsTopic: requests,
		ResultsTopic: results, DeadLetterTopic: dlq, Sarama: kc.Config()}, consumer.RunnerHandler(runner))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	first := turntest.NewRequest("c-7731", "ada", "where is my order?")
	kc.ProduceRequest(t, requests, first)
	kc.ReadResults(t, results, 1, time.Minute)
	refund := turntest.NewRequest("c-7731", "ada", "I want a refund for order o-17")
	kc.ProduceRequest(t, requests, refund)
	letters := kc.ReadDeadLetters(t, dlq, 1, time.Minute)
	require.Equal(t, refund.ID, letters[0].RequestID)

	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	var redrives atomic.Int32
	h, err := New(Config{App: "shop", Sessions: st.sessions, Inbox: st.inbox, Kafka: client, DeadLetterTopic: dlq,
		RequestsTopic: requests, Group: group, Actions: true, DeadLetterTTL: time.Millisecond,
		Authorize: func(_ *http.Request, a Action) error {
			if a == ActionRedrive {
				redrives.Add(1)
			}
			return nil
		}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true)}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)

	shots := map[string][]byte{}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			shots[name] = buf
			return err
		})
	}
	text := func(sel string, into *string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) (err error) {
			*into, err = chromedp.Text(chromedp.CSS(sel))(ctx, tg)
			return err
		})
	}
	// browse runs the steps one by one, each within 30s, and fails naming the one that did not
	// finish.
	browse := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		for i, st := range steps {
			sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
			err := chromedp.Do(sctx, st)
			scancel()
			require.NoError(t, err, "step %d", i)
		}
	}
	require.NoError(t, chromedp.Do(bctx)) // starts the browser, outside any step's timeout
	var conv, outcome, timeline string
	browse(
		chromedp.Navigate(srv.URL+"/conversations"),
		chromedp.SendKeys(chromedp.ID("q"), "ada"),
		chromedp.SetValue(chromedp.ID("by"), "user"),
		chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.CSS("a.conv")),
		text("a.conv", &conv),
		shot("search"),
		chromedp.Click(chromedp.CSS("a.conv")),
		chromedp.WaitVisible(chromedp.CSS("button.redrive")),
		text("ol.timeline", &timeline),
		shot("timeline"),
		chromedp.Navigate(srv.URL+"/deadletters"),
		chromedp.WaitVisible(chromedp.CSS("section.reason-group")),
		shot("deadletters"),
		chromedp.Navigate(srv.URL+"/conversations/c-7731"),
		chromedp.WaitVisible(chromedp.CSS("button.redrive")),
	)
	require.Equal(t, "c-7731", conv)
	for _, want := range []string{"where is my order?", "I want a refund for order o-17", "tool:lookup", "tool:email",
		turn.InboxKey("shop", first), letters[0].ID(), errModelDown.Error()} {
		require.Contains(t, timeline, want)
	}

	model.broken.Store(false) // the fix is deployed: re-drive
	browse(
		chromedp.Click(chromedp.CSS("button.redrive")),
		chromedp.WaitVisible(chromedp.CSS("td.outcome")),
		text("td.outcome", &outcome),
		shot("redriven"),
	)
	require.Equal(t, string(deadletter.Redriven), outcome)
	require.EqualValues(t, 1, redrives.Load())

	// The request is back on the requests topic, marked as a re-drive, and its turn runs.
	var back bool
	for _, m := range kc.ReadAll(t, requests, 3, time.Minute) {
		back = back || turntest.HeaderMap(m)[deadletter.HeaderRedrivenFrom] == letters[0].ID()
	}
	require.True(t, back, "no request re-published from %s", letters[0].ID())
	key := turn.InboxKey("shop", refund)
	require.Eventually(t, func() bool {
		e, err := st.inbox.Get(context.Background(), key)
		return err == nil && e.Status == inbox.StatusDone && len(e.Redrives) == 1
	}, time.Minute, 20*time.Millisecond)

	browse(
		chromedp.Navigate(srv.URL+"/conversations/c-7731"),
		chromedp.WaitVisible(chromedp.CSS("ol.timeline")),
		text("ol.timeline", &timeline),
	)
	require.Contains(t, timeline, "re-driven")

	// The lag page shows the group's partitions once it committed.
	require.Eventually(t, func() bool {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/lag", nil))
		return rec.Code == http.StatusOK && strings.Count(rec.Body.String(), "<tr><td>") == 3
	}, time.Minute, 50*time.Millisecond)
	if *screenshots || os.Getenv("TURNSTILE_CONSOLE_SCREENSHOTS") == "1" {
		for name, buf := range shots {
			require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "console-"+name+".png"), buf, 0o644))
		}
	}
}
