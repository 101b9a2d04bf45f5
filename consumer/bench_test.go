package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/kafkatest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// BenchmarkThroughput compares, on the same kfake broker and the same records in one run,
// turnstile (instant model, in-memory stores: the overhead of decoding, the inbox, the
// session, the result envelope and the lanes) with a raw sarama loop that consumes, produces
// the value back to a results topic with the same idempotent producer settings, and marks.
// Each iteration serves benchRecords records of 200 conversations over 6 partitions, from
// the group's join to the last record marked.
//
//	go test -run '^$' -bench BenchmarkThroughput -benchtime 5x ./consumer
func BenchmarkThroughput(b *testing.B) {
	const benchRecords = 2000
	cluster := kafkatest.Start(b, kafkatest.Options{})
	for _, mode := range []string{"raw-sarama", "turnstile"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				requests := cluster.CreateTopic(b, "bench-requests", 6)
				results := cluster.CreateTopic(b, "bench-results", 6)
				produceBench(b, cluster, requests, benchRecords)
				b.StartTimer()
				switch mode {
				case "raw-sarama":
					runRaw(b, cluster, requests, results, benchRecords)
				case "turnstile":
					runTurnstile(b, cluster, requests, results, benchRecords)
				}
			}
			b.ReportMetric(float64(benchRecords*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

func produceBench(b testing.TB, cluster *kafkatest.Cluster, topic string, n int) {
	p, err := sarama.NewSyncProducer(cluster.Brokers(), cluster.ProducerConfig())
	require.NoError(b, err)
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		r := request(fmt.Sprintf("bench-%d", i%200), fmt.Sprintf("message %d", i))
		data, err := r.Encode()
		require.NoError(b, err)
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(r.ConversationID), Value: sarama.ByteEncoder(data)}
	}
	require.NoError(b, p.SendMessages(msgs))
}

func runTurnstile(b *testing.B, cluster *kafkatest.Cluster, requests, results string, n int) {
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) { return echo(in) })
	r := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	c, err := consumer.New(consumer.Config{
		Brokers: cluster.Brokers(), GroupID: cluster.Unique("bench"), RequestsTopic: requests,
		ResultsTopic: results, DeadLetterTopic: results + "-dlq", Sarama: cluster.Config(),
		Logger: testLogger(nil),
	}, consumer.RunnerHandler(r))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for c.Stats().Records < int64(n) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	require.NoError(b, <-done)
}

// rawHandler is the baseline: consume, produce, mark, commit every second.
type rawHandler struct {
	producer sarama.SyncProducer
	results  string
	done     atomic.Int64
}

func (h *rawHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *rawHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *rawHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	defer sess.Commit()
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			if _, _, err := h.producer.SendMessage(&sarama.ProducerMessage{
				Topic: h.results, Key: sarama.ByteEncoder(msg.Key), Value: sarama.ByteEncoder(msg.Value),
			}); err != nil {
				return err
			}
			sess.MarkOffset(msg.Topic, msg.Partition, msg.Offset+1, "")
			h.done.Add(1)
		case <-tick.C:
			sess.Commit()
		case <-sess.Context().Done():
			return nil
		}
	}
}

func runRaw(b *testing.B, cluster *kafkatest.Cluster, requests, results string, n int) {
	producer, err := sarama.NewSyncProducer(cluster.Brokers(), cluster.ProducerConfig())
	require.NoError(b, err)
	defer producer.Close()
	group, err := sarama.NewConsumerGroup(cluster.Brokers(), cluster.Unique("raw"), cluster.Config())
	require.NoError(b, err)
	h := &rawHandler{producer: producer, results: results}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := group.Consume(ctx, []string{requests}, h); err != nil {
				return
			}
		}
	})
	for h.done.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	require.NoError(b, group.Close())
}
