package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	rec "github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// abandonWait is how long a revoked partition's ConsumeClaim waits, after cancelling the turn in
// flight, for the turn to notice; a Handler that ignores cancellation is left behind, and
// whatever it returns is dropped.
const abandonWait = time.Second

// Consumer runs turns from a requests topic. Create it with New and call Run once.
type Consumer struct {
	cfg   Config
	h     Handler
	log   *slog.Logger
	sem   chan struct{} // slots for turns, Config.MaxInFlight
	work  chan *record  // from the partitions' dispatchers to the workers, one per slot
	stats counters

	running atomic.Bool
	// Set by Run before the group starts, read by the partitions.
	runCtx     context.Context
	group      sarama.ConsumerGroup
	out        *output
	sink       sink                          // the commit mode (sink.go), set by Run
	txnHook    func()                        // tests: runs before each CommitTxn
	decodeHook func(*sarama.ConsumerMessage) // tests: runs before each record's decoding

	// maxRecordBytes is the producer's Producer.MaxMessageBytes; a turn's Result must fit
	// in it with its record's key and headers (resultLimit, turn.ResultLimit).
	maxRecordBytes    int
	resultLimitSource string
	pauses            *pauses
	throttle          *throttle
	partitions        atomic.Int32 // of the requests topic
	client            sarama.Client
	committer         atomic.Pointer[committer] // of the current session; sessions do not overlap
	solo              soloGate                  // lets a turn run with no other in flight (turn.ErrRunAlone)
	batcher           BatchHandler              // the Handler, when it takes batches and batching is on (batch.go)

	// hostRunner is the RunnerHandler's Runner as the host gave it, before telemetry wrapped
	// its stores: a replay compares its stores with production's (replay.go).
	hostRunner *turn.Runner

	// Telemetry (telemetry.go, metrics.go): nil when Config.Telemetry leaves it off.
	tracing *tracing
	meters  *meters
	health  health // health.go

	shutdownMu   sync.Mutex
	shutdownErrs []error // commits of the shutdown that did not finish
}

// New validates cfg, applies its defaults and returns a Consumer that serves records with h.
// With RunnerHandler, cfg takes the Runner's MaxAttempts, TurnTimeout and Decoder, and a Config
// that sets one of them to another value is refused (see RunnerHandler). It opens no
// connection; Run does. Errors name the Config field at fault; a Handler with a Validate()
// error method (RunnerHandler's: turn.Runner.Validate, which names a missing Model, Sessions or
// Inbox) is checked too, so that a mistake in it fails here instead of dead-lettering every
// request.
func New(cfg Config, h Handler) (*Consumer, error) {
	if h == nil {
		return nil, errors.New("consumer: nil Handler")
	}
	if v, ok := h.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("consumer: invalid Handler: %w", err)
		}
	}
	if a, ok := h.(limitsAdopter); ok {
		if err := a.adopt(&cfg); err != nil {
			return nil, err
		}
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var hostRunner *turn.Runner
	if rh, ok := h.(runnerHandler); ok {
		hostRunner = rh.r
		if cfg.Telemetry.Enabled() {
			h = runnerHandler{turnotel.Runner(rh.r, cfg.Telemetry)} // spans for the inbox, session and model
		}
	}
	c := &Consumer{cfg: cfg, h: h, hostRunner: hostRunner, log: cfg.Logger, sem: make(chan struct{}, cfg.MaxInFlight),
		work: make(chan *record, cfg.MaxInFlight), tracing: newTracing(&cfg)}
	m, err := newMeters(c)
	if err != nil {
		return nil, err
	}
	c.meters = m
	if bh, ok := h.(BatchHandler); ok && cfg.MaxBatch > 1 && cfg.TurnContextFunc == nil {
		c.batcher = bh
	}
	c.maxRecordBytes = cfg.producerConfig(newPartitioner).Producer.MaxMessageBytes
	c.resultLimitSource = rec.ResultLimitSource(c.maxRecordBytes)
	return c, nil
}

