package consumer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/IBM/sarama"
)

// Replay configures a replay into a sandbox (Config.Replay): the Consumer reads the production
// requests topic (Config.RequestsTopic) from a chosen offset or time under a group id of its
// own (Config.GroupID), runs every request through its Handler, which should hold stores of its
// own, with a context marked by turn.WithReplay (the Runner passes it to the model as
// turn.Input.Replay, so side-effecting tools are stubbed or pointed at a sandbox), and
// publishes only to its own results and dead-letter topics: Config.ResultsTopic and
// Config.DeadLetterTopic may be empty, and then nothing is published there (a dead letter is
// logged instead).
//
// New refuses a replay whose group id, results topic or dead-letter topic is one of
// production's, or whose results or dead-letter topic is the requests topic; Run refuses to
// start when the Handler's stores are production's (see ProductionStores). Both errors name
// what is shared.
type Replay struct {
	// ProductionGroupID, ProductionResultsTopic and ProductionDeadLetterTopic are the
	// production service's Config.GroupID, ResultsTopic and DeadLetterTopic. Required: a
	// replay that does not say what production is cannot be kept away from it.
	ProductionGroupID         string
	ProductionResultsTopic    string
	ProductionDeadLetterTopic string
	// ProductionStores are the stores the production service writes (its Runner's Sessions
	// and Inbox). When the Handler is a RunnerHandler, Run refuses to start if one of its
	// Runner's stores is one of these, or names the same tables: stores with a method
	// Location(ctx) (string, error), as session/sqlsession's Store and inbox/sqlinbox's Inbox
	// have (and turn/turnotel's wrappers of them), are compared by it, whichever *sql.DB
	// reaches them. A store of your own wrapping is compared only by value unless it has
	// Location too.
	ProductionStores []any
	// StartTime, when set, starts each partition at its first record whose timestamp is at or
	// after it (the broker's offset for a time, KIP-79); a partition with none starts at its
	// end. Otherwise StartOffset applies.
	StartTime time.Time
	// StartOffset is the offset each partition starts at: an offset (clamped to what the
	// partition holds), or sarama.OffsetOldest (the zero value means OffsetOldest too).
	// StartTime and StartOffset apply to partitions the replay group has no committed offset
	// for: a replay that is stopped and run again under the same GroupID goes on where it was.
	StartOffset int64
	// StopAtEnd makes Run return, after its usual drain and commit, once the group's
	// committed offset of every partition reached the end offset the partition had when Run
	// started: a replay of what was recorded, not of what keeps coming.
	StopAtEnd bool
}

// validate reports what a replay shares with production.
func (r *Replay) validate(c *Config) []error {
	var errs []error
	for name, v := range map[string]string{"Replay.ProductionGroupID": r.ProductionGroupID,
		"Replay.ProductionResultsTopic": r.ProductionResultsTopic, "Replay.ProductionDeadLetterTopic": r.ProductionDeadLetterTopic} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s: empty; a replay must name production to stay away from it", name))
		}
	}
	if c.GroupID != "" && c.GroupID == r.ProductionGroupID {
		errs = append(errs, fmt.Errorf("GroupID: %q is production's group: a replay must commit under a group of its own", c.GroupID))
	}
	prod := map[string]string{r.ProductionResultsTopic: "production's results topic",
		r.ProductionDeadLetterTopic: "production's dead-letter topic", c.RequestsTopic: "the requests topic"}
	for name, v := range map[string]string{"ResultsTopic": c.ResultsTopic, "DeadLetterTopic": c.DeadLetterTopic} {
		if what, ok := prod[v]; ok && v != "" {
			errs = append(errs, fmt.Errorf("%s: %q is %s: a replay publishes only to topics of its own (or, empty, nowhere)", name, v, what))
		}
	}
	if r.StartOffset < 0 && r.StartOffset != sarama.OffsetOldest {
		errs = append(errs, fmt.Errorf("Replay.StartOffset: %d; want an offset or sarama.OffsetOldest", r.StartOffset))
	}
	return errs
}

