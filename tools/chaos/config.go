package chaos

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Cell is one cell of the chaos matrix: a mode of the consumer (and of Temporal) that every
// run of the suite is tried in. Its string is stable: tests, flags and RELIABILITY.md name
// cells by it.
type Cell string

// The cells of the matrix. Cells lists them all; a new mode or option gets a cell here.
const (
	// CellByKey is direct mode (turn.Runner behind the consumer), ordering by key, no
	// telemetry, no transactions.
	CellByKey Cell = "direct-by-key"
	// CellByKeyOTel is CellByKey with the consumer's Config.Telemetry on the OpenTelemetry
	// SDK (a tracer provider and a meter provider whose exporter and reader discard), on
	// batched stores (see Cell.Batched).
	CellByKeyOTel Cell = "direct-by-key-otel"
	// CellByPartition is direct mode with consumer.OrderByPartition.
	CellByPartition Cell = "direct-by-partition"
	// CellTransactional is direct mode in the consumer's transactional mode, on batched
	// stores; the checker reads the topics read_committed and counts every request id with
	// more than one committed result.
	CellTransactional Cell = "transactional"
	// CellTemporal is Temporal mode: bridge members (a consumer with the workflow bridge as
	// its Handler) and Temporal workers as separate processes, against a dev server that
	// keeps its state in a database file and is restarted mid-run; the workers' stores are
	// batched.
	CellTemporal Cell = "temporal"
)

// Cells returns every cell of the matrix, in a stable order.
func Cells() []Cell {
	return []Cell{CellByKey, CellByKeyOTel, CellByPartition, CellTransactional, CellTemporal}
}

