package budgetagent

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

func okCall(chain, segment string, latency time.Duration) callRecord {
	return callRecord{chain: chain, segment: segment, outcome: OutcomeOK, attempts: 1, ok: true, okLatency: latency}
}

func decodeWindowLatencies(t *testing.T, w *pb.SegmentWindow) (count, min, max int64) {
	t.Helper()
	h := newLatencyHistogram()
	if err := decodeLatenciesInto(h, w.LatencyHdr); err != nil {
		t.Fatal(err)
	}
	return h.TotalCount(), h.Min(), h.Max()
}

func TestOutcomeCountersFollowTheOutcomeNames(t *testing.T) {
	if len(AllOutcomes) != outcomeCount {
		t.Fatalf("%d outcomes, counters for %d", len(AllOutcomes), outcomeCount)
	}
	if retryCauses != [2]string{"deadline", "unavailable"} {
		t.Fatalf("causes %v", retryCauses)
	}
}

func TestACallsCountsLandTogetherInTheWindowTaken(t *testing.T) {
	c := newCounters(nil)
	if ws := c.take(0, 10_000); len(ws) != 0 {
		t.Fatalf("no call, no window: %v", ws)
	}
	c.record(okCall("checkout", "order->inventory", 5*time.Millisecond))
	c.record(callRecord{chain: "checkout", segment: "order->inventory", outcome: OutcomeOK,
		attempts: 3, retries: [2]uint32{1, 1}, ok: true, okLatency: 7 * time.Millisecond})
	c.record(callRecord{chain: "checkout", segment: "order->inventory", outcome: OutcomeUnavailable,
		attempts: 2, retries: [2]uint32{0, 1}})
	c.record(callRecord{chain: "checkout", segment: "order->inventory", outcome: OutcomeBudgetExhausted})
	c.record(okCall("checkout", "order->payment", 90*time.Millisecond))
	c.record(okCall("refund", "order->payment", time.Millisecond))

	ws := c.take(120_000, 130_000)
	if len(ws) != 3 {
		t.Fatalf("%d windows", len(ws))
	}
	got := map[cellKey]*pb.SegmentWindow{}
	for _, w := range ws {
		got[cellKey{w.Chain, w.Segment}] = w
		if w.StartUnixMs != 120_000 || w.EndUnixMs != 130_000 {
			t.Errorf("%s span [%d, %d]", w.Segment, w.StartUnixMs, w.EndUnixMs)
		}
	}
	inv := got[cellKey{"checkout", "order->inventory"}]
	if inv.Calls != 4 || inv.Attempts != 6 {
		t.Errorf("calls %d, attempts %d", inv.Calls, inv.Attempts)
	}
	if inv.Retries["deadline"] != 1 || inv.Retries["unavailable"] != 2 {
		t.Errorf("retries %v", inv.Retries)
	}
	wantOutcomes := map[string]uint64{"ok": 2, "unavailable": 1, "budget_exhausted": 1}
	if len(inv.Outcomes) != len(wantOutcomes) {
		t.Errorf("outcomes %v: zero counts are left out", inv.Outcomes)
	}
	for o, n := range wantOutcomes {
		if inv.Outcomes[o] != n {
			t.Errorf("outcome %s: %d, want %d", o, inv.Outcomes[o], n)
		}
	}
	// SPEC §8: calls = Σ outcomes; attempts = calls − budget_exhausted + Σ retries.
	if inv.Attempts != inv.Calls-inv.Outcomes["budget_exhausted"]+inv.Retries["deadline"]+inv.Retries["unavailable"] {
		t.Error("attempts do not add up")
	}
	if n, min, max := decodeWindowLatencies(t, inv); n != 2 || min != 5000 || max != 7003 {
		t.Errorf("latencies: %d, min %d, max %d", n, min, max)
	}
	// The same segment id in two chains is counted apart.
	if got[cellKey{"refund", "order->payment"}].Calls != 1 || got[cellKey{"checkout", "order->payment"}].Calls != 1 {
		t.Error("chains mixed")
	}

	if ws := c.take(130_000, 140_000); len(ws) != 0 {
		t.Errorf("taking resets the counts: %v", ws)
	}
	c.record(callRecord{chain: "checkout", segment: "order->inventory", outcome: OutcomeDeadlineExceeded, attempts: 2, retries: [2]uint32{1, 0}})
	ws = c.take(140_000, 150_000)
	if len(ws) != 1 || ws[0].Calls != 1 || ws[0].LatencyHdr != nil {
		t.Errorf("a window without successes has no latencies: %v", ws)
	}
}

