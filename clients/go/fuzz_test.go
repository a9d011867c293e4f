package budgetagent

// Fuzz targets for what reaches the agent from outside the process: a cache file or a chain's
// JSON, and a ChainBudget of the control plane's stream. Whatever the bytes, parsing and the
// checks never panic; a config that parses is cached and read back unchanged, and one that
// passes the checks is safe to run calls under. The seeds are the conformance corpus and the
// edge cases below; plain `go test` runs them as ordinary tests. To fuzz one target:
//
//	go test -run XXX -fuzz FuzzParseSnapshot -fuzztime 60s -parallel 1

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// corpusSeeds are the cache files of conformance/cache.json and the configs of checks.json.
func corpusSeeds(f *testing.F) (caches, configs [][]byte) {
	f.Helper()
	read := func(name string, into interface{}) {
		data, err := os.ReadFile(filepath.Join(conformanceDir, name))
		if err != nil {
			f.Fatalf("conformance file %s: %v", name, err)
		}
		if err := json.Unmarshal(data, into); err != nil {
			f.Fatalf("conformance file %s: %v", name, err)
		}
	}
	var cache struct {
		Vectors []struct {
			File string `json:"file"`
		} `json:"vectors"`
	}
	read("cache.json", &cache)
	for _, v := range cache.Vectors {
		caches = append(caches, []byte(v.File))
	}
	var checks struct {
		Vectors []struct {
			Config json.RawMessage `json:"config"`
		} `json:"vectors"`
	}
	read("checks.json", &checks)
	for _, v := range checks.Vectors {
		configs = append(configs, v.Config)
	}
	if len(caches) == 0 || len(configs) == 0 {
		f.Fatal("the conformance corpus gave no seeds")
	}
	return caches, configs
}

// Hand-written edge cases: numbers at the bounds, escapes, nulls where none belong.
var edgeSeeds = []string{
	`{"revision":1,"chains":{}}`,
	`{"revision":-9223372036854775808,"chains":{"":null}}`,
	`{"revision":1,"chains":{"c":{"chain":"c","revision":1,"baseline_id":"","published_at":"","entry_budget_ms":18446744073709551615,"breaker_window_ms":1,"max_recovery":"213503982334d","segments":[]}}}`,
	`{"chain":"\ud800","revision":1}`,
	`{"revision":1,"chains":{"\ud83d\ude00":{},"\\ud800":[],"\ufffd":1}}`,
	`{"chain":"c","revision":1,"baseline_id":"b","published_at":"p","entry_budget_ms":1000000000000,"breaker_window_ms":1000000000000,"max_recovery":"0s","segments":[{"id":"a->b","caller":"a","callee":"b","parent":null,"class":"stable","timeout_ms":1000000000000,"budget_ms":1000000000000,"retry":{"idempotent":true,"on_deadline":{"max_retries":4294967295,"backoffs_ms":[0,18446744073709551615],"jitter_pct":18446744073709551615,"worst_case_backoff_ms":18446744073709551615}},"idempotency":{"key":"k","ttl":"18446744073709551615ms"}}]}`,
}

func FuzzParseSnapshot(f *testing.F) {
	caches, configs := corpusSeeds(f)
	for _, c := range caches {
		f.Add(c)
	}
	for _, c := range configs {
		f.Add([]byte(`{"revision":3,"chains":{"checkout":` + string(c) + `}}`))
	}
	for _, s := range edgeSeeds {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSnapshot(data)
		if err != nil {
			return
		}
		checkReceived(t, s, dir)
	})
}

func FuzzParseChain(f *testing.F) {
	_, configs := corpusSeeds(f)
	for _, c := range configs {
		f.Add([]byte(c))
	}
	for _, s := range edgeSeeds {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseChain(data)
		if err != nil {
			return
		}
		encoded, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("a parsed chain does not encode: %v", err)
		}
		again, err := ParseChain(encoded)
		if err != nil {
			t.Fatalf("a chain written by this client does not parse: %v\n%s", err, encoded)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("the chain changed through its JSON:\n got %+v\nwant %+v", again, c)
		}
		checkReceived(t, &Snapshot{Revision: c.Revision, Chains: map[string]*Chain{c.Chain: c}}, dir)
	})
}

func FuzzChainFromProto(f *testing.F) {
	_, configs := corpusSeeds(f)
	for _, config := range configs {
		c, err := ParseChain(config)
		if err != nil {
			f.Fatalf("a conformance config does not parse: %v", err)
		}
		data, err := proto.Marshal(chainToProto(c))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		var wire pb.ChainBudget
		if proto.Unmarshal(data, &wire) != nil {
			return
		}
		chain, err := chainFromProto(&wire)
		if err != nil {
			var malformed *convertError
			if !errors.As(err, &malformed) {
				t.Fatalf("conversion failed with %T: %v", err, err)
			}
			return
		}
		// The stream's path: the update is refused exactly when the chain has an error finding.
		next, refusal := applyUpdate(&Snapshot{Chains: map[string]*Chain{}}, &pb.BudgetUpdate{Revision: 2, Chains: []*pb.ChainBudget{&wire}})
		if (refusal == nil) != (chain.refusal() == nil) {
			t.Fatalf("applyUpdate refused %v, the chain's own check %v", refusal, chain.refusal())
		}
		if refusal != nil {
			checkReceived(t, &Snapshot{Revision: 2, Chains: map[string]*Chain{chain.Chain: chain}}, dir)
			return
		}
		// An accepted config is cached: the agent must be able to start from that cache.
		checkReceived(t, next, dir)
	})
}

