package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// Defaults applied by Config to zero fields.
const (
	DefaultMaxAttempts     = turn.DefaultMaxAttempts
	DefaultRevokeGrace     = 5 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultMaxInFlight     = 64
	DefaultMaxBuffered     = 1024
	DefaultCommitInterval  = time.Second
	DefaultRetryBackoff    = 200 * time.Millisecond
	DefaultMaxRetryBackoff = 10 * time.Second
	DefaultMaxPause        = time.Minute
	DefaultMaxRateLimits   = 20
	DefaultMaxBatch        = 1
)

// Ordering says which records of a partition may run at the same time.
type Ordering int

const (
	// OrderByKey runs the records of one key (one conversation) strictly one at a time, in
	// offset order, and records of different keys of the same partition concurrently. G1 is
	// per conversation, so this keeps it while a slow conversation no longer holds up the
	// others that share its partition (the ordering Confluent's Parallel Consumer calls KEY).
	OrderByKey Ordering = iota
	// OrderByPartition runs the records of one partition one at a time, in offset order;
	// partitions run concurrently. It is for handlers whose records must not overlap even
	// across keys.
	OrderByPartition
)

// String returns "by-key" or "by-partition".
func (o Ordering) String() string {
	switch o {
	case OrderByKey:
		return "by-key"
	case OrderByPartition:
		return "by-partition"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// Config configures a Consumer. Brokers, GroupID, RequestsTopic, ResultsTopic and
// DeadLetterTopic are required; every other field has a default, applied by New.
type Config struct {
	// Brokers are the bootstrap brokers, "host:port".
	Brokers []string
	// GroupID is the consumer group; all members of one service share it.
	GroupID string
	// RequestsTopic is the topic of request records, keyed by conversation id.
	RequestsTopic string
	// ResultsTopic receives one result record per completed request, keyed like the request.
	// Required; a Handler that publishes nothing (returns a nil Result) never writes to it.
	ResultsTopic string
	// DeadLetterTopic receives the records that cannot be served, with the reason in headers.
	DeadLetterTopic string

	// MaxAttempts bounds the attempts of a request whose turn keeps failing before it is
	// dead-lettered. The consumer counts the failed attempts it sees in this member; a Runner
	// counts them in the inbox, across members and crashes. With RunnerHandler leave it zero:
	// New takes the Runner's (turn.Runner.Attempts) and refuses another value. Otherwise
	// default DefaultMaxAttempts.
	MaxAttempts int
	// TurnTimeout, when set, bounds each call of the Handler; a call that runs past it fails
	// its attempt with turn.ErrTurnTimeout. With RunnerHandler leave it zero: the Runner's
	// TurnTimeout bounds the turn, and New refuses another value. Otherwise default none.
	TurnTimeout time.Duration
	// RevokeGrace is how long the turn in flight on a revoked partition may run before it is
	// cancelled; what finishes in time is published and committed, the rest is redone by the
	// new owner. It must be shorter than the group's rebalance timeout less a second
	// (Consumer.Group.Rebalance.Timeout, 60 s by default), or sarama ends the member's session
	// (ErrRebalanceTimedOut). Default DefaultRevokeGrace, or less when Sarama's rebalance
	// timeout is short: half of what that timeout leaves.
	RevokeGrace time.Duration
	// ShutdownTimeout is how long Run drains in-flight turns after its context ends before it
	// cancels them, commits what finished and closes. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Ordering chooses which records of a partition may run concurrently. Default
	// OrderByKey.
	Ordering Ordering
	// MaxInFlight bounds the turns running at once across all partitions of the member (G6),
	// and with it the goroutines that run them. Partitions wait for a free slot first come,
	// first served. Default DefaultMaxInFlight.
	MaxInFlight int
	// MaxInFlightPerPartition bounds the turns running at once in one partition (with
	// OrderByKey; OrderByPartition runs one). Default MaxInFlight: one busy partition may use
	// every slot while the others are idle.
	MaxInFlightPerPartition int
	// MaxBuffered bounds the records a partition's window holds: records received whose offset
	// is not yet committable (queued, running, publishing, or done above one that is not).
	// At MaxBuffered the partition is paused, and resumed at half. Records already fetched
	// when it paused still arrive and are held, not run out of turn: at most
	// Consumer.ChannelBufferSize more, plus one fetch of Consumer.Fetch.Default bytes. New sets
	// both from MaxBuffered when Sarama leaves them at sarama's defaults (ChannelBufferSize =
	// MaxBuffered/4, Fetch.Default = MaxBuffered × 128 bytes, at least 16 KiB and at most
	// sarama's 1 MiB), so a member holds about partitions × (1.25 × MaxBuffered records +
	// Fetch.Default bytes) at most, give or take one record batch: a fetch returns a batch
	// larger than Fetch.Default whole (KIP-74). Keep MaxBuffered well above what the member serves in
	// 100 ms per partition: sarama naps 100 ms when every partition of a broker is paused.
	// Default DefaultMaxBuffered.
	MaxBuffered int
	// MaxBatch bounds the records of one key handed to a BatchHandler in one call: when a
	// key's record starts and more of the key's records wait in the window, up to MaxBatch of
	// them go together (workflow.Bridge hands them to the conversation's workflow in one
	// signal: about 4 times the hand-offs per second at 100, BENCHMARKS.md). 1 turns batching
	// off; it is off too with a Handler that is not a BatchHandler, or with TurnContextFunc
	// (whose context is per request). Default DefaultMaxBatch, 1 (off): on the 2-core
	// development machine a batched hand-off made Temporal mode's end-to-end turns/s lower, not
	// higher (BENCHMARKS.md), so batching is for a deployment that measured it.
	MaxBatch int
	// CommitInterval is how often marked offsets are committed; they are also committed on
	// revoke and on shutdown. Default DefaultCommitInterval.
	CommitInterval time.Duration
	// RetryBackoff and MaxRetryBackoff shape the capped exponential backoff (with jitter)
	// between attempts of a failing turn and between retries of a failed publish.
	// Defaults DefaultRetryBackoff and DefaultMaxRetryBackoff.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// MaxPause caps the pause of all partitions after a rate limit, whatever delay the model
	// asked for: after it, one turn probes again. It caps too the backoff of a request rate
	// limited alone (see MaxRateLimits). Default DefaultMaxPause.
	MaxPause time.Duration
	// MaxRateLimits bounds the rate limits (turn.KindRateLimited) one request may meet in
	// this member before it is dead-lettered with the reason "rate limited N times in this
	// member (Config.MaxRateLimits), rate limited alone M times while other requests passed".
	// A rate limit spends no attempt. Rate limits are told apart:
	//   - a request's first rate limit pauses every partition (for the delay the model asked
	//     for), and counts;
	//   - a rate limit met again after a turn that started after the request's previous one
	//     succeeded was met alone (a per-tenant limit at a gateway, a prompt over a token
	//     limit): only the request's key waits, with its own exponential backoff from
	//     RetryBackoff up to MaxPause, never below the delay asked for; no partition pauses,
	//     and it counts;
	//   - a rate limit met again after other requests were rate limited meanwhile and none
	//     passed is the provider's: every partition pauses, and it counts against nothing,
	//     however long the provider's limit lasts;
	//   - otherwise (the request is the only one limited and nothing passed, as when it is
	//     alone in the member) every partition pauses, and it counts.
	// So a request always refused while others pass is dead-lettered after MaxRateLimits of
	// its own backoffs (with the default 20 and the default RetryBackoff and MaxPause, about
	// 12 minutes, during which it holds its conversation and one slot of MaxInFlight, not the
	// member). Default DefaultMaxRateLimits. The count starts again on another member.
	MaxRateLimits int
	// Decoder decodes and validates request records; its zero value applies turn's default
	// limits. With RunnerHandler leave it zero: New takes the Runner's Decoder (the Runner
	// validates every request again with it) and refuses another one.
	Decoder turn.Decoder

	// Sarama is the configuration to start from for the consumer group's client; nil means
	// sarama.NewConfig() with Version sarama.V3_6_0_0 and ClientID "turnstile" (a Version of at
	// least V2_4_0_0 is needed for the cooperative-sticky strategy, KIP-429). New copies it and
	// overrides what turnstile's guarantees rest on: manual commits (AutoCommit off),
	// Return.Errors, Offsets.Initial = OffsetOldest (a new group reads every request already on
	// the topic), and the cooperative-sticky strategy unless GroupStrategies names a strategy
	// other than sarama's default range. Consumer.MaxWaitTime (Kafka's fetch.max.wait.ms) left
	// at sarama's 500 ms becomes 100 ms: a partition resumed after a backpressure pause is
	// fetched only after the fetch in flight returns, which an idle topic holds for the whole
	// wait. Net.ReadTimeout left at sarama's 30 s becomes the rebalance timeout plus 5 s for the
	// group's connections (60 s + 5 s by default): sarama reads a JoinGroup response under it,
	// and the coordinator may hold that response for the whole rebalance (IBM/sarama#2820;
	// Java's consumer waits as long, KAFKA-9332); a ReadTimeout set to no more than the
	// rebalance timeout is refused. The producer gets its own copy (sharing one config between the group and an
	// idempotent producer makes commits slow), with Idempotent, RequiredAcks=WaitForAll,
	// Net.MaxOpenRequests=1, Retry.Max at least 5 and a murmur2 partitioner (the placement a
	// Java producer picks for the same key).
	Sarama *sarama.Config
	// Replay, when set, makes the Consumer a replay into a sandbox: see Replay. ResultsTopic
	// and DeadLetterTopic may then be empty (nothing is published there), and must not be
	// production's.
	Replay *Replay

	// Logger receives the consumer's logs, with request id, conversation id, topic,
	// partition and offset on every line about a record. Default slog.Default().
	Logger *slog.Logger

	// ForwardHeaders names the request record headers copied onto its result record, so that
	// a reader of the results sees them (a tenant, a correlation id). Nil means
	// DefaultForwardHeaders (traceparent and tracestate); an empty, non-nil slice forwards
	// none. With tracing on, traceparent and tracestate on results and dead letters are the
	// consumer's own (its send span, in the producer's trace). A dead letter keeps every
	// header of the record as it came. Every request's headers reach the Handler in
	// turn.Request.Headers whatever this says.
	ForwardHeaders []string
	// TurnContextFunc, when set, derives each record's turn context from its request (its
	// Headers, Source and fields), for a tenant, credentials or a deadline of the request's
	// own. It is called once per record, after decoding, with a context that already carries
	// the record's span; the context it returns is the one every attempt of the turn runs
	// with, and its cancel func (nil allowed) is called when the record's turn ends. Derive
	// from ctx: a revoke or shutdown cancels it. A context of the func's that ends (its own
	// deadline) fails the attempt in progress and every attempt after it, so the record is
	// dead-lettered after MaxAttempts; the inbox refunds such attempts, so the consumer
	// counts them itself.
	TurnContextFunc func(ctx context.Context, req turn.Request) (context.Context, context.CancelFunc)
	// Telemetry sends traces and metrics to the host's OpenTelemetry providers; its zero
	// value sends none and costs nothing. See the package doc, "Telemetry".
	Telemetry turnotel.Options

	// Transactional, when set, turns on the transactional mode: a member's results, dead
	// letters and offsets commit together in Kafka transactions (see Transactional and
	// txn.go). Nil, the default, keeps the idempotent producer and group commits.
	Transactional *Transactional
}

func (c *Config) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.MaxInFlightPerPartition == 0 {
		c.MaxInFlightPerPartition = c.MaxInFlight
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Ordering == OrderByPartition {
		c.MaxInFlightPerPartition = 1
	}
	if c.RevokeGrace == 0 {
		c.RevokeGrace = DefaultRevokeGrace
		if c.Sarama != nil { // leave room within the group's rebalance timeout
			c.RevokeGrace = max(0, min(c.RevokeGrace, (c.Sarama.Consumer.Group.Rebalance.Timeout-abandonWait)/2))
		}
	}
	def(&c.ShutdownTimeout, DefaultShutdownTimeout)
	def(&c.CommitInterval, DefaultCommitInterval)
	def(&c.RetryBackoff, DefaultRetryBackoff)
	def(&c.MaxRetryBackoff, DefaultMaxRetryBackoff)
	def(&c.MaxPause, DefaultMaxPause)
	if c.MaxRateLimits == 0 {
		c.MaxRateLimits = DefaultMaxRateLimits
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ForwardHeaders == nil {
		c.ForwardHeaders = DefaultForwardHeaders
	}
	if c.Transactional != nil {
		t := *c.Transactional // the caller's struct is left as it is
		t.setDefaults()
		c.Transactional = &t
	}
}

// Validate reports every field that is missing or out of range, by name, joined in the order
// of the fields of Config (errors.Join: one line each). New calls it after applying the
// defaults.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("Brokers: empty"))
	}
	required := []struct{ name, v string }{{"GroupID", c.GroupID}, {"RequestsTopic", c.RequestsTopic}}
	if c.Replay == nil {
		required = append(required, struct{ name, v string }{"ResultsTopic", c.ResultsTopic},
			struct{ name, v string }{"DeadLetterTopic", c.DeadLetterTopic})
	}
	for _, f := range required {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("%s: empty", f.name))
		}
	}
	if c.RequestsTopic != "" && (c.RequestsTopic == c.ResultsTopic || c.RequestsTopic == c.DeadLetterTopic) {
		errs = append(errs, errors.New("RequestsTopic: must differ from ResultsTopic and DeadLetterTopic"))
	}
	if c.Replay != nil {
		errs = append(errs, c.Replay.validate(c)...)
	}
	negative := func(name string, v any, neg bool) {
		if neg {
			errs = append(errs, fmt.Errorf("%s: negative (%v)", name, v))
		}
	}
	negative("MaxAttempts", c.MaxAttempts, c.MaxAttempts < 0)
	negative("TurnTimeout", c.TurnTimeout, c.TurnTimeout < 0)
	negative("RevokeGrace", c.RevokeGrace, c.RevokeGrace < 0)
	negative("ShutdownTimeout", c.ShutdownTimeout, c.ShutdownTimeout < 0)
	if c.Ordering != OrderByKey && c.Ordering != OrderByPartition {
		errs = append(errs, fmt.Errorf("Ordering: unknown (%d)", int(c.Ordering)))
	}
	negative("MaxInFlight", c.MaxInFlight, c.MaxInFlight < 0)
	negative("MaxInFlightPerPartition", c.MaxInFlightPerPartition, c.MaxInFlightPerPartition < 0)
	negative("MaxBuffered", c.MaxBuffered, c.MaxBuffered < 0)
	negative("MaxBatch", c.MaxBatch, c.MaxBatch < 0)
	negative("CommitInterval", c.CommitInterval, c.CommitInterval < 0)
	negative("RetryBackoff", c.RetryBackoff, c.RetryBackoff < 0)
	negative("MaxRetryBackoff", c.MaxRetryBackoff, c.MaxRetryBackoff < 0)
	negative("MaxPause", c.MaxPause, c.MaxPause < 0)
	negative("MaxRateLimits", c.MaxRateLimits, c.MaxRateLimits < 0)
	if c.Sarama != nil {
		if err := c.Sarama.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Sarama: %w", err))
		}
	}
	errs = append(errs, c.rebalanceErrors()...)
	if c.Transactional != nil {
		errs = append(errs, c.Transactional.validate(c)...)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consumer: invalid Config: %w", err)
	}
	return nil
}

