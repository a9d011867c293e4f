package budgetagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// fakeControlPlane records the reports sent to it and answers with what a test sets.
type fakeControlPlane struct {
	mu       sync.Mutex
	requests []*pb.ReportRequest
	answer   func(req *pb.ReportRequest) (*pb.ReportResponse, error)
}

func (f *fakeControlPlane) send(ctx context.Context, req *pb.ReportRequest) (*pb.ReportResponse, error) {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	answer := f.answer
	f.mu.Unlock()
	if answer != nil {
		return answer(req)
	}
	return &pb.ReportResponse{AcceptedWindows: int64(len(req.Windows))}, nil
}

func (f *fakeControlPlane) sent() []*pb.ReportRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.ReportRequest(nil), f.requests...)
}

// logLines is a Logger keeping what it is given.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Printf(format string, args ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// clock is a settable wall clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) get() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) set(ms int64)   { c.mu.Lock(); defer c.mu.Unlock(); c.now = time.UnixMilli(ms) }

// testReporter is a reporter of 10 s windows on a clock starting at startMs.
func testReporter(t *testing.T, startMs int64) (*reporter, *fakeControlPlane, *clock, *logLines) {
	t.Helper()
	cp, clk, log := &fakeControlPlane{}, &clock{}, &logLines{}
	clk.set(startMs)
	c := newCounters(nil)
	c.now = clk.get
	r, err := newReporter("order-1", 10*time.Second, c, cp.send, log)
	if err != nil {
		t.Fatal(err)
	}
	r.now = clk.get
	r.lastEndMs = startMs
	return r, cp, clk, log
}

func spans(req *pb.ReportRequest) [][2]int64 {
	var s [][2]int64
	for _, w := range req.Windows {
		s = append(s, [2]int64{w.StartUnixMs, w.EndUnixMs})
	}
	return s
}

