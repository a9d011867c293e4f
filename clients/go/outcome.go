package budgetagent

// Outcome is how one call ended, as SPEC §8 counts it: one outcome per call, not per attempt.
//
//   - ok: an attempt succeeded, after any number of retries;
//   - business_error: the last attempt failed with FailureBusiness or FailureOther, never
//     retryable;
//   - retry_refused_no_key: the last attempt failed retryably, the segment is idempotent
//     with a rule allowing at least one retry for that cause, but the caller gave no
//     idempotency key (the seed's "没带的一律拒绝重试并打点");
//   - deadline_exceeded / unavailable: otherwise, by the last attempt's failure: retries used
//     up, no rule for the cause, a non-idempotent segment, or a retry that did not fit;
//   - budget_exhausted: no attempt could be started at all, no time being left.
type Outcome string

const (
	OutcomeOK                Outcome = "ok"
	OutcomeDeadlineExceeded  Outcome = "deadline_exceeded"
	OutcomeUnavailable       Outcome = "unavailable"
	OutcomeBusinessError     Outcome = "business_error"
	OutcomeBudgetExhausted   Outcome = "budget_exhausted"
	OutcomeRetryRefusedNoKey Outcome = "retry_refused_no_key"
)

// AllOutcomes lists every outcome in the order of a window's counters.
var AllOutcomes = []Outcome{
	OutcomeOK,
	OutcomeDeadlineExceeded,
	OutcomeUnavailable,
	OutcomeBusinessError,
	OutcomeBudgetExhausted,
	OutcomeRetryRefusedNoKey,
}

// OutcomeAfterFailure is the outcome of a call of seg whose last attempt failed with f and
// that made no further attempt, for whatever reason.
func OutcomeAfterFailure(seg *Segment, keyGiven bool, f Failure) Outcome {
	c, retryable := f.cause()
	if !retryable {
		return OutcomeBusinessError
	}
	if !keyGiven && wouldRetryWithAKey(seg, c) {
		return OutcomeRetryRefusedNoKey
	}
	if c == CauseUnavailable {
		return OutcomeUnavailable
	}
	return OutcomeDeadlineExceeded
}

// wouldRetryWithAKey says whether only a missing key stops a retry of seg for c.
func wouldRetryWithAKey(seg *Segment, c Cause) bool {
	rule := ruleFor(seg, c)
	return mayRetry(seg, true) && rule != nil && rule.MaxRetries > 0
}
