package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// ErrRefused wraps a publish that can never succeed for this record (too large for the
// topic): the activity dead-letters instead of retrying.
var ErrRefused = errors.New("workflow: record refused by the topic")

// DeadLetter says why a request is dead-lettered.
type DeadLetter struct {
	// Reason is the one-line reason (the "reason" header).
	Reason string
	// Attempts is the number of attempts spent (the "attempts" header).
	Attempts int
	// Err is the last error, if any (the "error" header).
	Err error
	// Kind is the turn.Kind of the error that dead-lettered the request (the "kind" header,
	// consumer.HeaderKind); turn.KindNone leaves the header out.
	Kind turn.Kind
	// WorkflowID is the id of the conversation workflow whose activity dead-lettered the
	// request (the "workflow-id" header, consumer.HeaderWorkflowID); the activity sets it.
	WorkflowID string
}

// Publisher publishes the outcome of a turn. Both methods may be called again for the same
// request (an activity retried after a crash); readers dedup on the request-id header.
type Publisher interface {
	// PublishResult publishes res, the Result of env's request.
	PublishResult(ctx context.Context, env Envelope, res turn.Result) error
	// PublishDeadLetter publishes env's request to the dead-letter topic with dl in headers.
	PublishDeadLetter(ctx context.Context, env Envelope, dl DeadLetter) error
}

// ResultLimiter is a Publisher that knows the largest Result it can publish for a request.
// The activity puts that limit in the Runner's context (turn.WithResultLimit), so that an
// answer too large to publish is dead-lettered before it is appended to the session, as in
// direct mode. KafkaPublisher is one.
type ResultLimiter interface {
	// ResultLimit returns the limit of the Result of env's request.
	ResultLimit(env Envelope) turn.ResultLimit
}

// KafkaPublisher publishes results and dead letters to Kafka as the consumer does: same
// topics, same header names (consumer.HeaderRequestID and the rest), keyed by the conversation
// id, on the request's partition index when the target topic has as many partitions as the
// requests topic and else where a Java producer would put the key (murmur2). It uses an
// idempotent sync producer, so a publish has returned only once the brokers acknowledged it.
//
// The headers, the shrinking of a dead letter the topic refuses (without its value, then the
// propagated headers, then the key) and the placement are the consumer's own code (package
// internal/record). One difference from the consumer: a dead letter's value is the request's
// envelope re-encoded (Request.Encode), not the record's original bytes, which never reach
// Temporal; its own headers are the propagated ones (Envelope.Headers), in name order.
type KafkaPublisher struct {
	client          sarama.Client
	producer        sarama.SyncProducer
	resultsTopic    string
	deadLetterTopic string
	maxMessageBytes int // the producer's Producer.MaxMessageBytes
	closeOnce       sync.Once

	// ForwardHeaders names the propagated headers (Envelope.Headers) copied onto result
	// records, as consumer.Config.ForwardHeaders does; nil means
	// consumer.DefaultForwardHeaders. When the activity traces (WorkerOptions.Telemetry),
	// traceparent and tracestate on results and dead letters are its turn span's. Set it
	// before the first publish.
	ForwardHeaders []string
}

// NewKafkaPublisher connects a publisher to brokers. sc is the sarama config to start from
// (nil: defaults with Version 3.6); the publisher copies it and sets what its guarantees rest
// on: an idempotent producer, acks from all in-sync replicas, one request in flight.
func NewKafkaPublisher(brokers []string, sc *sarama.Config, resultsTopic, deadLetterTopic string) (*KafkaPublisher, error) {
	if resultsTopic == "" || deadLetterTopic == "" {
		return nil, errors.New("workflow: NewKafkaPublisher needs a results topic and a dead-letter topic")
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	if sc != nil {
		cp := *sc
		cfg = &cp
	}
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Partitioner = record.NewPartitioner
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("workflow: kafka client: %w", err)
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("workflow: kafka producer: %w", err)
	}
	return &KafkaPublisher{client: client, producer: producer, resultsTopic: resultsTopic, deadLetterTopic: deadLetterTopic,
		maxMessageBytes: cfg.Producer.MaxMessageBytes}, nil
}

