package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// Options configure Redrive.
type Options struct {
	// Client reaches the cluster; Redrive leaves it open. Redrive reads with it and publishes
	// through a producer of its own on the same brokers, built from a copy of its config and
	// idempotent (Idempotent, RequiredAcks = WaitForAll, Net.MaxOpenRequests = 1), as the
	// consumer's is. Required.
	Client sarama.Client
	// Inbox is the service's inbox (its Runner's). Required.
	Inbox inbox.Inbox
	// App is the service's Runner.App, which scopes inbox keys (turn.InboxKey); default
	// turn.DefaultApp. Under another app Redrive finds no entry, publishes the request as new,
	// and the service, which finds its entry still dead, dead-letters it again (see
	// NoInboxEntry).
	App string
	// RequestsTopic, when set, is where requests are published again; default each dead
	// letter's source topic.
	RequestsTopic string
	// Decoder decodes the request to find its inbox entry; give it the service's limits.
	Decoder turn.Decoder
	// Note is kept in the inbox's audit of each re-drive (inbox.RedriveAudit.Note): who
	// re-drove it and why.
	Note string
	// Logger gets a line per re-driven dead letter; default slog.Default().
	Logger *slog.Logger
	// DryRun changes nothing and publishes nothing: each Outcome says what the real run would
	// do, from the same checks (the routing, the source record, the size limits of the producer
	// and of the topic, the consumer's checks of the record, the inbox entry read with Get). Inbox may be nil then:
	// the entries are taken to be dead.
	DryRun bool
	// Force re-drives a request that the consumer's checks refuse (ErrNeverPasses: a value
	// that does not decode under Decoder, a key that is not its conversation id), which the
	// service dead-letters again at once. Without it such a dead letter is refused.
	Force bool

	limits map[string]int // the topics' max.message.bytes, read once per Redrive (topicLimit)
}

// ErrTooLarge is an Outcome.Err (wrapped, with the sizes) for a request record larger than
// the producer's limit, Client.Config().Producer.MaxMessageBytes (sarama's default 1 MiB), or
// than the requests topic's max.message.bytes (read with DescribeConfigs; not checked when it
// cannot be read): running the re-drive again fails the same way; it needs a client with a
// higher limit (up to the topic's).
var ErrTooLarge = errors.New("deadletter: the request record is larger than the producer's limit")

// ErrNeverPasses is an Outcome.Err (wrapped, with the reason) for a request record the
// consumer's checks refuse (consumer.DecodeRecord: malformed JSON, a missing user id, a key
// that is not the conversation id): published again, it would be dead-lettered again at once.
// Options.Force re-drives it anyway.
var ErrNeverPasses = errors.New("deadletter: the request can never pass the consumer's checks")

// Action says what Redrive did with one dead letter.
type Action string

const (
	// Redriven: the inbox entry was dead and is runnable again (or there was none), and the
	// request was published again.
	Redriven Action = "redriven"
	// Republished: the entry had been re-driven already and not yet run (a re-drive stopped
	// between the inbox and the publish, or its record is still waiting): the request was
	// published again; the inbox runs it once whichever copy comes first.
	Republished Action = "republished"
	// SkippedDone: the request has a result (it was re-driven before, or delivered again and
	// answered): nothing was published.
	SkippedDone Action = "skipped: done"
	// SkippedRunning: the request is being attempted now: nothing was published.
	SkippedRunning Action = "skipped: in progress"
)

// Outcome is what Redrive did with one dead letter.
type Outcome struct {
	Letter Letter
	Action Action
	// Entry is the inbox entry after the re-drive; nil when the request has none (a record
	// that did not decode never reached the inbox) or does not decode.
	Entry *inbox.Entry
	// Topic and Partition are where the request was published (would be, in a dry run),
	// when Action publishes one; Offset is its offset, -1 in a dry run.
	Topic     string
	Partition int32
	Offset    int64
	// DryRun is Options.DryRun: nothing was changed or published.
	DryRun bool
	// Err is why this dead letter could not be re-driven; the others go on.
	Err error
}

