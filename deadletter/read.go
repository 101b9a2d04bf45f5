package deadletter

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"
)

// Read reads topic (a dead-letter topic) from the oldest record of each partition to the end
// offset it had when Read began, and returns the dead letters that match f, by partition then
// offset. It reads as a plain consumer, outside any group, and commits nothing. client must be
// open; Read leaves it open. A partition that ends in transaction markers (the consumer's
// transactional mode writes dead letters in transactions) ends about a second after its last
// record. Errors: the topic's (unknown topic), the broker's, ctx's when it ends first.
func Read(ctx context.Context, client sarama.Client, topic string, f Filter) ([]Letter, error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("deadletter: topic %q: %w", topic, err)
	}
	if f.Partition != nil {
		parts = []int32{*f.Partition}
	}
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("deadletter: consumer: %w", err)
	}
	defer cons.Close()
	var out []Letter
	for _, p := range parts {
		from, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("deadletter: oldest offset of %s/%d: %w", topic, p, err)
		}
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("deadletter: end offset of %s/%d: %w", topic, p, err)
		}
		if f.Offset != nil {
			if *f.Offset < from || *f.Offset >= end {
				continue
			}
			from, end = *f.Offset, *f.Offset+1
		}
		err = readRange(ctx, cons, topic, p, from, end, func(m *sarama.ConsumerMessage) bool {
			if l := Parse(m); f.Match(l) {
				out = append(out, l)
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}

// markerQuiet is how long readRange waits for another record once the broker has reported
// the partition's high-water mark at or past end: the offsets left below end then hold only
// transaction markers (control records, which no consumer is given), as a dead-letter
// partition written by the transactional mode ends. A fetch that stopped at its size limit
// is followed at once by the next one, so a second of silence means there is nothing more.
const markerQuiet = time.Second

// readRange calls fn for each record of topic/p with from <= offset < end, until fn returns
// false. Offsets below end that hold transaction markers are never delivered: readRange ends
// markerQuiet after the last record once the broker reports records up to end.
func readRange(ctx context.Context, cons sarama.Consumer, topic string, p int32, from, end int64, fn func(*sarama.ConsumerMessage) bool) error {
	if from >= end {
		return nil
	}
	pc, err := cons.ConsumePartition(topic, p, from)
	if err != nil {
		return fmt.Errorf("deadletter: read %s/%d from %d: %w", topic, p, from, err)
	}
	defer pc.AsyncClose()
	tick := time.NewTicker(markerQuiet / 10)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case m, ok := <-pc.Messages():
			if !ok {
				return fmt.Errorf("deadletter: read %s/%d: closed before offset %d", topic, p, end)
			}
			last = time.Now()
			if m.Offset >= end {
				return nil
			}
			if !fn(m) || m.Offset+1 >= end {
				return nil
			}
		case e, ok := <-pc.Errors():
			if ok {
				return fmt.Errorf("deadletter: read %s/%d: %w", topic, p, e.Err)
			}
		case <-tick.C:
			if pc.HighWaterMarkOffset() >= end && time.Since(last) >= markerQuiet {
				return nil // what is left below end is transaction markers
			}
		case <-ctx.Done():
			return fmt.Errorf("deadletter: read %s/%d up to offset %d: %w", topic, p, end, ctx.Err())
		}
	}
}

// ErrSourceGone is the error (matched with errors.Is) of a re-drive that needs the source
// record (the dead letter's value was dropped) when the requests topic no longer holds it:
// retention deleted it, or compaction replaced it.
var ErrSourceGone = errors.New("deadletter: the source record is no longer on the requests topic")

// readSource returns the record at topic/p/offset.
func readSource(ctx context.Context, client sarama.Client, topic string, p int32, offset int64) (*sarama.ConsumerMessage, error) {
	oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return nil, fmt.Errorf("deadletter: oldest offset of %s/%d: %w", topic, p, err)
	}
	end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
	if err != nil {
		return nil, fmt.Errorf("deadletter: end offset of %s/%d: %w", topic, p, err)
	}
	if offset < oldest || offset >= end {
		return nil, fmt.Errorf("%w: %s/%d/%d (the partition holds offsets %d to %d)", ErrSourceGone, topic, p, offset, oldest, end-1)
	}
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("deadletter: consumer: %w", err)
	}
	defer cons.Close()
	var got *sarama.ConsumerMessage
	err = readRange(ctx, cons, topic, p, offset, end, func(m *sarama.ConsumerMessage) bool {
		got = m // the first record at or after offset: the rest of the partition is not read
		return false
	})
	if err != nil {
		return nil, err
	}
	if got == nil || got.Offset != offset {
		return nil, fmt.Errorf("%w: %s/%d/%d (compacted away)", ErrSourceGone, topic, p, offset)
	}
	return got, nil
}
