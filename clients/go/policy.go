package budgetagent

import (
	"math"
	"time"
)

// Failure is what kind of failure an attempt ended with, as R-retry sees it.
type Failure int

const (
	// FailureDeadline is DEADLINE_EXCEEDED: the attempt ran out of time (or the downstream
	// said so).
	FailureDeadline Failure = iota + 1
	// FailureUnavailable is UNAVAILABLE: a fast failure, e.g. no healthy instance.
	FailureUnavailable
	// FailureBusiness is a business error: the downstream answered "no". Never retried.
	FailureBusiness
	// FailureOther is anything else (cancelled, internal, unknown …). Never retried. The zero
	// Failure counts as one, so an unclassified error is never retried.
	FailureOther
)

// Error makes a bare Failure usable as an operation's error, e.g. in tests.
func (f Failure) Error() string {
	switch f {
	case FailureDeadline:
		return "deadline exceeded"
	case FailureUnavailable:
		return "unavailable"
	case FailureBusiness:
		return "business error"
	default:
		return "failed"
	}
}

// cause is the retry cause this failure may be retried under; false for none.
func (f Failure) cause() (Cause, bool) {
	switch f {
	case FailureDeadline:
		return CauseDeadline, true
	case FailureUnavailable:
		return CauseUnavailable, true
	default:
		return 0, false
	}
}

// Cause is one of the two causes R-retry retries on. Its value indexes arrays of per-cause
// counters: deadline 0, unavailable 1.
type Cause int

const (
	CauseDeadline Cause = iota
	CauseUnavailable
)

// String is the name used in logs and metrics: "deadline" or "unavailable".
func (c Cause) String() string {
	if c == CauseUnavailable {
		return "unavailable"
	}
	return "deadline"
}

// RetryState counts the retries made so far in one call, per cause.
type RetryState struct {
	deadline, unavailable uint32
}

// Retries is the number of retries made for cause.
func (s *RetryState) Retries(c Cause) uint32 {
	if c == CauseUnavailable {
		return s.unavailable
	}
	return s.deadline
}

// Total is the number of retries of every cause: the n of the last `retry=n` logged.
func (s *RetryState) Total() uint32 {
	return s.deadline + s.unavailable
}

func (s *RetryState) record(c Cause) {
	if c == CauseUnavailable {
		s.unavailable++
	} else {
		s.deadline++
	}
}

// StopReason is why a failed attempt is not retried; the zero value means it is.
type StopReason int

const (
	// StopBusiness: business errors never retry.
	StopBusiness StopReason = iota + 1
	// StopOther: failures other than deadline and unavailable never retry.
	StopOther
	// StopNotIdempotent: the segment is not idempotent, or the caller gave no key.
	StopNotIdempotent
	// StopNoRule: the plan has no rule for the cause (e.g. retry.on_deadline=false).
	StopNoRule
	// StopMaxRetries: the rule's retries for the cause are used up.
	StopMaxRetries
	// StopOutOfBudget: the backoff would end at or past the call's deadline; better a
	// fallback than an overrun.
	StopOutOfBudget
)

// String is the reason's name in the conformance corpus, e.g. "max_retries".
func (r StopReason) String() string {
	switch r {
	case StopBusiness:
		return "business"
	case StopOther:
		return "other"
	case StopNotIdempotent:
		return "not_idempotent"
	case StopNoRule:
		return "no_rule"
	case StopMaxRetries:
		return "max_retries"
	case StopOutOfBudget:
		return "out_of_budget"
	default:
		return ""
	}
}

// Decision is the verdict on one failed attempt: either sleep Backoff and make retry number
// RetryN (1-based, counting every cause), or stop for Stop.
type Decision struct {
	Retry bool
	// Cause is the failure's cause, for a retry and for every stop on a retryable failure.
	Cause  Cause
	RetryN uint32
	// Backoff is the jittered wait before the retry; for StopOutOfBudget, the wait that did
	// not fit.
	Backoff time.Duration
	Stop    StopReason
	// Remaining is the time that was left, for StopOutOfBudget.
	Remaining time.Duration
}

