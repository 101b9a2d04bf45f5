package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/internal/record"
)

const replayUsage = `
Copies recorded requests from the requests topic into a sandbox requests topic, for a
sandbox service to run them (a consumer with consumer.Config.Replay, its own group, stores
and results topic; its model sees turn.Input.Replay). Records keep their key, value,
headers and partition index, and get a replayed-from header. It copies each partition from
--from-offset, or from its first record at or after --from-time, up to its end when the
copy began. It refuses to write to the requests topic, to a --production-topic, and to a
topic whose last records it did not write: each copy carries the replayed-from header, and it
reads the last 20 offsets of each partition of --to first (pass --allow-foreign-records to
copy into such a topic anyway). It also refuses a copy that --to already holds a part of
(the same replay run twice): a record among those last offsets replayed from a record this
copy would copy (pass --allow-duplicates to copy them again). A --from or --to topic the
cluster does not have exits 3, naming the topics it has (create the sandbox topic first).

Examples:
  turnstile replay --brokers kafka:9092 --from agent.requests --to sandbox.requests --from-time 24h \
      --production-topic agent.results --production-topic agent.requests.dlq
  turnstile replay --brokers kafka:9092 --from agent.requests --to sandbox.requests --from-offset 0 \
      --conversation c-7731
`

const lagUsage = `
Shows, per partition of a topic, the offset a consumer group committed (the next to read),
the end offset (the next to be written) and the lag between them. A partition the group
never committed shows "-" and the whole partition as lag (a new group reads from the oldest
record, as turnstile's consumer does). A group with no committed offset on any partition of
the topic (a mistyped --group) is not found: exit code 3, naming the groups the cluster
knows; so is a --topic the cluster does not have, naming the topics it has. A partition
whose committed offset the broker cannot read (not authorized to describe the group, a
partition moving) is an error, not a "-".

Examples:
  turnstile lag --brokers kafka:9092 --group agent --topic agent.requests
  turnstile lag --brokers kafka:9092 --group agent --topic agent.requests --json
`

// headerReplayedFrom is the header replay adds to each copied record (record.HeaderReplayedFrom).
const headerReplayedFrom = record.HeaderReplayedFrom

func lagCmd(_ context.Context, e *env, args []string) error {
	f := newFlags(e, "lag", lagUsage).withKafka().withJSON()
	group := f.String("group", "", "the consumer group (required)")
	topic := f.String("topic", "", "the topic it reads (required)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := f.require("group", "topic"); err != nil {
		return err
	}
	client, err := f.kafka()
	if err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return err
	}
	defer admin.Close() // closes client too
	if err := requireTopics(client, [2]string{"topic", *topic}); err != nil {
		return err
	}
	lags, err := consumer.GroupLag(client, admin, *group, *topic)
	if errors.Is(err, consumer.ErrNoCommittedOffsets) {
		return fmt.Errorf("%w: %v", errNotFound, err)
	}
	if err != nil {
		return err
	}
	if *f.json {
		return printJSON(e.stdout, lags)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tCOMMITTED\tEND\tLAG\t")
	var total int64
	for _, l := range lags {
		committed := "-"
		if l.Committed >= 0 {
			committed = fmt.Sprint(l.Committed)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t\n", l.Partition, committed, l.End, l.Lag)
		total += l.Lag
	}
	fmt.Fprintf(tw, "total\t\t\t%d\t\n", total)
	return tw.Flush()
}

// stringList is a repeatable flag; one value may also list several, separated by commas (as
// an environment variable does).
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			*s = append(*s, x)
		}
	}
	return nil
}

func replayCmd(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "replay", replayUsage).withKafka()
	from := f.String("from", "", "the recorded requests topic (required)")
	to := f.String("to", "", "the sandbox requests topic to copy into (required)")
	var since timeFlag
	f.Var(&since, "from-time", "start each partition at its first record at or after this time (RFC 3339, or a duration ago: 24h)")
	fromOffset := f.Int64("from-offset", -1, "start each partition at this offset (-1: its oldest record)")
	conv := f.String("conversation", "", "copy only the records of this conversation (record key)")
	foreign := f.Bool("allow-foreign-records", false, "copy even when --to holds records that replay did not write")
	again := f.Bool("allow-duplicates", false, "copy even when --to holds a copy of records this replay would copy")
	var production stringList
	f.Var(&production, "production-topic", "a production topic the copy must never write to (repeatable, or comma-separated)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := f.require("from", "to"); err != nil {
		return err
	}
	if *to == *from {
		return usagef("--to %q is the requests topic: a replay writes to a sandbox topic of its own", *to)
	}
	for _, p := range production {
		if *to == p {
			return usagef("--to %q is a production topic", *to)
		}
	}
	client, err := f.kafka()
	if err != nil {
		return err
	}
	defer client.Close()
	if err := requireTopics(client, [2]string{"from", *from}, [2]string{"to", *to}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	spans, err := replaySpans(client, *from, since, *fromOffset)
	if err != nil {
		return err
	}
	probe, err := probeSandbox(ctx, client, *to)
	if err != nil {
		return err
	}
	if !*foreign {
		if err := probe.foreign(*to); err != nil {
			return err
		}
	}
	if !*again {
		if err := probe.duplicate(*from, *to, spans, *conv); err != nil {
			return err
		}
	}
	n, err := copyRecords(ctx, client, *from, *to, spans, *conv)
	if err != nil {
		return fmt.Errorf("copied %d records, then: %w", n, err)
	}
	fmt.Fprintf(e.stdout, "copied %d records from %s to %s\n", n, *from, *to)
	return nil
}

