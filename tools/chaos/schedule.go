package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// faultKind is one kind of fault of the schedule.
type faultKind int

const (
	faultKill       faultKind = iota // kill -9 of a member
	faultTerm                        // SIGTERM of a member
	faultDBKill                      // pg_terminate_backend on the members' connections
	faultBroker                      // broker restart with its data
	faultBurst                       // 429 burst in a member's model
	faultWorkerKill                  // kill -9 of a Temporal worker
	faultServer                      // Temporal dev server restart on its database file
)

func (k faultKind) String() string {
	return [...]string{"kill -9", "SIGTERM", "database connection kill", "broker restart", "429 burst",
		"kill -9 of a worker", "Temporal server restart"}[k]
}

// fault is one entry of the schedule: what, when (from the start of production) and, for the
// faults of a member, which slot is tried first.
type fault struct {
	at   time.Duration
	kind faultKind
	slot int
}

func (f fault) String() string { return fmt.Sprintf("%s at %s (member %d)", f.kind, f.at, f.slot+1) }

// newSchedule draws the faults of cfg over span: their kinds shuffled, spread evenly with
// jitter over the middle 90% of span, each with a member slot.
func newSchedule(rng *rand.Rand, cfg Config, span time.Duration) []fault {
	var kinds []faultKind
	for k, n := range map[faultKind]int{faultKill: cfg.Kills, faultTerm: cfg.Terms, faultDBKill: cfg.DBKills,
		faultBroker: cfg.BrokerRestarts, faultBurst: cfg.Bursts, faultWorkerKill: cfg.WorkerKills, faultServer: cfg.ServerRestarts} {
		for range n {
			kinds = append(kinds, k)
		}
	}
	// Map order is random: sort before the seeded shuffle, so that one seed gives one schedule.
	for i := 1; i < len(kinds); i++ {
		for j := i; j > 0 && kinds[j] < kinds[j-1]; j-- {
			kinds[j], kinds[j-1] = kinds[j-1], kinds[j]
		}
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	out := make([]fault, len(kinds))
	n := float64(len(kinds))
	for i, k := range kinds {
		frac := 0.05 + 0.9*(float64(i)+rng.Float64())/n
		out[i] = fault{at: time.Duration(frac * float64(span)), kind: k, slot: rng.IntN(max(cfg.Members, cfg.Workers))}
	}
	return out
}
