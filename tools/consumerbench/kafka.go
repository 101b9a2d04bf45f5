package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

var topicSeq atomic.Int64

// topics creates a fresh requests topic and a results topic of as many partitions.
func topics(ctx context.Context, brokers []string, partitions int) (requests, results string, err error) {
	n := topicSeq.Add(1)
	requests, results = fmt.Sprintf("bench-requests-%d", n), fmt.Sprintf("bench-results-%d", n)
	_, err = turntest.CreateTopics(ctx, brokers, nil,
		turntest.Topic{Name: requests, Partitions: int32(partitions)},
		turntest.Topic{Name: results, Partitions: int32(partitions)},
		turntest.Topic{Name: requests + ".dlq", Partitions: int32(partitions)})
	return requests, results, err
}

// request is the benchmark's request envelope for conversation key.
func request(key int, text string) ([]byte, error) {
	conv := fmt.Sprintf("conv-%04d", key)
	return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conv, UserID: "u-" + conv, Text: text}.Encode()
}

// produce writes n requests round-robin over keys conversations (each conversation's records
// in order), with an async producer; pace, when set, spaces them out at that rate (records/s);
// headers, when given, make each record's headers.
// onSent, when set, gets each record's send time by request index.
func produce(brokers []string, topic string, n, keys int, pace float64, headers ...func() []sarama.RecordHeader) (sent []time.Time, err error) {
	sc := turntest.Config()
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	sc.Producer.Return.Successes = true
	sc.Producer.Flush.Frequency = time.Millisecond
	p, err := sarama.NewAsyncProducer(brokers, sc)
	if err != nil {
		return nil, err
	}
	var (
		wg   sync.WaitGroup
		errs atomic.Int64
		last error
		mu   sync.Mutex
	)
	wg.Go(func() {
		for range p.Successes() {
		}
	})
	wg.Go(func() {
		for e := range p.Errors() {
			errs.Add(1)
			mu.Lock()
			last = e
			mu.Unlock()
		}
	})
	sent = make([]time.Time, n)
	start := time.Now()
	for i := range n {
		if pace > 0 {
			if d := time.Until(start.Add(time.Duration(float64(i) / pace * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
		}
		value, err := request(i%keys, fmt.Sprintf("message %d", i))
		if err != nil {
			return nil, err
		}
		sent[i] = time.Now()
		msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("conv-%04d", i%keys)),
			Value: sarama.ByteEncoder(value), Metadata: i}
		for _, h := range headers {
			msg.Headers = append(msg.Headers, h()...)
		}
		p.Input() <- msg
	}
	p.AsyncClose()
	wg.Wait()
	if errs.Load() > 0 {
		return nil, fmt.Errorf("produce: %d records failed, last: %v", errs.Load(), last)
	}
	return sent, nil
}

// rawLoop is the baseline: a sarama consumer group that produces each record's value to the
// results topic through an async idempotent producer and marks the record's offset once the
// result is acknowledged; auto-commit commits the marks every 100 ms.
type rawLoop struct {
	producer sarama.AsyncProducer
	results  string
	done     atomic.Int64
	started  atomic.Int64 // unix nanos of the first Setup
	first    atomic.Int64 // unix nanos of the first record
}

type rawMeta struct {
	sess sarama.ConsumerGroupSession
	msg  *sarama.ConsumerMessage
}

func (h *rawLoop) Setup(sarama.ConsumerGroupSession) error {
	h.started.CompareAndSwap(0, time.Now().UnixNano())
	return nil
}
func (h *rawLoop) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *rawLoop) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		if h.first.CompareAndSwap(0, time.Now().UnixNano()) && os.Getenv("CONSUMERBENCH_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "raw: first record %v after Setup\n", time.Duration(h.first.Load()-h.started.Load()))
		}
		h.producer.Input() <- &sarama.ProducerMessage{Topic: h.results, Key: sarama.ByteEncoder(msg.Key),
			Value: sarama.ByteEncoder(msg.Value), Metadata: rawMeta{sess, msg}}
	}
	return nil
}

// runRaw serves n records of requests with the raw loop and returns the time from joining
// the group to the last acknowledgement.
func runRaw(ctx context.Context, brokers []string, requests, results string, n int) (time.Duration, error) {
	pc := turntest.Config()
	pc.Producer.Idempotent = true
	pc.Producer.RequiredAcks = sarama.WaitForAll
	pc.Net.MaxOpenRequests = 1
	pc.Producer.Return.Successes = true
	pc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	producer, err := sarama.NewAsyncProducer(brokers, pc)
	if err != nil {
		return 0, err
	}
	h := &rawLoop{producer: producer, results: results}
	var wg sync.WaitGroup
	finished := make(chan time.Time, 1)
	wg.Go(func() {
		for m := range producer.Successes() {
			meta := m.Metadata.(rawMeta)
			meta.sess.MarkOffset(meta.msg.Topic, meta.msg.Partition, meta.msg.Offset+1, "")
			if h.done.Add(1) == int64(n) {
				finished <- time.Now()
			}
		}
	})
	wg.Go(func() {
		for e := range producer.Errors() {
			fmt.Println("raw loop: produce error:", e)
		}
	})
	gc := turntest.Config()
	gc.Consumer.Offsets.Initial = sarama.OffsetOldest
	gc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	gc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	group, err := sarama.NewConsumerGroup(brokers, fmt.Sprintf("raw-%d", topicSeq.Add(1)), gc)
	if err != nil {
		producer.Close()
		return 0, err
	}
	cpuStart := cpuTime()
	cctx, cancel := context.WithCancel(ctx)
	var gwg sync.WaitGroup
	gwg.Go(func() {
		for cctx.Err() == nil {
			if err := group.Consume(cctx, []string{requests}, h); err != nil {
				return
			}
		}
	})
	end := <-finished
	if os.Getenv("CONSUMERBENCH_DEBUG") != "" {
		elapsed := end.Sub(time.Unix(0, h.started.Load()))
		fmt.Fprintf(os.Stderr, "raw: %v, %.2f cores, %.1f µs of CPU per record\n", elapsed,
			(cpuTime()-cpuStart).Seconds()/elapsed.Seconds(), float64((cpuTime()-cpuStart).Microseconds())/float64(n))
	}
	cancel()
	gwg.Wait()
	group.Close()
	producer.AsyncClose()
	wg.Wait()
	return end.Sub(time.Unix(0, h.started.Load())), nil
}

// instant is the model of the overhead scenario: it answers at once.
func instant(_ context.Context, in turn.Input) (turn.Output, error) {
	return turn.Output{Events: []session.Event{{Text: "ok: " + in.Request.Text}}}, nil
}

// sleeper returns a model that takes d per turn (or a uniform random time in [0, d) with
// jitter), honouring cancellation.
func sleeper(d time.Duration, jitter bool) turn.ModelFunc {
	return func(ctx context.Context, in turn.Input) (turn.Output, error) {
		wait := d
		if jitter {
			wait = time.Duration(rand.Int64N(int64(d) + 1))
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return turn.Output{}, ctx.Err()
		}
		return instant(ctx, in)
	}
}