// rebalanceErrors checks what must fit in the group's rebalance timeout (sarama's default,
// 60 s, when Sarama is nil): RevokeGrace with the time to abandon a turn, and the JoinGroup
// that sarama reads under Net.ReadTimeout while the coordinator may hold it for the whole
// rebalance; a ReadTimeout the host set to no more than the rebalance timeout would re-send
// JoinGroup for ever and keep the group rebalancing (IBM/sarama#2820).
func (c *Config) rebalanceErrors() []error {
	var errs []error
	sc, def := c.base(), sarama.NewConfig()
	rt := sc.Consumer.Group.Rebalance.Timeout
	if c.RevokeGrace+abandonWait >= rt {
		errs = append(errs, fmt.Errorf("RevokeGrace: %s (plus %s to abandon the turn) is not shorter than Sarama.Consumer.Group.Rebalance.Timeout (%s)",
			c.RevokeGrace, abandonWait, rt))
	}
	if sc.Net.ReadTimeout != def.Net.ReadTimeout && sc.Net.ReadTimeout <= rt {
		errs = append(errs, fmt.Errorf("Sarama.Net.ReadTimeout: %s is not longer than Sarama.Consumer.Group.Rebalance.Timeout (%s): "+
			"the member's JoinGroup would time out while the coordinator holds it for the rebalance, and re-sent for ever keep the group rebalancing "+
			"(leave Net.ReadTimeout at sarama's default and New raises it to the rebalance timeout plus %s)",
			sc.Net.ReadTimeout, rt, joinGroupLapse))
	}
	return errs
}

