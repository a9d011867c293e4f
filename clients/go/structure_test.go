package budgetagent

import (
	"fmt"
	"math"
	"testing"
)

// structureMessages validates c and returns the messages of its structure findings.
func structureMessages(c *Chain) []string {
	var got []string
	for _, f := range c.structure() {
		if f.Check != CheckStructure || f.Severity != SeverityError || f.Segment != "" ||
			f.Message[:len(f.Pointer)+2] != f.Pointer+": " {
			return []string{"malformed finding: " + f.Message}
		}
		got = append(got, f.Message)
	}
	return got
}

func checkStructure(t *testing.T, name string, c *Chain, want ...string) {
	t.Helper()
	got := structureMessages(c)
	if len(got) != len(want) {
		t.Errorf("%s: got %q, want %q", name, got, want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: finding %d is\n%s\nwant\n%s", name, i, got[i], want[i])
		}
	}
}

func plainSegment(caller, callee string, parent string) Segment {
	s := Segment{ID: caller + "->" + callee, Caller: caller, Callee: callee, Class: ClassStable, TimeoutMs: 10, BudgetMs: 10}
	if parent != "" {
		s.Parent = &parent
	}
	return s
}

func TestStructureOfAValidChain(t *testing.T) {
	checkStructure(t, "example A", exampleA())
}

func TestStructureCycles(t *testing.T) {
	c := exampleA()
	// a->b and b->a form a cycle; c hangs off it and is in no cycle itself.
	c.Segments = append(c.Segments, plainSegment("a", "b", "b->a"), plainSegment("b", "a", "a->b"), plainSegment("a", "c", "b->a"))
	checkStructure(t, "cycle", c,
		`/segments/4/parent: segment "a->b" is its own ancestor: parents form a cycle`,
		`/segments/5/parent: segment "b->a" is its own ancestor: parents form a cycle`)

	self := exampleA()
	self.Segments = append(self.Segments, plainSegment("a", "a", "a->a"))
	checkStructure(t, "self", self,
		`/segments/4/parent: segment "a->a" is its own ancestor: parents form a cycle`)
}

func TestStructureDuplicateIDsShadow(t *testing.T) {
	c := exampleA()
	// The second order->x is the one children are checked against.
	second := plainSegment("order", "x", "gateway->order")
	second.Callee = "y"
	c.Segments = append(c.Segments, plainSegment("order", "x", "gateway->order"), second, plainSegment("x", "z", "order->x"))
	checkStructure(t, "shadow", c,
		`/segments/5/id: duplicate segment id "order->x" (first at /segments/4)`,
		`/segments/5/id: id "order->x" does not match caller->callee "order->y"`,
		`/segments/6/caller: "x->z" is called by "x", but its parent "order->x" is handled by "y"`)
}

func TestStructureEmptyNames(t *testing.T) {
	c := exampleA()
	c.Segments[3].Caller, c.Segments[3].ID = "", "->user"
	checkStructure(t, "empty caller", c,
		`/segments/3/caller: caller and callee must not be empty`,
		`/segments/3/caller: "->user" is called by "", but its parent "gateway->order" is handled by "order"`)
}

func TestDurationsAboveTheBoundFollowTheTreesFaults(t *testing.T) {
	c := exampleA()
	c.EntryBudgetMs = MaxConfigMs + 1
	c.BreakerWindowMs = math.MaxUint64
	c.Segments[0].TimeoutMs = MaxConfigMs + 1
	c.Segments[2].ReserveMs = math.MaxUint64
	c.Segments[3].BudgetMs = MaxConfigMs + 1
	c.Segments = append(c.Segments, plainSegment("a", "a", "a->a"))
	checkStructure(t, "above the bound", c,
		`/segments/4/parent: segment "a->a" is its own ancestor: parents form a cycle`,
		`/segments/0/budget_ms: 800 is below the timeout 1000000000001`,
		`/entry_budget_ms: must be at most 1000000000000 ms`,
		`/breaker_window_ms: must be at most 1000000000000 ms`,
		`/segments/0/timeout_ms: must be at most 1000000000000 ms`,
		`/segments/2/reserve_ms: must be at most 1000000000000 ms`,
		`/segments/3/budget_ms: must be at most 1000000000000 ms`)

	at := exampleA()
	at.EntryBudgetMs, at.BreakerWindowMs = MaxConfigMs, MaxConfigMs
	for i := range at.Segments {
		s := &at.Segments[i]
		s.TimeoutMs, s.BudgetMs, s.ReserveMs = MaxConfigMs, MaxConfigMs, MaxConfigMs
	}
	checkStructure(t, "at the bound", at)
}