// Redrive re-drives each dead letter: it makes the request's inbox entry runnable again
// (inbox.Inbox.Redrive, with Options.Note in the audit) and publishes the request record again
// to the requests topic with its key, its own headers and HeaderRedrivenFrom (the workflow of
// Temporal mode tells a re-drive from a duplicate by it). A dead letter of a record goes back
// to its source partition (so the conversation keeps its partition; where a Java producer
// would put its key, murmur2, when the topic has fewer partitions now); a dead letter of
// Bridge.Submit (Letter.Origin OriginSubmit: no source record) goes to Options.RequestsTopic,
// which it needs, on its key's partition, murmur2, as a Java producer and the consumer's
// placement put it; a gap dead letter (OriginGap) has no request and is refused. A dead letter
// without its value is re-driven from its source record, read by its offset (ErrSourceGone when
// retention removed it). A request whose entry is done, or in progress with an attempt begun,
// is skipped; one re-driven and not begun yet is published again (Republished): re-driving the
// same dead letter twice gives one turn. A dead letter that can never pass is refused before
// its inbox entry is touched: a record over the producer's or the topic's size limit
// (ErrTooLarge) and, unless Options.Force, a request the consumer's checks refuse
// (ErrNeverPasses). With Options.DryRun nothing is changed or published, and each Outcome
// says what the real run would do, from the same checks. Outcomes come back
// in the order of letters, each with its own error; Redrive's own error is for what stops it
// all: bad Options, the producer, or ctx ending, which returns the outcomes of the letters
// handled so far with ctx's error.
func Redrive(ctx context.Context, opts Options, letters []Letter) ([]Outcome, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("deadletter: Options.Client is nil")
	case opts.Inbox == nil && !opts.DryRun:
		return nil, errors.New("deadletter: Options.Inbox is nil")
	}
	if opts.App == "" {
		opts.App = turn.DefaultApp
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.limits = map[string]int{}
	var producer sarama.SyncProducer
	if !opts.DryRun {
		var err error
		if producer, err = newProducer(opts.Client); err != nil {
			return nil, err
		}
		defer producer.Close()
	}
	out := make([]Outcome, 0, len(letters))
	for _, l := range letters {
		o := redriveOne(ctx, opts, producer, l)
		log := opts.Logger.With("dead_letter", l.ID(), "request_id", l.RequestID, "conversation_id", l.ConversationID,
			"topic", l.Source.Topic, "partition", l.Source.Partition, "offset", l.Source.Offset, "dry_run", opts.DryRun)
		switch {
		case o.Err != nil:
			log.Error("dead letter not re-driven", "err", o.Err)
		case NoInboxEntry(o):
			log.Warn("dead letter re-driven, but the inbox has no entry for its request although it spent attempts: "+
				"purged since, or Options.App is not the service's Runner.App (then the service dead-letters it again)",
				"app", opts.App, "action", string(o.Action), "to_partition", o.Partition, "to_offset", o.Offset)
		default:
			log.Info("dead letter re-driven", "action", string(o.Action), "to_topic", o.Topic, "to_partition", o.Partition, "to_offset", o.Offset)
		}
		out = append(out, o)
		if ctx.Err() != nil && len(out) < len(letters) {
			return out, fmt.Errorf("deadletter: stopped after %d of %d dead letters: %w", len(out), len(letters), ctx.Err())
		}
	}
	return out, nil
}

// NoInboxEntry reports whether o published a request that spent attempts (so the inbox had
// an entry for it) but whose entry Redrive did not find: the entry was purged since, and the
// request runs as new, or Options.App is not the service's Runner.App, and the service finds
// the entry still dead and dead-letters the request again. A dry run without an Inbox finds
// no entry either; it never reports one.
func NoInboxEntry(o Outcome) bool {
	return o.Err == nil && o.Action == Redriven && o.Entry == nil && o.Letter.Attempts > 0 && o.Letter.RequestID != "" && !o.DryRun
}

// plan is where and what a re-drive publishes: the record, placed on its partition.
type plan struct {
	msg *sarama.ProducerMessage
}

