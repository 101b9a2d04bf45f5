package turntest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Environment variables read by [NewCluster].
const (
	// EnvBrokers names a real cluster to use instead of kfake: a comma
	// separated list of host:port (plaintext, no authentication).
	EnvBrokers = "TURNSTILE_KAFKA_BROKERS"
	// EnvVersion optionally overrides the Kafka protocol version sarama is
	// told to speak (sarama.ParseKafkaVersion syntax, e.g. "3.7.0").
	EnvVersion = "TURNSTILE_KAFKA_VERSION"
	// EnvDebug, when non-empty, sends kfake's warnings and sarama's log to
	// stderr. sarama's logger is global, so this applies to the whole binary.
	EnvDebug = "TURNSTILE_KAFKA_DEBUG"
)

// Version is the Kafka protocol version [Cluster.Config] and [Config] set. kfake
// serves the APIs of Kafka 4.x but refuses the oldest request versions
// (Produce < v3, Fetch < v4); sarama at 3.6 speaks versions kfake accepts,
// has cooperative rebalancing (>= 2.4), idempotence and transactions with
// KIP-447 group metadata (>= 2.5).
var Version = sarama.V3_6_0_0

// Options configure [Start] and [NewCluster]. The zero value is a good default.
type Options struct {
	// Brokers is the number of in-process kfake brokers, 1 to 5; 0 means 1. Ignored for a
	// real cluster.
	Brokers int

	// MaxMessageBytes sets the kfake brokers' message.max.bytes: the largest record batch a
	// producer may send, in bytes, unless a topic's max.message.bytes overrides it. 0 keeps
	// Kafka's default of 1048588 (1 MiB plus the batch overhead). Ignored for a real cluster.
	MaxMessageBytes int

	// GroupMinSessionTimeout is the smallest consumer group session timeout the kfake brokers
	// accept (group.min.session.timeout.ms); 0 means 10 ms, so tests may use short sessions.
	// A real broker's default is 6 s.
	GroupMinSessionTimeout time.Duration

	// SessionTimeout is the consumer group session timeout that
	// [Cluster.Config] sets; 0 means 3s on kfake (short, so that a crash test
	// waits little for the dead member's expulsion, but long enough that a
	// loaded machine running tests under -race keeps its heartbeats) and 10s on
	// a real cluster
	// (whose brokers refuse less than group.min.session.timeout.ms, 6s by
	// default). Heartbeats are sent every SessionTimeout/10.
	SessionTimeout time.Duration

	// RebalanceTimeout is the consumer group rebalance timeout that
	// [Cluster.Config] sets: how long the coordinator waits for members to
	// rejoin and how long sarama waits for a revoked claim's ConsumeClaim
	// to return; 0 means 5s.
	RebalanceTimeout time.Duration
}

// Cluster is a Kafka cluster: an in-process kfake cluster that [Start] or [NewCluster]
// started, or a real one that [NewCluster] reached through TURNSTILE_KAFKA_BROKERS.
type Cluster struct {
	brokers []string
	fake    *kfake.Cluster // nil for a real cluster
	version sarama.KafkaVersion

	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration

	adminMu sync.Mutex // guards admin
	admin   sarama.ClusterAdmin
	mu      sync.Mutex // guards created
	created []string   // topics to delete at cleanup on a real cluster

	prodMu   sync.Mutex
	producer sarama.SyncProducer
	prodErr  error

	closeOnce sync.Once
}

var debugOnce sync.Once

func newCluster(opts Options) *Cluster {
	c := &Cluster{
		version:          Version,
		sessionTimeout:   opts.SessionTimeout,
		rebalanceTimeout: opts.RebalanceTimeout,
	}
	if c.rebalanceTimeout <= 0 {
		c.rebalanceTimeout = 5 * time.Second
	}
	return c
}

