// Package embedkafka starts an in-process Kafka broker for turnstile's examples and tests, and
// creates topics on any cluster, embedded or real.
//
// [Start] runs kfake (github.com/twmb/franz-go/pkg/kfake), a Kafka wire-protocol broker written
// in Go, on 127.0.0.1 on free ports; sarama reaches it over TCP like any cluster, so a program
// that runs against it runs unchanged against a real one. Unlike internal/kafkatest it needs no
// *testing.T: `go run ./examples/quickstart` uses it. [CreateTopics] creates the topics that are
// missing and waits until every partition has a leader, on kfake and on a real cluster alike.
package embedkafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Version is the Kafka protocol version to give sarama for a kfake cluster. kfake serves the
// APIs of Kafka 4.x but refuses the oldest request versions (Produce < v3, Fetch < v4); sarama
// at 3.6 speaks versions it accepts and has cooperative rebalancing (KIP-429, >= 2.4).
var Version = sarama.V3_6_0_0

// Options configure [Start]. The zero value is a one-broker cluster with Kafka's defaults.
type Options struct {
	// Brokers is the number of brokers, 1 to 5; 0 means 1.
	Brokers int
	// MaxMessageBytes sets the brokers' message.max.bytes: the largest record batch a producer
	// may send, in bytes, unless a topic's max.message.bytes overrides it. 0 keeps Kafka's
	// default of 1048588 (1 MiB plus the batch overhead).
	MaxMessageBytes int
	// GroupMinSessionTimeout is the smallest consumer group session timeout the brokers
	// accept (group.min.session.timeout.ms); 0 means 100 ms, so tests may use short sessions.
	// A real broker's default is 6 s.
	GroupMinSessionTimeout time.Duration
}

// Cluster is a running kfake cluster. Close it when done.
type Cluster struct {
	fake    *kfake.Cluster
	brokers []string
}

// Start starts a kfake cluster listening on 127.0.0.1. kfake does not create topics on first
// use: create them with [CreateTopics].
func Start(opts Options) (*Cluster, error) {
	n := opts.Brokers
	if n == 0 {
		n = 1
	}
	if n < 1 || n > 5 {
		return nil, fmt.Errorf("embedkafka: Options.Brokers = %d, want 1 to 5", opts.Brokers)
	}
	if opts.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("embedkafka: Options.MaxMessageBytes = %d is negative", opts.MaxMessageBytes)
	}
	minSession := opts.GroupMinSessionTimeout
	if minSession <= 0 {
		minSession = 100 * time.Millisecond
	}
	kopts := []kfake.Opt{kfake.NumBrokers(n), kfake.GroupMinSessionTimeout(minSession)}
	if opts.MaxMessageBytes > 0 {
		kopts = append(kopts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(opts.MaxMessageBytes)}))
	}
	fake, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("embedkafka: start kfake: %w", err)
	}
	return &Cluster{fake: fake, brokers: fake.ListenAddrs()}, nil
}

// Brokers returns the bootstrap addresses, host:port on 127.0.0.1. The slice is a copy.
func (c *Cluster) Brokers() []string { return append([]string(nil), c.brokers...) }

// Fake returns the kfake cluster, for tests that inject faults.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Close stops the brokers and drops every record; clients still connected see their
// connections close.
func (c *Cluster) Close() { c.fake.Close() }

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
	sc.ClientID = "turnstile-embedkafka"
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
		return nil, fmt.Errorf("embedkafka: connect to %v: %w", brokers, err)
	}
	defer admin.Close()
	for _, t := range topics {
		if t.Partitions < 1 {
			return existing, fmt.Errorf("embedkafka: topic %q: %d partitions, want at least 1", t.Name, t.Partitions)
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
			return existing, fmt.Errorf("embedkafka: create topic %q: %w", t.Name, err)
		}
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return existing, fmt.Errorf("embedkafka: connect to %v: %w", brokers, err)
	}
	defer client.Close()
	for _, t := range topics {
		if err := waitReady(ctx, client, t.Name); err != nil {
			return existing, err
		}
	}
	return existing, nil
}

// waitReady polls the metadata until every partition of topic has a leader: a real cluster
// publishes a new topic's metadata a little after CreateTopics returns.
func waitReady(ctx context.Context, client sarama.Client, topic string) error {
	for {
		err := ready(client, topic)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("embedkafka: topic %q not ready: %w (%w)", topic, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func ready(client sarama.Client, topic string) error {
	if err := client.RefreshMetadata(topic); err != nil {
		return err
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return errors.New("no partitions in metadata")
	}
	for _, p := range parts {
		if _, err := client.Leader(topic, p); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}