// groupConfig returns the consumer group's sarama config.
func (c *Config) groupConfig() *sarama.Config {
	sc := c.base()
	sc.Consumer.Offsets.AutoCommit.Enable = false // commits follow durable outcomes (G2)
	sc.Consumer.Return.Errors = true
	// A group without a committed offset starts at the oldest record, not sarama's default
	// newest: requests produced before the group first committed are accepted work (G2).
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	// What sarama fetches ahead of a paused partition is held in its window: keep it near
	// MaxBuffered (G6) unless the user chose these sizes.
	def := sarama.NewConfig()
	if sc.ChannelBufferSize == def.ChannelBufferSize {
		sc.ChannelBufferSize = max(1, c.MaxBuffered/4)
	}
	if sc.Consumer.Fetch.Default == def.Consumer.Fetch.Default {
		sc.Consumer.Fetch.Default = int32(max(16<<10, min(c.MaxBuffered*128, int(def.Consumer.Fetch.Default))))
	}
	if sc.Consumer.MaxWaitTime == def.Consumer.MaxWaitTime {
		sc.Consumer.MaxWaitTime = resumeFetchWait
	}
	if rt := sc.Consumer.Group.Rebalance.Timeout; sc.Net.ReadTimeout == def.Net.ReadTimeout && sc.Net.ReadTimeout < rt+joinGroupLapse {
		// sarama reads a JoinGroup response under Net.ReadTimeout, and the coordinator may hold
		// it for the whole rebalance timeout: a shorter deadline re-sends the JoinGroup for
		// ever while the group waits for the member (IBM/sarama#2820). Java's consumer waits
		// the rebalance timeout plus 5 s for it (KAFKA-9332).
		sc.Net.ReadTimeout = rt + joinGroupLapse
	}
	if c.Transactional != nil {
		// read_committed makes sarama fetch a claim's committed offset with RequireStable
		// (OffsetFetch v7, KIP-447): a new owner waits for a transaction still committing the
		// partition's offset instead of starting below it and serving its records again.
		sc.Consumer.IsolationLevel = sarama.ReadCommitted
	}
	strategies := sc.Consumer.Group.Rebalance.GroupStrategies
	if len(strategies) == 0 || (len(strategies) == 1 && (strategies[0].Name() == sarama.RangeBalanceStrategyName ||
		strategies[0].Name() == sarama.CooperativeStickyBalanceStrategyName)) {
		// sarama's default (range) or cooperative-sticky: a fresh cooperative-sticky object,
		// since that strategy keeps per-member state and must not be shared.
		sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	}
	return sc
}

