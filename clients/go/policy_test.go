package budgetagent

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

const millisecond = time.Millisecond

func noJitter(uint64) uint64    { return 0 }
func maxJitter(m uint64) uint64 { return m }

func retryDecision(c Cause, n uint32, backoff time.Duration) Decision {
	return Decision{Retry: true, Cause: c, RetryN: n, Backoff: backoff}
}

func stopDecision(reason StopReason, c Cause) Decision {
	return Decision{Cause: c, Stop: reason}
}

// checkDecisions runs Decide over failures of one call with plenty of time and no jitter.
func checkDecisions(t *testing.T, id string, key bool, failures []Failure, want []Decision) {
	t.Helper()
	seg, ok := exampleA().Segment(id)
	if !ok {
		t.Fatalf("no segment %s", id)
	}
	var st RetryState
	for i, f := range failures {
		if got := Decide(seg, f, key, &st, 10*time.Second, noJitter); got != want[i] {
			t.Errorf("%s, key %v, failure %d (%v): got %+v, want %+v", id, key, i, f, got, want[i])
		}
	}
}

func TestRRetryTable(t *testing.T) {
	D, U := CauseDeadline, CauseUnavailable
	checkDecisions(t, "order->inventory", true, []Failure{FailureDeadline, FailureDeadline},
		[]Decision{retryDecision(D, 1, 100*millisecond), stopDecision(StopMaxRetries, D)})
	checkDecisions(t, "order->inventory", true, []Failure{FailureUnavailable, FailureUnavailable, FailureUnavailable},
		[]Decision{retryDecision(U, 1, 100*millisecond), retryDecision(U, 2, 300*millisecond), stopDecision(StopMaxRetries, U)})
	// Limits are per cause; the retry number counts every retry of the call.
	checkDecisions(t, "order->inventory", true,
		[]Failure{FailureDeadline, FailureUnavailable, FailureUnavailable, FailureDeadline},
		[]Decision{retryDecision(D, 1, 100*millisecond), retryDecision(U, 2, 100*millisecond), retryDecision(U, 3, 300*millisecond), stopDecision(StopMaxRetries, D)})
	checkDecisions(t, "order->inventory", true, []Failure{FailureBusiness}, []Decision{{Stop: StopBusiness}})
	checkDecisions(t, "order->inventory", true, []Failure{FailureOther}, []Decision{{Stop: StopOther}})
	// The zero Failure is an unclassified error: never retried.
	checkDecisions(t, "order->inventory", true, []Failure{0}, []Decision{{Stop: StopOther}})
	checkDecisions(t, "order->inventory", false, []Failure{FailureDeadline, FailureUnavailable},
		[]Decision{stopDecision(StopNotIdempotent, D), stopDecision(StopNotIdempotent, U)})
	checkDecisions(t, "order->user", true, []Failure{FailureDeadline, FailureUnavailable},
		[]Decision{stopDecision(StopNotIdempotent, D), stopDecision(StopNotIdempotent, U)})
	checkDecisions(t, "order->payment", true,
		[]Failure{FailureDeadline, FailureUnavailable, FailureUnavailable, FailureUnavailable},
		[]Decision{stopDecision(StopNoRule, D), retryDecision(U, 1, 100*millisecond), retryDecision(U, 2, 300*millisecond), stopDecision(StopMaxRetries, U)})
}

func TestAPlanFlaggedIdempotentNeedsItsKeyRule(t *testing.T) {
	seg, _ := exampleA().Segment("order->inventory")
	seg.Idempotency = nil
	var st RetryState
	if got := Decide(seg, FailureDeadline, true, &st, 10*time.Second, noJitter); got.Stop != StopNotIdempotent {
		t.Errorf("without an idempotency rule the call never retries, got %+v", got)
	}
}

