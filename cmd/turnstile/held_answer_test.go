package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/workflow"
)

// With its worker stopped, a held conversation's workflow does not answer its status query:
// turnstile held names it and exits 1 (it printed "0 conversations held" and exited 0). A
// mistyped --task-queue exits 3 naming the task queue in use, for held and release; a release
// of a conversation without a workflow exits 3.
func TestHeldReportsUnansweredAndUnknownTaskQueue(t *testing.T) {
	t.Parallel()
	s := startTemporalService(t)
	kc, queue, bridge := s.kc, s.queue, s.bridge
	conv := kc.Unique("c-held")
	s.handOff(t, conv, 1)
	s.handOff(t, conv, 3)
	temporal, tq := "--temporal="+s.host, "--task-queue="+queue
	require.Eventually(t, func() bool {
		code, out, _ := cli(t, "held", temporal, tq, "--json")
		var held []workflow.HeldConversation
		return code == exitOK && json.Unmarshal([]byte(out), &held) == nil && len(held) == 1
	}, wait, 200*time.Millisecond, "the held conversation is listed while its worker runs")

	s.stopWorker()
	code, out, errOut := cli(t, "held", temporal, tq, "--query-timeout=1s")
	require.Equal(t, exitFailed, code, "stdout: %s\nstderr: %s", out, errOut)
	require.Contains(t, errOut, "no answer: "+bridge.WorkflowID(conv))
	require.Contains(t, errOut, "1 of 1 conversation workflows did not answer their status query")
	require.Contains(t, errOut, "0 conversations held among the 0 of 1 workflows that answered")
	require.NotContains(t, out, conv, "not listed as held: it did not say")

	for _, args := range [][]string{
		{"held", temporal, "--task-queue=" + queue + "-typo"},
		{"release", temporal, "--task-queue=" + queue + "-typo", "--conversation=" + conv},
	} {
		code, _, errOut = cli(t, args...)
		require.Equal(t, exitNotFound, code, "%s: %s", strings.Join(args, " "), errOut)
		require.Contains(t, errOut, queue+"-typo")
		require.Contains(t, errOut, "the running conversation workflows use: ", errOut)
		require.Contains(t, errOut, queue, "names the task queue in use")
	}
	code, _, errOut = cli(t, "release", temporal, "--conversation="+kc.Unique("c-none"))
	require.Equal(t, exitNotFound, code, errOut)
	require.Contains(t, errOut, "no running workflow of conversation")
}
