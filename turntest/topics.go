package turntest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// Topic describes a topic for [CreateTopics].
type Topic struct {
	// Name is the topic's name.
	Name string
	// Partitions is the number of partitions, at least 1.
	Partitions int32
	// Configs are topic configs, such as "max.message.bytes" (bytes) or "retention.ms".
	Configs map[string]string
}

// Config returns a sarama config for admin clients and producers of a kfake cluster: [Version]
// and short metadata retries, so that a topic created a moment ago is found at once.
func Config() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = Version
	sc.ClientID = "turnstile-turntest"
	sc.Metadata.Retry.Max = 10
	sc.Metadata.Retry.Backoff = 50 * time.Millisecond
	return sc
}

// CreateTopics creates each topic that does not exist yet (replication factor -1: the
// broker's default) and waits, until ctx ends, for every partition of every topic to have a
// leader in the metadata. A topic that exists is left as it is, whatever its partition count
// and configs, and so is reported in existing. sc is the sarama config to connect with; nil
// means [Config]().
func CreateTopics(ctx context.Context, brokers []string, sc *sarama.Config, topics ...Topic) (existing []string, err error) {
	if sc == nil {
		sc = Config()
	}
	admin, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("turntest: connect to %v: %w", brokers, err)
	}
	defer admin.Close()
	for _, t := range topics {
		if t.Partitions < 1 {
			return existing, fmt.Errorf("turntest: topic %q: %d partitions, want at least 1", t.Name, t.Partitions)
		}
		detail := &sarama.TopicDetail{NumPartitions: t.Partitions, ReplicationFactor: -1, ConfigEntries: map[string]*string{}}
		for k, v := range t.Configs {
			detail.ConfigEntries[k] = &v
		}
		err := admin.CreateTopic(t.Name, detail, false)
		switch {
		case errors.Is(err, sarama.ErrTopicAlreadyExists):
			existing = append(existing, t.Name)
		case err != nil:
			return existing, fmt.Errorf("turntest: create topic %q: %w", t.Name, err)
		}
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return existing, fmt.Errorf("turntest: connect to %v: %w", brokers, err)
	}
	defer client.Close()
	for _, t := range topics {
		if err := waitReady(ctx, client, t.Name, 0); err != nil {
			return existing, err
		}
	}
	return existing, nil
}

// waitReady polls the metadata until every partition of topic has a leader, and, when
// partitions > 0, the metadata holds that many: a real cluster publishes a new topic's metadata
// a little after CreateTopics returns.
func waitReady(ctx context.Context, client sarama.Client, topic string, partitions int32) error {
	for {
		err := ready(client, topic, partitions)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("turntest: topic %q not ready: %w (%w)", topic, err, ctx.Err())
		case <-time.After(50 * time.Millisecond): // poll interval, not an assertion
		}
	}
}

func ready(client sarama.Client, topic string, partitions int32) error {
	if err := client.RefreshMetadata(topic); err != nil {
		return err
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	switch {
	case len(parts) == 0:
		return errors.New("no partitions in metadata")
	case partitions > 0 && int32(len(parts)) != partitions:
		return fmt.Errorf("%d of %d partitions in metadata", len(parts), partitions)
	}
	for _, p := range parts {
		if _, err := client.Leader(topic, p); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}
