package budgetagent

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

func TestReportWindowsDivideAMinute(t *testing.T) {
	good := map[time.Duration]int64{
		0:                      10_000, // the default
		10 * time.Second:       10_000,
		200 * time.Millisecond: 200,
		time.Minute:            60_000,
		15 * time.Second:       15_000,
	}
	for in, want := range good {
		if got, err := windowMs(in); err != nil || got != want {
			t.Errorf("windowMs(%v) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []time.Duration{
		7 * time.Second, 2 * time.Minute, 50 * time.Millisecond, 10*time.Second + 500*time.Microsecond, -time.Second,
	} {
		if _, err := windowMs(bad); err == nil {
			t.Errorf("windowMs(%v) accepted", bad)
		}
	}
}

func TestWindowsAlignToTheWallClock(t *testing.T) {
	for _, c := range []struct{ t, window, want int64 }{
		{123_456, 10_000, 120_000},
		{120_000, 10_000, 120_000},
		{119_999, 10_000, 110_000},
		{-1, 10_000, -10_000},
		{1_700_000_012_345, 15_000, 1_700_000_010_000},
	} {
		if got := windowFloor(c.t, c.window); got != c.want {
			t.Errorf("windowFloor(%d, %d) = %d, want %d", c.t, c.window, got, c.want)
		}
	}
	if m := minuteOf(&pb.SegmentWindow{StartUnixMs: 125_000}); m != 2 {
		t.Errorf("minute %d", m)
	}
}

func wireWindow(t *testing.T, segment string, startMs int64, calls uint64, latenciesUS ...int64) *pb.SegmentWindow {
	t.Helper()
	h := newLatencyHistogram()
	for _, l := range latenciesUS {
		if err := h.RecordValue(l); err != nil {
			t.Fatal(err)
		}
	}
	return &pb.SegmentWindow{
		Chain:       "checkout",
		Segment:     segment,
		StartUnixMs: startMs,
		EndUnixMs:   startMs + 10_000,
		Calls:       calls,
		Attempts:    calls + 1,
		Retries:     map[string]uint64{"deadline": 1},
		Outcomes:    map[string]uint64{"ok": uint64(len(latenciesUS)), "deadline_exceeded": calls - uint64(len(latenciesUS))},
		LatencyHdr:  encodeLatencies(h),
	}
}

func TestMergingWindowsSumsCountsMergesLatenciesAndWidensTheSpan(t *testing.T) {
	a := wireWindow(t, "order->inventory", 60_000, 3, 1000, 2000)
	b := wireWindow(t, "order->inventory", 70_000, 2, 3000)
	b.Retries = map[string]uint64{"unavailable": 2}
	if err := mergeWindow(a, b); err != nil {
		t.Fatal(err)
	}
	if a.StartUnixMs != 60_000 || a.EndUnixMs != 80_000 {
		t.Errorf("span [%d, %d]", a.StartUnixMs, a.EndUnixMs)
	}
	if a.Calls != 5 || a.Attempts != 7 {
		t.Errorf("calls %d, attempts %d", a.Calls, a.Attempts)
	}
	if a.Retries["deadline"] != 1 || a.Retries["unavailable"] != 2 {
		t.Errorf("retries %v", a.Retries)
	}
	if a.Outcomes["ok"] != 3 || a.Outcomes["deadline_exceeded"] != 2 {
		t.Errorf("outcomes %v", a.Outcomes)
	}
	h := newLatencyHistogram()
	if err := decodeLatenciesInto(h, a.LatencyHdr); err != nil {
		t.Fatal(err)
	}
	if h.TotalCount() != 3 || h.Min() != 1000 || h.Max() != 3001 {
		t.Errorf("latencies: %d, min %d, max %d", h.TotalCount(), h.Min(), h.Max())
	}

	// A window without latencies keeps the other's; counts saturate rather than wrap.
	empty := wireWindow(t, "order->inventory", 60_000, ^uint64(0))
	before := a.LatencyHdr
	if err := mergeWindow(a, empty); err != nil {
		t.Fatal(err)
	}
	if string(a.LatencyHdr) != string(before) || a.Calls != ^uint64(0) {
		t.Errorf("latencies changed or calls wrapped: %d", a.Calls)
	}

	// Latencies that do not decode: the counts are still summed, the first latencies kept.
	c := wireWindow(t, "order->inventory", 60_000, 1)
	c.LatencyHdr = []byte{1, 2, 3}
	calls := a.Attempts
	if err := mergeWindow(a, c); err == nil {
		t.Error("a corrupt histogram must be reported")
	}
	if a.Attempts != calls+2 || string(a.LatencyHdr) != string(before) {
		t.Errorf("attempts %d, latencies changed: %v", a.Attempts, string(a.LatencyHdr) != string(before))
	}
}
