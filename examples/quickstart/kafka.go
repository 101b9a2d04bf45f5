package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/turntest"
)

// saramaConfig is the base of every Kafka client of the quickstart (demo.ClientConfig).
func saramaConfig() *sarama.Config { return demo.ClientConfig("turnstile-quickstart") }

// producer sends the workload's requests in order, rate per second (<= 0: unpaced),
// and remembers when it sent each.
type producer struct {
	rate   float64
	sent   atomic.Int64
	tracer trace.Tracer // nil: records carry no traceparent

	mu     sync.Mutex
	sentAt map[string]time.Time // request id -> when it was handed to the producer
}

func (p *producer) run(ctx context.Context, brokers []string, wl *workload) error {
	sp, err := sarama.NewSyncProducer(brokers, turntest.IdempotentProducer(saramaConfig()))
	if err != nil {
		return fmt.Errorf("quickstart: requests producer: %w", err)
	}
	defer sp.Close()
	p.mu.Lock()
	p.sentAt = make(map[string]time.Time, len(wl.order))
	p.mu.Unlock()
	const tick = 20 * time.Millisecond
	batch := 100
	if p.rate > 0 {
		batch = max(1, int(p.rate*tick.Seconds()))
	}
	next := time.Now()
	for i := 0; i < len(wl.order); i += batch {
		reqs := wl.order[i:min(i+batch, len(wl.order))]
		msgs := make([]*sarama.ProducerMessage, len(reqs))
		var spans []trace.Span
		for j, r := range reqs {
			value, err := r.Encode()
			if err != nil {
				return fmt.Errorf("quickstart: encode request: %w", err)
			}
			msgs[j] = &sarama.ProducerMessage{Topic: RequestsTopic, Key: sarama.StringEncoder(r.ConversationID), Value: sarama.ByteEncoder(value)}
			if span := traceSend(p.tracer, msgs[j]); span != nil {
				spans = append(spans, span)
			}
		}
		now := time.Now()
		p.mu.Lock()
		for _, r := range reqs {
			p.sentAt[r.ID] = now
		}
		p.mu.Unlock()
		// One SendMessages keeps the batch's order per partition: the idempotent producer
		// sends one request at a time to each broker.
		err := sp.SendMessages(msgs)
		for _, span := range spans {
			span.End()
		}
		if err != nil {
			return fmt.Errorf("quickstart: produce requests: %w", err)
		}
		p.sent.Add(int64(len(reqs)))
		if p.rate > 0 {
			next = next.Add(tick)
			select {
			case <-time.After(time.Until(next)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (p *producer) sentTime(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.sentAt[id]
	return t, ok
}

// pinGroupAtEnd commits the current end of every partition of topic for group, before any
// member joins, so that the group starts with this run's records instead of replaying the
// records earlier runs left on a real cluster (a group without commits starts at the oldest).
// It commits as an admin tool does, outside any generation (GroupGenerationUndefined).
func pinGroupAtEnd(brokers []string, group, topic string) error {
	client, err := sarama.NewClient(brokers, saramaConfig())
	if err != nil {
		return fmt.Errorf("quickstart: connect to %v: %w", brokers, err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("quickstart: partitions of %s: %w", topic, err)
	}
	commit := &sarama.OffsetCommitRequest{
		Version: 2, ConsumerGroup: group, ConsumerGroupGeneration: sarama.GroupGenerationUndefined, RetentionTime: -1,
	}
	fetch := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: group}
	want := make(map[int32]int64, len(parts))
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("quickstart: end of %s/%d: %w", topic, p, err)
		}
		commit.AddBlock(topic, p, end, 0, "")
		fetch.AddPartition(topic, p)
		want[p] = end
	}
	coordinator, err := client.Coordinator(group)
	if err != nil {
		return fmt.Errorf("quickstart: coordinator of %s: %w", group, err)
	}
	cresp, err := coordinator.CommitOffset(commit)
	if err != nil {
		return fmt.Errorf("quickstart: commit start offsets of %s: %w", group, err)
	}
	fresp, err := coordinator.FetchOffset(fetch)
	if err != nil {
		return fmt.Errorf("quickstart: check start offsets of %s: %w", group, err)
	}
	var errs []error
	for p, end := range want {
		if kerr := cresp.Errors[topic][p]; kerr != sarama.ErrNoError {
			errs = append(errs, fmt.Errorf("partition %d: %w", p, kerr))
		} else if b := fresp.GetBlock(topic, p); b == nil || b.Offset != end {
			errs = append(errs, fmt.Errorf("partition %d: committed %+v, want %d", p, b, end))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("quickstart: start offsets of %s: %w", group, err)
	}
	return nil
}
