package demo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/turnstile-go/turnstile/consumer"
)

// Fleet is a consumer group's members, all in this process; in production each would be a
// process (a pod) of its own. The example wires each member's Consumer; the Fleet runs it,
// stops it and reports on it. Safe for concurrent use.
type Fleet struct {
	// Log gets a line when a member's Run fails; default slog.Default().
	Log *slog.Logger

	mu      sync.Mutex
	members []*member
}

type member struct {
	name    string
	c       *consumer.Consumer
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run returned
	err     error         // Run's error, set before done closes
	stopped bool
}

// Run runs c as the member name until it is stopped.
func (f *Fleet) Run(name string, c *consumer.Consumer) {
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		if err := c.Run(ctx); err != nil {
			m.err = err
			log := f.Log
			if log == nil {
				log = slog.Default()
			}
			log.Error("member stopped", "member", name, "err", err)
		}
	}()
	f.mu.Lock()
	f.members = append(f.members, m)
	f.mu.Unlock()
}

// Len returns the number of members run so far, stopped ones included.
func (f *Fleet) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.members)
}

// FirstRunning returns the name of the member that has run longest and is not stopped, or "".
func (f *Fleet) FirstRunning() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		if !m.stopped {
			return m.name
		}
	}
	return ""
}

// Stop stops the named member gracefully (Run drains the turns in flight, commits and leaves
// the group), waits for it and returns its counters. It returns zero Stats for a name it does
// not know.
func (f *Fleet) Stop(name string) consumer.Stats {
	f.mu.Lock()
	var m *member
	for _, x := range f.members {
		if x.name == name && !x.stopped {
			m = x
		}
	}
	if m != nil {
		m.stopped = true
	}
	f.mu.Unlock()
	if m == nil {
		return consumer.Stats{}
	}
	m.cancel()
	<-m.done
	return m.c.Stats()
}

// StopAll stops every member still running, all at once, and waits for them.
func (f *Fleet) StopAll() {
	f.mu.Lock()
	members := append([]*member(nil), f.members...)
	for _, m := range members {
		m.stopped = true
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			m.cancel()
			<-m.done
		})
	}
	wg.Wait()
}

// Failed returns the first error a member's Run returned, if any.
func (f *Fleet) Failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		select {
		case <-m.done:
			if m.err != nil {
				return fmt.Errorf("member %s: %w", m.name, m.err)
			}
		default:
		}
	}
	return nil
}

// Describe lists the members with the turns each completed, "-" marking one that stopped:
// "m1-:512 m2:731 m3:240".
func (f *Fleet) Describe() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := make([]string, len(f.members))
	for i, m := range f.members {
		mark := ""
		if m.stopped {
			mark = "-"
		}
		parts[i] = fmt.Sprintf("%s%s:%d", m.name, mark, m.c.Stats().Turns)
	}
	return strings.Join(parts, " ")
}

// Stats sums the members' counters.
func (f *Fleet) Stats() consumer.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s consumer.Stats
	for _, m := range f.members {
		s = s.Add(m.c.Stats())
	}
	return s
}
