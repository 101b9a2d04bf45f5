package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/internal/temporaldev"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
	"github.com/turnstile-go/turnstile/workflow"
)

// Topics, partitions and the task queue of the example.
const (
	RequestsTopic   = "agent.requests"
	ResultsTopic    = "agent.results"
	DeadLetterTopic = "agent.requests.dlq"
	Partitions      = 6
	TaskQueue       = "turnstile-example"
	group           = "turnstile-temporal-example"
	// heartbeatTimeout is short so that the killed worker's turn moves on quickly.
	heartbeatTimeout = 2 * time.Second
)

// Config configures one run.
type Config struct {
	Requests, Conversations int
	Timeout                 time.Duration
}

// world is what a run sets up: Kafka, Temporal, the stores and the client.
type world struct {
	brokers []string
	host    string
	dbPath  string
	st      *stores
	client  client.Client
	cleanup []func()
}

func (w *world) close() {
	for i := len(w.cleanup) - 1; i >= 0; i-- {
		w.cleanup[i]()
	}
}

func setup(ctx context.Context) (*world, error) {
	w := &world{}
	kc, err := turntest.Start(turntest.Options{})
	if err != nil {
		return nil, err
	}
	w.cleanup = append(w.cleanup, kc.Close)
	w.brokers = kc.Brokers()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := turntest.CreateTopics(tctx, w.brokers, nil,
		turntest.Topic{Name: RequestsTopic, Partitions: Partitions}, turntest.Topic{Name: ResultsTopic, Partitions: Partitions},
		turntest.Topic{Name: DeadLetterTopic, Partitions: Partitions}); err != nil {
		w.close()
		return nil, err
	}
	srv, err := temporaldev.Start(ctx, nil, workflow.SearchAttributeTypes)
	if err != nil {
		w.close()
		return nil, err
	}
	w.cleanup = append(w.cleanup, func() { _ = srv.Stop() })
	w.host = srv.FrontendHostPort()
	dir, err := os.MkdirTemp("", "turnstile-temporal-")
	if err != nil {
		w.close()
		return nil, err
	}
	w.cleanup = append(w.cleanup, func() { os.RemoveAll(dir) })
	w.dbPath = filepath.Join(dir, "turnstile.db")
	if w.st, err = openStores(ctx, w.dbPath); err != nil {
		w.close()
		return nil, err
	}
	w.cleanup = append(w.cleanup, func() { w.st.db.Close() })
	if w.client, err = dial(w.host); err != nil {
		w.close()
		return nil, err
	}
	w.cleanup = append(w.cleanup, w.client.Close)
	return w, nil
}

func dial(host string) (client.Client, error) {
	return client.Dial(client.Options{HostPort: host, ContextPropagators: []twf.ContextPropagator{workflow.NewContextPropagator()}, Logger: quiet{}})
}

// run is the example: it returns the Summary of the checks, or an error for a run that could
// not finish.
func run(ctx context.Context, cfg Config, stdout io.Writer) (Summary, error) {
	if cfg.Requests < 1 || cfg.Conversations < 1 || cfg.Conversations > cfg.Requests {
		return Summary{}, fmt.Errorf("want 1 <= conversations (%d) <= requests (%d)", cfg.Conversations, cfg.Requests)
	}
	w, err := setup(ctx)
	if err != nil {
		return Summary{}, err
	}
	defer w.close()
	fmt.Fprintf(stdout, "turnstile in Temporal mode: %d requests over %d conversations; Kafka %s; Temporal %s; SQLite %s\n",
		cfg.Requests, cfg.Conversations, strings.Join(w.brokers, ","), w.host, w.dbPath)

	log := slog.New(slog.DiscardHandler)
	watch, err := demo.NewWatcher(w.brokers, turntest.Config(), ResultsTopic, DeadLetterTopic, sarama.OffsetOldest)
	if err != nil {
		return Summary{}, err
	}
	defer watch.Close()

	// The worker that will be killed starts first, alone, so that it surely takes a turn.
	victim, err := startVictim(w)
	if err != nil {
		return Summary{}, err
	}
	defer victim.kill()

	ledger := w.st.ledger
	var members []*member
	for i := range 2 {
		m, err := startMember(w, ledger, log)
		if err != nil {
			return Summary{}, fmt.Errorf("member %d: %w", i+1, err)
		}
		members = append(members, m)
	}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	wl := newWorkload(cfg.Requests, cfg.Conversations)
	start := time.Now()
	if err := produce(w.brokers, wl); err != nil {
		return Summary{}, err
	}

	sum := Summary{Requests: cfg.Requests, Conversations: cfg.Conversations}
	model := &demoModel{db: w.st.db}
	select {
	case id := <-victim.inModel:
		sum.KilledRequest = id
		workerA, err := startWorker(w, model, log)
		if err != nil {
			return Summary{}, err
		}
		defer workerA.Stop()
		victim.kill()
		fmt.Fprintf(stdout, "worker process %d killed (SIGKILL) in the model's call for request %s\n", victim.pid, id)
		workerB, err := startWorker(w, model, log) // the replacement
		if err != nil {
			return Summary{}, err
		}
		defer workerB.Stop()
	case <-time.After(cfg.Timeout):
		return Summary{}, errors.New("the worker process never reached the model")
	}

	if err := watch.WaitFor(ctx, cfg.Requests, cfg.Timeout); err != nil {
		return Summary{}, err
	}
	sum.Elapsed = time.Since(start)
	for _, m := range members {
		m.stop()
	}
	if err := check(ctx, &sum, w, wl, watch, model); err != nil {
		return Summary{}, err
	}
	sum.print(stdout)
	return sum, nil
}

