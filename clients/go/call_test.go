package budgetagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// Call against a scripted downstream, in real time: lower bounds are exact (a timer never
// fires early), upper bounds allow for a loaded machine and the race detector.

const (
	inv   = "order->inventory"
	pay   = "order->payment"
	user  = "order->user"
	key   = "order-42"
	slack = 80 * time.Millisecond
)

var (
	errUnavailable = status.Error(codes.Unavailable, "no healthy instance")
	errBusiness    = status.Error(codes.FailedPrecondition, "out of stock")
	errOther       = errors.New("boom")
)

// step is what the downstream does on one attempt: hang until the attempt's context ends,
// or answer err (nil: success) after a delay.
type step struct {
	hang  bool
	after time.Duration
	err   error
}

var (
	hang = step{hang: true}
	ok   = step{}
)

func fail(err error) step { return step{err: err} }

// seen is one attempt as the downstream saw it: when it started (since the call) and its
// timeout.
type seen struct {
	at, timeout time.Duration
}

// syncLog is a Logger whose lines tests read.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Printf(format string, args ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.buf, format+"\n", args...)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func staticAgent(t *testing.T, s *Snapshot, opts Options) *Agent {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = &syncLog{}
	}
	a, err := FromSnapshot(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// roomy is example A with inventory at timeout 300, budget 2 × 300 + 120 = 720 under a 1200 ms
// entry, so both UNAVAILABLE retries (100 + 300 ms) fit.
func roomy(t *testing.T) *Snapshot {
	s := exampleSnapshot(t, "example-a")
	c := s.Chains["checkout"]
	c.EntryBudgetMs = 1200
	c.Segments[0].TimeoutMs, c.Segments[0].BudgetMs = 1200, 1200
	c.Segments[1].TimeoutMs, c.Segments[1].BudgetMs = 300, 720
	return s
}

// run makes one call of segment with script (attempts past its end succeed) within an
// inherited deadline (0: none); it returns the error, the attempts seen and the time taken.
func run(t *testing.T, a *Agent, segment, key string, inherited time.Duration, script ...step) (error, []seen, time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if inherited != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(inherited))
		defer cancel()
	}
	var attempts []seen
	err := a.Call(ctx, segment, key, func(ctx context.Context, at Attempt) error {
		attempts = append(attempts, seen{at: time.Since(start), timeout: at.Timeout})
		if d, has := ctx.Deadline(); !has || !d.Equal(at.Deadline) {
			t.Errorf("attempt %d: context deadline %v, want %v", at.Number, d, at.Deadline)
		}
		if at.Number != len(attempts) {
			t.Errorf("attempt numbered %d, want %d", at.Number, len(attempts))
		}
		s := ok
		if at.Number <= len(script) {
			s = script[at.Number-1]
		}
		if s.hang {
			<-ctx.Done()
			return ctx.Err()
		}
		time.Sleep(s.after)
		return s.err
	})
	return err, attempts, time.Since(start)
}

func within(t *testing.T, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi+slack {
		t.Errorf("%s took %v, want %v..%v", what, d, lo, hi)
	}
}

// windows takes every segment's counts, as the reporter does.
func windows(a *Agent) map[string]*pb.SegmentWindow {
	out := map[string]*pb.SegmentWindow{}
	for _, w := range a.counters.take(0, 1) {
		out[w.Segment] = w
	}
	return out
}

func TestADeadlineOnAnIdempotentCallRetriesOnceAfterItsBackoff(t *testing.T) {
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	err, attempts, _ := run(t, a, inv, key, 0, hang, ok)
	if err != nil || len(attempts) != 2 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	// Attempt 1 times out at 44 ms; 100 ms stretched by 0–20 % later comes the retry.
	if attempts[0].timeout != 44*time.Millisecond || attempts[1].timeout != 44*time.Millisecond {
		t.Errorf("attempt timeouts %v", attempts)
	}
	within(t, "the timeout and backoff", attempts[1].at-attempts[0].at, 144*time.Millisecond, 164*time.Millisecond)

	// Two timeouts: exactly one retry, then the deadline error, inside the 208 ms budget.
	err, attempts, took := run(t, a, inv, key, 0, hang, hang, ok)
	if !errors.Is(err, context.DeadlineExceeded) || len(attempts) != 2 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	within(t, "the call", took, 188*time.Millisecond, 208*time.Millisecond)

	w := windows(a)[inv]
	if w.Calls != 2 || w.Attempts != 4 || w.Retries["deadline"] != 2 || w.Outcomes["ok"] != 1 || w.Outcomes["deadline_exceeded"] != 1 {
		t.Errorf("counted %v", w)
	}
}