// ResultLimit returns the limit of the Result of env's request: the producer's
// Producer.MaxMessageBytes less room for the record's key and headers (consumer.ResultLimit,
// the consumer's own rule, which package internal/record owns).
func (p *KafkaPublisher) ResultLimit(env Envelope) turn.ResultLimit {
	forward := p.ForwardHeaders
	if forward == nil {
		forward = consumer.DefaultForwardHeaders
	}
	req := env.Request
	req.Headers = env.Headers
	return record.ResultLimit(p.maxMessageBytes, &req, forward)
}

// Close closes the producer and its client.
func (p *KafkaPublisher) Close() error {
	var err error
	p.closeOnce.Do(func() { err = errors.Join(p.producer.Close(), p.client.Close()) })
	return err
}

// PublishResult publishes res as JSON to the results topic, with the ForwardHeaders of
// env.Headers and the trace context of ctx's span.
func (p *KafkaPublisher) PublishResult(ctx context.Context, env Envelope, res turn.Result) error {
	value, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("%w: result does not encode: %w", ErrRefused, err)
	}
	forward := p.ForwardHeaders
	if forward == nil {
		forward = consumer.DefaultForwardHeaders
	}
	headers := record.Forward(record.ResultHeaders(&env.Request, res.Attempt, len(forward)), env.Headers, forward)
	return p.send(&sarama.ProducerMessage{
		Topic: p.resultsTopic, Key: sarama.StringEncoder(env.Request.ConversationID), Value: sarama.ByteEncoder(value),
		Headers: traceHeaders(ctx, headers), Metadata: p.placement(env.Source),
	})
}

// PublishDeadLetter publishes the request's envelope to the dead-letter topic with the
// propagated headers (in name order) and the consumer's dead-letter headers
// (record.DeadLetter.Headers). A dead letter the topic refuses is shrunk as the consumer's is
// (record.Shrink): sent again without its value, then without the propagated headers, then
// without its key, each noted in a header; the error wraps ErrRefused when even the smallest
// is refused.
func (p *KafkaPublisher) PublishDeadLetter(ctx context.Context, env Envelope, dl DeadLetter) error {
	value, err := env.Request.Encode()
	if err != nil || env.Origin == record.OriginGap {
		value = nil // a gap has no request
	}
	d := record.DeadLetter{Reason: dl.Reason, Error: record.ErrorText(dl.Err), Attempts: dl.Attempts, Kind: dl.Kind,
		Source: env.Source, RequestID: env.Request.ID, ConversationID: env.Request.ConversationID,
		Origin: env.Origin, WorkflowID: dl.WorkflowID, Sequence: env.Request.Sequence}
	names := slices.Sorted(maps.Keys(env.Headers))
	own := make([]*sarama.RecordHeader, len(names))
	for i, k := range names {
		h := record.Header(k, env.Headers[k])
		own[i] = &h
	}
	msg := &sarama.ProducerMessage{
		Topic: p.deadLetterTopic, Key: sarama.StringEncoder(env.Request.ConversationID), Value: sarama.ByteEncoder(value),
		Headers: traceHeaders(ctx, d.Headers(own)), Metadata: p.placement(env.Source),
	}
	err = p.send(msg)
	for errors.Is(err, ErrRefused) {
		if msg, _ = record.Shrink(msg, err); msg == nil {
			break
		}
		err = p.send(msg)
	}
	return err
}

func (p *KafkaPublisher) send(msg *sarama.ProducerMessage) error {
	_, _, err := p.producer.SendMessage(msg)
	if record.Refused(err) {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return err
}

// placement is the request's partition and its topic's partition count, when known, for
// record.NewPartitioner.
func (p *KafkaPublisher) placement(src turn.Source) any {
	if src.Topic == "" {
		return nil
	}
	parts, err := p.client.Partitions(src.Topic)
	if err != nil || len(parts) == 0 {
		return nil
	}
	return record.Placement{Partition: src.Partition, Partitions: int32(len(parts))}
}
