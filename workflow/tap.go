package workflow

import (
	"sync"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/turn"
)

// DefaultTapEntries bounds a HeaderTap when its size is not given.
const DefaultTapEntries = 65536

type recordPos struct {
	topic     string
	partition int32
	offset    int64
}

// HeaderTap keeps the headers of records as a sarama consumer reads them, for the Bridge to
// pick up by the request's Source, for code that hands the bridge requests without their
// headers (turn.Request.Headers): a consumer of the host's own. Package consumer needs none:
// it sets Request.Headers from each record, and the bridge reads them there first. It is a
// sarama.ConsumerInterceptor: put it in that consumer's Consumer.Interceptors. It keeps only the names it is told (NewHeaderTap), and
// at most its size of records, forgetting the oldest first (a record revoked before its turn
// ran, say). It is safe for concurrent use.
type HeaderTap struct {
	names []string
	size  int

	mu    sync.Mutex
	byPos map[recordPos]map[string]string
	order []recordPos
}

// NewHeaderTap returns a tap for the header names given (DefaultHeaders when none) that holds
// at most size records (DefaultTapEntries when size <= 0).
func NewHeaderTap(size int, names ...string) *HeaderTap {
	if len(names) == 0 {
		names = DefaultHeaders
	}
	if size <= 0 {
		size = DefaultTapEntries
	}
	return &HeaderTap{names: names, size: size, byPos: map[recordPos]map[string]string{}}
}

// OnConsume records the wanted headers of msg; records without any are not kept.
func (t *HeaderTap) OnConsume(msg *sarama.ConsumerMessage) {
	var h map[string]string
	for _, rh := range msg.Headers {
		if rh == nil {
			continue
		}
		for _, n := range t.names {
			if string(rh.Key) == n {
				if h == nil {
					h = map[string]string{}
				}
				h[n] = string(rh.Value)
			}
		}
	}
	if h == nil {
		return
	}
	pos := recordPos{msg.Topic, msg.Partition, msg.Offset}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byPos[pos]; !ok {
		t.order = append(t.order, pos)
	}
	t.byPos[pos] = h
	for len(t.order) > t.size {
		delete(t.byPos, t.order[0])
		t.order = t.order[1:]
	}
}

// Take returns the headers recorded for the record at src, restricted to names. The entry
// stays until it ages out, so a request handed off again (a retry) finds its headers too.
func (t *HeaderTap) Take(src turn.Source, names []string) map[string]string {
	t.mu.Lock()
	h := t.byPos[recordPos{src.Topic, src.Partition, src.Offset}]
	t.mu.Unlock()
	return filterHeaders(h, names)
}