// member is one consumer group member with the bridge as its handler.
type member struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startMember(w *world, ledger workflow.Ledger, log *slog.Logger) (*member, error) {
	// The consumer hands the bridge each request with its record's headers (traceparent): no
	// HeaderTap is needed.
	b, err := workflow.NewBridge(w.client, workflow.BridgeOptions{
		TaskQueue: TaskQueue, Ledger: ledger, Logger: log,
		Config: workflow.Config{MaxTurnsPerRun: 50, SearchAttributes: true},
	})
	if err != nil {
		return nil, err
	}
	c, err := consumer.New(consumer.Config{
		Brokers: w.brokers, GroupID: group, RequestsTopic: RequestsTopic, ResultsTopic: ResultsTopic,
		DeadLetterTopic: DeadLetterTopic, Sarama: turntest.Config(), Logger: log, CommitInterval: 200 * time.Millisecond,
	}, b)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	return m, nil
}

// stop ends the member: it drains, commits and leaves the group.
func (m *member) stop() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
	})
}

// victim is the worker process that gets killed.
type victim struct {
	cmd     *exec.Cmd
	pid     int
	inModel chan string
	once    sync.Once
}

func startVictim(w *world) (*victim, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envWorker+"="+w.host+"|"+w.dbPath+"|"+strings.Join(w.brokers, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the worker process: %w", err)
	}
	v := &victim{cmd: cmd, pid: cmd.Process.Pid, inModel: make(chan string, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), inModelLine); ok {
				select {
				case v.inModel <- strings.TrimSpace(id):
				default:
				}
			}
		}
	}()
	return v, nil
}

func (v *victim) kill() {
	v.once.Do(func() {
		_ = v.cmd.Process.Kill() // SIGKILL
		_ = v.cmd.Wait()
	})
}

// workload is the requests of a run, per conversation in sequence order.
type workload struct {
	convs []string
	reqs  map[string][]turn.Request
	trace map[string]string // request id -> traceparent
}

func newWorkload(requests, conversations int) *workload {
	run := uuid.NewString()[:6]
	wl := &workload{reqs: map[string][]turn.Request{}, trace: map[string]string{}}
	for c := range conversations {
		wl.convs = append(wl.convs, fmt.Sprintf("conv-%s-%03d", run, c))
	}
	for i := range requests {
		conv := wl.convs[i%conversations]
		seq := int64(len(wl.reqs[conv]) + 1)
		req := turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conv, UserID: "user-" + conv[len(conv)-3:],
			Sequence: seq, Text: fmt.Sprintf("message %d of %s", seq, conv)}
		wl.reqs[conv] = append(wl.reqs[conv], req)
		wl.trace[req.ID] = fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
	}
	return wl
}

// produce sends the workload interleaved over conversations, keyed by conversation (murmur2).
func produce(brokers []string, wl *workload) error {
	sc := turntest.Config()
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	p, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		return err
	}
	defer p.Close()
	for i := 0; ; i++ {
		sent := false
		for _, conv := range wl.convs {
			if i >= len(wl.reqs[conv]) {
				continue
			}
			req := wl.reqs[conv][i]
			value, err := req.Encode()
			if err != nil {
				return err
			}
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: RequestsTopic, Key: sarama.StringEncoder(conv), Value: sarama.ByteEncoder(value),
				Headers: []sarama.RecordHeader{{Key: []byte("traceparent"), Value: []byte(wl.trace[req.ID])}}}); err != nil {
				return err
			}
			sent = true
		}
		if !sent {
			return nil
		}
	}
}

// quiet drops the Temporal SDK's logs.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
