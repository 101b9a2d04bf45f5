package consumer

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

// The group's read deadline must outlast the rebalance it waits for in JoinGroup
// (IBM/sarama#2820): left at sarama's default it is derived from the rebalance timeout, set
// by the host it is kept when longer and refused when not.
func TestJoinGroupReadDeadline(t *testing.T) {
	t.Parallel()
	valid := func(sc *sarama.Config) Config {
		return Config{Brokers: []string{"b:9092"}, GroupID: "g", RequestsTopic: "rq", ResultsTopic: "rs",
			DeadLetterTopic: "dl", Sarama: sc}
	}
	custom := func(rebalance, read time.Duration) *sarama.Config {
		sc := sarama.NewConfig()
		sc.Version = sarama.V3_6_0_0
		if rebalance > 0 {
			sc.Consumer.Group.Rebalance.Timeout = rebalance
		}
		if read > 0 {
			sc.Net.ReadTimeout = read
		}
		return sc
	}
	for _, tc := range []struct {
		name      string
		sarama    *sarama.Config
		wantRead  time.Duration
		wantError string
	}{
		{"no sarama config: 60 s rebalance", nil, 65 * time.Second, ""},
		{"defaults left as sarama made them", custom(0, 0), 65 * time.Second, ""},
		{"a short rebalance keeps sarama's longer deadline", custom(8*time.Second, 0), 30 * time.Second, ""},
		{"a long rebalance", custom(5*time.Minute, 0), 5*time.Minute + 5*time.Second, ""},
		{"the host's longer deadline is kept", custom(60*time.Second, 2*time.Minute), 2 * time.Minute, ""},
		{"the host's shorter deadline is refused", custom(60*time.Second, 10*time.Second), 0, "Sarama.Net.ReadTimeout: 10s is not longer than Sarama.Consumer.Group.Rebalance.Timeout (1m0s)"},
		{"equal is refused", custom(20*time.Second, 20*time.Second), 0, "is not longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var before time.Duration
			if tc.sarama != nil {
				before = tc.sarama.Net.ReadTimeout
			}
			c := valid(tc.sarama)
			c.setDefaults()
			err := c.Validate()
			if tc.wantError != "" {
				require.ErrorContains(t, err, tc.wantError)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantRead, c.groupConfig().Net.ReadTimeout)
			if tc.sarama != nil {
				require.Equal(t, before, tc.sarama.Net.ReadTimeout, "the host's config is left as it is")
			}
		})
	}
}
