package budgetagent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// exampleSnapshot is a cached snapshot of the conformance corpus (cache.json), by vector
// name: "example-a" is SPEC example A at revision 7, "example-b-inverted" example B.
func exampleSnapshot(t *testing.T, name string) *Snapshot {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "conformance", "cache.json"))
	if err != nil {
		t.Fatalf("the conformance corpus: %v", err)
	}
	var corpus struct {
		Vectors []struct {
			Name string `json:"name"`
			File string `json:"file"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	for _, v := range corpus.Vectors {
		if v.Name == name {
			s, err := ParseSnapshot([]byte(v.File))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return s
		}
	}
	t.Fatalf("no vector %q in conformance/cache.json", name)
	return nil
}

// checkout is the checkout chain of an example snapshot.
func checkout(t *testing.T, name string) *Chain {
	t.Helper()
	c, ok := exampleSnapshot(t, name).Chains["checkout"]
	if !ok {
		t.Fatalf("%s has no checkout chain", name)
	}
	return c
}

// chainToProto is what the control plane sends for c.
func chainToProto(c *Chain) *pb.ChainBudget {
	out := &pb.ChainBudget{
		Chain: c.Chain, BaselineId: c.BaselineID, Revision: c.Revision, PublishedAt: c.PublishedAt,
		EntryBudgetMs: c.EntryBudgetMs, BreakerWindowMs: c.BreakerWindowMs, MaxRecoveryMs: c.MaxRecovery.Ms,
	}
	rule := func(r *RetryRule) *pb.RetryRule {
		if r == nil {
			return nil
		}
		return &pb.RetryRule{MaxRetries: r.MaxRetries, BackoffsMs: r.BackoffsMs, JitterPct: r.JitterPct, WorstCaseBackoffMs: r.WorstCaseBackoffMs}
	}
	for _, s := range c.Segments {
		w := &pb.SegmentBudget{
			Id: s.ID, Caller: s.Caller, Callee: s.Callee, Stage: s.Stage, Class: s.Class,
			TimeoutMs: s.TimeoutMs, BudgetMs: s.BudgetMs, ReserveMs: s.ReserveMs,
			Retry: &pb.RetryPlan{Idempotent: s.Retry.Idempotent, OnDeadline: rule(s.Retry.OnDeadline), OnUnavailable: rule(s.Retry.OnUnavailable)},
		}
		if s.Parent != nil {
			w.Parent = *s.Parent
		}
		if s.Idempotency != nil {
			w.Idempotency = &pb.Idempotency{Key: s.Idempotency.Key, TtlMs: s.Idempotency.TTL.Ms}
		}
		out.Segments = append(out.Segments, w)
	}
	return out
}

func update(revision int64, chains ...*Chain) *pb.BudgetUpdate {
	u := &pb.BudgetUpdate{Revision: revision}
	for _, c := range chains {
		u.Chains = append(u.Chains, chainToProto(c))
	}
	return u
}

func TestAReceivedChainConvertsLosslessly(t *testing.T) {
	a := checkout(t, "example-a")
	got, err := chainFromProto(chainToProto(a))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("round trip changed the chain:\n got %+v\nwant %+v", got, a)
	}
}

func TestAMalformedChainNamesItsField(t *testing.T) {
	cases := []struct {
		field string
		spoil func(c *pb.ChainBudget)
	}{
		{"chain", func(c *pb.ChainBudget) { c.Chain = "" }},
		{"entry_budget_ms", func(c *pb.ChainBudget) { c.EntryBudgetMs = 0 }},
		{"revision", func(c *pb.ChainBudget) { c.Revision = 0 }},
		{"segments[1].id", func(c *pb.ChainBudget) { c.Segments[1].Id = "" }},
		{"segments[1].class", func(c *pb.ChainBudget) { c.Segments[1].Class = "wobbly" }},
		{"segments[1].timeout_ms", func(c *pb.ChainBudget) { c.Segments[1].TimeoutMs = 0 }},
		{"segments[1].budget_ms", func(c *pb.ChainBudget) { c.Segments[1].BudgetMs = 10 }},
		{"segments[1].retry", func(c *pb.ChainBudget) { c.Segments[1].Retry = nil }},
		{"segments[1].idempotency.key", func(c *pb.ChainBudget) { c.Segments[1].Idempotency.Key = "" }},
		{"segments[3].retry", func(c *pb.ChainBudget) { c.Segments[3].Retry.OnDeadline = &pb.RetryRule{} }},
	}
	for _, tc := range cases {
		wire := chainToProto(checkout(t, "example-a"))
		tc.spoil(wire)
		_, err := chainFromProto(wire)
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+": ") {
			t.Errorf("spoiling %s: got %v", tc.field, err)
		}
	}
}

func TestAnUpdateReplacesItsChainsOrIsRefusedWhole(t *testing.T) {
	a := checkout(t, "example-a")
	s, refusal := applyUpdate(&Snapshot{Chains: map[string]*Chain{}}, update(7, a))
	if refusal != nil {
		t.Fatal(refusal)
	}
	if s.Revision != 7 || !reflect.DeepEqual(s.Chains["checkout"], a) {
		t.Fatalf("got %+v", s)
	}

	// Another chain arrives: checkout is kept, the strictest budget of the two wins.
	refund := checkout(t, "example-a")
	refund.Chain, refund.Revision = "refund", 8
	refund.Segments[1].TimeoutMs, refund.Segments[1].BudgetMs = 30, 180
	s2, refusal := applyUpdate(s, update(8, refund))
	if refusal != nil {
		t.Fatal(refusal)
	}
	chain, seg, _ := s2.Segment("order->inventory")
	if s2.Revision != 8 || len(s2.Chains) != 2 || chain != "refund" || seg.BudgetMs != 180 {
		t.Fatalf("revision %d, %d chains, inventory from %s at %d ms", s2.Revision, len(s2.Chains), chain, seg.BudgetMs)
	}

	// An inverted one is refused with its numbers; the snapshot held is untouched.
	_, refusal = applyUpdate(s2, update(9, checkout(t, "example-b-inverted")))
	if refusal == nil || refusal.Chain != "checkout" || refusal.Segment != "gateway->order" ||
		!strings.Contains(refusal.Message, "909") || !strings.Contains(refusal.Message, "109") {
		t.Fatalf("refusal %v", refusal)
	}
	if s2.Revision != 8 || s2.Chains["checkout"].Segments[1].BudgetMs != 208 {
		t.Fatal("the refused update changed the snapshot held")
	}

	// A malformed one is refused naming the field.
	bad := update(9, a)
	bad.Chains[0].Segments[2].Class = "wobbly"
	_, refusal = applyUpdate(s2, bad)
	if refusal == nil || refusal.Chain != "checkout" || !strings.Contains(refusal.Message, "malformed config: segments[2].class") {
		t.Fatalf("refusal %v", refusal)
	}
}
