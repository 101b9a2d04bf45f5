package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/examples/internal/demo"
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

// saramaConfig is the base config of every client (demo.ClientConfig); clientID names the
// member in the group's description, so the program can tell which member holds which
// partition.
func saramaConfig(clientID string) *sarama.Config {
	sc := demo.ClientConfig(clientID)
	// The members publish the poison email to the dead-letter topic as it came: 6 MB.
	sc.Producer.MaxMessageBytes = MaxRecordBytes
	return sc
}

// produce sends the emails in order, keyed by conversation and placed by murmur2, with an
// idempotent producer whose records may be as large as MaxRecordBytes.
func produce(brokers []string, emails []turn.Request) error {
	p, err := sarama.NewSyncProducer(brokers, turntest.IdempotentProducer(saramaConfig("support-mail-gateway")))
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
