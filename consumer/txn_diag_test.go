package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// diagDups logs where duplicate results came from (partition, offset, producer id), for a
// failing run: two producer ids mean two members committed the same request.
func (e *env) diagDups(t *testing.T, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.Brokers()...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Log(err)
		return
	}
	defer cl.Close()
	byID := map[string][]*kgo.Record{}
	for quiet := 0; quiet < 2; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		recs := fs.Records()
		if len(recs) == 0 {
			quiet++
		}
		for _, r := range recs {
			for _, h := range r.Headers {
				if h.Key == "request-id" {
					byID[string(h.Value)] = append(byID[string(h.Value)], r)
				}
			}
		}
	}
	n := 0
	for id, rs := range byID {
		if len(rs) < 2 {
			continue
		}
		if n++; n > 8 {
			break
		}
		for _, r := range rs {
			hs := map[string]string{}
			for _, h := range r.Headers {
				hs[h.Key] = string(h.Value)
			}
			t.Logf("dup %s: p%d o%d pid %d epoch %d attempt %s ts %s", id, r.Partition, r.Offset, r.ProducerID, r.ProducerEpoch, hs["attempt"], r.Timestamp.Format("15:04:05.000"))
		}
	}
}