func TestJitterStretchesByAtMostTheRulePercentage(t *testing.T) {
	for _, tc := range []struct {
		base, pct uint64
		pick      func(uint64) uint64
		want      time.Duration
	}{
		{100, 20, noJitter, 100 * millisecond},
		{100, 20, maxJitter, 120 * millisecond},
		{300, 20, maxJitter, 360 * millisecond},
		{300, 20, func(m uint64) uint64 { return m / 2 }, 330 * millisecond},
		{100, 20, func(uint64) uint64 { return math.MaxUint64 }, 120 * millisecond},
		{100, 0, maxJitter, 100 * millisecond},
		{math.MaxUint64, 20, maxJitter, math.MaxInt64},
	} {
		if got := jittered(tc.base, tc.pct, tc.pick); got != tc.want {
			t.Errorf("jittered(%d, %d) = %v, want %v", tc.base, tc.pct, got, tc.want)
		}
	}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 1000; i++ {
		b := jittered(100, 20, func(m uint64) uint64 { return uint64(r.Int63n(int64(m) + 1)) })
		if b < 100*millisecond || b > 120*millisecond {
			t.Fatalf("backoff %v outside 100–120 ms", b)
		}
	}
}

func TestNeverBacksOffPastTheDeadline(t *testing.T) {
	seg, _ := exampleA().Segment("order->inventory")
	for _, tc := range []struct {
		remaining time.Duration
		pick      func(uint64) uint64
		want      Decision
	}{
		{101 * millisecond, noJitter, retryDecision(CauseUnavailable, 1, 100*millisecond)},
		{100*millisecond + time.Nanosecond, noJitter, retryDecision(CauseUnavailable, 1, 100*millisecond)},
		{100 * millisecond, noJitter, Decision{Cause: CauseUnavailable, Stop: StopOutOfBudget, Backoff: 100 * millisecond, Remaining: 100 * millisecond}},
		{110 * millisecond, maxJitter, Decision{Cause: CauseUnavailable, Stop: StopOutOfBudget, Backoff: 120 * millisecond, Remaining: 110 * millisecond}},
		{0, noJitter, Decision{Cause: CauseUnavailable, Stop: StopOutOfBudget, Backoff: 100 * millisecond}},
		{-millisecond, noJitter, Decision{Cause: CauseUnavailable, Stop: StopOutOfBudget, Backoff: 100 * millisecond, Remaining: -millisecond}},
	} {
		var st RetryState
		got := Decide(seg, FailureUnavailable, true, &st, tc.remaining, tc.pick)
		if got != tc.want {
			t.Errorf("remaining %v: got %+v, want %+v", tc.remaining, got, tc.want)
		}
		recorded := uint32(0)
		if tc.want.Retry {
			recorded = 1
		}
		if st.Total() != recorded || st.Retries(CauseUnavailable) != recorded {
			t.Errorf("remaining %v: %d retries recorded, want %d (only granted ones)", tc.remaining, st.Total(), recorded)
		}
	}
}

func TestAttemptTimeoutIsCappedByTheRemainingTime(t *testing.T) {
	for _, tc := range []struct {
		timeoutMs uint64
		remaining time.Duration
		want      time.Duration
		ok        bool
	}{
		{44, 208 * millisecond, 44 * millisecond, true},
		{44, 30 * millisecond, 30 * millisecond, true},
		{44, 44 * millisecond, 44 * millisecond, true},
		{44, time.Nanosecond, time.Nanosecond, true},
		{44, 0, 0, false},
		{44, -millisecond, 0, false},
		{math.MaxUint64, time.Hour, time.Hour, true},
		{math.MaxUint64, math.MaxInt64, math.MaxInt64, true},
		{MaxConfigMs, math.MaxInt64, 1_000_000_000 * time.Second, true},
	} {
		got, ok := AttemptTimeout(tc.timeoutMs, tc.remaining)
		if got != tc.want || ok != tc.ok {
			t.Errorf("AttemptTimeout(%d, %v) = %v, %v; want %v, %v", tc.timeoutMs, tc.remaining, got, ok, tc.want, tc.ok)
		}
	}
}

