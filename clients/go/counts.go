package budgetagent

// The counts of SPEC §8, per (chain, segment), for the window in progress.
//
// The hot path is counters.record, called once when a call ends with everything the call did
// (callRecord), so every count of a call lands in the same window: in every window
// calls = Σ outcomes and attempts = calls − budget_exhausted + Σ retries. It finds the
// segment's cell in a copy-on-write map (one atomic load, no lock) and holds only that cell's
// mutex for a few additions and one histogram slot; calls on different segments never meet,
// and the reporter holds a cell's mutex only to swap its counts out (counters.take).
//
// Memory stays bounded whatever the traffic: a cell exists for a segment with a call in the
// last minute (cells idle for a minute are dropped at a take), and its latency histograms are
// capped by the one-hour clamp (two at most, 188 KiB each: the one filling and a spare).

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codahale/hdrhistogram"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// One call's counts, recorded together when the call ends (SPEC §8).
type callRecord struct {
	chain, segment string
	outcome        Outcome
	attempts       uint32
	retries        [2]uint32 // index 0 deadline, 1 unavailable
	ok             bool
	okLatency      time.Duration // the successful attempt's latency, when ok
}

// outcomeCount is len(AllOutcomes): the outcome counters of a window.
const outcomeCount = 6

// retryCauses names the retry counters, in callRecord.retries order.
var retryCauses = [2]string{CauseDeadline.String(), CauseUnavailable.String()}

// cellIdleMs is how long a cell without calls is kept before it is dropped.
const cellIdleMs = 60_000

// outcomeIndex is o's position in AllOutcomes, or -1 for a name that is not an outcome.
func outcomeIndex(o Outcome) int {
	for i, known := range AllOutcomes {
		if o == known {
			return i
		}
	}
	return -1
}

type cellKey struct{ chain, segment string }

// tally is what a cell's calls did since the last take.
type tally struct {
	calls    uint64
	attempts uint64
	retries  [2]uint64
	outcomes [outcomeCount]uint64
}

// cell is one (chain, segment)'s counts for the window in progress.
type cell struct {
	key    cellKey
	series *segmentSeries // nil without Metrics

	mu sync.Mutex
	t  tally
	// latency holds this window's successful attempts (µs); nil until the first one. spare is
	// a reset histogram to take its place at the next take, so a busy segment allocates none.
	latency, spare *hdrhistogram.Histogram
	// lastCallMs is the end of the last window taken with a call in it (Unix ms).
	lastCallMs int64
	// dropped is set, under mu, when the cell has left the map: a call that found it before
	// then looks its segment up again.
	dropped bool
}

// add counts r (whose outcome is at index outcome) unless the cell was dropped.
func (c *cell) add(r *callRecord, outcome int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return false
	}
	c.t.calls++
	c.t.attempts += uint64(r.attempts)
	for i, n := range r.retries {
		c.t.retries[i] += uint64(n)
	}
	c.t.outcomes[outcome]++
	if r.ok {
		if c.latency == nil {
			c.latency, c.spare = c.spare, nil
			if c.latency == nil {
				c.latency = newLatencyHistogram()
			}
		}
		// Cannot fail: latencyUS stays within the histogram's range.
		_ = c.latency.RecordValue(latencyUS(r.okLatency))
	}
	return true
}

// take swaps the cell's counts out as a window [startMs, endMs], or nil without calls.
func (c *cell) take(startMs, endMs int64) *pb.SegmentWindow {
	c.mu.Lock()
	t := c.t
	if t.calls == 0 {
		c.mu.Unlock()
		return nil
	}
	c.t = tally{}
	h := c.latency
	c.latency = nil
	c.lastCallMs = endMs
	c.mu.Unlock()

	w := t.window(c.key, startMs, endMs)
	if h != nil {
		w.LatencyHdr = encodeLatencies(h)
		h.Reset()
		c.mu.Lock()
		if c.spare == nil {
			c.spare = h
		}
		c.mu.Unlock()
	}
	return w
}

// dropIfIdle marks the cell dropped if it had no call for cellIdleMs before nowMs.
func (c *cell) dropIfIdle(nowMs int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.calls == 0 && nowMs-c.lastCallMs >= cellIdleMs {
		c.dropped = true
	}
	return c.dropped
}

