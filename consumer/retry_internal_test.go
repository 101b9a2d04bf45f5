package consumer

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
)

// kindErrors returns an error of each turn.Kind, as turn.Classify sees them, for the decide
// rows; boom is the error they wrap.
func kindErrors(boom error) map[turn.Kind]error {
	return map[turn.Kind]error{
		turn.KindNone:        nil,
		turn.KindAttempt:     boom,
		turn.KindPermanent:   turn.Permanent(boom),
		turn.KindRateLimited: turn.RetryAfter(2*time.Second, boom),
		turn.KindUnavailable: turn.Unavailable(boom),
		turn.KindAbandoned:   turn.ErrAbandoned,
		turn.KindRunAlone:    turn.ErrRunAlone,
	}
}

// Every turn.Kind has its own decision, not decide's fallback for a kind Classify never
// makes: a kind added to turn without a case in decide is caught here.
func TestDecideKnowsEveryKind(t *testing.T) {
	t.Parallel()
	errs := kindErrors(errors.New("boom"))
	require.Empty(t, missing(errs, turn.Kinds()), "kindErrors needs an error of each kind")
	for _, k := range turn.Kinds() {
		require.Equal(t, k, turn.Classify(errs[k]), "kindErrors[%s]", k)
		d := decide(outcome{kind: k, err: errs[k]}, counts{}, limits{maxAttempts: 3, maxRateLimits: 3})
		require.NotEqual(t, actRetry, d.act, "decide has no case for %s", k)
	}
	d := decide(outcome{kind: turn.Kind(99), err: errors.New("?")}, counts{}, limits{maxAttempts: 3, maxRateLimits: 3})
	require.Equal(t, decision{act: actRetry, endProbe: true}, d, "a kind Classify never makes: retried at once")
}

// A turn cut short by its partition's end is abandoned, whatever its kind, with its probe
// ended, whether the Handler ran or the turn stopped before it (a wait to run alone may have
// made it the probe).
func TestDecideAbandonsEveryKindWhenThePartitionEnds(t *testing.T) {
	t.Parallel()
	errs := kindErrors(errors.New("boom"))
	full := counts{failures: 3, rate: rateLimits{counted: 3}}
	lim := limits{maxAttempts: 3, maxRateLimits: 3}
	for _, k := range turn.Kinds() {
		for _, n := range []counts{{}, full} {
			got := decide(outcome{kind: k, err: errs[k], aborted: true, own: true}, n, lim)
			require.Equal(t, decision{act: actAbandon, endProbe: true}, got, "aborted %s, counts %+v", k, n)
			got = decide(outcome{kind: k, err: errs[k], stopped: true}, n, lim)
			require.Equal(t, decision{act: actAbandon, endProbe: true}, got, "stopped %s, counts %+v", k, n)
		}
	}
}