// producerConfig returns the results and dead-letter producer's sarama config.
func (c *Config) producerConfig(partitioner sarama.PartitionerConstructor) *sarama.Config {
	sc := c.base()
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Partitioner = partitioner
	if sc.Producer.Retry.Max < 5 {
		sc.Producer.Retry.Max = 5
	}
	return sc
}

// base returns a copy of the user's sarama config, or a default one.
func (c *Config) base() *sarama.Config {
	if c.Sarama == nil {
		sc := sarama.NewConfig()
		sc.Version = sarama.V3_6_0_0
		sc.ClientID = "turnstile"
		return sc
	}
	cp := *c.Sarama
	return &cp
}

// joinGroupLapse is what the member's read deadline exceeds the group's rebalance timeout
// by, as Java's consumer's JoinGroup request timeout does (JOIN_GROUP_TIMEOUT_LAPSE).
const joinGroupLapse = 5 * time.Second

// resumeFetchWait is the fetch long-poll (sarama's Consumer.MaxWaitTime, Kafka's
// fetch.max.wait.ms) when the user left sarama's 500 ms: a partition resumed after a
// backpressure pause is fetched only in the broker consumer's next fetch request, which waits
// for the one in flight, and that one waits up to MaxWaitTime when the partitions it asks for
// have nothing new. A shorter long-poll bounds that stall at the cost of more empty fetches on
// an idle topic.
var resumeFetchWait = 100 * time.Millisecond
