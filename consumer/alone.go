package consumer

import (
	"context"
	"sync"
)

// soloGate lets one turn of the member run with no other turn in flight: a request whose last
// attempt ended with its member while other turns ran (turn.ErrRunAlone), so that a crash of
// this run can only be its own (see turn.WithCrashIsolation). Every other Handler call holds
// the gate shared; a lone run holds it exclusively, and while one waits, no new turn starts
// its Handler call (sync.RWMutex blocks new readers once a writer waits). Turns already in
// their Handler call finish first, within their whole-turn deadline.
type soloGate struct{ rw sync.RWMutex }

// enter enters the gate beside other turns; leave leaves it.
func (g *soloGate) enter() { g.rw.RLock() }
func (g *soloGate) leave() { g.rw.RUnlock() }

// alone waits until no other turn is in a Handler call and keeps new ones out until the
// returned func is called, or returns ctx's error when ctx ends first (a revoke). A wait
// that was given up still takes the gate when its turn comes and lets it go at once.
func (g *soloGate) alone(ctx context.Context) (func(), error) {
	got := make(chan struct{})
	go func() {
		g.rw.Lock()
		close(got)
	}()
	select {
	case <-got:
		return g.rw.Unlock, nil
	case <-ctx.Done():
		go func() {
			<-got
			g.rw.Unlock()
		}()
		return nil, ctx.Err()
	}
}