func TestWindowsStartWhereTheLastEndedWithinTheirAlignedWindow(t *testing.T) {
	r, cp, clk, _ := testReporter(t, 123_456)
	ctx := context.Background()
	step := func(endMs, nowMs int64, want [2]int64) {
		t.Helper()
		clk.set(nowMs)
		r.counters.record(okCall("checkout", "order->inventory", time.Millisecond))
		if err := r.round(ctx, endMs, time.Second); err != nil {
			t.Fatal(err)
		}
		reqs := cp.sent()
		last := reqs[len(reqs)-1]
		if got := spans(last); len(got) != 1 || got[0] != want {
			t.Errorf("window %v, want %v", got, want)
		}
		if last.AgentId != "order-1" || last.Windows[0].Calls != 1 {
			t.Errorf("agent %q, %d calls", last.AgentId, last.Windows[0].Calls)
		}
	}
	step(130_000, 130_004, [2]int64{123_456, 130_000}) // the first, partial window
	step(135_000, 135_000, [2]int64{130_000, 135_000}) // a flush mid-window
	step(140_000, 140_002, [2]int64{135_000, 140_000}) // the rest of that window at its boundary
	step(140_000, 140_500, [2]int64{140_000, 140_500}) // a flush right after
	step(205_500, 205_500, [2]int64{200_000, 205_500}) // after a gap: never across a minute
	if st := r.stats(); st.SentWindows != 5 || st.PendingWindows != 0 || st.Segments != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestAFailedReportGoesAgainAsItWasBeforeNewerWindows(t *testing.T) {
	r, cp, clk, log := testReporter(t, 600_000)
	ctx := context.Background()
	down := status.Error(codes.Unavailable, "connection refused")
	cp.answer = func(*pb.ReportRequest) (*pb.ReportResponse, error) { return nil, down }

	r.counters.record(okCall("checkout", "order->inventory", time.Millisecond))
	clk.set(610_000)
	err := r.round(ctx, 610_000, time.Second)
	var re *ReportError
	if !errors.As(err, &re) || re.Refused || !errors.Is(err, down) {
		t.Fatalf("error %v", err)
	}
	r.counters.record(okCall("checkout", "order->inventory", 2*time.Millisecond))
	clk.set(620_000)
	if err := r.round(ctx, 620_000, time.Second); err == nil {
		t.Fatal("still down")
	}
	if st := r.stats(); st.FailedReports != 2 || st.PendingWindows != 2 || st.SentWindows != 0 {
		t.Fatalf("stats %+v: the report in doubt, and one window taken since", st)
	}
	if n := log.count("report failed"); n != 1 {
		t.Errorf("a series of failures is logged once, not %d times", n)
	}

	cp.answer = nil
	r.counters.record(okCall("checkout", "order->inventory", 3*time.Millisecond))
	clk.set(625_000)
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The first report, then the same (id, windows) with resend until it is answered; nothing
	// newer before it is; then the windows taken meanwhile, merged, under a new id.
	reqs := cp.sent()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	first := reqs[0]
	if len(first.ReportId) != 16 || first.Resend || spans(first)[0] != [2]int64{600_000, 610_000} {
		t.Fatalf("first report: id %x, resend %v, windows %v", first.ReportId, first.Resend, spans(first))
	}
	for _, again := range reqs[1:3] {
		if !again.Resend || !bytes.Equal(again.ReportId, first.ReportId) || !proto.Equal(again.Windows[0], first.Windows[0]) || len(again.Windows) != 1 {
			t.Errorf("a resend differs from the report in doubt: %v", again)
		}
	}
	got := reqs[3]
	if got.Resend || len(got.ReportId) != 16 || bytes.Equal(got.ReportId, first.ReportId) || len(got.Windows) != 1 {
		t.Fatalf("the newer windows' report: %v", got)
	}
	w := got.Windows[0]
	if w.Calls != 2 || w.StartUnixMs != 610_000 || w.EndUnixMs != 625_000 {
		t.Errorf("merged window: %d calls over [%d, %d]", w.Calls, w.StartUnixMs, w.EndUnixMs)
	}
	if n, _, _ := decodeWindowLatencies(t, w); n != 2 {
		t.Errorf("%d latencies", n)
	}
	if st := r.stats(); st.SentWindows != 2 || st.PendingWindows != 0 || st.DroppedWindows != 0 {
		t.Errorf("stats %+v", st)
	}
	if log.count("delivered after failures") != 1 {
		t.Error("recovery is logged")
	}
}

func TestWindowsPendingTooLongAreDropped(t *testing.T) {
	r, cp, clk, log := testReporter(t, 600_000)
	ctx := context.Background()
	cp.answer = func(*pb.ReportRequest) (*pb.ReportResponse, error) {
		return nil, status.Error(codes.Unavailable, "down")
	}
	r.counters.record(okCall("checkout", "order->inventory", time.Millisecond))
	clk.set(610_000)
	_ = r.round(ctx, 610_000, time.Second)
	cp.answer = nil
	clk.set(610_001 + pendingMaxAgeMs)
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.stats(); st.DroppedWindows != 1 || st.PendingWindows != 0 || st.SentWindows != 0 {
		t.Errorf("stats %+v", st)
	}
	if len(cp.sent()) != 1 {
		t.Errorf("nothing left to send, yet %d requests", len(cp.sent()))
	}
	if log.count("dropped 1 report windows") != 1 {
		t.Errorf("the drop is logged: %v", log.lines)
	}
}

func TestRefusedReportsAreDroppedAndCounted(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.Unimplemented} {
		r, cp, clk, _ := testReporter(t, 600_000)
		cp.answer = func(*pb.ReportRequest) (*pb.ReportResponse, error) { return nil, status.Error(code, "no") }
		r.counters.record(okCall("checkout", "order->inventory", time.Millisecond))
		r.counters.record(okCall("checkout", "order->user", time.Millisecond))
		clk.set(605_000)
		err := r.flush(context.Background())
		var re *ReportError
		if !errors.As(err, &re) || !re.Refused {
			t.Fatalf("%v: error %v", code, err)
		}
		if st := r.stats(); st.DroppedWindows != 2 || st.PendingWindows != 0 || st.FailedReports != 0 {
			t.Errorf("%v: stats %+v", code, st)
		}
	}
}

