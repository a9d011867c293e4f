package budgetagent

// Reporting windows: their length and wall-clock alignment, and merging two windows of one
// segment. Pure: callers pass the times.
//
// Windows are aligned to wall-clock multiples of their length, and the length divides a
// minute, so a window never straddles a minute: neither the control plane's per-minute rollups
// nor the per-minute merge of pending windows (pending.go) ever splits one.

import (
	"fmt"
	"math"
	"time"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// defaultReportWindow is how often an agent reports when its window is left zero (SPEC §8).
const defaultReportWindow = 10 * time.Second

// windowMs checks a reporting window length and returns it in milliseconds: whole
// milliseconds between 100 ms (below 1 s only makes sense in tests) and a minute, dividing a
// minute. Zero means defaultReportWindow.
func windowMs(window time.Duration) (int64, error) {
	if window == 0 {
		window = defaultReportWindow
	}
	ms := window.Milliseconds()
	if window%time.Millisecond != 0 || ms < 100 || ms > 60_000 || 60_000%ms != 0 {
		return 0, fmt.Errorf("report window must be whole milliseconds between 100 ms and 60 s that divide a minute (e.g. 10s), not %v", window)
	}
	return ms, nil
}

// windowFloor is the start of the aligned window of length windowMs holding tMs.
func windowFloor(tMs, windowMs int64) int64 {
	r := tMs % windowMs
	if r < 0 {
		r += windowMs
	}
	return tMs - r
}

// minuteOf is the Unix minute a window belongs to: the one its start falls in.
func minuteOf(w *pb.SegmentWindow) int64 {
	return windowFloor(w.StartUnixMs, 60_000) / 60_000
}

// mergeWindow folds from into into (same chain and segment): counts summed, histograms
// merged, the span widened to cover both. If the histograms do not merge (never with this
// agent's own), into keeps its latencies and the counts are still summed; the error says so.
func mergeWindow(into, from *pb.SegmentWindow) error {
	if from.StartUnixMs < into.StartUnixMs {
		into.StartUnixMs = from.StartUnixMs
	}
	if from.EndUnixMs > into.EndUnixMs {
		into.EndUnixMs = from.EndUnixMs
	}
	into.Calls = addSat(into.Calls, from.Calls)
	into.Attempts = addSat(into.Attempts, from.Attempts)
	into.Retries = mergeCounts(into.Retries, from.Retries)
	into.Outcomes = mergeCounts(into.Outcomes, from.Outcomes)
	merged, err := mergeLatencies(into.LatencyHdr, from.LatencyHdr)
	if err != nil {
		return fmt.Errorf("segment %s: latencies not merged, keeping the first window's: %w", into.Segment, err)
	}
	into.LatencyHdr = merged
	return nil
}

func mergeCounts(into, from map[string]uint64) map[string]uint64 {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = make(map[string]uint64, len(from))
	}
	for k, n := range from {
		into[k] = addSat(into[k], n)
	}
	return into
}

// addSat is a + b, saturating at the largest uint64 rather than wrapping.
func addSat(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