// Run joins the consumer group and serves records until ctx ends, then drains: the turns in
// flight get Config.ShutdownTimeout to finish, finished ones are published and committed, the
// rest are cancelled (and redelivered to the group later), the member leaves the group and
// every connection closes. Run may be called once.
//
// Before it joins the group Run checks that the requests, results and dead-letter topics
// exist (a replay's own, when it has them), and returns an error naming the missing one (a
// member that joined without them would look healthy while its partitions retried
// publishing forever). It returns nil after a clean shutdown; an error wrapping
// ErrFinalCommit when a commit of the shutdown did not finish within 5 s or leaving the group
// did not (the records it covered are redelivered to the group, and redone: nothing is
// lost); or an error when it cannot start (brokers unreachable, a topic missing, ctx ended
// while connecting, a replay that would write to production's stores: ErrProductionStore). In
// the transactional mode (Config.Transactional) it also ends, with an error wrapping ErrFenced,
// when the member's transactional producer is fenced or fails for good.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("consumer: Run called twice")
	}
	defer c.meters.close()
	c.warnConcurrency()
	client, err := connect(ctx, func() (sarama.Client, error) { return sarama.NewClient(c.cfg.Brokers, c.cfg.groupConfig()) })
	if err != nil {
		return fmt.Errorf("consumer: connect to %v: %w", c.cfg.Brokers, err)
	}
	defer client.Close()
	c.client = client
	c.health.running.Store(true)
	defer c.health.running.Store(false)
	if err := c.checkTopics(); err != nil {
		return err
	}
	ctx, stopReplay, err := c.replayUntilEnd(ctx)
	if err != nil {
		return err
	}
	defer stopReplay()
	ctx, closeSink, err := c.startSink(ctx)
	if err != nil {
		return err
	}
	defer closeSink() // after every claim returned: nothing of theirs is sent any more
	group, err := sarama.NewConsumerGroupFromClient(c.cfg.GroupID, client)
	if err != nil {
		return fmt.Errorf("consumer: join group %q: %w", c.cfg.GroupID, err)
	}
	c.runCtx, c.group = ctx, group
	defer c.startWorkers()()
	c.pauses = newPauses(group)
	c.throttle = newThrottle(c.pauses, c.log, time.Second, c.cfg.MaxPause)
	defer c.throttle.stop()
	return c.serveGroup(ctx, group)
}

// warnConcurrency logs when the Handler's stores cannot serve Config.MaxInFlight turns at once.
func (c *Consumer) warnConcurrency() {
	if cc, ok := c.h.(concurrencyChecker); ok {
		if err := cc.CheckConcurrency(c.cfg.MaxInFlight); err != nil {
			c.log.Warn("the handler's stores may not keep up with MaxInFlight; turns will wait for connections",
				"max_in_flight", c.cfg.MaxInFlight, "err", err)
		}
	}
}

// checkTopics checks that the requests, results and dead-letter topics exist.
func (c *Consumer) checkTopics() error {
	if err := c.refreshPartitions(); err != nil {
		return err
	}
	for _, topic := range []struct{ field, name string }{
		{"ResultsTopic", c.cfg.ResultsTopic}, {"DeadLetterTopic", c.cfg.DeadLetterTopic},
	} {
		if topic.name == "" { // a replay that publishes nothing
			continue
		}
		if _, err := c.client.Partitions(topic.name); err != nil {
			return fmt.Errorf("consumer: Config.%s %q: %w", topic.field, topic.name, err)
		}
	}
	return nil
}

