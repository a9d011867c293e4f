package budgetagent

// Windows the control plane has not accepted yet: merged per (chain, segment, minute) and
// bounded, so an outage costs a fixed amount of memory and the first report after it carries
// everything still worth sending. Pure: callers pass the time.
//
//   - Merge: windows of one segment in one minute become one (counts summed, histograms merged,
//     the span widened within that minute); the control plane rolls up per minute anyway.
//   - Bound: at most pendingMinutes minutes per segment; older ones are dropped.
//   - Age: the control plane refuses windows that ended more than 10 minutes ago, so windows
//     older than pendingMaxAgeMs are dropped before sending (a refused request would otherwise
//     fail forever).
//
// Every window dropped is counted (pending.dropped) and reported in ReportStats; the reporter
// logs the number dropped.

import (
	"sort"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// pendingMinutes is how many minutes of windows are kept per segment while reports fail.
const pendingMinutes = 11

// pendingMaxAgeMs is the oldest a window may have ended to be sent: the control plane's 10
// minutes less 10 s for clock skew and transit.
const pendingMaxAgeMs = 10*60_000 - 10_000

// pending holds the windows waiting to be sent, and how many were given up.
type pending struct {
	// segments maps a (chain, segment) to its windows, one per minute, oldest first.
	segments map[cellKey][]*pb.SegmentWindow
	dropped  uint64
	log      Logger // may be nil
}

func newPending(log Logger) *pending {
	return &pending{segments: make(map[cellKey][]*pb.SegmentWindow), log: log}
}

// add adds w, merged into the window of its segment and minute if there is one, then drops the
// segment's oldest minutes beyond pendingMinutes.
func (p *pending) add(w *pb.SegmentWindow) {
	key := cellKey{w.Chain, w.Segment}
	held := p.segments[key]
	minute := minuteOf(w)
	i := sort.Search(len(held), func(i int) bool { return minuteOf(held[i]) >= minute })
	if i < len(held) && minuteOf(held[i]) == minute {
		if err := mergeWindow(held[i], w); err != nil {
			reportLogf(p.log, "budget agent: %v", err)
		}
		return
	}
	held = append(held, nil)
	copy(held[i+1:], held[i:])
	held[i] = w
	if over := len(held) - pendingMinutes; over > 0 {
		p.dropped += uint64(over)
		held = append(held[:0:0], held[over:]...)
	}
	p.segments[key] = held
}

// dropStale drops the windows that ended before nowMs − pendingMaxAgeMs: the control plane
// would refuse them.
func (p *pending) dropStale(nowMs int64) {
	limit := nowMs - pendingMaxAgeMs
	for key, held := range p.segments {
		kept := held[:0]
		for _, w := range held {
			if w.EndUnixMs < limit {
				p.dropped++
				continue
			}
			kept = append(kept, w)
		}
		if len(kept) == 0 {
			delete(p.segments, key)
		} else {
			p.segments[key] = kept
		}
	}
}

// takeAll returns every pending window, by chain, segment and minute, and leaves none.
func (p *pending) takeAll() []*pb.SegmentWindow {
	keys := make([]cellKey, 0, len(p.segments))
	for k := range p.segments {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].chain != keys[j].chain {
			return keys[i].chain < keys[j].chain
		}
		return keys[i].segment < keys[j].segment
	})
	var all []*pb.SegmentWindow
	for _, k := range keys {
		all = append(all, p.segments[k]...)
	}
	p.segments = make(map[cellKey][]*pb.SegmentWindow)
	return all
}

// len is the number of pending windows (one per segment and minute).
func (p *pending) len() int {
	n := 0
	for _, held := range p.segments {
		n += len(held)
	}
	return n
}

// countRefused counts as dropped windows the control plane refused outright.
func (p *pending) countRefused(windows int) {
	p.dropped += uint64(windows)
}

// reportLogf logs through log when there is one.
func reportLogf(log Logger, format string, args ...interface{}) {
	if log != nil {
		log.Printf(format, args...)
	}
}
