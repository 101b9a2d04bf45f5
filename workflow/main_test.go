package workflow

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-go/turnstile/internal/temporaldev"
)

// serverSignalLimit is the dev server's limit of signals per run in these tests.
const serverSignalLimit = 300

// dev is the package's one dev server, shared by every test that needs one (TestMain starts
// it), or the reason there is none.
var dev struct {
	server *testsuite.DevServer
	reason string
}

func TestMain(m *testing.M) {
	if os.Getenv(envWorkerProcess) != "" {
		os.Exit(runWorkerProcess())
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		dev.reason = "-short: no dev server"
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	// A run takes at most serverSignalLimit signals here (10,000 by default), so that a test
	// can reach the limit quickly. The history shard's transfer queue is read at most 20
	// times a second by default (history.transferProcessorMaxPollRPS), which a dev server's
	// one shard shares among all workflows: a workflow task scheduled by an activity's
	// completion then waited 32 ms on average before a worker got it (2 ms at 1,000), most of
	// a turn's time (TestDevServerThousandTurnsSmallPayloads: 1,000 turns in 51 s, 16 s at
	// 1,000, without -race).
	srv, err := temporaldev.Start(ctx, nil, SearchAttributeTypes,
		"--dynamic-config-value", fmt.Sprintf("history.maximumSignalsPerExecution=%d", serverSignalLimit),
		"--dynamic-config-value", "system.enableActivityEagerExecution=true",
		"--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000")
	cancel()
	if err != nil {
		dev.reason = err.Error()
		return m.Run()
	}
	dev.server = srv
	defer func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "dev server stop:", err)
		}
	}()
	return m.Run()
}

// needServer returns the dev server's host:port, or skips the test with the reason there is
// none (fails it under CI=true).
func needServer(t testing.TB) string {
	t.Helper()
	if dev.server == nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Temporal dev server needed: %s", dev.reason)
		}
		t.Skipf("Temporal dev server needed: %s", dev.reason)
	}
	return dev.server.FrontendHostPort()
}
