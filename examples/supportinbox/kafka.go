package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// Topic names of the support inbox.
const (
	RequestsTopic   = "agent.requests"
	ResultsTopic    = "agent.results"
	DeadLetterTopic = "agent.requests.dlq"
)

// MaxRecordBytes is the largest record the support inbox accepts: 8 MiB, room for the 6 MB
// pasted log and its JSON envelope. Kafka's default is 1 MiB (the broker's message.max.bytes,
// the topic's max.message.bytes and sarama's Producer.MaxMessageBytes), and turnstile's
// default Decoder.MaxTextBytes is 1 MiB too. The example raises all four; see the package doc.
const MaxRecordBytes = 8 << 20

// saramaConfig is the base config of every client; clientID names the member in the group's
// description, so the program can tell which member holds which partition.
func saramaConfig(clientID string) *sarama.Config {
	sc := turntest.Config()
	sc.ClientID = clientID
	sc.Consumer.MaxWaitTime = 100 * time.Millisecond
	sc.Consumer.Group.Session.Timeout = 10 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	sc.Consumer.Group.Rebalance.Timeout = 20 * time.Second
	sc.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	// The members publish the poison email to the dead-letter topic as it came: 6 MB.
	sc.Producer.MaxMessageBytes = MaxRecordBytes
	return sc
}

// produce sends the emails in order, keyed by conversation and placed by murmur2, with an
// idempotent producer whose records may be as large as MaxRecordBytes.
func produce(brokers []string, emails []turn.Request) error {
	sc := saramaConfig("support-mail-gateway")
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = 10
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	p, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		return fmt.Errorf("supportinbox: producer: %w", err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, 0, len(emails))
	for _, e := range emails {
		v, err := e.Encode()
		if err != nil {
			return fmt.Errorf("supportinbox: encode email: %w", err)
		}
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic: RequestsTopic, Key: sarama.StringEncoder(e.ConversationID), Value: sarama.ByteEncoder(v), Timestamp: e.CreatedAt,
		})
	}
	if err := p.SendMessages(msgs); err != nil {
		return fmt.Errorf("supportinbox: produce emails: %w", err)
	}
	return nil
}

// watcher reads the results and dead-letter topics, as the service that sends the replies
// and the operators' triage tool would.
type watcher struct {
	client   sarama.Client
	consumer sarama.Consumer
	pcs      []sarama.PartitionConsumer
	wg       sync.WaitGroup
	once     sync.Once

	mu      sync.Mutex
	replies map[string]turn.Result // request id -> the first result read
	records int                    // result records, repeats included
	dead    map[string]deadLetter  // request id -> its first dead letter
}

// deadLetter is a record of the dead-letter topic, as an operator sees it.
type deadLetter struct {
	RequestID, Conversation string
	Reason, Error           string
	Attempts                string
	SourcePartition         string
	ValueBytes              int
}

func newWatcher(brokers []string) (*watcher, error) {
	sc := saramaConfig("support-watcher")
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("supportinbox: connect: %w", err)
	}
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("supportinbox: consumer: %w", err)
	}
	w := &watcher{client: client, consumer: cons, replies: map[string]turn.Result{}, dead: map[string]deadLetter{}}
	for _, topic := range []string{ResultsTopic, DeadLetterTopic} {
		parts, err := client.Partitions(topic)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("supportinbox: partitions of %s: %w", topic, err)
		}
		for _, p := range parts {
			pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
			if err != nil {
				w.close()
				return nil, fmt.Errorf("supportinbox: read %s/%d: %w", topic, p, err)
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
	h := make(map[string]string, len(m.Headers))
	for _, rh := range m.Headers {
		if rh != nil {
			h[string(rh.Key)] = string(rh.Value)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch m.Topic {
	case ResultsTopic:
		w.records++
		res, err := turn.DecodeResult(m.Value)
		if err != nil {
			return
		}
		if _, ok := w.replies[res.RequestID]; !ok {
			w.replies[res.RequestID] = res
		}
	case DeadLetterTopic:
		id := h[consumer.HeaderRequestID]
		if _, ok := w.dead[id]; !ok {
			w.dead[id] = deadLetter{
				RequestID: id, Conversation: h[consumer.HeaderConversationID], Reason: h[consumer.HeaderReason],
				Error: h[consumer.HeaderError], Attempts: h[consumer.HeaderAttempts],
				SourcePartition: h[consumer.HeaderSourcePartition], ValueBytes: len(m.Value),
			}
		}
	}
}

func (w *watcher) counts() (replies, dead int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.replies), len(w.dead)
}

func (w *watcher) close() {
	w.once.Do(func() {
		for _, pc := range w.pcs {
			pc.AsyncClose()
		}
		w.wg.Wait()
		_ = w.consumer.Close()
		_ = w.client.Close()
	})
}

// assignment returns the group's members by client id with the partitions of topic each
// holds, once the group is stable.
func assignment(admin sarama.ClusterAdmin, group, topic string) (map[string][]int32, error) {
	descs, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		return nil, err
	}
	if len(descs) != 1 {
		return nil, fmt.Errorf("%d descriptions of group %s", len(descs), group)
	}
	d := descs[0]
	if d.State != "Stable" {
		return nil, fmt.Errorf("group %s is %s", group, d.State)
	}
	out := make(map[string][]int32, len(d.Members))
	for _, m := range d.Members {
		a, err := m.GetMemberAssignment()
		if err != nil {
			return nil, err
		}
		if a != nil {
			out[m.ClientId] = append(out[m.ClientId], a.Topics[topic]...)
		}
	}
	return out, nil
}

// waitStable waits until the group is stable with members members sharing all partitions.
func waitStable(ctx context.Context, brokers []string, group string, members, partitions int) (map[string][]int32, error) {
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig("support-admin"))
	if err != nil {
		return nil, fmt.Errorf("supportinbox: admin: %w", err)
	}
	defer admin.Close()
	for {
		a, err := assignment(admin, group, RequestsTopic)
		if err == nil {
			n := 0
			for _, ps := range a {
				n += len(ps)
			}
			if len(a) == members && n == partitions {
				return a, nil
			}
			err = fmt.Errorf("%d members hold %d of %d partitions", len(a), n, partitions)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("supportinbox: group %s not stable: %w (%w)", group, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// describeAssignment formats who holds how many partitions.
func describeAssignment(a map[string][]int32) string {
	names := make([]string, 0, len(a))
	for n := range a {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s:%d", strings.TrimPrefix(n, "support-"), len(a[n]))
	}
	return strings.Join(parts, " ")
}