func TestWhatNoServerDerivesFollowsTheTreesFaultsSegmentBySegment(t *testing.T) {
	c := exampleA()
	c.Segments[1].BudgetMs = 40 // below its 44 ms timeout
	c.Segments[1].Retry.OnDeadline.MaxRetries = MaxRuleRetries + 1
	c.Segments[1].Retry.OnUnavailable.MaxRetries = math.MaxUint32
	c.Segments[2].ReserveMs = MaxConfigMs + 1
	c.Segments[3].TimeoutMs = 0
	c.Segments = append(c.Segments, plainSegment("a", "a", "a->a"))
	checkStructure(t, "received faults", c,
		`/segments/4/parent: segment "a->a" is its own ancestor: parents form a cycle`,
		`/segments/1/budget_ms: 40 is below the timeout 44`,
		`/segments/1/retry/on_deadline/max_retries: must be at most 10`,
		`/segments/1/retry/on_unavailable/max_retries: must be at most 10`,
		`/segments/3/timeout_ms: must be greater than 0`,
		`/segments/2/reserve_ms: must be at most 1000000000000 ms`)

	at := exampleA()
	at.Segments[1].Retry.OnDeadline.MaxRetries = MaxRuleRetries
	at.Segments[1].BudgetMs = at.Segments[1].TimeoutMs
	checkStructure(t, "at the bounds", at)
}

// rootsOnly is example A's root repeated n times under distinct callers: n roots, every one
// of them valid on its own.
func rootsOnly(n int) *Chain {
	c := exampleA()
	root := c.Segments[0]
	c.Segments = make([]Segment, n)
	for i := range c.Segments {
		s := root
		s.Caller = fmt.Sprintf("edge%d", i)
		s.ID = s.Caller + "->" + s.Callee
		c.Segments[i] = s
	}
	return c
}

// The findings of a hostile config grow with it at most linearly: each extra root names the
// first one only, and past MaxSegments one finding alone, whatever else is wrong.
func TestHostileShapesGiveBoundedFindings(t *testing.T) {
	roots := structureMessages(rootsOnly(MaxSegments))
	if len(roots) != MaxSegments-1 {
		t.Fatalf("%d roots gave %d findings, want %d", MaxSegments, len(roots), MaxSegments-1)
	}
	want := `/segments/999/parent: more than one root segment ("edge0->order" is already the root); exactly one may have no parent`
	if last := roots[len(roots)-1]; last != want {
		t.Errorf("the last extra root: %s\nwant %s", last, want)
	}

	// A chain of 50 000 calls, each the parent of the next and with a 0 ms timeout: walking
	// every segment's ancestors alone would take about 10^9 steps.
	long := rootsOnly(50_000)
	for i := range long.Segments {
		s := &long.Segments[i]
		s.Caller, s.Callee, s.TimeoutMs = fmt.Sprintf("s%d", i), fmt.Sprintf("s%d", i+1), 0
		s.ID = s.Caller + "->" + s.Callee
		if i > 0 {
			s.Parent = &long.Segments[i-1].ID
		}
	}
	checkStructure(t, "50 000 segments", long, `/segments: a chain has at most 1000 segments`)
	// Refused before any work that grows with the segments: a handful of allocations.
	if allocs := testing.AllocsPerRun(1, func() { long.Findings() }); allocs > 10 {
		t.Errorf("refusing 50 000 segments took %v allocations", allocs)
	}
	want = `chain "checkout", segment "": structure: /segments: a chain has at most 1000 segments`
	if r := long.refusal(); r == nil || r.Error() != want {
		t.Errorf("refusal %v, want %s", r, want)
	}
}

func TestRustQuote(t *testing.T) {
	for in, want := range map[string]string{
		"order->user":    `"order->user"`,
		`a"b\c`:          `"a\"b\\c"`,
		"t\tn\nr\r0\x00": `"t\tn\nr\r0\0"`,
		"esc\x1b":        `"esc\u{1b}"`,
		"del\x7f":        `"del\u{7f}"`,
		"支付->库存":         `"支付->库存"`,
		"nbsp\u00a0":     `"nbsp\u{a0}"`,
		"e\u0301":        `"e\u{301}"`,
		"it's":           `"it's"`,
	} {
		if got := rustQuote(in); got != want {
			t.Errorf("rustQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