func TestUnavailableRetriesTwiceAfter100Then300Ms(t *testing.T) {
	a := staticAgent(t, roomy(t), Options{})
	err, attempts, _ := run(t, a, inv, key, 0, fail(errUnavailable), fail(errUnavailable), fail(errUnavailable), ok)
	if err != errUnavailable || len(attempts) != 3 {
		t.Fatalf("err %v after %d attempts, want the last error after 3", err, len(attempts))
	}
	within(t, "the first backoff", attempts[1].at-attempts[0].at, 100*time.Millisecond, 120*time.Millisecond)
	within(t, "the second backoff", attempts[2].at-attempts[1].at, 300*time.Millisecond, 360*time.Millisecond)

	err, attempts, _ = run(t, a, inv, key, 0, fail(errUnavailable), fail(errUnavailable), ok)
	if err != nil || len(attempts) != 3 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	w := windows(a)[inv]
	if w.Calls != 2 || w.Attempts != 6 || w.Retries["unavailable"] != 4 || w.Outcomes["unavailable"] != 1 || w.Outcomes["ok"] != 1 {
		t.Errorf("counted %v", w)
	}
}

func TestBusinessAndOtherErrorsNeverRetry(t *testing.T) {
	appErr := errors.New("card declined")
	classify := func(err error) Failure {
		if errors.Is(err, appErr) {
			return FailureBusiness
		}
		return DefaultClassify(err)
	}
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{Classify: classify})
	for _, failure := range []error{errBusiness, errOther, appErr, fmt.Errorf("wrapped: %w", appErr)} {
		err, attempts, _ := run(t, a, inv, key, 0, fail(failure), ok)
		if err != failure || len(attempts) != 1 {
			t.Errorf("%v: err %v after %d attempts", failure, err, len(attempts))
		}
	}
	w := windows(a)[inv]
	if w.Calls != 4 || w.Attempts != 4 || len(w.Retries) != 0 || w.Outcomes["business_error"] != 4 {
		t.Errorf("counted %v", w)
	}
}

func TestNonIdempotentCallsNeverRetry(t *testing.T) {
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	// An idempotent segment, but the caller gave no key.
	err, attempts, took := run(t, a, inv, "", 0, hang, ok)
	if !errors.Is(err, context.DeadlineExceeded) || len(attempts) != 1 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	within(t, "the call", took, 44*time.Millisecond, 44*time.Millisecond)
	if err, attempts, _ := run(t, a, inv, "", 0, fail(errUnavailable), ok); err != errUnavailable || len(attempts) != 1 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	// A segment without idempotency, even with a key.
	err, attempts, took = run(t, a, user, key, 0, hang, ok)
	if !errors.Is(err, context.DeadlineExceeded) || len(attempts) != 1 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	within(t, "the call", took, 9*time.Millisecond, 9*time.Millisecond)

	w := windows(a)
	if i := w[inv]; i.Calls != 2 || i.Attempts != 2 || i.Outcomes["retry_refused_no_key"] != 2 {
		t.Errorf("inventory counted %v", i)
	}
	if u := w[user]; u.Calls != 1 || u.Attempts != 1 || u.Outcomes["deadline_exceeded"] != 1 {
		t.Errorf("user counted %v", u)
	}
}

func TestOnDeadlineFalseRetriesOnUnavailableOnly(t *testing.T) {
	// order->payment: idempotent (pay_no), no deadline rule; timeout = budget = 390.
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	err, attempts, took := run(t, a, pay, key, 0, hang, ok)
	if !errors.Is(err, context.DeadlineExceeded) || len(attempts) != 1 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	within(t, "the call", took, 390*time.Millisecond, 390*time.Millisecond)

	err, attempts, _ = run(t, a, pay, key, 0, fail(errUnavailable), ok)
	if err != nil || len(attempts) != 2 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	// The retried attempt gets what is left of the 390 ms budget, not a fresh 390.
	if left := 390*time.Millisecond - attempts[1].at; attempts[1].timeout > left+time.Millisecond {
		t.Errorf("retry timeout %v, more than the %v left", attempts[1].timeout, left)
	}
}