func TestAnUnknownOutcomeIsNotCounted(t *testing.T) {
	c := newCounters(nil)
	c.record(callRecord{chain: "c", segment: "a->b", outcome: "exploded", attempts: 1})
	if ws := c.take(0, 10_000); len(ws) != 0 {
		t.Errorf("counted: %v", ws)
	}
}

func TestIdleSegmentsAreDroppedAndComeBack(t *testing.T) {
	c := newCounters(nil)
	start := time.UnixMilli(600_000)
	c.now = func() time.Time { return start }
	c.record(okCall("checkout", "order->inventory", time.Millisecond))
	c.record(okCall("checkout", "order->user", time.Millisecond))
	c.take(600_000, 610_000)
	if n, bytes := c.footprint(); n != 2 || bytes < 2*newLatencyHistogram().ByteSize() {
		t.Fatalf("%d cells, %d bytes", n, bytes)
	}
	// user keeps calling; inventory stops.
	for end := int64(620_000); end <= 670_000; end += 10_000 {
		c.record(okCall("checkout", "order->user", time.Millisecond))
		c.take(end-10_000, end)
	}
	if n, _ := c.footprint(); n != 1 {
		t.Fatalf("%d cells: inventory idle for a minute must be dropped", n)
	}
	c.record(okCall("checkout", "order->inventory", 2*time.Millisecond))
	ws := c.take(670_000, 680_000)
	if len(ws) != 1 || ws[0].Segment != "order->inventory" || ws[0].Calls != 1 {
		t.Fatalf("a dropped segment counts again on its next call: %v", ws)
	}
}

func TestConcurrentCallsAreAllCountedWhileWindowsAreTaken(t *testing.T) {
	c := newCounters(nil)
	const goroutines, calls = 8, 2000
	segments := []string{"order->inventory", "order->payment", "order->user"}
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				r := okCall("checkout", segments[(g+i)%len(segments)], time.Duration(i)*time.Microsecond)
				if i%5 == 0 {
					r = callRecord{chain: r.chain, segment: r.segment, outcome: OutcomeUnavailable, attempts: 2, retries: [2]uint32{0, 1}}
				}
				c.record(r)
			}
		}(g)
	}
	var total, attempts, oks uint64
	var latencies int64
	add := func(ws []*pb.SegmentWindow) {
		for _, w := range ws {
			total += w.Calls
			attempts += w.Attempts
			oks += w.Outcomes["ok"]
			n, _, _ := decodeWindowLatencies(t, w)
			latencies += n
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	end := int64(0)
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		add(c.take(end, end+1))
		end++
	}
	add(c.take(end, end+1))
	if total != goroutines*calls || attempts != total+total/5 || oks != total-total/5 || latencies != int64(oks) {
		t.Errorf("calls %d, attempts %d, ok %d, latencies %d", total, attempts, oks, latencies)
	}
}

// BenchmarkRecord is the cost a call pays for being counted, with metrics, from all cores
// on a few segments.
func BenchmarkRecord(b *testing.B) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	c := newCounters(m)
	segments := []string{"order->inventory", "order->payment", "order->user"}
	b.RunParallel(func(p *testing.PB) {
		for i := 0; p.Next(); i++ {
			c.record(okCall("checkout", segments[i%len(segments)], time.Duration(i%5000)*time.Microsecond))
		}
	})
}
