package budgetagent

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestFindingsOfExampleA(t *testing.T) {
	if f := exampleA().Findings(); len(f) != 0 {
		t.Errorf("SPEC example A has no finding, got %+v", f)
	}
}

func TestStructureErrorsComeAloneAndFirst(t *testing.T) {
	c := exampleA()
	c.BreakerWindowMs = 0                    // structure
	c.Segments[1].BudgetMs = 900             // would be an inversion
	c.Segments[1].Idempotency.TTL.Ms = 3_600 // would be an idempotency_ttl finding
	f := c.Findings()
	if len(f) != 1 || f[0].Check != CheckStructure || f[0].Pointer != "/breaker_window_ms" {
		t.Errorf("only the structure finding, got %+v", f)
	}
}

func TestBreakerWindowSkipsPlansWithoutWaits(t *testing.T) {
	c := exampleA()
	c.BreakerWindowMs = 1
	c.Segments[2].Retry.OnUnavailable = nil
	c.Segments[1].Retry.OnDeadline.WorstCaseBackoffMs = 0
	c.Segments[1].Retry.OnUnavailable.WorstCaseBackoffMs = 0
	for _, f := range c.Findings() {
		if f.Check == CheckBreakerWindow {
			t.Errorf("a plan whose waits take no time has no breaker finding: %+v", f)
		}
	}
}

func TestBreakerWindowRatioAtTheBoundAndForHugeWaits(t *testing.T) {
	c := exampleA()
	c.BreakerWindowMs = MaxConfigMs
	for i := range c.Segments[1:3] {
		c.Segments[1+i].Retry.OnUnavailable.WorstCaseBackoffMs = MaxConfigMs / 4
	}
	f := c.Findings()
	if len(f) != 2 || f[0].Ratio != 4 || !strings.Contains(f[0].Message, "is 4× the worst-case") {
		t.Errorf("a 4× ratio without overflow, got %+v", f)
	}
	// A rule's worst case is not bounded: the largest one is an error with a ratio of 0.
	c.Segments[1].Retry.OnUnavailable.WorstCaseBackoffMs = math.MaxUint64
	f = c.Findings()
	if len(f) != 2 || f[0].Severity != SeverityError || f[0].Ratio != 0 || !strings.Contains(f[0].Message, "is 0× the worst-case") {
		t.Errorf("a window shorter than the wait, got %+v", f)
	}
}

func TestFindingJSON(t *testing.T) {
	stage := uint32(1)
	for _, tc := range []struct {
		f    Finding
		want string
	}{
		{Finding{Check: CheckStructure, Severity: SeverityError, Message: "/segments: x", Pointer: "/segments"},
			`{"check":"structure","pointer":"/segments","segment":"","severity":"error","message":"/segments: x"}`},
		{Finding{Check: CheckInversion, Segment: "a->b", Severity: SeverityError, Message: "m", NeedMs: 9, AvailableMs: -1, ExcessMs: 10,
			Stages: []StageNeed{{Stage: &stage, Segments: []string{"b->c"}, MaxBudgetMs: 9}, {Segments: []string{"b->d"}}}},
			`{"check":"inversion","need_ms":9,"available_ms":-1,"excess_ms":10,"stages":[{"stage":1,"segments":["b->c"],"max_budget_ms":9},{"stage":null,"segments":["b->d"],"max_budget_ms":0}],"segment":"a->b","severity":"error","message":"m"}`},
		{Finding{Check: CheckBreakerWindow, Segment: "a->b", Severity: SeverityWarning, Message: "<&>", BreakerWindowMs: 481, WorstCaseBackoffMs: 480, Ratio: 1},
			`{"check":"breaker_window","breaker_window_ms":481,"worst_case_backoff_ms":480,"ratio":1.0,"segment":"a->b","severity":"warning","message":"<&>"}`},
		{Finding{Check: CheckIdempotencyTTL, Segment: "a->b", Severity: SeverityError, Message: "m", Key: "k", TTLMs: 1, MaxRecoveryMs: 2},
			`{"check":"idempotency_ttl","key":"k","ttl_ms":1,"max_recovery_ms":2,"segment":"a->b","severity":"error","message":"m"}`},
	} {
		got, err := tc.f.MarshalJSON()
		if err != nil || string(got) != tc.want {
			t.Errorf("got  %s (%v)\nwant %s", got, err, tc.want)
		}
		if _, err := json.Marshal([]Finding{tc.f}); err != nil {
			t.Errorf("a list of findings encodes: %v", err)
		}
	}
	if _, err := (Finding{Check: "entry_headroom"}).MarshalJSON(); err == nil {
		t.Error("a finding of a check clients do not run has no JSON")
	}
}