// decide's table: each kind, below and at its limits. The counts are the turn's with the
// attempt counted (attempt's job); every turn.Kind must have a row.
func TestDecide(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	errs := kindErrors(boom)
	lim := limits{maxAttempts: 3, maxRateLimits: 2}
	rateErr := errs[turn.KindRateLimited]
	dle := &turn.DeadLetterError{RequestID: "r1", Reason: "dead before", Attempts: 4, Kind: turn.KindAttempt}
	ae := func(attempt int) error { return &turn.AttemptError{RequestID: "r1", Attempt: attempt, Err: boom} }
	rows := []struct {
		name string
		o    outcome
		n    counts
		want decision
	}{
		{"success", outcome{kind: turn.KindNone}, counts{failures: 2},
			decision{act: actResult}},
		{"permanent", outcome{kind: turn.KindPermanent, err: errs[turn.KindPermanent]}, counts{failures: 1},
			decision{act: actDeadLetter, endProbe: true, reason: "permanent: boom", attempts: 2, kind: turn.KindPermanent}},
		{"permanent, dead-lettered by the Runner", outcome{kind: turn.KindPermanent, err: dle}, counts{failures: 1},
			decision{act: actDeadLetter, endProbe: true, reason: "dead before", attempts: 4, kind: turn.KindAttempt}},
		{"permanent, dead before (kind not known)", outcome{kind: turn.KindPermanent,
			err: &turn.DeadLetterError{Reason: "earlier", Attempts: 1}}, counts{},
			decision{act: actDeadLetter, endProbe: true, reason: "earlier", attempts: 1, kind: turn.KindNone}},
		{"rate limited: every partition pauses", outcome{kind: turn.KindRateLimited, err: rateErr},
			counts{rate: rateLimits{counted: 1}},
			decision{act: actPause, delay: 2 * time.Second}},
		{"rate limited, no delay named", outcome{kind: turn.KindRateLimited, err: turn.RetryAfter(0, boom)},
			counts{rate: rateLimits{counted: 1}},
			decision{act: actPause}},
		{"rate limited while others pass: it alone backs off", outcome{kind: turn.KindRateLimited, err: rateErr, own: true},
			counts{rate: rateLimits{counted: 1, alone: 1}},
			decision{act: actBackOffAlone, endProbe: true, delay: 2 * time.Second}},
		{"rate limited, refused alone before, shared now", outcome{kind: turn.KindRateLimited, err: rateErr},
			counts{rate: rateLimits{counted: 1, alone: 1}},
			decision{act: actPause, delay: 2 * time.Second}},
		{"rate limited at MaxRateLimits", outcome{kind: turn.KindRateLimited, err: rateErr, own: true},
			counts{failures: 1, rate: rateLimits{counted: 2, alone: 1}},
			decision{act: actDeadLetter, endProbe: true, attempts: 1, kind: turn.KindRateLimited,
				reason: "rate limited 2 times in this member (Config.MaxRateLimits), rate limited alone 1 times " +
					"while other requests passed; last error: " + rateErr.Error()}},
		{"rate limited at MaxRateLimits, shared", outcome{kind: turn.KindRateLimited, err: rateErr},
			counts{rate: rateLimits{counted: 2}},
			decision{act: actDeadLetter, endProbe: true, attempts: 0, kind: turn.KindRateLimited,
				reason: "rate limited 2 times in this member (Config.MaxRateLimits), rate limited alone 0 times " +
					"while other requests passed; last error: " + rateErr.Error()}},
		{"unavailable: no attempt spent", outcome{kind: turn.KindUnavailable, err: errs[turn.KindUnavailable]},
			counts{failures: 2},
			decision{act: actRetryUnavailable, endProbe: true}},
		{"attempt failed", outcome{kind: turn.KindAttempt, err: boom}, counts{failures: 1},
			decision{act: actRetryFailed, endProbe: true, attempts: 1}},
		{"attempt failed, the Runner's count", outcome{kind: turn.KindAttempt, err: ae(7)}, counts{failures: 2},
			decision{act: actRetryFailed, endProbe: true, attempts: 7}},
		{"attempts exhausted", outcome{kind: turn.KindAttempt, err: boom}, counts{failures: 3},
			decision{act: actDeadLetter, endProbe: true, attempts: 3, kind: turn.KindAttempt,
				reason: "3 attempts failed in this member; last error: boom"}},
		{"attempts exhausted, the Runner's count", outcome{kind: turn.KindAttempt, err: ae(9)}, counts{failures: 3},
			decision{act: actDeadLetter, endProbe: true, attempts: 9, kind: turn.KindAttempt,
				reason: fmt.Sprintf("3 attempts failed in this member; last error: %v", ae(9))}},
		{"abandoned by its own context: a failure", outcome{kind: turn.KindAbandoned, err: turn.ErrAbandoned},
			counts{failures: 1},
			decision{act: actRetryFailed, endProbe: true, attempts: 1}},
		{"abandoned by its own context, at MaxAttempts", outcome{kind: turn.KindAbandoned, err: turn.ErrAbandoned},
			counts{failures: 3},
			decision{act: actDeadLetter, endProbe: true, attempts: 3, kind: turn.KindAttempt,
				reason: "3 attempts failed in this member; last error: " + turn.ErrAbandoned.Error()}},
		{"run alone", outcome{kind: turn.KindRunAlone, err: turn.ErrRunAlone}, counts{failures: 2},
			decision{act: actRunAlone, endProbe: true}},
	}
	seen := map[turn.Kind]bool{}
	for _, row := range rows {
		seen[row.o.kind] = true
	}
	require.Empty(t, missing(seen, turn.Kinds()), "every turn.Kind needs its rows")
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, row.o.kind, turn.Classify(row.o.err), "the row's error is of its kind")
			require.Equal(t, row.want, decide(row.o, row.n, lim))
		})
	}
}