func TestAPartialAcceptanceIsLoggedAndCountedAsSent(t *testing.T) {
	r, cp, clk, log := testReporter(t, 600_000)
	cp.answer = func(*pb.ReportRequest) (*pb.ReportResponse, error) {
		return &pb.ReportResponse{AcceptedWindows: 1}, nil
	}
	r.counters.record(okCall("checkout", "order->inventory", time.Millisecond))
	r.counters.record(okCall("checkout", "order->user", time.Millisecond))
	clk.set(605_000)
	if err := r.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := r.stats(); st.SentWindows != 2 || st.PendingWindows != 0 {
		t.Errorf("stats %+v", st)
	}
	if log.count("accepted 1 of 2") != 1 {
		t.Errorf("log %v", log.lines)
	}
}

func TestAnEmptyWindowSendsNothing(t *testing.T) {
	r, cp, clk, _ := testReporter(t, 600_000)
	clk.set(610_000)
	if err := r.flush(context.Background()); err != nil || len(cp.sent()) != 0 {
		t.Errorf("%v, %d requests", err, len(cp.sent()))
	}
}

func TestCallsNeverWaitOnASlowReport(t *testing.T) {
	r, cp, _, _ := testReporter(t, time.Now().UnixMilli())
	release := make(chan struct{})
	cp.answer = func(*pb.ReportRequest) (*pb.ReportResponse, error) {
		<-release
		return &pb.ReportResponse{AcceptedWindows: 1}, nil
	}
	r.counters.record(okCall("checkout", "order->inventory", time.Millisecond))
	flushed := make(chan error)
	go func() { flushed <- r.flush(context.Background()) }()
	for len(cp.sent()) == 0 {
		time.Sleep(time.Millisecond)
	}
	recorded := make(chan struct{})
	go func() {
		for i := 0; i < 1000; i++ {
			r.counters.record(okCall("checkout", "order->inventory", time.Millisecond))
		}
		close(recorded)
	}()
	select {
	case <-recorded:
	case <-time.After(5 * time.Second):
		t.Fatal("calls waited on the report in flight")
	}
	// A second flush waits for the first request; its context bounds that wait.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("flush behind a slow one: %v", err)
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := r.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var calls uint64
	for _, req := range cp.sent() {
		for _, w := range req.Windows {
			calls += w.Calls
		}
	}
	if calls != 1001 {
		t.Errorf("%d calls reported, want 1001", calls)
	}
}

func TestRunReportsAtEveryBoundaryThenTheLastPartialWindow(t *testing.T) {
	cp := &fakeControlPlane{}
	c := newCounters(nil)
	r, err := newReporter("order-1", 200*time.Millisecond, c, cp.send, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { r.run(ctx); close(stopped) }()

	deadline := time.Now().Add(5 * time.Second)
	for i := 0; len(cp.sent()) < 2; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d reports in 5 s with 200 ms windows", len(cp.sent()))
		}
		c.record(okCall("checkout", "order->inventory", time.Millisecond))
		time.Sleep(20 * time.Millisecond)
	}
	for _, req := range cp.sent() {
		end := req.Windows[0].EndUnixMs
		if end%200 != 0 {
			t.Errorf("a boundary report ends at %d, not on a 200 ms boundary", end)
		}
	}
	c.record(callRecord{chain: "checkout", segment: "order->inventory", outcome: OutcomeBusinessError, attempts: 1})
	cancel()
	select {
	case <-stopped:
	case <-time.After(finalReportTimeout + time.Second):
		t.Fatal("run did not return after its context ended")
	}
	reqs := cp.sent()
	last := reqs[len(reqs)-1].Windows[0]
	if last.Outcomes["business_error"] != 1 {
		t.Errorf("the last partial window was not sent: %v", last.Outcomes)
	}
}