// planOf returns what re-driving l publishes (topic, partition, key, value, headers), or why
// it cannot be re-driven. The real run and the dry run both use it.
func planOf(ctx context.Context, opts Options, l Letter) (plan, error) {
	if l.Origin == OriginGap {
		return plan{}, fmt.Errorf("deadletter: a gap dead letter has no request to re-drive: sequence %d of conversation %q never arrived and was skipped by a release", l.Sequence, l.ConversationID)
	}
	topic := opts.RequestsTopic
	if topic == "" {
		topic = l.Source.Topic
	}
	fromSubmit := l.Origin == OriginSubmit
	switch {
	case fromSubmit && opts.RequestsTopic == "":
		return plan{}, errors.New("deadletter: the dead letter's request came from Bridge.Submit, not from a record: give Options.RequestsTopic (--requests-topic) to re-drive it through the requests topic")
	case fromSubmit && l.Value == nil:
		return plan{}, fmt.Errorf("deadletter: the dead letter's request came from Bridge.Submit and its value was dropped (%s): there is no source record to read it from", l.ValueDropped)
	case topic == "" || !fromSubmit && l.Source.Offset < 0:
		return plan{}, errors.New("deadletter: the dead letter does not say where its request came from (source headers)")
	}
	value, key, headers := l.Value, l.Key, l.Headers
	if !fromSubmit && (l.ValueDropped != "" || value == nil) {
		src, err := readSource(ctx, opts.Client, l.Source.Topic, l.Source.Partition, l.Source.Offset)
		if err != nil {
			return plan{}, err
		}
		value, key = src.Value, src.Key
		headers = headers[:0:0]
		for _, h := range src.Headers {
			if h != nil {
				headers = append(headers, *h)
			}
		}
	}
	if key == nil && l.ConversationID != "" {
		key = []byte(l.ConversationID) // the key was dropped (too large with it): the conversation id is the key
	}
	msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(value),
		Headers: append(headers[:len(headers):len(headers)], sarama.RecordHeader{Key: []byte(HeaderRedrivenFrom), Value: []byte(l.ID())})}
	src := &l.Source.Partition
	if fromSubmit {
		src = nil
	}
	p, err := place(opts.Client, msg, src)
	if err != nil {
		return plan{}, err
	}
	msg.Metadata = sourcePartition(p)
	if err := check(opts, msg, key, value); err != nil {
		return plan{}, err
	}
	return plan{msg: msg}, nil
}

// check refuses what the publish or the consumer would refuse whatever the number of tries:
// a record over the producer's size limit (ErrTooLarge), measured as sarama's producer does,
// and, unless Options.Force, a request the consumer's checks refuse (ErrNeverPasses).
func check(opts Options, msg *sarama.ProducerMessage, key, value []byte) error {
	cfg := opts.Client.Config()
	version := 1
	if cfg.Version.IsAtLeast(sarama.V0_11_0_0) {
		version = 2
	}
	size := msg.ByteSize(version)
	if limit := cfg.Producer.MaxMessageBytes; size > limit {
		return fmt.Errorf("%w: %d bytes, limit %d (Producer.MaxMessageBytes): running the re-drive again fails the same way; "+
			"raise the limit (up to the topic's max.message.bytes)", ErrTooLarge, size, limit)
	}
	if limit := topicLimit(opts, msg.Topic); limit > 0 && size > limit {
		return fmt.Errorf("%w: %d bytes, over the max.message.bytes of topic %s (%d): running the re-drive again fails the same way",
			ErrTooLarge, size, msg.Topic, limit)
	}
	if opts.Force {
		return nil
	}
	if _, err := consumer.DecodeRecord(opts.Decoder, key, value); err != nil {
		return fmt.Errorf("%w (the service dead-letters it again at once; force to publish it anyway): %w", ErrNeverPasses, err)
	}
	return nil
}

// topicLimit returns the max.message.bytes of topic (DescribeConfigs to the controller),
// which refuses a larger record batch, read once per Redrive; 0 when it cannot be read (the
// publish finds out then).
func topicLimit(opts Options, topic string) int {
	if limit, ok := opts.limits[topic]; ok || opts.limits == nil {
		return limit
	}
	opts.limits[topic] = 0
	b, err := opts.Client.Controller()
	if err != nil {
		return 0
	}
	req := &sarama.DescribeConfigsRequest{Resources: []*sarama.ConfigResource{
		{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"max.message.bytes"}}}}
	if opts.Client.Config().Version.IsAtLeast(sarama.V1_1_0_0) {
		req.Version = 1
	}
	resp, err := b.DescribeConfigs(req)
	if err != nil {
		return 0
	}
	for _, r := range resp.Resources {
		for _, c := range r.Configs {
			if n, err := strconv.Atoi(c.Value); err == nil && c.Name == "max.message.bytes" && r.ErrorCode == 0 {
				opts.limits[topic] = n
			}
		}
	}
	return opts.limits[topic]
}

// place returns the partition of topic msg goes to: src when the topic has it, else where a
// Java producer puts msg's key (murmur2, sarama.NewMurmur2Partitioner).
func place(client sarama.Client, msg *sarama.ProducerMessage, src *int32) (int32, error) {
	parts, err := client.Partitions(msg.Topic)
	if err != nil {
		return 0, fmt.Errorf("deadletter: topic %q: %w", msg.Topic, err)
	}
	n := int32(len(parts))
	if src != nil && *src >= 0 && *src < n {
		return *src, nil
	}
	return sarama.NewMurmur2Partitioner(msg.Topic).Partition(msg, n)
}

