package consumer

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/IBM/sarama"
)

// ErrNoCommittedOffsets matches (errors.Is) GroupLag's error for a group that has no committed
// offset on any partition of the topic: a mistyped group, or one that has not committed yet.
var ErrNoCommittedOffsets = errors.New("consumer: group has no committed offsets on the topic")

// PartitionLag is one partition's lag as GroupLag reports it: the offset the group committed
// (the next it reads; -1 when it never committed on the partition), the partition's end
// offset (the next to be written) and the records between them. A partition never committed
// counts from its oldest record, as turnstile's consumer starts there.
type PartitionLag struct {
	Partition int32 `json:"partition"`
	Committed int64 `json:"committed"` // -1: none
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
}

// GroupLag reads group's committed offsets on topic (through admin) and topic's end offsets
// (through client) and returns each partition's lag, by partition. A partition whose
// committed offset the broker cannot read (a partition moving, a coordinator loading, no
// authorization) is an error, never a "never committed": a lag computed from the oldest
// record would lie. Errors: the topic's (unknown topic), the broker's, and
// an error matching ErrNoCommittedOffsets (its text names up to 10 of the cluster's groups)
// when the group committed on no partition of topic.
func GroupLag(client sarama.Client, admin sarama.ClusterAdmin, group, topic string) ([]PartitionLag, error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("topic %q: %w", topic, err)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
		return nil, fmt.Errorf("committed offsets of group %q: %w", group, err)
	}
	out := make([]PartitionLag, 0, len(parts))
	for _, p := range parts {
		pl := PartitionLag{Partition: p, Committed: -1}
		var b *sarama.OffsetFetchResponseBlock
		if resp != nil {
			b = resp.GetBlock(topic, p)
		}
		if b != nil {
			if b.Err != sarama.ErrNoError {
				return nil, fmt.Errorf("committed offset of group %q on %s/%d: %w", group, topic, p, b.Err)
			}
			if b.Offset >= 0 {
				pl.Committed = b.Offset
			}
		}
		if pl.End, err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			return nil, fmt.Errorf("end offset of %s/%d: %w", topic, p, err)
		}
		from := pl.Committed
		if from < 0 {
			if from, err = client.GetOffset(topic, p, sarama.OffsetOldest); err != nil {
				return nil, fmt.Errorf("oldest offset of %s/%d: %w", topic, p, err)
			}
		}
		pl.Lag = max(0, pl.End-from)
		out = append(out, pl)
	}
	if !slices.ContainsFunc(out, func(pl PartitionLag) bool { return pl.Committed >= 0 }) {
		return nil, noOffsetsError(fmt.Sprintf("group %q has no committed offsets on topic %q (a mistyped group, or a group that has not committed yet)%s",
			group, topic, knownGroups(admin)))
	}
	return out, nil
}

// noOffsetsError is GroupLag's error for a group without committed offsets: its text names the
// group, the topic and the cluster's groups; it matches ErrNoCommittedOffsets.
type noOffsetsError string

func (e noOffsetsError) Error() string { return string(e) }

func (noOffsetsError) Is(target error) bool { return target == ErrNoCommittedOffsets }

// knownGroups lists, for GroupLag's ErrNoCommittedOffsets, up to 10 of the consumer groups
// the cluster knows; "" when it cannot say.
func knownGroups(admin sarama.ClusterAdmin) string {
	groups, err := admin.ListConsumerGroups()
	if err != nil || len(groups) == 0 {
		return ""
	}
	names := slices.Sorted(maps.Keys(groups))
	more := ""
	if len(names) > 10 {
		names, more = names[:10], ", ..."
	}
	return "; the cluster's groups: " + strings.Join(names, ", ") + more
}
