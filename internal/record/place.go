package record

import (
	"errors"

	"github.com/IBM/sarama"
)

// Placement is where a result or dead letter's request came from: its partition index on the
// requests topic and that topic's partition count when the record was built.
type Placement struct {
	Partition  int32
	Partitions int32
}

// Placement returns p: a Placement is a Placer, for a ProducerMessage.Metadata of its own.
func (p Placement) Placement() Placement { return p }

// Placer is what a ProducerMessage's Metadata implements to carry its request's Placement to
// the partitioner of NewPartitioner (the consumer's outbound record; a Placement itself).
type Placer interface {
	Placement() Placement
}

// partitioner is the placement rule of NewPartitioner.
type partitioner struct{ murmur2 sarama.Partitioner }

// NewPartitioner is a sarama.PartitionerConstructor for results and dead letters. A record
// whose Metadata is a Placer lands on its request's partition index when the target topic has
// as many partitions as the requests topic had (co-partitioned, whatever partitioner the
// upstream producer used); any other record where a Java producer would put its key: murmur2,
// as Kafka's Java producer's default partitioner (sarama.NewMurmur2Partitioner), never on
// sarama's default FNV-1a hash. A keyless record without a placement gets a random partition
// (sarama's hash partitioners do the same).
func NewPartitioner(topic string) sarama.Partitioner {
	return &partitioner{murmur2: sarama.NewMurmur2Partitioner(topic)}
}

// Partition returns msg's partition among numPartitions; an error only from murmur2's own.
func (p *partitioner) Partition(msg *sarama.ProducerMessage, numPartitions int32) (int32, error) {
	if pl, ok := msg.Metadata.(Placer); ok {
		if at := pl.Placement(); at.Partitions == numPartitions && at.Partition >= 0 && at.Partition < numPartitions {
			return at.Partition, nil
		}
	}
	return p.murmur2.Partition(msg, numPartitions)
}

// RequiresConsistency is true: a key (or a placement) maps to one partition.
func (p *partitioner) RequiresConsistency() bool { return true }

// MessageRequiresConsistency is true for a record with a key or a placement, so that sarama
// never moves it to another partition when its own is unavailable.
func (p *partitioner) MessageRequiresConsistency(msg *sarama.ProducerMessage) bool {
	return msg.Key != nil || msg.Metadata != nil
}

// Refused reports a publish error that retrying cannot fix: sarama's own check of
// Producer.MaxMessageBytes (a sarama.ConfigurationError), or the broker's MESSAGE_TOO_LARGE
// (sarama.ErrMessageSizeTooLarge), RECORD_LIST_TOO_LARGE (sarama.ErrMessageSetSizeTooLarge),
// INVALID_RECORD (sarama.ErrInvalidRecord) or an invalid size (sarama.ErrInvalidMessageSize).
// A refused result is replaced by a dead letter; a refused dead letter is shrunk (Shrink).
func Refused(err error) bool {
	var cfgErr sarama.ConfigurationError
	return errors.As(err, &cfgErr) || errors.Is(err, sarama.ErrMessageSizeTooLarge) ||
		errors.Is(err, sarama.ErrMessageSetSizeTooLarge) || errors.Is(err, sarama.ErrInvalidRecord) ||
		errors.Is(err, sarama.ErrInvalidMessageSize)
}