func TestJSONFloatWritesWhatSerdeWrites(t *testing.T) {
	for f, want := range map[float64]string{
		0: "0.0", 1: "1.0", 10.4: "10.4", 0.83: "0.83", 9.99: "9.99", 12: "12.0", 100: "100.0",
		1e15: "1000000000000000.0", 1e16: "1e16", 1.5e17: "1.5e17", 0.0001: "0.0001",
		0.00001: "0.00001", 0.000001: "1e-6", 1.25e-7: "1.25e-7", -2.5: "-2.5", 123456.78: "123456.78",
	} {
		if got := jsonFloat(f); got != want {
			t.Errorf("jsonFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

func TestCheckRefusesTheFirstChainByName(t *testing.T) {
	good, inverted, narrow := exampleA(), exampleA(), exampleA()
	inverted.Chain = "refund"
	inverted.Segments[1].BudgetMs = 500 // 500 + 390 + 9 = 899 > 800
	inverted.Segments[1].Idempotency.TTL = Duration{Ms: 12 * 3_600_000}
	narrow.Chain = "payments"
	narrow.BreakerWindowMs = 480
	s := &Snapshot{Revision: 8, Chains: map[string]*Chain{"checkout": good, "refund": inverted}}

	err := s.Check()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("Check() = %v, want a *Refusal", err)
	}
	want := Refusal{
		Chain:   "refund",
		Segment: "gateway->order",
		Check:   CheckInversion,
		Message: "inversion: children of gateway->order need 899 ms (500 + 390 + 9), only 800 ms available — 99 ms over: budget inversion; " +
			"idempotency_ttl: order->inventory: idempotency key order_id lives 12h but the longest recovery is 18h; a retry after recovery could run twice",
	}
	if *r != want {
		t.Errorf("refusal\n got %+v\nwant %+v", *r, want)
	}
	if got := r.Error(); got != `chain "refund", segment "gateway->order": `+want.Message {
		t.Errorf("Error() = %s", got)
	}

	// "payments" sorts before "refund": its breaker_window error is the refusal.
	s.Chains["payments"] = narrow
	if err := s.Check(); !errors.As(err, &r) || r.Chain != "payments" || r.Check != CheckBreakerWindow {
		t.Errorf("Check() = %v, want payments' breaker_window", err)
	}
	// Warnings alone do not refuse.
	delete(s.Chains, "refund")
	narrow.BreakerWindowMs = 4000
	if err := s.Check(); err != nil {
		t.Errorf("warnings refused the snapshot: %v", err)
	}
	if err := (&Snapshot{}).Check(); err != nil {
		t.Errorf("an empty snapshot is refused: %v", err)
	}
}

func TestStructureRefusalHasNoSegment(t *testing.T) {
	c := exampleA()
	c.EntryBudgetMs = 0
	err := (&Snapshot{Chains: map[string]*Chain{"checkout": c}}).Check()
	want := `chain "checkout", segment "": structure: /entry_budget_ms: must be greater than 0`
	if err == nil || err.Error() != want {
		t.Errorf("Check() = %v, want %s", err, want)
	}
}