// checkReceived holds for any config that parsed: every finding encodes, Check gives nil or a
// *Refusal, the cache reads back what was written (and checks the same), and a config that
// passes runs calls within its numbers.
func checkReceived(t *testing.T, s *Snapshot, dir string) {
	t.Helper()
	for _, name := range s.chainNames() {
		findings := s.Chains[name].Findings()
		if _, err := json.Marshal(findings); err != nil {
			t.Fatalf("chain %q: findings do not encode: %v", name, err)
		}
	}
	checked := s.Check()
	var refusal *Refusal
	if checked != nil && (!errors.As(checked, &refusal) || refusal.Check == "" || refusal.Error() == "") {
		t.Fatalf("Check gave %T %v, want a *Refusal naming its check", checked, checked)
	}

	path := filepath.Join(dir, "budgets.json")
	if err := WriteCache(path, s); err != nil {
		t.Fatalf("WriteCache: %v", err)
	}
	read, err := ReadCache(path)
	if err != nil {
		data, _ := os.ReadFile(path)
		t.Fatalf("the cache just written does not read back: %v\n%s", err, data)
	}
	if !reflect.DeepEqual(read, s) {
		t.Fatalf("the cache read back differs:\n got %+v\nwant %+v", read, s)
	}
	if again := read.Check(); !reflect.DeepEqual(again, checked) {
		t.Fatalf("the cached config checks %v, the received one %v", again, checked)
	}
	if checked == nil {
		runWithin(t, s)
	}
}

// runWithin drives every segment of a config that passed the checks as the agent would:
// R-retry's numbers stay within the budget whatever the failures and jitter, and Deadline
// and Call work on it.
func runWithin(t *testing.T, s *Snapshot) {
	t.Helper()
	a, err := FromSnapshot(s, Options{Logger: &syncLog{}})
	if err != nil {
		t.Fatalf("a config that passed Check was refused: %v", err)
	}
	defer a.Close()
	for _, name := range s.chainNames() {
		for i := range s.Chains[name].Segments {
			id := s.Chains[name].Segments[i].ID
			_, seg, ok := s.Segment(id)
			if !ok {
				t.Fatalf("segment %q not found", id)
			}
			for _, f := range []Failure{FailureDeadline, FailureUnavailable, FailureBusiness, FailureOther} {
				for _, pick := range []func(uint64) uint64{noJitter, maxJitter} {
					retryWithin(t, seg, f, pick)
				}
			}
			callUnder(t, a, seg)
		}
	}
}

// retryWithin runs attempts failing with f until R-retry stops, checking that no attempt
// or backoff goes past the budget.
func retryWithin(t *testing.T, seg *Segment, f Failure, pick func(uint64) uint64) {
	t.Helper()
	budget := time.Duration(seg.BudgetMs) * time.Millisecond
	now := time.Unix(1_800_000_000, 0)
	end := Earliest(now, budget, now.Add(time.Hour), true)
	if end.After(now.Add(budget)) || end.After(now.Add(time.Hour)) {
		t.Fatalf("%s: deadline %v past the budget or the inherited one", seg.ID, end.Sub(now))
	}
	var st RetryState
	for attempts := 0; attempts < 1000; attempts++ {
		remaining := end.Sub(now)
		timeout, ok := AttemptTimeout(seg.TimeoutMs, remaining)
		if !ok {
			return
		}
		if timeout <= 0 || timeout > remaining || timeout > time.Duration(seg.TimeoutMs)*time.Millisecond {
			t.Fatalf("%s: attempt timeout %v with %v left", seg.ID, timeout, remaining)
		}
		now = now.Add(timeout)
		before := st.Total()
		d := Decide(seg, f, true, &st, end.Sub(now), pick)
		if !d.Retry {
			if d.Stop == 0 || st.Total() != before {
				t.Fatalf("%s: a stop %+v changed the retry count", seg.ID, d)
			}
			OutcomeAfterFailure(seg, true, f)
			return
		}
		if d.Backoff < 0 || d.Backoff >= end.Sub(now) || d.RetryN != st.Total() || st.Total() != before+1 {
			t.Fatalf("%s: retry %+v with %v left", seg.ID, d, end.Sub(now))
		}
		now = now.Add(d.Backoff)
	}
}

// callUnder runs the segment through Deadline and Call: a quick success, and a failure with
// almost no time left.
func callUnder(t *testing.T, a *Agent, seg *Segment) {
	t.Helper()
	ctx, cancel := a.Deadline(context.Background(), seg.ID)
	deadline, has := ctx.Deadline()
	cancel()
	if !has || time.Until(deadline) > time.Duration(seg.BudgetMs)*time.Millisecond {
		t.Fatalf("%s: Deadline gave %v (set %v) for a budget of %d ms", seg.ID, time.Until(deadline), has, seg.BudgetMs)
	}
	if err := a.Call(context.Background(), seg.ID, "key", func(context.Context, Attempt) error { return nil }); err != nil {
		t.Fatalf("%s: a successful call failed: %v", seg.ID, err)
	}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
	defer cancel()
	err := a.Call(short, seg.ID, "key", func(ctx context.Context, at Attempt) error {
		if at.Timeout <= 0 || at.Timeout > time.Duration(seg.TimeoutMs)*time.Millisecond {
			t.Errorf("%s: attempt %d timeout %v", seg.ID, at.Number, at.Timeout)
		}
		return FailureUnavailable
	})
	if err == nil {
		t.Fatalf("%s: a failing call succeeded", seg.ID)
	}
}