// replayUntilEnd starts a replay (Config.Replay) and, when it stops at the end of its range,
// returns a context that ends there; stop releases it.
func (c *Consumer) replayUntilEnd(ctx context.Context) (context.Context, func(), error) {
	if c.cfg.Replay == nil {
		return ctx, func() {}, nil
	}
	ends, err := c.startReplay(ctx, c.client)
	if err != nil || ends == nil {
		return ctx, func() {}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	go c.stopAtEnd(ctx, cancel, c.client, ends)
	return ctx, cancel, nil
}

// startWorkers starts Config.MaxInFlight workers, which live as long as Run: a goroutine per
// turn would grow a fresh stack for every record (JSON decoding is deep), which cost more than
// the rest of a fast turn. The returned func stops them.
func (c *Consumer) startWorkers() func() {
	stop := make(chan struct{})
	for range c.cfg.MaxInFlight {
		go c.worker(stop)
	}
	return func() { close(stop) }
}

// serveGroup consumes the requests topic in the group until ctx ends, rejoining after a
// session ends on an error, then leaves the group (bounded: against a hung broker it would
// wait out network timeouts) and returns Run's error.
func (c *Consumer) serveGroup(ctx context.Context, group sarama.ConsumerGroup) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		for err := range group.Errors() {
			c.log.Warn("consumer group error", "group", c.cfg.GroupID, "err", err)
		}
	})
	bo := newBackoff(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff)
	defer c.logDrain(ctx)()
	for ctx.Err() == nil {
		err := group.Consume(ctx, []string{c.cfg.RequestsTopic}, groupHandler{c})
		if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			break
		}
		if err != nil {
			c.log.Warn("consumer group session ended; rejoining", "group", c.cfg.GroupID, "err", err)
			sleep(ctx, bo.NextBackOff())
			continue
		}
		bo.Reset()
	}
	var err error
	if !within(commitTimeout, func() { err = group.Close() }) {
		c.log.Warn("leaving the consumer group did not finish in time; continuing", "timeout", commitTimeout.String())
		c.shutdownFailed(fmt.Errorf("leaving the group did not finish within %s", commitTimeout))
		return c.runErr()
	}
	wg.Wait()
	if err != nil {
		c.log.Warn("consumer group close", "err", err)
	}
	return c.runErr()
}

// runErr is Run's error: the transactional producer's failure (txn.go), if any, and the
// shutdown's.
func (c *Consumer) runErr() error {
	if err := c.sink.err(); err != nil {
		return errors.Join(err, c.shutdownErr())
	}
	return c.shutdownErr()
}

// ErrFinalCommit is wrapped by Run's error when a commit of its shutdown did not finish in
// time (or leaving the group did not): the offsets it would have committed are read again by
// the group, and their records redone (the inbox answers those that were done).
var ErrFinalCommit = errors.New("consumer: final commit failed")

// shutdownFailed records a failure of the shutdown for Run to return.
func (c *Consumer) shutdownFailed(err error) {
	c.shutdownMu.Lock()
	c.shutdownErrs = append(c.shutdownErrs, err)
	c.shutdownMu.Unlock()
}

func (c *Consumer) shutdownErr() error {
	c.shutdownMu.Lock()
	defer c.shutdownMu.Unlock()
	if len(c.shutdownErrs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrFinalCommit, errors.Join(c.shutdownErrs...))
}

// worker serves the records the dispatchers hand it until stop closes.
func (c *Consumer) worker(stop <-chan struct{}) {
	for {
		select { // a record already waiting: taken without a two-case select
		case r := <-c.work:
			r.p.serve(r)
			continue
		default:
		}
		select {
		case r := <-c.work:
			r.p.serve(r)
		case <-stop:
			return
		}
	}
}

// connect runs open (sarama's constructors take no context) and returns early when ctx ends;
// what open makes after that is closed in the background.
func connect[T io.Closer](ctx context.Context, open func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := open()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				_ = r.v.Close()
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}

func (c *Consumer) refreshPartitions() error {
	parts, err := c.client.Partitions(c.cfg.RequestsTopic)
	if err != nil {
		return fmt.Errorf("consumer: requests topic %q: %w", c.cfg.RequestsTopic, err)
	}
	c.partitions.Store(int32(len(parts)))
	return nil
}

// within runs f and waits for it at most d; it reports whether f finished.
func within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