// ruleFor is the rule of the segment's plan for cause, nil when the plan has none.
func ruleFor(seg *Segment, c Cause) *RetryRule {
	if c == CauseUnavailable {
		return seg.Retry.OnUnavailable
	}
	return seg.Retry.OnDeadline
}

// mayRetry says whether a call of seg may retry at all: the segment is idempotent and the
// caller passed the idempotency key (without it, a retry could run the operation twice).
func mayRetry(seg *Segment, keyGiven bool) bool {
	return keyGiven && seg.Retry.Idempotent && seg.Idempotency != nil
}

// jittered stretches baseMs by pick(max) microseconds, max being jitterPct % of the base;
// a pick above max is clamped.
func jittered(baseMs, jitterPct uint64, pick func(max uint64) uint64) time.Duration {
	baseUs := saturatingMul(baseMs, 1000)
	maxExtraUs := saturatingMul(baseUs, jitterPct) / 100
	extraUs := pick(maxExtraUs)
	if extraUs > maxExtraUs {
		extraUs = maxExtraUs
	}
	total := baseUs + extraUs
	if total < baseUs {
		total = math.MaxUint64
	}
	return micros(total)
}

// baseBackoffMs is the backoff before retry number index (0-based, per cause) without
// jitter; a rule with fewer backoffs than retries repeats its last one.
func baseBackoffMs(rule *RetryRule, index uint32) uint64 {
	switch n := len(rule.BackoffsMs); {
	case n == 0:
		return 0
	case int(index) < n:
		return rule.BackoffsMs[index]
	default:
		return rule.BackoffsMs[n-1]
	}
}

// Decide applies R-retry after an attempt of seg failed with f.
//
// remaining is the time left until the call's deadline (the earlier of the call's start plus
// the segment budget and the inherited deadline). A retry is granted only when its backoff
// ends strictly before that deadline; st then records it. pick(max) draws the jitter in
// microseconds from 0..=max.
func Decide(seg *Segment, f Failure, keyGiven bool, st *RetryState, remaining time.Duration, pick func(max uint64) uint64) Decision {
	c, retryable := f.cause()
	if !retryable {
		if f == FailureBusiness {
			return Decision{Stop: StopBusiness}
		}
		return Decision{Stop: StopOther}
	}
	if !mayRetry(seg, keyGiven) {
		return Decision{Cause: c, Stop: StopNotIdempotent}
	}
	rule := ruleFor(seg, c)
	if rule == nil {
		return Decision{Cause: c, Stop: StopNoRule}
	}
	used := st.Retries(c)
	if used >= rule.MaxRetries {
		return Decision{Cause: c, Stop: StopMaxRetries}
	}
	backoff := jittered(baseBackoffMs(rule, used), rule.JitterPct, pick)
	if backoff >= remaining {
		return Decision{Cause: c, Stop: StopOutOfBudget, Backoff: backoff, Remaining: remaining}
	}
	st.record(c)
	return Decision{Retry: true, Cause: c, RetryN: st.Total(), Backoff: backoff}
}

// AttemptTimeout is the timeout of the next attempt: the segment's timeout capped by the
// time remaining; false when no time remains (never start an attempt past the deadline).
func AttemptTimeout(timeoutMs uint64, remaining time.Duration) (time.Duration, bool) {
	if remaining <= 0 {
		return 0, false
	}
	timeout := millis(timeoutMs)
	if remaining < timeout {
		timeout = remaining
	}
	return timeout, true
}

// Earliest is the deadline of a call: the earlier of now + budget and the inherited
// deadline, when there is one.
func Earliest(now time.Time, budget time.Duration, inherited time.Time, hasInherited bool) time.Time {
	own := now.Add(budget)
	if hasInherited && inherited.Before(own) {
		return inherited
	}
	return own
}

func saturatingMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// micros converts microseconds to a Duration, saturating at the longest one (~292 years).
func micros(us uint64) time.Duration {
	if us > uint64(math.MaxInt64/int64(time.Microsecond)) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// millis converts milliseconds to a Duration, saturating at the longest one.
func millis(ms uint64) time.Duration {
	if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}