// startFake starts kfake on 127.0.0.1 for c, one free port per broker.
func (c *Cluster) startFake(opts Options, debug bool) error {
	n := opts.Brokers
	if n == 0 {
		n = 1
	}
	if n < 1 || n > 5 {
		return fmt.Errorf("turntest: Options.Brokers = %d, want 1 to 5", opts.Brokers)
	}
	if opts.MaxMessageBytes < 0 {
		return fmt.Errorf("turntest: Options.MaxMessageBytes = %d is negative", opts.MaxMessageBytes)
	}
	minSession := opts.GroupMinSessionTimeout
	if minSession <= 0 {
		minSession = 10 * time.Millisecond
	}
	if c.sessionTimeout <= 0 {
		c.sessionTimeout = 3 * time.Second
	}
	kopts := []kfake.Opt{
		kfake.NumBrokers(n),
		// Classic groups refuse a JoinGroup whose session timeout is below this; Kafka's
		// default is 6s. kfake does not create topics on first use: a typo fails instead.
		kfake.GroupMinSessionTimeout(minSession),
	}
	if opts.MaxMessageBytes > 0 {
		kopts = append(kopts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(opts.MaxMessageBytes)}))
	}
	if debug {
		kopts = append(kopts, kfake.WithLogger(kfake.BasicLogger(os.Stderr, kfake.LogLevelWarn)))
	}
	fake, err := kfake.NewCluster(kopts...)
	if err != nil {
		return fmt.Errorf("turntest: start kfake: %w", err)
	}
	c.fake = fake
	c.brokers = fake.ListenAddrs()
	return nil
}

// Start starts an in-process kfake cluster on 127.0.0.1 for a program (the examples run on
// it); a test uses [NewCluster]. Close it when done. kfake does not create topics on first
// use: create them with [CreateTopics] or [Cluster.CreateTopic]. Errors: Options out of range,
// kfake failing to listen.
func Start(opts Options) (*Cluster, error) {
	c := newCluster(opts)
	if err := c.startFake(opts, os.Getenv(EnvDebug) != ""); err != nil {
		return nil, err
	}
	return c, nil
}

// ErrUnreachable is wrapped by the error of [NewClusterContext] when the brokers that
// TURNSTILE_KAFKA_BROKERS names cannot be reached; [NewCluster] skips the test on it (fails it
// under CI=true).
var ErrUnreachable = errors.New("unreachable brokers")

// NewClusterContext returns a cluster for a program, as [NewCluster] does for a test: with
// TURNSTILE_KAFKA_BROKERS set it connects to that cluster, otherwise it starts kfake on
// 127.0.0.1 with opts.Brokers brokers and a group minimum session timeout low enough for fast
// group tests. Close it when done: on a real cluster that deletes the topics its
// [Cluster.CreateTopicContext] created. ctx is checked before it starts; connecting is bounded
// by the config's dial timeout (10 s). Errors: ctx's, a bad TURNSTILE_KAFKA_VERSION or
// TURNSTILE_KAFKA_BROKERS, Options out of range, kfake failing to listen, and brokers that
// cannot be reached (wrapping [ErrUnreachable]).
func NewClusterContext(ctx context.Context, opts Options) (*Cluster, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("turntest: cluster: %w", err)
	}
	debug := os.Getenv(EnvDebug) != ""
	if debug {
		debugOnce.Do(func() {
			sarama.Logger = logWriter{}
		})
	}
	c := newCluster(opts)
	if v := os.Getenv(EnvVersion); v != "" {
		parsed, err := sarama.ParseKafkaVersion(v)
		if err != nil {
			return nil, fmt.Errorf("turntest: %s=%q: %w", EnvVersion, v, err)
		}
		c.version = parsed
	}

	if env := strings.TrimSpace(os.Getenv(EnvBrokers)); env != "" {
		for _, b := range strings.Split(env, ",") {
			if b = strings.TrimSpace(b); b != "" {
				c.brokers = append(c.brokers, b)
			}
		}
		if len(c.brokers) == 0 {
			return nil, fmt.Errorf("turntest: %s=%q names no broker", EnvBrokers, env)
		}
		if c.sessionTimeout <= 0 {
			c.sessionTimeout = 10 * time.Second
		}
	} else if err := c.startFake(opts, debug); err != nil {
		return nil, err
	}

	admin, err := sarama.NewClusterAdmin(c.brokers, c.Config())
	if err != nil {
		if c.fake != nil {
			c.fake.Close()
			return nil, fmt.Errorf("turntest: connect to kfake at %v: %w", c.brokers, err)
		}
		return nil, fmt.Errorf("turntest: cannot reach %s=%s (%w): %w", EnvBrokers, strings.Join(c.brokers, ","), ErrUnreachable, err)
	}
	c.admin = admin
	return c, nil
}

