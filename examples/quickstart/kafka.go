package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// saramaConfig is the base of every Kafka client of the quickstart. Each call returns a fresh
// config: a consumer group member needs its own (the cooperative-sticky strategy keeps state
// per member), and the consumer copies it for its producer.
func saramaConfig() *sarama.Config {
	sc := turntest.Config()
	sc.ClientID = "turnstile-quickstart"
	// The fetch long poll also delays a commit sent to the same broker: 100 ms keeps commits fast.
	sc.Consumer.MaxWaitTime = 100 * time.Millisecond
	// Members learn of a rebalance from a heartbeat answer, so frequent heartbeats make member
	// changes quick. The session timeout must be at least the broker's
	// group.min.session.timeout.ms (6 s on a real broker).
	sc.Consumer.Group.Session.Timeout = 10 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	sc.Consumer.Group.Rebalance.Timeout = 20 * time.Second
	sc.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	return sc
}

// producerConfig is the requests producer's config: idempotent with acks from all in-sync
// replicas, one request in flight per broker (so records of a key keep their order on
// retries), and murmur2 placement, where a Java producer would put the same key.
func producerConfig() *sarama.Config {
	sc := saramaConfig()
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = 10
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	return sc
}

// producer sends the workload's requests in order, rate per second (<= 0: unpaced),
// and remembers when it sent each.
type producer struct {
	rate float64
	sent atomic.Int64

	mu     sync.Mutex
	sentAt map[string]time.Time // request id -> when it was handed to the producer
}

func (p *producer) run(ctx context.Context, brokers []string, wl *workload) error {
	sp, err := sarama.NewSyncProducer(brokers, producerConfig())
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
		for j, r := range reqs {
			value, err := r.Encode()
			if err != nil {
				return fmt.Errorf("quickstart: encode request: %w", err)
			}
			msgs[j] = &sarama.ProducerMessage{Topic: RequestsTopic, Key: sarama.StringEncoder(r.ConversationID), Value: sarama.ByteEncoder(value)}
		}
		now := time.Now()
		p.mu.Lock()
		for _, r := range reqs {
			p.sentAt[r.ID] = now
		}
		p.mu.Unlock()
		// One SendMessages keeps the batch's order per partition: the idempotent producer
		// sends one request at a time to each broker.
		if err := sp.SendMessages(msgs); err != nil {
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

// watcher reads the results and dead-letter topics from where they ended when it started,
// as a downstream service would, recording the first arrival of each request id.
type watcher struct {
	client   sarama.Client
	consumer sarama.Consumer
	pcs      []sarama.PartitionConsumer
	changed  chan struct{} // signalled on every record
	wg       sync.WaitGroup
	once     sync.Once

	mu            sync.Mutex
	results       map[string]arrival
	resultRecords int
	badResults    int
	dead          map[string]deadLetter
	deadRecords   int
}

type arrival struct {
	at  time.Time
	res turn.Result
}

type deadLetter struct {
	reason, attempts string
}

func newWatcher(brokers []string) (*watcher, error) {
	sc := saramaConfig()
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("quickstart: connect to %v: %w", brokers, err)
	}
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("quickstart: results reader: %w", err)
	}
	w := &watcher{client: client, consumer: cons, changed: make(chan struct{}, 1), results: map[string]arrival{}, dead: map[string]deadLetter{}}
	for _, topic := range []string{ResultsTopic, DeadLetterTopic} {
		parts, err := client.Partitions(topic)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("quickstart: partitions of %s: %w", topic, err)
		}
		for _, p := range parts {
			end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				w.close()
				return nil, fmt.Errorf("quickstart: end of %s/%d: %w", topic, p, err)
			}
			pc, err := cons.ConsumePartition(topic, p, end)
			if err != nil {
				w.close()
				return nil, fmt.Errorf("quickstart: read %s/%d: %w", topic, p, err)
			}
			w.pcs = append(w.pcs, pc)
			w.wg.Go(func() {
				for m := range pc.Messages() {
					w.record(m)
				}
			})
			w.wg.Go(func() {
				for range pc.Errors() { // a partition consumer retries by itself
				}
			})
		}
	}
	return w, nil
}

func (w *watcher) record(m *sarama.ConsumerMessage) {
	now := time.Now()
	w.mu.Lock()
	switch m.Topic {
	case ResultsTopic:
		w.resultRecords++
		res, err := turn.DecodeResult(m.Value)
		if err != nil {
			w.badResults++
			break
		}
		if _, seen := w.results[res.RequestID]; !seen {
			w.results[res.RequestID] = arrival{at: now, res: res}
		}
	case DeadLetterTopic:
		w.deadRecords++
		h := headers(m)
		w.dead[h[consumer.HeaderRequestID]] = deadLetter{reason: h[consumer.HeaderReason], attempts: h[consumer.HeaderAttempts]}
	}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// counts returns the distinct request ids with a result and with a dead letter.
func (w *watcher) counts() (results, dead int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.results), len(w.dead)
}

// close stops reading; the watcher's maps stay readable.
func (w *watcher) close() {
	w.once.Do(func() {
		for _, pc := range w.pcs {
			pc.AsyncClose() // closes its channels, ending the goroutines
		}
		w.wg.Wait()
		_ = w.consumer.Close()
		_ = w.client.Close()
	})
}

func headers(m *sarama.ConsumerMessage) map[string]string {
	h := make(map[string]string, len(m.Headers))
	for _, rh := range m.Headers {
		if rh != nil {
			h[string(rh.Key)] = string(rh.Value)
		}
	}
	return h
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