// inboxAction returns what the request's inbox entry lets a re-drive do: with dry false it
// re-drives the entry (inbox.Inbox.Redrive), with dry true it only reads it (nil Inbox: it
// assumes the entry is dead). entry is the entry afterwards, nil when there is none.
func inboxAction(ctx context.Context, opts Options, value []byte) (Action, *inbox.Entry, error) {
	req, err := opts.Decoder.Decode(value)
	if err != nil {
		return Redriven, nil, nil // never reached the inbox
	}
	key := turn.InboxKey(opts.App, req)
	var e inbox.Entry
	switch {
	case opts.DryRun && opts.Inbox == nil:
		return Redriven, nil, nil
	case opts.DryRun:
		if e, err = opts.Inbox.Get(ctx, key); err == nil && e.Status != inbox.StatusDead {
			err = inbox.ErrNotDead
		}
	default:
		e, err = opts.Inbox.Redrive(ctx, key, opts.Note)
	}
	switch {
	case err == nil:
		return Redriven, &e, nil
	case errors.Is(err, inbox.ErrNotFound):
		// Dead-lettered before the inbox saw it (or purged since): nothing blocks it.
		return Redriven, nil, nil
	case errors.Is(err, inbox.ErrNotDead) && e.Status == inbox.StatusDone:
		return SkippedDone, &e, nil
	case errors.Is(err, inbox.ErrNotDead) && e.Attempts == 0 && len(e.Redrives) > 0:
		return Republished, &e, nil
	case errors.Is(err, inbox.ErrNotDead):
		return SkippedRunning, &e, nil
	}
	return "", nil, fmt.Errorf("deadletter: inbox re-drive of request %s: %w", req.ID, err)
}

func redriveOne(ctx context.Context, opts Options, producer sarama.SyncProducer, l Letter) Outcome {
	o := Outcome{Letter: l, DryRun: opts.DryRun, Offset: -1}
	pl, err := planOf(ctx, opts, l)
	if err != nil {
		o.Err = err
		return o
	}
	o.Topic, o.Partition = pl.msg.Topic, int32(pl.msg.Metadata.(sourcePartition))
	value, _ := pl.msg.Value.Encode()
	o.Action, o.Entry, o.Err = inboxAction(ctx, opts, value)
	if o.Err != nil || o.Action == SkippedDone || o.Action == SkippedRunning || opts.DryRun {
		return o
	}
	p, off, err := producer.SendMessage(pl.msg)
	switch {
	case record.Refused(err):
		o.Err = fmt.Errorf("deadletter: publish to %s refused: %w (the inbox entry is re-driven; running the re-drive again "+
			"fails the same way while the record is too large for the topic)", pl.msg.Topic, err)
		return o
	case err != nil:
		o.Err = fmt.Errorf("deadletter: publish to %s: %w (the inbox entry is re-driven; run the re-drive again)", pl.msg.Topic, err)
		return o
	}
	o.Partition, o.Offset = p, off
	return o
}

// sourcePartition in ProducerMessage.Metadata is the partition place chose.
type sourcePartition int32

// partitioner puts a request on the partition place chose, or, for a message without one,
// where a Java producer would put its key (murmur2).
type partitioner struct{ murmur2 sarama.Partitioner }

func (p partitioner) Partition(msg *sarama.ProducerMessage, n int32) (int32, error) {
	if sp, ok := msg.Metadata.(sourcePartition); ok && int32(sp) >= 0 && int32(sp) < n {
		return int32(sp), nil
	}
	return p.murmur2.Partition(msg, n)
}

func (partitioner) RequiresConsistency() bool { return true }

func newProducer(client sarama.Client) (sarama.SyncProducer, error) {
	// The producer needs its own settings; build a client of its own on the same brokers.
	base := client.Config()
	sc := *base
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	if sc.Producer.Retry.Max < 5 {
		sc.Producer.Retry.Max = 5
	}
	sc.Producer.Partitioner = func(topic string) sarama.Partitioner {
		return partitioner{murmur2: sarama.NewMurmur2Partitioner(topic)}
	}
	var brokers []string
	for _, b := range client.Brokers() {
		brokers = append(brokers, b.Addr())
	}
	p, err := sarama.NewSyncProducer(brokers, &sc)
	if err != nil {
		return nil, fmt.Errorf("deadletter: producer: %w", err)
	}
	return p, nil
}