// probeSandbox reads up to sandboxProbeRecords records at the end of each partition of the
// --to topic, waiting at most sandboxProbeWait for each next one.
const (
	sandboxProbeRecords = 20
	sandboxProbeWait    = 2 * time.Second
)

// probedRecord is one record probeSandbox read: where it is, its key and its replayed-from
// header ("" when it has none).
type probedRecord struct {
	partition    int32
	offset       int64
	key          string
	replayedFrom string
}

// silentPartition is a partition of --to where probeSandbox found no record among its last
// offsets (transaction markers only).
type silentPartition struct {
	partition int32
	offsets   int64
}

// sandboxProbe is what probeSandbox read at the end of the --to topic.
type sandboxProbe struct {
	records []probedRecord
	silent  []silentPartition
}

// probeSandbox reads the records among the last sandboxProbeRecords offsets of each partition
// of to, for foreign and duplicate. Read errors are returned, not taken for a sandbox.
func probeSandbox(ctx context.Context, client sarama.Client, to string) (sandboxProbe, error) {
	var probe sandboxProbe
	parts, err := client.Partitions(to)
	if err != nil {
		return probe, fmt.Errorf("topic %q: %w", to, err)
	}
	sc := *client.Config()
	sc.Consumer.Return.Errors = true
	cons, err := sarama.NewConsumer(brokerAddrs(client), &sc)
	if err != nil {
		return probe, fmt.Errorf("consumer: %w", err)
	}
	defer cons.Close()
	for _, p := range parts {
		oldest, err := client.GetOffset(to, p, sarama.OffsetOldest)
		if err != nil {
			return probe, err
		}
		end, err := client.GetOffset(to, p, sarama.OffsetNewest)
		if err != nil {
			return probe, err
		}
		if end <= oldest {
			continue // empty
		}
		start := max(oldest, end-sandboxProbeRecords)
		read, err := probePartition(ctx, cons, to, p, start, end)
		if err != nil {
			return probe, err
		}
		if len(read) == 0 {
			probe.silent = append(probe.silent, silentPartition{p, end - start})
		}
		probe.records = append(probe.records, read...)
	}
	return probe, nil
}

