package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

// A topic the cluster does not have (a mistyped --topic) exits 3 naming the topics it has, for
// every command that reads one; before, dlq list printed "0 dead letters" and exited 0.
func TestMistypedTopicIsNotFound(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	dlq, requests := kc.CreateTopic(t, "dlq", 1), kc.CreateTopic(t, "requests", 1)
	brokers, typo := "--brokers="+kc.BrokerList(), kc.Unique("typo")
	for _, args := range [][]string{
		{"dlq", "list", "--topic=" + typo},
		{"dlq", "show", "--topic=" + typo, "--request-id=r-1"},
		{"dlq", "redrive", "--topic=" + typo, "--all", "--dry-run"},
		{"dlq", "redrive", "--topic=" + dlq, "--all", "--dry-run", "--requests-topic=" + typo},
		{"lag", "--topic=" + typo, "--group=g"},
		{"replay", "--from=" + typo, "--to=" + kc.Unique("sandbox")},
		{"replay", "--from=" + requests, "--to=" + typo},
	} {
		code, out, errOut := cli(t, append(args, brokers)...)
		require.Equal(t, exitNotFound, code, "%s\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
		require.Contains(t, errOut, typo+`": the cluster has no such topic; it has: `, args)
		require.Contains(t, errOut, dlq, "names the topics the cluster has")
		require.Contains(t, errOut, requests)
	}
	code, _, errOut := cli(t, "dlq", "list", "--topic="+dlq, brokers)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "0 dead letters")
}
