package demo

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/turn"
)

// Arrival is the first result record read for a request id.
type Arrival struct {
	// At is when the watcher read it.
	At time.Time
	// Result is the decoded record.
	Result turn.Result
}

// Watcher reads the results and dead-letter topics, as the service that sends the replies and
// an operator's triage tool would, and keeps the first record of each request id.
type Watcher struct {
	results, deadLetters string
	client               sarama.Client
	consumer             sarama.Consumer
	pcs                  []sarama.PartitionConsumer
	changed              chan struct{} // signalled after every record
	wg                   sync.WaitGroup
	once                 sync.Once

	mu            sync.Mutex
	arrivals      map[string]Arrival
	resultRecords int
	badResults    int
	dead          map[string]deadletter.Letter
	deadRecords   int
}

// NewWatcher starts reading resultsTopic and deadLetterTopic on brokers with a client of
// config sc, every partition from offset from: sarama.OffsetOldest reads the topics from their
// start, sarama.OffsetNewest from where they end when the watcher starts (a run on a real
// cluster that holds earlier runs' records). Close stops it.
func NewWatcher(brokers []string, sc *sarama.Config, resultsTopic, deadLetterTopic string, from int64) (*Watcher, error) {
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("watcher: connect to %v: %w", brokers, err)
	}
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("watcher: consumer: %w", err)
	}
	w := &Watcher{results: resultsTopic, deadLetters: deadLetterTopic, client: client, consumer: cons,
		changed: make(chan struct{}, 1), arrivals: map[string]Arrival{}, dead: map[string]deadletter.Letter{}}
	for _, topic := range []string{resultsTopic, deadLetterTopic} {
		if err := w.read(topic, from); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

func (w *Watcher) read(topic string, from int64) error {
	parts, err := w.client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("watcher: partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		offset := from
		if from == sarama.OffsetNewest { // fixed now, not when the partition consumer starts
			if offset, err = w.client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
				return fmt.Errorf("watcher: end of %s/%d: %w", topic, p, err)
			}
		}
		pc, err := w.consumer.ConsumePartition(topic, p, offset)
		if err != nil {
			return fmt.Errorf("watcher: read %s/%d: %w", topic, p, err)
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
	return nil
}

func (w *Watcher) record(m *sarama.ConsumerMessage) {
	now := time.Now()
	w.mu.Lock()
	switch m.Topic {
	case w.results:
		w.resultRecords++
		res, err := turn.DecodeResult(m.Value)
		if err != nil {
			w.badResults++
			break
		}
		if _, seen := w.arrivals[res.RequestID]; !seen {
			w.arrivals[res.RequestID] = Arrival{At: now, Result: res}
		}
	case w.deadLetters:
		w.deadRecords++
		d := deadletter.Parse(m)
		if _, seen := w.dead[d.RequestID]; !seen {
			w.dead[d.RequestID] = d
		}
	}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Changed is signalled after a record was read (at most one signal waits).
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// Counts returns the number of request ids with a result and with a dead letter.
func (w *Watcher) Counts() (results, dead int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.arrivals), len(w.dead)
}

// Records returns the number of records read: results (repeats included), results that do not
// decode, and dead letters (repeats included).
func (w *Watcher) Records() (results, badResults, deadLetters int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resultRecords, w.badResults, w.deadRecords
}

// Results returns a copy of the first result of each request id.
func (w *Watcher) Results() map[string]Arrival {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.arrivals)
}

// DeadLetters returns a copy of the first dead letter of each request id, as an operator's
// triage tool reads it (deadletter.Parse): the consumer's headers, and the request as it came.
func (w *Watcher) DeadLetters() map[string]deadletter.Letter {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.dead)
}

// WaitFor waits until n request ids have a result, ctx ends or timeout passes.
func (w *Watcher) WaitFor(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		results, _ := w.Counts()
		if results >= n {
			return nil
		}
		select {
		case <-w.changed:
		case <-deadline:
			return fmt.Errorf("%d of %d requests have a result after %s", results, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops reading; what was read stays readable.
func (w *Watcher) Close() {
	w.once.Do(func() {
		for _, pc := range w.pcs {
			pc.AsyncClose() // closes its channels, ending the goroutines
		}
		w.wg.Wait()
		_ = w.consumer.Close()
		_ = w.client.Close()
	})
}