func TestEarliestOfOwnBudgetAndInherited(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		inherited time.Time
		has       bool
		want      time.Time
	}{
		{time.Time{}, false, now.Add(208 * millisecond)},
		{now.Add(100 * millisecond), true, now.Add(100 * millisecond)},
		{now.Add(500 * millisecond), true, now.Add(208 * millisecond)},
		{now, true, now},
		{now.Add(-millisecond), true, now.Add(-millisecond)},
		// hasInherited false ignores whatever time is passed
		{now, false, now.Add(208 * millisecond)},
	} {
		if got := Earliest(now, 208*millisecond, tc.inherited, tc.has); !got.Equal(tc.want) {
			t.Errorf("Earliest(inherited %v, %v) = %v, want %v", tc.inherited, tc.has, got, tc.want)
		}
	}
}

// A deadline of any config that passes the checks is exact: the longest budget fits a
// time.Duration, and adding it to the clock (wall and monotonic) moves the clock forward.
func TestEarliestWithTheLongestBudgets(t *testing.T) {
	longest := millis(MaxConfigMs)
	if uint64(longest/millisecond) != MaxConfigMs || longest%millisecond != 0 {
		t.Fatalf("%d ms is %v as a time.Duration", MaxConfigMs, longest)
	}
	now := time.Now()
	if got := Earliest(now, longest, time.Time{}, false); got.Sub(now) != longest {
		t.Errorf("Earliest(now, %v) is %v after now", longest, got.Sub(now))
	}
	inherited := now.Add(time.Second)
	for _, budget := range []time.Duration{longest, math.MaxInt64} {
		if got := Earliest(now, budget, inherited, true); !got.Equal(inherited) {
			t.Errorf("budget %v: Earliest = %v, want the inherited %v", budget, got, inherited)
		}
		if got := Earliest(now, budget, time.Time{}, false); !got.After(now) {
			t.Errorf("budget %v: Earliest = %v, not after now %v", budget, got, now)
		}
	}
}

// A received rule may carry any wait (its backoffs are not bounded): a wait too long for a
// time.Duration saturates and is out of budget, never wrapping to a short or negative one.
func TestDecideSaturatesBackoffsTooLongForADuration(t *testing.T) {
	seg, _ := exampleA().Segment("order->inventory")
	for _, backoffMs := range []uint64{
		9_000_000_000_000, // 9.0e18 ns fits, 20 % jitter on top does not
		10_000_000_000_000,
		1 << 63,
		math.MaxUint64,
	} {
		rule := *seg.Retry.OnUnavailable
		rule.BackoffsMs = []uint64{backoffMs}
		s := *seg
		s.Retry.OnUnavailable = &rule
		var st RetryState
		got := Decide(&s, FailureUnavailable, true, &st, math.MaxInt64, maxJitter)
		want := Decision{Cause: CauseUnavailable, Stop: StopOutOfBudget, Backoff: math.MaxInt64, Remaining: math.MaxInt64}
		if got != want || st.Total() != 0 {
			t.Errorf("backoff %d ms: got %+v (%d retries), want %+v", backoffMs, got, st.Total(), want)
		}
	}
}

func TestBackoffsShorterThanMaxRetriesRepeatTheLast(t *testing.T) {
	rule := &RetryRule{MaxRetries: 3, BackoffsMs: []uint64{100, 300}, JitterPct: 20}
	for i, want := range []uint64{100, 300, 300, 300} {
		if got := baseBackoffMs(rule, uint32(i)); got != want {
			t.Errorf("backoff %d = %d, want %d", i, got, want)
		}
	}
	if got := baseBackoffMs(&RetryRule{MaxRetries: 3}, 0); got != 0 {
		t.Errorf("a rule without backoffs waits %d", got)
	}
}

func TestNames(t *testing.T) {
	if CauseDeadline.String() != "deadline" || CauseUnavailable.String() != "unavailable" {
		t.Error("cause names")
	}
	// Causes index arrays of per-cause counters.
	if CauseDeadline != 0 || CauseUnavailable != 1 {
		t.Error("cause indexes")
	}
	if FailureDeadline.Error() != "deadline exceeded" || Failure(0).Error() != "failed" {
		t.Error("failure texts")
	}
	if StopReason(0).String() != "" || StopOutOfBudget.String() != "out_of_budget" {
		t.Error("stop reason names")
	}
}
