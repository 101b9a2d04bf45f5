package consumer

import (
	"sync"

	"github.com/IBM/sarama"
)

// pauser is the part of sarama.ConsumerGroup that pauses fetching.
type pauser interface {
	Pause(partitions map[string][]int32)
	Resume(partitions map[string][]int32)
	PauseAll()
	ResumeAll()
}

// pauses is the one owner of sarama's pause state. Two reasons pause fetching: a partition
// whose window is full (backpressure, per partition) and a rate-limited model (every
// partition). A partition fetches only when neither holds. Nothing else in the package calls
// Pause or Resume, so the two reasons cannot undo each other (a ResumeAll after a rate limit
// re-pauses the partitions that are still full).
//
// sarama keeps a partition's pause across a revoke and applies it to the partition's next
// claim (consumer.go, addChild), so a claim starts by asking for the state it should have.
type pauses struct {
	group pauser

	mu   sync.Mutex
	all  bool            // a rate limit pauses every partition
	full map[tp]struct{} // partitions paused for backpressure
}

// tp names one partition of one topic.
type tp struct {
	topic     string
	partition int32
}

func (t tp) sarama() map[string][]int32 { return map[string][]int32{t.topic: {t.partition}} }

func newPauses(group pauser) *pauses {
	return &pauses{group: group, full: make(map[tp]struct{})}
}

// claimed sets a newly claimed partition's pause state: paused only during a rate limit.
func (p *pauses) claimed(t tp) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.full, t)
	if p.all {
		p.group.Pause(t.sarama())
	} else {
		p.group.Resume(t.sarama())
	}
}

// setFull pauses (on) or resumes (off) one partition for backpressure. A release while a
// rate limit holds leaves the partition paused; the end of the rate limit resumes it.
func (p *pauses) setFull(t tp, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, was := p.full[t]; was == on {
		return
	}
	if on {
		p.full[t] = struct{}{}
		p.group.Pause(t.sarama())
		return
	}
	delete(p.full, t)
	if !p.all {
		p.group.Resume(t.sarama())
	}
}

// setAll pauses (on) or resumes (off) every partition for a rate limit; resuming leaves the
// full partitions paused.
func (p *pauses) setAll(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.all == on {
		return
	}
	p.all = on
	if on {
		p.group.PauseAll()
		return
	}
	p.group.ResumeAll()
	for t := range p.full {
		p.group.Pause(t.sarama())
	}
}

var _ pauser = sarama.ConsumerGroup(nil)