func TestNeverBacksOffPastTheBudgetOrTheInheritedDeadline(t *testing.T) {
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	// Inventory's budget is 208 ms: after the 100 ms retry the 300 ms backoff does not fit, so
	// the call stops with the last error instead of sleeping.
	err, attempts, took := run(t, a, inv, key, 0, fail(errUnavailable), fail(errUnavailable), fail(errUnavailable))
	if err != errUnavailable || len(attempts) != 2 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	within(t, "the call", took, 100*time.Millisecond, 120*time.Millisecond)

	// 30 ms inherited: the attempt's timeout is cut from 44 to 30 and nothing follows.
	err, attempts, took = run(t, a, inv, key, 30*time.Millisecond, hang, ok)
	if !errors.Is(err, context.DeadlineExceeded) || len(attempts) != 1 || attempts[0].timeout > 30*time.Millisecond {
		t.Fatalf("err %v, attempts %v", err, attempts)
	}
	within(t, "the call", took, 30*time.Millisecond, 30*time.Millisecond)

	// 120 ms inherited: after the 44 ms timeout only 76 ms remain, less than the backoff.
	err, attempts, took = run(t, a, inv, key, 120*time.Millisecond, hang, ok)
	if !errors.Is(err, context.DeadlineExceeded) || len(attempts) != 1 {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	within(t, "the call", took, 44*time.Millisecond, 44*time.Millisecond)

	// An inherited deadline already past: not even one attempt.
	err, attempts, _ = run(t, a, inv, key, -time.Millisecond, ok)
	if err != ErrBudgetExhausted || len(attempts) != 0 || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v after %d attempts", err, len(attempts))
	}
	w := windows(a)[inv]
	if w.Calls != 4 || w.Attempts != 4 || w.Retries["unavailable"] != 1 || w.Outcomes["budget_exhausted"] != 1 || w.Outcomes["deadline_exceeded"] != 2 {
		t.Errorf("counted %v", w)
	}
}

func TestRetriesAreLoggedWithTheirNumberAndCause(t *testing.T) {
	logs := &syncLog{}
	a := staticAgent(t, roomy(t), Options{Logger: logs})
	if err, _, _ := run(t, a, inv, key, 0, hang, fail(errUnavailable), ok); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "retrying") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 || !strings.Contains(lines[0], `segment="order->inventory" retry=1 cause=deadline`) ||
		!strings.Contains(lines[1], "retry=2 cause=unavailable") {
		t.Fatalf("retry lines %q", lines)
	}
}

func TestUnknownAndCancelledCallsAreNotCounted(t *testing.T) {
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	err := a.Call(context.Background(), "order->nowhere", key, func(context.Context, Attempt) error {
		t.Error("an unknown segment's operation ran")
		return nil
	})
	if !errors.Is(err, ErrUnknownSegment) || !strings.Contains(err.Error(), "order->nowhere") {
		t.Fatalf("err %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = a.Call(ctx, inv, key, func(ctx context.Context, _ Attempt) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if w := windows(a); len(w) != 0 {
		t.Fatalf("counted %v", w)
	}
}

func TestDeadlineIsTheEarlierOfTheBudgetAndTheInheritedOne(t *testing.T) {
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	check := func(what string, parent context.Context, segment string, lo, hi time.Duration, want bool) {
		t.Helper()
		before := time.Now()
		ctx, cancel := a.Deadline(parent, segment)
		defer cancel()
		d, has := ctx.Deadline()
		if has != want || (has && (d.Before(before.Add(lo)) || d.After(time.Now().Add(hi)))) {
			t.Errorf("%s: deadline %v in %v (has %v)", what, d, time.Until(d), has)
		}
	}
	check("inventory", context.Background(), inv, 208*time.Millisecond, 208*time.Millisecond, true)
	check("user", context.Background(), user, 9*time.Millisecond, 9*time.Millisecond, true)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	check("inherited 100 ms", short, inv, 0, 100*time.Millisecond, true)
	long, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	check("inherited 1 h", long, pay, 390*time.Millisecond, 390*time.Millisecond, true)
	check("unknown segment", context.Background(), "order->nowhere", 0, 0, false)
}

func TestAStaticAgentRefusesAnInvertedSnapshot(t *testing.T) {
	_, err := FromSnapshot(exampleSnapshot(t, "example-b-inverted"), Options{Logger: log.New(&bytes.Buffer{}, "", 0)})
	var r *Refusal
	if !errors.As(err, &r) || r.Segment != "gateway->order" || !strings.Contains(r.Message, "909") {
		t.Fatalf("err %v", err)
	}
}