func TestTheLastReportIsBounded(t *testing.T) {
	// A control plane that never answers.
	blocking := func(ctx context.Context, req *pb.ReportRequest) (*pb.ReportResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newCounters(nil)
	r, err := newReporter("order-1", time.Minute, c, blocking, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.record(okCall("checkout", "order->inventory", time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	r.run(ctx)
	if took := time.Since(start); took < finalReportTimeout/2 || took > finalReportTimeout+time.Second {
		t.Errorf("the last report took %v; bounded by %v", took, finalReportTimeout)
	}
	if st := r.stats(); st.FailedReports != 1 || st.PendingWindows != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestAReportWindowMustDivideAMinute(t *testing.T) {
	if _, err := newReporter("a", 7*time.Second, newCounters(nil), (&fakeControlPlane{}).send, nil); err == nil {
		t.Error("7 s accepted")
	}
}

func TestStoppingDuringASendIsNotAFailureAndLosesNothing(t *testing.T) {
	var calls sync.WaitGroup
	calls.Add(1)
	first := true
	var mu sync.Mutex
	var delivered uint64
	send := func(ctx context.Context, req *pb.ReportRequest) (*pb.ReportResponse, error) {
		mu.Lock()
		blocking := first
		first = false
		mu.Unlock()
		if blocking {
			calls.Done()
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		mu.Lock()
		defer mu.Unlock()
		for _, w := range req.Windows {
			delivered += w.Calls
		}
		return &pb.ReportResponse{AcceptedWindows: int64(len(req.Windows))}, nil
	}
	c := newCounters(nil)
	log := &logLines{}
	r, err := newReporter("order-1", 100*time.Millisecond, c, send, log)
	if err != nil {
		t.Fatal(err)
	}
	c.record(okCall("checkout", "order->inventory", time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { r.run(ctx); close(stopped) }()
	calls.Wait() // the first report is in flight
	c.record(okCall("checkout", "order->inventory", time.Millisecond))
	cancel()
	<-stopped
	st := r.stats()
	if st.FailedReports != 0 || st.PendingWindows != 0 || log.count("report failed") != 0 {
		t.Errorf("stats %+v, log %v", st, log.lines)
	}
	if delivered != 2 {
		t.Errorf("%d calls delivered, want 2", delivered)
	}
}

func TestWindowsAreSentWithinAQuarterOfTheWindowAtMost2500Ms(t *testing.T) {
	upTo := func(max uint64) uint64 { return max }
	for _, c := range []struct {
		windowMs int64
		want     time.Duration
	}{
		{10_000, 2500 * time.Millisecond},
		{60_000, 2500 * time.Millisecond},
		{1_000, 250 * time.Millisecond},
		{100, 25 * time.Millisecond},
	} {
		if got := sendDelay(c.windowMs, upTo); got != c.want {
			t.Errorf("window %d ms: longest delay %v, want %v", c.windowMs, got, c.want)
		}
	}
	if got := sendDelay(10_000, func(uint64) uint64 { return 1234 }); got != 1234*time.Millisecond {
		t.Errorf("a pick of 1234 ms waits %v", got)
	}
	if got := sendDelay(10_000, func(uint64) uint64 { return 9999 }); got != 2500*time.Millisecond {
		t.Errorf("a pick past the bound waits %v, want it cut to 2.5 s", got)
	}
	seen := map[time.Duration]bool{}
	for i := 0; i < 200; i++ {
		d := sendDelay(10_000, randomPick)
		if d < 0 || d > 2500*time.Millisecond {
			t.Fatalf("the running agent waits %v", d)
		}
		seen[d] = true
	}
	if len(seen) <= 100 {
		t.Errorf("%d distinct delays of 200: not spread", len(seen))
	}
}

func TestAReportIsInDoubtWhileItIsSent(t *testing.T) {
	r, cp, clk, _ := testReporter(t, 600_000)
	answered := make(chan struct{})
	inFlight := make(chan struct{}, 1)
	cp.answer = func(req *pb.ReportRequest) (*pb.ReportResponse, error) {
		inFlight <- struct{}{}
		<-answered
		return &pb.ReportResponse{AcceptedWindows: int64(len(req.Windows))}, nil
	}
	r.counters.record(okCall("checkout", "order->inventory", time.Millisecond))
	clk.set(610_000)
	done := make(chan error, 1)
	go func() { done <- r.round(context.Background(), 610_000, 5*time.Second) }()
	<-inFlight
	if st := r.stats(); st.PendingWindows != 1 {
		t.Errorf("while sent: %+v, want the report's window pending (in doubt)", st)
	}
	close(answered)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := r.stats(); st.PendingWindows != 0 || st.SentWindows != 1 {
		t.Errorf("once answered: %+v", st)
	}
}
