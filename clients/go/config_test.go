package budgetagent

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// exampleA is SPEC §4's checkout chain at revision 7: inventory 44/208 (retries on both
// causes), payment 390/390 (no deadline retry), user 9/9 (not idempotent).
func exampleA() *Chain {
	root := "gateway->order"
	deadline := func() *RetryRule {
		return &RetryRule{MaxRetries: 1, BackoffsMs: []uint64{100}, JitterPct: 20, WorstCaseBackoffMs: 120}
	}
	unavailable := func() *RetryRule {
		return &RetryRule{MaxRetries: 2, BackoffsMs: []uint64{100, 300}, JitterPct: 20, WorstCaseBackoffMs: 480}
	}
	child := func(callee, class string, timeout, budget uint64, plan RetryPlan, idem *Idempotency) Segment {
		return Segment{ID: "order->" + callee, Caller: "order", Callee: callee, Parent: &root, Class: class,
			TimeoutMs: timeout, BudgetMs: budget, Retry: plan, Idempotency: idem}
	}
	return &Chain{
		Chain: "checkout", Revision: 7, BaselineID: "bl-20261130-001", PublishedAt: "2026-11-30T00:00:01.000Z",
		EntryBudgetMs: 800, BreakerWindowMs: 5000, MaxRecovery: Duration{Ms: 18 * 3_600_000},
		Segments: []Segment{
			{ID: root, Caller: "gateway", Callee: "order", Class: ClassVolatile, TimeoutMs: 800, BudgetMs: 800},
			child("inventory", ClassStable, 44, 208,
				RetryPlan{Idempotent: true, OnDeadline: deadline(), OnUnavailable: unavailable()},
				&Idempotency{Key: "order_id", TTL: Duration{Ms: 24 * 3_600_000}}),
			child("payment", ClassVolatile, 390, 390,
				RetryPlan{Idempotent: true, OnUnavailable: unavailable()},
				&Idempotency{Key: "pay_no", TTL: Duration{Ms: 7 * 86_400_000}}),
			child("user", ClassStable, 9, 9, RetryPlan{}, nil),
		},
	}
}

func mustMarshal(t *testing.T, v interface{}) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// editJSON decodes a chain's JSON, lets edit change it, and encodes it again.
func editJSON(t *testing.T, c *Chain, edit func(chain map[string]interface{}, segs []interface{})) []byte {
	t.Helper()
	var m map[string]interface{}
	if err := json.Unmarshal(mustMarshal(t, c), &m); err != nil {
		t.Fatal(err)
	}
	edit(m, m["segments"].([]interface{}))
	return mustMarshal(t, m)
}

func TestChainJSONRoundTrips(t *testing.T) {
	a := exampleA()
	got, err := ParseChain(mustMarshal(t, a))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("round trip changed the chain:\n got %+v\nwant %+v", got, a)
	}
}

func TestChainJSONHasTheControlPlaneShape(t *testing.T) {
	var m map[string]interface{}
	if err := json.Unmarshal(mustMarshal(t, exampleA()), &m); err != nil {
		t.Fatal(err)
	}
	root := m["segments"].([]interface{})[0].(map[string]interface{})
	user := m["segments"].([]interface{})[3].(map[string]interface{})
	if v, ok := root["parent"]; !ok || v != nil {
		t.Errorf("the root's parent is written as null, got %v (present %v)", v, ok)
	}
	for _, absent := range []string{"stage", "idempotency"} {
		if _, ok := user[absent]; ok {
			t.Errorf("an absent %s is omitted, got %v", absent, user[absent])
		}
	}
	if user["reserve_ms"] != float64(0) {
		t.Errorf("reserve_ms is always written, got %v", user["reserve_ms"])
	}
	if plan := user["retry"].(map[string]interface{}); len(plan) != 1 {
		t.Errorf("a plan without rules is only {\"idempotent\"}, got %v", plan)
	}
	if m["max_recovery"] != "18h" {
		t.Errorf("max_recovery is a duration string, got %v", m["max_recovery"])
	}
	if strings.Contains(string(mustMarshal(t, RetryRule{})), "null") {
		t.Errorf("a rule without backoffs writes [], got %s", mustMarshal(t, RetryRule{}))
	}
	if s := string(mustMarshal(t, Snapshot{Revision: 3})); s != `{"revision":3,"chains":{}}` {
		t.Errorf("an empty snapshot is %s", s)
	}
}