// ErrProductionStore is the error (matched with errors.Is) of Run when a replay's Handler
// would write to a store of production (Replay.ProductionStores).
var ErrProductionStore = errors.New("consumer: replay would write to a production store")

// checkReplayStores refuses a replay whose Runner writes to production's stores.
func (c *Consumer) checkReplayStores(ctx context.Context) error {
	r := c.hostRunner // the host's stores: telemetry's wrappers have no Location
	if r == nil {
		return nil
	}
	ours := map[string]any{"Sessions": r.Sessions, "Inbox": r.Inbox}
	for name, s := range ours {
		for _, p := range c.cfg.Replay.ProductionStores {
			same, where, err := sameStore(ctx, s, p)
			if err != nil {
				return fmt.Errorf("consumer: replay: compare Runner.%s with the production stores: %w", name, err)
			}
			if same {
				return fmt.Errorf("%w: the Runner's %s is production's (%s); give the replay stores of its own", ErrProductionStore, name, where)
			}
		}
	}
	return nil
}

type locator interface {
	Location(ctx context.Context) (string, error)
}

// sameStore reports whether a and b are one store: the same pointer, or stores whose Location
// names the same tables.
func sameStore(ctx context.Context, a, b any) (bool, string, error) {
	if a == nil || b == nil {
		return false, "", nil
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Type() == vb.Type() && va.Kind() == reflect.Pointer && va.Pointer() == vb.Pointer() {
		return true, fmt.Sprintf("the same %T", a), nil
	}
	la, ok := a.(locator)
	if !ok {
		return false, "", nil
	}
	lb, ok := b.(locator)
	if !ok {
		return false, "", nil
	}
	wa, err := la.Location(ctx)
	if err != nil {
		return false, "", err
	}
	wb, err := lb.Location(ctx)
	if err != nil {
		return false, "", err
	}
	return wa != "" && wa == wb, wa, nil
}

// startReplay refuses production's stores, commits the start offsets of the partitions the
// replay group never committed, and returns the end offsets to stop at (nil without
// StopAtEnd).
func (c *Consumer) startReplay(ctx context.Context, client sarama.Client) (map[int32]int64, error) {
	if err := c.checkReplayStores(ctx); err != nil {
		return nil, err
	}
	r, topic := c.cfg.Replay, c.cfg.RequestsTopic
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("consumer: replay: requests topic %q: %w", topic, err)
	}
	committed, err := committedOffsets(client, c.cfg.GroupID, topic, parts)
	if err != nil {
		return nil, fmt.Errorf("consumer: replay: committed offsets of group %q: %w", c.cfg.GroupID, err)
	}
	ends := make(map[int32]int64, len(parts))
	start := make(map[int32]int64)
	for _, p := range parts {
		if ends[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			return nil, fmt.Errorf("consumer: replay: end offset of %s/%d: %w", topic, p, err)
		}
		if committed[p] >= 0 {
			continue
		}
		off, err := replayStart(client, r, topic, p, ends[p])
		if err != nil {
			return nil, err
		}
		if off >= 0 {
			start[p] = off
		}
	}
	if err := commitOffsets(client, c.cfg.GroupID, topic, start); err != nil {
		return nil, fmt.Errorf("consumer: replay: commit start offsets for group %q: %w", c.cfg.GroupID, err)
	}
	c.log.Info("replay into a sandbox", "group", c.cfg.GroupID, "topic", topic, "start", start,
		"results", c.cfg.ResultsTopic, "dead_letters", c.cfg.DeadLetterTopic, "stop_at_end", r.StopAtEnd)
	if !r.StopAtEnd {
		return nil, nil
	}
	return ends, nil
}