// probePartition reads partition p of to from start up to end; a partition whose last
// offsets are transaction markers ends sandboxProbeWait after its last record.
func probePartition(ctx context.Context, cons sarama.Consumer, to string, p int32, start, end int64) ([]probedRecord, error) {
	pc, err := cons.ConsumePartition(to, p, start)
	if err != nil {
		return nil, fmt.Errorf("topic %q partition %d: %w", to, p, err)
	}
	defer pc.AsyncClose()
	var out []probedRecord
	for {
		select {
		case m := <-pc.Messages():
			out = append(out, probedRecord{partition: p, offset: m.Offset, key: string(m.Key), replayedFrom: replayedFrom(m)})
			if m.Offset+1 >= end {
				return out, nil
			}
		case e := <-pc.Errors():
			return nil, fmt.Errorf("topic %q partition %d: reading its last records: %w", to, p, e)
		case <-time.After(sandboxProbeWait):
			return out, nil // the rest are transaction markers
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// foreign refuses a --to topic whose last records replay did not write: every record of a
// sandbox topic carries the replayed-from header, while a production topic's requests,
// results and dead letters do not, so a mistyped --to (agent.results for sandbox.requests) is
// caught even without --production-topic. A partition where the probe found no record
// (transaction markers only, as when transactional producers' commits end it) is refused
// too, since it cannot tell.
func (p sandboxProbe) foreign(to string) error {
	for _, r := range p.records {
		if r.replayedFrom == "" {
			return usagef("--to %q holds records that replay did not write (partition %d offset %d has no %s header): "+
				"it looks like a production topic; pass --allow-foreign-records if it is a sandbox topic", to, r.partition, r.offset, headerReplayedFrom)
		}
	}
	for _, s := range p.silent {
		return usagef("--to %q partition %d: none of its last %d offsets holds a record (transaction markers only), "+
			"so replay cannot tell a sandbox topic from a production one; pass --allow-foreign-records if it is a sandbox topic",
			to, s.partition, s.offsets)
	}
	return nil
}

// duplicate refuses a copy of which --to already holds a part: a probed record replayed from
// a record of from that spans cover (and of conv, when given), as running the same replay
// twice leaves. It sees the copies among the last records of each partition, which is where
// the previous run of a replay left them.
func (p sandboxProbe) duplicate(from, to string, spans []span, conv string) error {
	for _, r := range p.records {
		topic, part, off, ok := parseReplayedFrom(r.replayedFrom)
		if !ok || topic != from || conv != "" && r.key != conv {
			continue
		}
		for _, s := range spans {
			if s.partition == part && s.start <= off && off < s.end {
				return usagef("--to %q already holds a copy of %s (partition %d offset %d was replayed from %s): "+
					"this replay would copy those records again; pass --allow-duplicates to copy them anyway, or replay into a fresh topic",
					to, from, r.partition, r.offset, r.replayedFrom)
			}
		}
	}
	return nil
}

// parseReplayedFrom parses a replayed-from header, "TOPIC/PARTITION/OFFSET".
func parseReplayedFrom(v string) (topic string, partition int32, offset int64, ok bool) {
	parts := strings.Split(v, "/")
	if len(parts) != 3 {
		return "", 0, 0, false
	}
	p, err1 := strconv.ParseInt(parts[1], 10, 32)
	o, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return parts[0], int32(p), o, true
}

// brokerAddrs returns the addresses of client's brokers, for a producer or consumer that
// needs a config of its own.
func brokerAddrs(client sarama.Client) []string {
	var addrs []string
	for _, b := range client.Brokers() {
		addrs = append(addrs, b.Addr())
	}
	return addrs
}

// replayedFrom returns m's replayed-from header, "" when it has none.
func replayedFrom(m *sarama.ConsumerMessage) string {
	for _, h := range m.Headers {
		if h != nil && string(h.Key) == headerReplayedFrom {
			return string(h.Value)
		}
	}
	return ""
}

// span is the offsets [start, end) of one partition that a replay copies.
type span struct {
	partition  int32
	start, end int64
}

// replaySpans returns, for each partition of from with records to copy, the offsets a replay
// copies: from its first record at or after since (when set), or from fromOffset (when >= 0),
// or from its oldest record, up to its end now.
func replaySpans(client sarama.Client, from string, since timeFlag, fromOffset int64) ([]span, error) {
	parts, err := client.Partitions(from)
	if err != nil {
		return nil, fmt.Errorf("topic %q: %w", from, err)
	}
	var out []span
	for _, p := range parts {
		start, err := client.GetOffset(from, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		end, err := client.GetOffset(from, p, sarama.OffsetNewest)
		if err != nil {
			return nil, err
		}
		switch {
		case !since.t.IsZero():
			off, err := client.GetOffset(from, p, since.t.UnixMilli())
			if err != nil {
				return nil, err
			}
			if off < 0 {
				off = end
			}
			start = off
		case fromOffset >= 0:
			start = min(max(start, fromOffset), end)
		}
		if start < end {
			out = append(out, span{p, start, end})
		}
	}
	return out, nil
}

// copyRecords copies the records of from in spans to to.
func copyRecords(ctx context.Context, client sarama.Client, from, to string, spans []span, conv string) (int, error) {
	toParts, err := client.Partitions(to)
	if err != nil {
		return 0, fmt.Errorf("topic %q: %w", to, err)
	}
	sc := *client.Config()
	sc.Producer.Idempotent, sc.Producer.RequiredAcks, sc.Net.MaxOpenRequests = true, sarama.WaitForAll, 1
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer(brokerAddrs(client), &sc)
	if err != nil {
		return 0, fmt.Errorf("producer: %w", err)
	}
	defer producer.Close()
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return 0, err
	}
	defer cons.Close()
	murmur := sarama.NewMurmur2Partitioner(to)
	copied := 0
	for _, sp := range spans {
		p, end := sp.partition, sp.end
		pc, err := cons.ConsumePartition(from, p, sp.start)
		if err != nil {
			return copied, err
		}
		err = func() error {
			defer pc.AsyncClose()
			for {
				select {
				case m := <-pc.Messages():
					if conv == "" || string(m.Key) == conv {
						msg := &sarama.ProducerMessage{Topic: to, Key: sarama.ByteEncoder(m.Key), Value: sarama.ByteEncoder(m.Value)}
						for _, h := range m.Headers {
							if h != nil {
								msg.Headers = append(msg.Headers, *h)
							}
						}
						msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(headerReplayedFrom),
							Value: fmt.Appendf(nil, "%s/%d/%d", from, p, m.Offset)})
						msg.Partition = p
						if int(p) >= len(toParts) {
							if msg.Partition, err = murmur.Partition(msg, int32(len(toParts))); err != nil {
								return err
							}
						}
						if _, _, err := producer.SendMessage(msg); err != nil {
							return err
						}
						copied++
					}
					if m.Offset+1 >= end {
						return nil
					}
				case e := <-pc.Errors():
					return e
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}()
		if err != nil {
			return copied, err
		}
	}
	return copied, nil
}
