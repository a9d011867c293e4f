package budgetagent

import (
	"testing"
)

const minute = int64(60_000)

func TestPendingWindowsOfASegmentMergePerMinute(t *testing.T) {
	p := newPending(nil)
	p.add(wireWindow(t, "a->b", 10*minute, 3, 100))
	p.add(wireWindow(t, "a->b", 10*minute+20_000, 4, 200))
	p.add(wireWindow(t, "a->b", 11*minute, 5, 300))
	p.add(wireWindow(t, "a->c", 10*minute+10_000, 6, 400))
	if p.len() != 3 {
		t.Fatalf("%d pending", p.len())
	}
	all := p.takeAll()
	if p.len() != 0 || len(all) != 3 {
		t.Fatalf("took %d, left %d", len(all), p.len())
	}
	first := all[0]
	if first.Segment != "a->b" || first.Calls != 7 || first.Attempts != 9 {
		t.Errorf("first: %s, %d calls, %d attempts", first.Segment, first.Calls, first.Attempts)
	}
	if first.StartUnixMs != 10*minute || first.EndUnixMs != 10*minute+30_000 {
		t.Errorf("span [%d, %d]", first.StartUnixMs, first.EndUnixMs)
	}
	if first.Retries["deadline"] != 2 || first.Outcomes["ok"] != 2 {
		t.Errorf("retries %v, outcomes %v", first.Retries, first.Outcomes)
	}
	if n, min, max := decodeWindowLatencies(t, first); n != 2 || min != 100 || max != 200 {
		t.Errorf("latencies: %d, min %d, max %d", n, min, max)
	}
	if all[1].Segment != "a->b" || all[1].Calls != 5 || all[2].Segment != "a->c" || all[2].Calls != 6 {
		t.Errorf("order: %s/%d, %s/%d", all[1].Segment, all[1].Calls, all[2].Segment, all[2].Calls)
	}
	if p.dropped != 0 {
		t.Errorf("dropped %d", p.dropped)
	}
}

func TestAtMostElevenMinutesPerSegmentAreKept(t *testing.T) {
	p := newPending(nil)
	for m := int64(0); m < 15; m++ {
		p.add(wireWindow(t, "a->b", m*minute, 1, 100))
		p.add(wireWindow(t, "a->c", m*minute, 1, 100))
	}
	if p.len() != 2*pendingMinutes || p.dropped != 2*4 {
		t.Fatalf("%d pending, %d dropped", p.len(), p.dropped)
	}
	kept := p.takeAll()
	oldest := kept[0].StartUnixMs
	for _, w := range kept {
		if w.StartUnixMs < oldest {
			oldest = w.StartUnixMs
		}
	}
	if oldest != 4*minute {
		t.Errorf("the oldest minutes go first; oldest kept %d", oldest/minute)
	}

	// An older minute arriving when a segment is full is the one dropped.
	p = newPending(nil)
	for m := int64(1); m <= pendingMinutes; m++ {
		p.add(wireWindow(t, "a->b", m*minute, 1, 100))
	}
	p.add(wireWindow(t, "a->b", 0, 1, 100))
	if ws := p.takeAll(); len(ws) != pendingMinutes || ws[0].StartUnixMs != minute || p.dropped != 1 {
		t.Errorf("kept %d, oldest %d, dropped %d", len(ws), ws[0].StartUnixMs, p.dropped)
	}
}

func TestWindowsTooOldForTheControlPlaneAreDropped(t *testing.T) {
	p := newPending(nil)
	p.add(wireWindow(t, "a->b", 0, 1, 100))      // ends at 10 s
	p.add(wireWindow(t, "a->b", minute, 1, 100)) // ends at 70 s
	p.dropStale(10_000 + pendingMaxAgeMs)
	if p.len() != 2 || p.dropped != 0 {
		t.Fatalf("exactly at the limit is kept: %d pending, %d dropped", p.len(), p.dropped)
	}
	p.dropStale(10_001 + pendingMaxAgeMs)
	if p.len() != 1 || p.dropped != 1 {
		t.Fatalf("%d pending, %d dropped", p.len(), p.dropped)
	}
	p.dropStale(70_001 + pendingMaxAgeMs)
	if p.len() != 0 || len(p.segments) != 0 {
		t.Fatalf("%d pending, %d segments", p.len(), len(p.segments))
	}
	p.countRefused(3)
	if p.dropped != 5 {
		t.Errorf("dropped %d", p.dropped)
	}
}