// NewCluster returns a cluster for t, closed by t.Cleanup: [NewClusterContext], failing the
// test on an error, and skipping it (failing it under CI=true) when the brokers that
// TURNSTILE_KAFKA_BROKERS names cannot be reached.
func NewCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := NewClusterContext(context.Background(), opts)
	if errors.Is(err, ErrUnreachable) {
		missing(t, "%v", err)
		return nil // unreachable: missing ends the test
	}
	fatalIf(t, err)
	t.Cleanup(func() { c.close(t.Logf) })
	return c
}

// fatalIf fails t with err, if it is not nil: the testing.TB forms of the helpers are their
// context forms and this.
func fatalIf(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v", err)
	}
}

// clusterAdmin returns the cluster's admin client, made on first use.
func (c *Cluster) clusterAdmin() (sarama.ClusterAdmin, error) {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	if c.admin == nil {
		admin, err := sarama.NewClusterAdmin(c.brokers, c.Config())
		if err != nil {
			return nil, err
		}
		c.admin = admin
	}
	return c.admin, nil
}

// Close closes what the cluster's helpers opened and, for kfake, stops the brokers and drops
// every record; clients still connected see their connections close. A cluster from
// [NewCluster] is closed by the test's cleanup; closing it earlier is allowed. Close is
// idempotent.
func (c *Cluster) Close() { c.close(func(string, ...any) {}) }

func (c *Cluster) close(logf func(string, ...any)) {
	c.closeOnce.Do(func() {
		c.prodMu.Lock()
		if c.producer != nil {
			if err := c.producer.Close(); err != nil {
				logf("turntest: close producer: %v", err)
			}
			c.producer = nil
		}
		c.prodMu.Unlock()

		c.mu.Lock()
		created := c.created
		c.created = nil
		c.mu.Unlock()
		c.adminMu.Lock()
		admin := c.admin
		c.admin = nil
		c.adminMu.Unlock()
		for _, topic := range created {
			if err := admin.DeleteTopic(topic); err != nil {
				logf("turntest: delete topic %q: %v", topic, err)
			}
		}
		if admin != nil {
			if err := admin.Close(); err != nil {
				logf("turntest: close admin: %v", err)
			}
		}
		if c.fake != nil {
			c.fake.Close()
		}
	})
}

// Brokers returns the bootstrap addresses (host:port) of the cluster. The
// slice is a copy.
func (c *Cluster) Brokers() []string {
	return append([]string(nil), c.brokers...)
}

// Fake returns the kfake cluster behind c, for tests that inject faults or
// move partitions, or nil when c is a real cluster (such a test should skip).
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Version returns the protocol version [Cluster.Config] sets.
func (c *Cluster) Version() sarama.KafkaVersion { return c.version }

// SessionTimeout returns the consumer group session timeout that
// [Cluster.Config] sets.
func (c *Cluster) SessionTimeout() time.Duration { return c.sessionTimeout }

var validName = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// Unique returns prefix followed by a dash and 8 random hex digits: a topic
// name, group id or transactional id that no other test or earlier run
// uses. prefix must be 1 to 200 of [a-zA-Z0-9._-]; otherwise Unique returns
// a name built from "invalid" so that the broker, not a panic, reports it.
func (c *Cluster) Unique(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	if len(prefix) == 0 || len(prefix) > 200 || !validName.MatchString(prefix) {
		prefix = "invalid"
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// CreateTopic is [Cluster.CreateTopicContext] for a test, waiting at most 30 s for the
// topic's metadata and failing the test on an error. On a real cluster the topic is deleted
// when the test ends (errors are logged, not failed).
func (c *Cluster) CreateTopic(t testing.TB, name string, partitions int32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic, err := c.CreateTopicContext(ctx, name, partitions)
	fatalIf(t, err)
	return topic
}

// CreateTopicContext creates a topic named [Cluster.Unique](name) with the given number of
// partitions (1 to 10000) and returns its name; callers must use the returned name. It waits,
// until ctx ends, for every partition to have a leader in the metadata. On a real cluster the
// topic is deleted when the cluster is closed. Errors: a name that is not 1 to 200 of
// [a-zA-Z0-9._-], a partition count out of range, a broker error, ctx ending first.
func (c *Cluster) CreateTopicContext(ctx context.Context, name string, partitions int32) (string, error) {
	if name == "" || len(name) > 200 || !validName.MatchString(name) {
		return "", fmt.Errorf("turntest: CreateTopic(%q): a name is 1 to 200 of [a-zA-Z0-9._-]", name)
	}
	if partitions < 1 || partitions > 10000 {
		return "", fmt.Errorf("turntest: CreateTopic(%q, %d): partitions must be 1 to 10000", name, partitions)
	}
	topic := c.Unique(name)
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1}
	admin, err := c.clusterAdmin()
	if err != nil {
		return "", fmt.Errorf("turntest: admin client: %w", err)
	}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		return "", fmt.Errorf("turntest: create topic %q with %d partitions: %w", topic, partitions, err)
	}
	if c.fake == nil {
		c.mu.Lock()
		c.created = append(c.created, topic)
		c.mu.Unlock()
	}
	client, err := sarama.NewClient(c.brokers, c.Config())
	if err != nil {
		return "", fmt.Errorf("turntest: client for %q: %w", topic, err)
	}
	defer client.Close()
	if err := waitReady(ctx, client, topic, partitions); err != nil {
		return "", err
	}
	return topic, nil
}

