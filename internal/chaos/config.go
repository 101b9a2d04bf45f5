package chaos

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Config is one chaos run. Short and Long return the two forms the project runs.
type Config struct {
	// Exe is the program run as the broker and as each member; it must call ChildMain first.
	Exe string
	// DSN is the PostgreSQL database of the stores and the refund table.
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
	// Members is the number of member processes.
	Members int
	// Partitions of the requests and results topics.
	Partitions int
	// Rate is how many records per second the producer sends.
	Rate int

	// The faults of the schedule, spread over the production phase.
	Kills          int // kill -9 of a member
	Terms          int // SIGTERM of a member
	DBKills        int // pg_terminate_backend of every member connection
	BrokerRestarts int // broker closed and started again with its data
	Bursts         int // a member's model answers 429 for BurstLength

	// BurstLength is how long a 429 burst lasts.
	BurstLength time.Duration
	// SlowShare and FailShare are the shares of requests whose model call is slow (up to
	// SlowMax) and whose first attempt fails after its side effect.
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
		Requests: 2000, Conversations: 100, Invalid: 20, Poison: 1, Members: 3, Partitions: 12, Rate: 70,
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
	c.Kills, c.Terms, c.DBKills, c.BrokerRestarts, c.Bursts = 40, 8, 8, 3, 8
	c.DrainTimeout = 5 * time.Minute
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
	for name, v := range map[string]int{"Invalid": c.Invalid, "Poison": c.Poison, "Kills": c.Kills, "Terms": c.Terms,
		"DBKills": c.DBKills, "BrokerRestarts": c.BrokerRestarts, "Bursts": c.Bursts} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: negative (%d)", name, v))
		}
	}
	if c.Poison >= c.Conversations {
		errs = append(errs, fmt.Errorf("Poison: %d, want fewer than Conversations (%d)", c.Poison, c.Conversations))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, errors.New("DrainTimeout: not positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chaos: invalid Config: %w", err)
	}
	return nil
}