func TestParsingIsAsStrictAsTheRustAgent(t *testing.T) {
	del := func(field string) func(map[string]interface{}, []interface{}) {
		return func(_ map[string]interface{}, segs []interface{}) {
			delete(segs[1].(map[string]interface{}), field)
		}
	}
	set := func(field string, v interface{}) func(map[string]interface{}, []interface{}) {
		return func(_ map[string]interface{}, segs []interface{}) {
			segs[1].(map[string]interface{})[field] = v
		}
	}
	cases := []struct {
		name string
		edit func(map[string]interface{}, []interface{})
		want string // part of the error; "" when the config parses
	}{
		{"chain without revision", func(c map[string]interface{}, _ []interface{}) { delete(c, "revision") }, `missing field "revision"`},
		{"chain without max_recovery", func(c map[string]interface{}, _ []interface{}) { delete(c, "max_recovery") }, `missing field "max_recovery"`},
		{"chain with a null window", func(c map[string]interface{}, _ []interface{}) { c["breaker_window_ms"] = nil }, "breaker_window_ms: expected an unsigned integer, found null"},
		{"segments null", func(c map[string]interface{}, _ []interface{}) { c["segments"] = nil }, "segments: expected an array, found null"},
		{"name in another case", func(c map[string]interface{}, _ []interface{}) { c["Revision"] = c["revision"]; delete(c, "revision") }, `missing field "revision"`},
		{"unknown chain field", func(c map[string]interface{}, _ []interface{}) { c["owner"] = "team" }, ""},
		{"segment without budget", del("budget_ms"), `segments[1]: missing field "budget_ms"`},
		{"segment without retry", del("retry"), `segments[1]: missing field "retry"`},
		{"segment without parent", del("parent"), ""},
		{"segment without reserve", del("reserve_ms"), ""},
		{"null reserve", set("reserve_ms", nil), "segments[1].reserve_ms: expected an unsigned integer, found null"},
		{"null stage", set("stage", nil), ""},
		{"stage over u32", set("stage", 4294967296), "segments[1].stage"},
		{"negative timeout", set("timeout_ms", -1), "segments[1].timeout_ms: expected an unsigned integer, found -1"},
		{"fractional timeout", set("timeout_ms", 44.5), "found 44.5"},
		{"timeout as a string", set("timeout_ms", "44"), "found a string"},
		{"unknown class", set("class", "wobbly"), `segments[1].class: unknown class "wobbly"`},
		// Well formed: what no server derives is for the checks to refuse, as structure errors.
		{"zero timeout", set("timeout_ms", 0), ""},
		{"budget below the timeout", set("budget_ms", 43), ""},
		{"eleven retries", set("retry", map[string]interface{}{"idempotent": true, "on_deadline": map[string]interface{}{"max_retries": 11, "backoffs_ms": []interface{}{100}, "jitter_pct": 20, "worst_case_backoff_ms": 120}}), ""},
		{"budget at the timeout", set("budget_ms", 44), ""},
		{"idempotency with an unknown field", set("idempotency", map[string]interface{}{"key": "k", "ttl": "24h", "tll": "1h"}), `unknown field "tll"`},
		{"bad ttl", set("idempotency", map[string]interface{}{"key": "k", "ttl": "1.5h"}), `segments[1].idempotency.ttl: invalid duration "1.5h"`},
		{"ttl as a number", set("idempotency", map[string]interface{}{"key": "k", "ttl": 3600}), "expected a string, found a number"},
		{"plan without idempotent", set("retry", map[string]interface{}{}), `segments[1].retry: missing field "idempotent"`},
		{"rule without backoffs", set("retry", map[string]interface{}{"idempotent": true, "on_deadline": map[string]interface{}{"max_retries": 1, "jitter_pct": 20, "worst_case_backoff_ms": 120}}), `retry.on_deadline: missing field "backoffs_ms"`},
		{"null backoff", set("retry", map[string]interface{}{"idempotent": true, "on_deadline": map[string]interface{}{"max_retries": 1, "backoffs_ms": []interface{}{100, nil}, "jitter_pct": 20, "worst_case_backoff_ms": 120}}), "on_deadline.backoffs_ms[1]: expected an unsigned integer, found null"},
		{"null rule", set("retry", map[string]interface{}{"idempotent": true, "on_deadline": nil}), ""},
	}
	for _, tc := range cases {
		_, err := ParseChain(editJSON(t, exampleA(), tc.edit))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: parsed, want an error with %q", tc.name, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: error %q, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestParsingRefusesWhatSerdeRefuses(t *testing.T) {
	a := string(mustMarshal(t, exampleA()))
	for name, text := range map[string]string{
		"duplicate member":     strings.Replace(a, `"revision":7`, `"revision":7,"revision":8`, 1),
		"integer as exponent":  strings.Replace(a, `"revision":7`, `"revision":7e0`, 1),
		"integer as float":     strings.Replace(a, `"revision":7`, `"revision":7.0`, 1),
		"lone surrogate":       strings.Replace(a, `"chain":"checkout"`, `"chain":"check\ud800out"`, 1),
		"invalid UTF-8":        strings.Replace(a, `"chain":"checkout"`, "\"chain\":\"check\xffout\"", 1),
		"trailing data":        a + "{}",
		"an array, not a map":  "[]",
		"null":                 "null",
		"truncated":            a[:len(a)/2],
		"empty":                "",
		"chain as a string":    `"checkout"`,
		"segment as an array":  strings.Replace(a, `"segments":[`, `"segments":[[],`, 1),
		"segments as a number": strings.Replace(a, `"segments":[`, `"segments":1,"x":[`, 1),
	} {
		if _, err := ParseChain([]byte(text)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	// An escaped U+FFFD is a real character, not a broken one.
	ok := strings.Replace(a, `"chain":"checkout"`, `"chain":"check\ufffdout"`, 1)
	if c, err := ParseChain([]byte(ok)); err != nil || c.Chain != "check\uFFFDout" {
		t.Errorf("an escaped U+FFFD: %v, %+v", err, c)
	}
	// A broken pair is refused even beside a real U+FFFD, escaped or not.
	for _, broken := range []string{`check\ud800\ufffdout`, "check\uFFFD\\udc00out", `check\ud800\u0041out`, `checkout\ud800`} {
		doc := strings.Replace(a, `"chain":"checkout"`, `"chain":"`+broken+`"`, 1)
		if _, err := ParseChain([]byte(doc)); err == nil {
			t.Errorf("%s: parsed", broken)
		}
	}
	// So is one in a member's name, a chain's name in a snapshot included.
	withMember := strings.Replace(a, `"chain":"checkout"`, `"chain":"checkout","x\udc00":1`, 1)
	if _, err := ParseChain([]byte(withMember)); err == nil {
		t.Error("a lone surrogate in a member's name parsed")
	}
	if _, err := ParseSnapshot([]byte(`{"revision":1,"chains":{"check\ud800out":` + a + `}}`)); err == nil {
		t.Error("a lone surrogate in a chain's name parsed")
	}
	if s, err := ParseSnapshot([]byte(`{"revision":1,"chains":{"check\ud83d\ude00out":` + a + `}}`)); err != nil || s.Chains["check\U0001F600out"] == nil {
		t.Errorf("a whole pair in a chain's name: %v", err)
	}
	// A whole pair is one character; an escaped backslash starts no escape.
	for text, want := range map[string]string{
		`check\ud83d\ude00out`: "check\U0001F600out",
		`check\\ud800out`:      `check\ud800out`,
	} {
		doc := strings.Replace(a, `"chain":"checkout"`, `"chain":"`+text+`"`, 1)
		if c, err := ParseChain([]byte(doc)); err != nil || c.Chain != want {
			t.Errorf("%s: %v, %+v", text, err, c)
		}
	}
}

func TestSnapshotParsing(t *testing.T) {
	a := string(mustMarshal(t, exampleA()))
	s, err := ParseSnapshot([]byte(`{"revision": 7, "chains": {"checkout": ` + a + `}}`))
	if err != nil || s.Revision != 7 || !reflect.DeepEqual(s.Chains["checkout"], exampleA()) {
		t.Fatalf("ParseSnapshot: %v, %+v", err, s)
	}
	for name, text := range map[string]string{
		"no revision":      `{"chains": {}}`,
		"no chains":        `{"revision": 7}`,
		"null chains":      `{"revision": 7, "chains": null}`,
		"a chain is null":  `{"revision": 7, "chains": {"checkout": null}}`,
		"revision string":  `{"revision": "7", "chains": {}}`,
		"bad chain inside": `{"revision": 7, "chains": {"checkout": {"chain": "checkout"}}}`,
	} {
		if _, err := ParseSnapshot([]byte(text)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	_, err = ParseSnapshot([]byte(`{"revision": 7, "chains": {"checkout": {"chain": "checkout"}}}`))
	if err == nil || !strings.HasPrefix(err.Error(), "chains.checkout: missing field") {
		t.Errorf("the error names the chain: %v", err)
	}
	// Like a serde map, a chain given twice keeps the last one, but both must be chains.
	b := strings.Replace(a, `"revision":7`, `"revision":8`, 1)
	s, err = ParseSnapshot([]byte(`{"revision": 8, "chains": {"checkout": ` + a + `, "checkout": ` + b + `}}`))
	if err != nil || len(s.Chains) != 1 || s.Chains["checkout"].Revision != 8 {
		t.Errorf("duplicate chain names: %v", err)
	}
	if _, err := ParseSnapshot([]byte(`{"revision": 7, "chains": {"checkout": {}, "checkout": ` + a + `}}`)); err == nil {
		t.Error("a malformed chain hidden by a later duplicate parsed")
	}
}

func TestSegmentPicksTheSmallestBudgetAcrossChains(t *testing.T) {
	checkout, refund, audit := exampleA(), exampleA(), exampleA()
	refund.Chain, audit.Chain = "refund", "audit"
	refund.Segments[1].TimeoutMs, refund.Segments[1].BudgetMs = 30, 180
	audit.Segments[1].TimeoutMs, audit.Segments[1].BudgetMs = 20, 180
	s := &Snapshot{Chains: map[string]*Chain{"checkout": checkout, "refund": refund}}

	check := func(id, wantChain string, wantBudget uint64) {
		t.Helper()
		chain, seg, ok := s.Segment(id)
		if !ok || chain != wantChain || seg.BudgetMs != wantBudget {
			t.Errorf("Segment(%q) = %q, %+v, %v; want %q with budget %d", id, chain, seg, ok, wantChain, wantBudget)
		}
	}
	check("order->inventory", "refund", 180)
	check("order->payment", "checkout", 390) // equal everywhere: the first chain by name
	if _, _, ok := s.Segment("order->nowhere"); ok {
		t.Error("an unknown segment is found")
	}
	// Equal budgets: the smaller timeout wins.
	s.Chains["audit"] = audit
	check("order->inventory", "audit", 180)
	if _, _, ok := (&Snapshot{}).Segment("order->inventory"); ok {
		t.Error("an empty snapshot has a segment")
	}
}
