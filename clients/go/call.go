package budgetagent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"time"
)

// Attempt is one attempt of a call, handed to the operation.
type Attempt struct {
	// Number is 1 for the first attempt, 2 for the first retry, …
	Number int
	// Timeout is this attempt's timeout: the segment's timeout_ms, capped by the time left.
	Timeout time.Duration
	// Deadline is when this attempt times out; the attempt's context carries it.
	Deadline time.Time
}

// ErrUnknownSegment is returned (wrapped, with the segment's name) by Call for a segment the
// live config does not know.
var ErrUnknownSegment = errors.New("budgetagent: unknown segment")

// Call runs op as a call of segment (`caller->callee`) under R-retry, within ctx's deadline.
//
// Each attempt gets a context whose deadline is the segment's timeout_ms from its start,
// capped by the time left; op must honour it (a gRPC call made with that context does). An
// attempt that runs out of time fails with cause deadline. A failure is retried only when
// idempotencyKey is not empty, the segment is idempotent and its retry plan has a rule for
// the cause (max_retries per cause, backoffs stretched by 0–jitter_pct %), and only when the
// backoff ends before the call's deadline: the earlier of now + the segment's budget_ms and
// ctx's deadline. Business and other errors never retry (see Options.Classify). Each retry is
// logged as `retry=n cause=…`.
//
// Call returns nil once an attempt succeeds, else the last attempt's error as op returned it
// (ErrBudgetExhausted when no attempt could start). When it ends the call is counted for its
// segment's report and metrics: attempts, retries by cause, its Outcome and the successful
// attempt's latency. A call on an unknown segment (ErrUnknownSegment), or cancelled by its
// caller (ctx cancelled, not timed out), is not counted.
func (a *Agent) Call(ctx context.Context, segment, idempotencyKey string, op func(ctx context.Context, attempt Attempt) error) error {
	chain, seg, ok := a.Snapshot().Segment(segment)
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownSegment, segment)
	}
	r := callRun{
		seg:      seg,
		keyGiven: idempotencyKey != "",
		classify: a.opts.Classify,
		pick:     randomPick,
		log:      a.opts.Logger,
	}
	ended, err := r.run(ctx, op)
	if ended.cancelled {
		return err
	}
	a.counters.record(callRecord{
		chain:     chain,
		segment:   segment,
		outcome:   ended.outcome,
		attempts:  ended.attempts,
		retries:   [2]uint32{ended.retries.Retries(CauseDeadline), ended.retries.Retries(CauseUnavailable)},
		ok:        ended.outcome == OutcomeOK,
		okLatency: ended.latency,
	})
	return err
}

// callRun is one call's fixed inputs; run is the R-retry loop over them.
type callRun struct {
	seg      *Segment
	keyGiven bool
	classify func(error) Failure
	pick     func(max uint64) uint64
	log      Logger
}

// callEnded is what a finished call did.
type callEnded struct {
	attempts uint32
	retries  RetryState
	outcome  Outcome
	// latency is the duration of the attempt that succeeded.
	latency time.Duration
	// cancelled is set when the caller cancelled ctx: such a call is not counted.
	cancelled bool
}

func (r *callRun) run(ctx context.Context, op func(context.Context, Attempt) error) (callEnded, error) {
	start := time.Now()
	inherited, has := ctx.Deadline()
	end := Earliest(start, time.Duration(r.seg.BudgetMs)*time.Millisecond, inherited, has)
	var (
		state    RetryState
		last     error
		failure  Failure
		attempts uint32
		// A retry decided but not yet made, and the retry counts before it: it counts only
		// once its attempt starts, so a backoff that ends past the deadline counts nothing.
		pending *RetryState
	)
	giveUp := func() (callEnded, error) {
		if pending != nil {
			state = *pending
		}
		if last == nil {
			return callEnded{attempts: attempts, retries: state, outcome: OutcomeBudgetExhausted}, ErrBudgetExhausted
		}
		outcome := OutcomeAfterFailure(r.seg, r.keyGiven, failure)
		return callEnded{attempts: attempts, retries: state, outcome: outcome}, last
	}
	for {
		if errors.Is(ctx.Err(), context.Canceled) {
			return callEnded{cancelled: true}, ctx.Err()
		}
		now := start
		if attempts > 0 {
			now = time.Now()
		}
		timeout, ok := AttemptTimeout(r.seg.TimeoutMs, end.Sub(now))
		if !ok {
			return giveUp()
		}
		pending = nil
		attempts++
		attempt := Attempt{Number: int(attempts), Timeout: timeout, Deadline: now.Add(timeout)}
		actx, cancel := context.WithDeadline(ctx, attempt.Deadline)
		err := op(actx, attempt)
		timedOut := actx.Err() == context.DeadlineExceeded
		cancel()
		if err == nil {
			return callEnded{attempts: attempts, retries: state, outcome: OutcomeOK, latency: time.Since(now)}, nil
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			return callEnded{cancelled: true}, err
		}
		last, failure = err, r.classify(err)
		if timedOut {
			// The attempt ran out of time, whatever error that surfaced as.
			failure = FailureDeadline
		}
		before := state
		d := Decide(r.seg, failure, r.keyGiven, &state, time.Until(end), r.pick)
		if !d.Retry {
			return giveUp()
		}
		r.log.Printf("retrying segment=%q retry=%d cause=%s backoff=%s", r.seg.ID, d.RetryN, d.Cause, d.Backoff)
		pending = &before
		sleep(ctx, d.Backoff)
	}
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// randomPick is a uniform random pick in 0..=max: the jitter of the running agent (the
// pure rules take it as an argument so tests pass fixed picks).
func randomPick(max uint64) uint64 {
	if max >= math.MaxInt64 {
		return rand.Uint64() % max
	}
	return uint64(rand.Int63n(int64(max) + 1))
}
