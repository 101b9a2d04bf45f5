package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/IBM/sarama"
)

// maxNamedTopics bounds the topics a not-found error names.
const maxNamedTopics = 30

// requireTopics returns a not-found error (exit code 3) for the first of topics (flag name to
// topic) that the cluster does not have, naming the topics it has (internal ones left out), so
// that a mistyped --topic is told from an empty one. It reads the cluster's whole metadata,
// which creates no topic. Errors: the metadata request's.
func requireTopics(client sarama.Client, topics ...[2]string) error {
	if err := client.RefreshMetadata(); err != nil {
		return fmt.Errorf("read the cluster's topics: %w", err)
	}
	have, err := client.Topics()
	if err != nil {
		return fmt.Errorf("read the cluster's topics: %w", err)
	}
	for _, ft := range topics {
		if ft[1] == "" || slices.Contains(have, ft[1]) {
			continue
		}
		return fmt.Errorf("%w: --%s %q: the cluster has no such topic; it has: %s", errNotFound, ft[0], ft[1], topicList(have))
	}
	return nil
}

// topicList names the topics, sorted, internal ones (a leading "__") left out, at most
// maxNamedTopics of them.
func topicList(topics []string) string {
	var names []string
	for _, t := range topics {
		if !strings.HasPrefix(t, "__") {
			names = append(names, t)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	if n := len(names); n > maxNamedTopics {
		return strings.Join(names[:maxNamedTopics], ", ") + fmt.Sprintf(" (and %d more)", n-maxNamedTopics)
	}
	return strings.Join(names, ", ")
}