// replayStart returns the offset partition p starts at, or -1 to leave it to
// Offsets.Initial (the oldest record).
func replayStart(client sarama.Client, r *Replay, topic string, p int32, end int64) (int64, error) {
	if !r.StartTime.IsZero() {
		off, err := client.GetOffset(topic, p, r.StartTime.UnixMilli())
		if err != nil {
			return 0, fmt.Errorf("consumer: replay: offset of %s/%d at %s: %w", topic, p, r.StartTime, err)
		}
		if off < 0 { // no record at or after the time
			return end, nil
		}
		return off, nil
	}
	if r.StartOffset <= 0 {
		return -1, nil
	}
	oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return 0, fmt.Errorf("consumer: replay: oldest offset of %s/%d: %w", topic, p, err)
	}
	return min(max(r.StartOffset, oldest), end), nil
}

// committedOffsets returns group's committed offset of each partition, -1 for none.
func committedOffsets(client sarama.Client, group, topic string, parts []int32) (map[int32]int64, error) {
	out := make(map[int32]int64, len(parts))
	coord, err := client.Coordinator(group)
	if err != nil {
		return nil, err
	}
	req := &sarama.OffsetFetchRequest{ConsumerGroup: group, Version: 1}
	for _, p := range parts {
		req.AddPartition(topic, p)
		out[p] = -1
	}
	resp, err := coord.FetchOffset(req)
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		b := resp.GetBlock(topic, p)
		switch {
		case b == nil:
		case b.Err != sarama.ErrNoError && !errors.Is(b.Err, sarama.ErrUnknownTopicOrPartition):
			return nil, fmt.Errorf("partition %d: %w", p, b.Err)
		case b.Offset >= 0:
			out[p] = b.Offset
		}
	}
	return out, nil
}

// commitOffsets commits offsets for group outside any group generation, as a tool that
// resets a group's offsets does (allowed while the group has no member).
func commitOffsets(client sarama.Client, group, topic string, offsets map[int32]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	coord, err := client.Coordinator(group)
	if err != nil {
		return err
	}
	req := &sarama.OffsetCommitRequest{ConsumerGroup: group, ConsumerGroupGeneration: sarama.GroupGenerationUndefined, Version: 2,
		RetentionTime: -1}
	for p, off := range offsets {
		req.AddBlock(topic, p, off, 0, "turnstile replay start")
	}
	resp, err := coord.CommitOffset(req)
	if err != nil {
		return err
	}
	for _, errs := range resp.Errors {
		for p, kerr := range errs {
			if kerr != sarama.ErrNoError {
				return fmt.Errorf("partition %d: %w", p, kerr)
			}
		}
	}
	return nil
}

// stopAtEnd cancels the run once group's committed offsets reached ends, polling every
// CommitInterval until ctx ends.
func (c *Consumer) stopAtEnd(ctx context.Context, cancel context.CancelFunc, client sarama.Client, ends map[int32]int64) {
	parts := make([]int32, 0, len(ends))
	for p := range ends {
		parts = append(parts, p)
	}
	tick := time.NewTicker(c.cfg.CommitInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		committed, err := committedOffsets(client, c.cfg.GroupID, c.cfg.RequestsTopic, parts)
		if err != nil {
			c.log.Warn("replay: read committed offsets", "err", err)
			continue
		}
		done := true
		for p, end := range ends {
			if end > 0 && committed[p] < end {
				done = false
			}
		}
		if done {
			c.log.Info("replay reached the end offsets it started with; stopping", "group", c.cfg.GroupID)
			cancel()
			return
		}
	}
}

// unpublished drops an outcome whose topic a replay left empty: a replay publishes only to
// topics of its own, or nowhere.
func (p *partition) unpublished(ob *outbound) *outbound {
	if ob == nil || ob.pm.Topic != "" {
		return ob
	}
	if ob.kind != outResult {
		p.log.Warn("replay: dead letter not published (Config.DeadLetterTopic is empty)", "offset", ob.r.msg.Offset,
			"reason", ob.reason, reqAttrs(ob.req))
	}
	return nil
}