func (c *cell) isDropped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// bytes is about what the cell holds, for ReportStats.
func (c *cell) bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 256 + len(c.key.chain) + len(c.key.segment)
	for _, h := range []*hdrhistogram.Histogram{c.latency, c.spare} {
		if h != nil {
			n += h.ByteSize()
		}
	}
	return n
}

// window is the wire form of t: counters as maps by name, zero counts left out.
func (t *tally) window(k cellKey, startMs, endMs int64) *pb.SegmentWindow {
	w := &pb.SegmentWindow{
		Chain:       k.chain,
		Segment:     k.segment,
		StartUnixMs: startMs,
		EndUnixMs:   endMs,
		Calls:       t.calls,
		Attempts:    t.attempts,
		Outcomes:    make(map[string]uint64, 2),
	}
	for i, n := range t.retries {
		if n > 0 {
			if w.Retries == nil {
				w.Retries = make(map[string]uint64, 2)
			}
			w.Retries[retryCauses[i]] = n
		}
	}
	for i, n := range t.outcomes {
		if n > 0 {
			w.Outcomes[string(AllOutcomes[i])] = n
		}
	}
	return w
}

// counters holds every segment's counts for the window in progress; safe for concurrent use.
type counters struct {
	metrics *Metrics
	// cells is replaced, never changed in place, under mu; readers only load it.
	cells atomic.Pointer[map[cellKey]*cell]
	mu    sync.Mutex
	now   func() time.Time // when a cell is made (for idleness)
}

func newCounters(m *Metrics) *counters {
	c := &counters{metrics: m, now: time.Now}
	empty := map[cellKey]*cell{}
	c.cells.Store(&empty)
	return c
}

// record counts one finished call. A record whose outcome is not one of AllOutcomes is
// ignored (it would break calls = Σ outcomes).
func (c *counters) record(r callRecord) {
	outcome := outcomeIndex(r.outcome)
	if outcome < 0 {
		return
	}
	key := cellKey{r.chain, r.segment}
	cl := (*c.cells.Load())[key]
	for cl == nil || !cl.add(&r, outcome) {
		cl = c.cell(key)
	}
	if cl.series != nil {
		cl.series.add(&r, outcome)
	}
}

// cell returns key's live cell, making it if needed.
func (c *counters) cell(key cellKey) *cell {
	c.mu.Lock()
	defer c.mu.Unlock()
	cells := *c.cells.Load()
	if cl := cells[key]; cl != nil && !cl.isDropped() {
		return cl
	}
	cl := &cell{key: key, lastCallMs: c.now().UnixMilli()}
	if c.metrics != nil {
		cl.series = c.metrics.series(key.segment)
	}
	next := make(map[cellKey]*cell, len(cells)+1)
	for k, v := range cells {
		next[k] = v
	}
	next[key] = cl
	c.cells.Store(&next)
	return cl
}

// take swaps every cell's counts out as windows [startMs, endMs] (cells without calls give
// none), ordered by chain and segment, then drops the cells idle for a minute at endMs.
// Calls keep recording meanwhile, each waiting at most for its own cell's swap.
func (c *counters) take(startMs, endMs int64) []*pb.SegmentWindow {
	cells := *c.cells.Load()
	var windows []*pb.SegmentWindow
	idle := false
	for _, cl := range cells {
		if w := cl.take(startMs, endMs); w != nil {
			windows = append(windows, w)
		} else {
			idle = true
		}
	}
	sort.Slice(windows, func(i, j int) bool {
		a, b := windows[i], windows[j]
		if a.Chain != b.Chain {
			return a.Chain < b.Chain
		}
		return a.Segment < b.Segment
	})
	if idle {
		c.dropIdle(endMs)
	}
	return windows
}

// dropIdle removes the cells idle for cellIdleMs at nowMs from the map.
func (c *counters) dropIdle(nowMs int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cells := *c.cells.Load()
	next := make(map[cellKey]*cell, len(cells))
	for k, cl := range cells {
		if !cl.dropIfIdle(nowMs) {
			next[k] = cl
		}
	}
	if len(next) != len(cells) {
		c.cells.Store(&next)
	}
}

// footprint is how many cells there are and about how many bytes they hold.
func (c *counters) footprint() (cells, bytes int) {
	all := *c.cells.Load()
	for _, cl := range all {
		bytes += cl.bytes()
	}
	return len(all), bytes
}