// ParseCell returns the cell named s, or an error naming the cells there are.
func ParseCell(s string) (Cell, error) {
	for _, c := range Cells() {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("chaos: no cell %q (cells: %v)", s, Cells())
}

// Temporal reports whether the cell runs in Temporal mode.
func (c Cell) Temporal() bool { return c == CellTemporal }

// Batched reports whether the cell's stores batch their calls and cache sessions
// (sqlsession.Options.Batch and Cache, sqlinbox.Options.Batch): the cells with telemetry, with
// transactions and with Temporal, so that the batched stores meet every mode; CellByKey and
// CellByPartition keep a statement per call.
func (c Cell) Batched() bool {
	return c == CellByKeyOTel || c == CellTransactional || c == CellTemporal
}

// MemberMaxBatch returns consumer.Config.MaxBatch for the member of the cell at index i (from
// 0): in the Temporal cell every member but the first hands a conversation's waiting records
// to its workflow in one signal (workflow.Bridge, a consumer.BatchHandler), up to
// memberMaxBatch of them, with telemetry on, so that one run holds batched and single
// hand-offs side by side (Figures.Batches counts the batched ones); 1, off, elsewhere, where
// the Handler (turn.Runner's) takes no batches.
func (c Cell) MemberMaxBatch(i int) int {
	if c.Temporal() && i > 0 {
		return memberMaxBatch
	}
	return 1
}

// memberMaxBatch is the MaxBatch of the Temporal cell's batching members.
const memberMaxBatch = 8

// Transactional reports whether the cell's members run in the transactional mode.
func (c Cell) Transactional() bool { return c == CellTransactional }

// Config is one chaos run. Short and Long return the two forms the project runs; ForCell
// adapts one to a cell.
type Config struct {
	// Cell is the matrix cell the run is made in; empty means CellByKey.
	Cell Cell
	// TemporalCLI is the temporal CLI that runs the dev server of CellTemporal (see
	// internal/temporaldev.CLIPath).
	TemporalCLI string
	// Exe is the program run as the broker and as each member; it must call ChildMain first.
	Exe string
	// DSN is the PostgreSQL database of the stores and of the fake services' tables (refunds,
	// emails, model step executions).
	DSN string
	// Dir holds the broker's data directory and the processes' logs; Run creates it if needed.
	Dir string
	// Seed draws the schedule, the workload's interleaving and the model's faults.
	Seed uint64

	// Requests is the number of valid requests, spread evenly over Conversations.
	Requests      int
	Conversations int
	// Invalid is the number of records that are not valid requests (broken JSON); each must
	// be dead-lettered.
	Invalid int
	// Poison is the number of valid requests whose model call kills the member process
	// (exit code 86) on every attempt; each must be dead-lettered once its attempts run out.
	Poison int
	// Strangers is the number of records that name another user's conversation: the right
	// conversation key, another user id (in Temporal mode, the victim's next sequence). Each
	// must be dead-lettered, never served (G7), and must not hold up the victim.
	Strangers int
	// Panics is the number of requests of each panicking kind: one whose model call panics,
	// one whose session store call (Append) panics, and in Temporal mode one whose Handler (a
	// decorator of the bridge in the member) panics, every attempt. Each must be
	// dead-lettered once its attempts run out, and no member may die of it.
	Panics int
	// Limited is the number of requests the model always answers with turn.RetryAfter; each
	// must be dead-lettered (the consumer's MaxRateLimits) without stalling its member.
	Limited int
	// Members is the number of member processes.
	Members int
	// Workers is the number of Temporal worker processes (CellTemporal only).
	Workers int
	// Partitions of the requests and results topics.
	Partitions int
	// Rate is how many records per second the producer sends.
	Rate int

	// The faults of the schedule, spread over the production phase.
	Kills          int // kill -9 of a member
	WorkerKills    int // kill -9 of a Temporal worker (CellTemporal)
	ServerRestarts int // the Temporal dev server stopped and started on its database file (CellTemporal)
	Terms          int // SIGTERM of a member
	DBKills        int // pg_terminate_backend of every member connection
	BrokerRestarts int // broker closed and started again with its data
	Bursts         int // a member's model answers 429 for BurstLength

	// BurstLength is how long a 429 burst lasts.
	BurstLength time.Duration
	// SlowShare and FailShare are the shares of requests whose first model step is slow (up
	// to SlowMax) and whose refund step fails on their first attempt, after the refund.
	SlowShare, FailShare float64
	SlowMax              time.Duration
	// MaxInFlight is each member's consumer.Config.MaxInFlight; its database pool is sized
	// from it.
	MaxInFlight int
	// DrainTimeout bounds the wait for every outcome after the last record was produced; a
	// request with no outcome by then counts as lost.
	DrainTimeout time.Duration
	// KeepTables leaves the run's tables in the database (they are dropped otherwise).
	KeepTables bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Short is the form the test command runs: 2,000 requests over 100 conversations, 3 members,
// 5 kill -9s, a broker restart and a database connection kill among other faults.
func Short() Config {
	return Config{
		Requests: 2000, Conversations: 100, Invalid: 20, Poison: 1, Strangers: 2, Panics: 1, Limited: 1,
		Members: 3, Partitions: 12, Rate: 70,
		Kills: 5, Terms: 2, DBKills: 2, BrokerRestarts: 1, Bursts: 2,
		BurstLength: 2 * time.Second, SlowShare: 0.02, FailShare: 0.03, SlowMax: 3 * time.Second,
		MaxInFlight: 12, DrainTimeout: 2 * time.Minute,
	}
}

// Long is the form run by a flag: 20,000 requests over 500 conversations, 3 members, 40
// kill -9s and 3 broker restarts among other faults.
func Long() Config {
	c := Short()
	c.Requests, c.Conversations, c.Invalid, c.Poison = 20000, 500, 100, 3
	c.Strangers, c.Panics, c.Limited = 10, 3, 3
	c.Kills, c.Terms, c.DBKills, c.BrokerRestarts, c.Bursts = 40, 8, 8, 3, 8
	c.DrainTimeout = 5 * time.Minute
	return c
}

// ForCell returns c made for cell: the cell set and, for CellTemporal, a smaller workload at
// a lower rate (every turn is a workflow task and an activity on a shared dev server), two
// workers, kill -9s split between members and workers and one dev server restart. Call it
// on Short() or Long().
func (c Config) ForCell(cell Cell) Config {
	c.Cell = cell
	if !cell.Temporal() {
		return c
	}
	long := c.Requests > Short().Requests
	c.Workers = 2
	if long {
		c.Requests, c.Conversations, c.Rate = 5000, 250, 40
		c.Kills, c.WorkerKills, c.ServerRestarts, c.BrokerRestarts = 8, 8, 2, 1
	} else {
		c.Requests, c.Conversations, c.Rate, c.Invalid = 500, 50, 25, 5
		c.Kills, c.WorkerKills, c.ServerRestarts, c.BrokerRestarts, c.Terms, c.DBKills, c.Bursts = 2, 3, 1, 0, 1, 1, 1
	}
	return c
}

func (c *Config) validate() error {
	var errs []error
	if c.Exe == "" {
		errs = append(errs, errors.New("Exe: empty"))
	}
	if c.DSN == "" {
		errs = append(errs, errors.New("DSN: empty"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("Dir: empty"))
	}
	for name, v := range map[string]int{"Requests": c.Requests, "Conversations": c.Conversations,
		"Members": c.Members, "Partitions": c.Partitions, "Rate": c.Rate, "MaxInFlight": c.MaxInFlight} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s: %d, want at least 1", name, v))
		}
	}
	if c.Cell == "" {
		c.Cell = CellByKey
	}
	if _, err := ParseCell(string(c.Cell)); err != nil {
		errs = append(errs, err)
	}
	if c.Cell.Temporal() {
		if c.Workers < 1 {
			errs = append(errs, fmt.Errorf("Workers: %d, want at least 1 in cell %s", c.Workers, c.Cell))
		}
		if c.TemporalCLI == "" {
			errs = append(errs, fmt.Errorf("TemporalCLI: empty in cell %s", c.Cell))
		}
	}
	for name, v := range map[string]int{"Invalid": c.Invalid, "Poison": c.Poison, "Kills": c.Kills, "Terms": c.Terms,
		"DBKills": c.DBKills, "BrokerRestarts": c.BrokerRestarts, "Bursts": c.Bursts, "Strangers": c.Strangers,
		"Panics": c.Panics, "Limited": c.Limited, "WorkerKills": c.WorkerKills, "ServerRestarts": c.ServerRestarts} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: negative (%d)", name, v))
		}
	}
	if n := c.specials(); n >= c.Conversations {
		errs = append(errs, fmt.Errorf("Poison, Strangers, Panics and Limited: %d requests, want fewer than Conversations (%d)", n, c.Conversations))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, errors.New("DrainTimeout: not positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chaos: invalid Config: %w", err)
	}
	return nil
}

// specials is how many conversations get a request of their own kind (poison, stranger,
// panicking, always limited): one each.
func (c *Config) specials() int {
	n := c.Poison + c.Strangers + 2*c.Panics + c.Limited
	if c.Cell.Temporal() {
		n += c.Panics // the Handler's panic
	}
	return n
}