// Config returns a new sarama configuration for a test client of c: the
// protocol version, manual commits (Consumer.Offsets.AutoCommit.Enable =
// false), reading from the oldest offset when the group has no committed
// offset, the cooperative-sticky strategy, and short group and retry
// timings (session timeout [Cluster.SessionTimeout], heartbeat every tenth
// of it, rebalance timeout from [Options], 100ms fetch wait and rebalance
// retry backoff). Producer.Return.Successes is on so the config serves a
// SyncProducer too.
//
// Consumer.MaxWaitTime (the fetch long poll) also bounds commit latency: a
// commit to a broker that is holding a fetch of the same client waits
// behind it, up to about twice MaxWaitTime (measured on kfake: 100ms gives
// commits of at most ~200ms, sarama's default 500ms up to ~1s).
//
// Every call returns a fresh config with its own balance strategy object:
// give each group member its own Config (the cooperative-sticky strategy
// keeps per-member state), and do not share a consumer's config with a
// producer.
func (c *Cluster) Config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = c.version
	cfg.ClientID = "turnstile-test"
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Net.ReadTimeout = 30 * time.Second
	cfg.Net.WriteTimeout = 10 * time.Second
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond

	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond

	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Consumer.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = c.sessionTimeout
	cfg.Consumer.Group.Heartbeat.Interval = max(c.sessionTimeout/10, 10*time.Millisecond)
	cfg.Consumer.Group.Rebalance.Timeout = c.rebalanceTimeout
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{
		sarama.NewBalanceStrategyCooperativeSticky(),
	}
	return cfg
}

// ProducerConfig returns [Cluster.Config] set up as the project's producers are
// ([IdempotentProducer]).
func (c *Cluster) ProducerConfig() *sarama.Config { return IdempotentProducer(c.Config()) }

// IdempotentProducer sets on sc what the project's producers of request records need and
// returns sc: idempotent (Idempotent, RequiredAcks = WaitForAll, Net.MaxOpenRequests = 1, so
// the records of a key keep their order through retries), 10 retries, successes returned (for
// a SyncProducer), and keyed records placed where a Java producer would
// (sarama.NewMurmur2Partitioner). A program without a [Cluster] uses it on its own config.
func IdempotentProducer(sc *sarama.Config) *sarama.Config {
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = 10
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	return sc
}

// TransactionalConfig returns [Cluster.ProducerConfig] with
// Producer.Transaction.ID set to id and a 50ms transaction retry backoff.
// An empty id means a fresh [Cluster.Unique]("txn"). Two producers given the
// same id fence each other, which is how a test builds a zombie.
func (c *Cluster) TransactionalConfig(id string) *sarama.Config {
	if id == "" {
		id = c.Unique("txn")
	}
	cfg := c.ProducerConfig()
	cfg.Producer.Transaction.ID = id
	cfg.Producer.Transaction.Retry.Backoff = 50 * time.Millisecond
	return cfg
}

// missing skips t with the reason, or fails it when CI=true.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (CI=true: a missing service fails the test)", args...)
	}
	t.Skipf(format, args...)
}

type logWriter struct{}

func (logWriter) Print(v ...any)                 { fmt.Fprint(os.Stderr, v...) }
func (logWriter) Printf(format string, v ...any) { fmt.Fprintf(os.Stderr, format, v...) }
func (logWriter) Println(v ...any)               { fmt.Fprintln(os.Stderr, v...) }
