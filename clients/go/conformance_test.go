package budgetagent

// Runs every vector of the language-neutral corpus in ../../conformance (generated from the
// control plane's own rules) through this client's real code. A missing file, an empty one or
// a field the runner does not know fails: the corpus can never pass by being skipped.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"
)

const conformanceDir = "../../conformance"

// loadCorpus decodes one corpus file into file, refusing fields this runner does not know.
func loadCorpus(t *testing.T, name string, file interface{}) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(conformanceDir, name))
	if err != nil {
		t.Fatalf("conformance file %s: %v", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(file); err != nil {
		t.Fatalf("conformance file %s: %v", name, err)
	}
}

// vectorHeader is what every vector has.
type vectorHeader struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// requireVectors fails when a corpus file holds no vectors or repeats a name.
func requireVectors(t *testing.T, file string, names []string) {
	t.Helper()
	if len(names) == 0 {
		t.Fatalf("%s holds no vectors", file)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] {
			t.Fatalf("%s: vector name %q is empty or not unique", file, n)
		}
		seen[n] = true
	}
}

// sameJSON compares two JSON documents as values; numbers compare by their text, so 1.0 and
// 1 differ as they do between serde and a careless encoder.
func sameJSON(t *testing.T, got, want []byte) bool {
	t.Helper()
	decode := func(data []byte) interface{} {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v interface{}
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, data)
		}
		return v
	}
	return reflect.DeepEqual(decode(got), decode(want))
}

func TestConformanceChecks(t *testing.T) {
	var file struct {
		Comment string `json:"comment"`
		Vectors []struct {
			vectorHeader
			Config   json.RawMessage `json:"config"`
			Accept   bool            `json:"accept"`
			Findings json.RawMessage `json:"findings"`
		} `json:"vectors"`
	}
	loadCorpus(t, "checks.json", &file)
	var names []string
	for _, v := range file.Vectors {
		names = append(names, v.Name)
	}
	requireVectors(t, "checks.json", names)

	for _, v := range file.Vectors {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			chain, err := ParseChain(v.Config)
			if err != nil {
				t.Fatalf("%s: config does not parse: %v", v.Name, err)
			}
			findings := chain.Findings()
			if findings == nil {
				findings = []Finding{}
			}
			got, err := json.Marshal(findings)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			if !sameJSON(t, got, v.Findings) {
				t.Errorf("%s: findings differ\n got: %s\nwant: %s", v.Name, got, v.Findings)
			}
			refusal := (&Snapshot{Chains: map[string]*Chain{chain.Chain: chain}}).Check()
			if accepted := refusal == nil; accepted != v.Accept {
				t.Errorf("%s: accepted %v, want %v (refusal: %v)", v.Name, accepted, v.Accept, refusal)
			}
		})
	}
}

func TestConformanceDeadline(t *testing.T) {
	var file struct {
		Comment string `json:"comment"`
		Vectors []struct {
			vectorHeader
			NowUs       int64  `json:"now_us"`
			BudgetMs    uint64 `json:"budget_ms"`
			InheritedUs *int64 `json:"inherited_us"`
			ExpectUs    int64  `json:"expect_us"`
		} `json:"vectors"`
	}
	loadCorpus(t, "deadline.json", &file)
	var names []string
	for _, v := range file.Vectors {
		names = append(names, v.Name)
	}
	requireVectors(t, "deadline.json", names)

	for _, v := range file.Vectors {
		now := time.UnixMicro(v.NowUs)
		var inherited time.Time
		if v.InheritedUs != nil {
			inherited = time.UnixMicro(*v.InheritedUs)
		}
		got := Earliest(now, millis(v.BudgetMs), inherited, v.InheritedUs != nil)
		if got.UnixMicro() != v.ExpectUs || got.Nanosecond()%1000 != 0 {
			t.Errorf("%s: deadline at %d ns, want %d µs", v.Name, got.UnixNano(), v.ExpectUs)
		}
	}
}

// retryExpect is one decision of retry.json; absent fields are nil.
type retryExpect struct {
	Decision    string  `json:"decision"`
	Cause       *string `json:"cause"`
	Retry       *uint32 `json:"retry"`
	BackoffUs   *int64  `json:"backoff_us"`
	Reason      *string `json:"reason"`
	RemainingUs *int64  `json:"remaining_us"`
}

var corpusFailures = map[string]Failure{
	"deadline":    FailureDeadline,
	"unavailable": FailureUnavailable,
	"business":    FailureBusiness,
	"other":       FailureOther,
}

func TestConformanceRetry(t *testing.T) {
	var file struct {
		Comment string `json:"comment"`
		Vectors []struct {
			vectorHeader
			Segment  json.RawMessage `json:"segment"`
			KeyGiven bool            `json:"key_given"`
			Steps    []struct {
				Failure     string      `json:"failure"`
				RemainingUs int64       `json:"remaining_us"`
				PickUs      uint64      `json:"pick_us"`
				Expect      retryExpect `json:"expect"`
			} `json:"steps"`
			Outcome *Outcome `json:"outcome"`
		} `json:"vectors"`
		AttemptTimeouts []struct {
			vectorHeader
			TimeoutMs   uint64 `json:"timeout_ms"`
			RemainingUs int64  `json:"remaining_us"`
			ExpectUs    *int64 `json:"expect_us"`
		} `json:"attempt_timeouts"`
	}
	loadCorpus(t, "retry.json", &file)
	var names, timeoutNames []string
	for _, v := range file.Vectors {
		names = append(names, v.Name)
	}
	for _, v := range file.AttemptTimeouts {
		timeoutNames = append(timeoutNames, v.Name)
	}
	requireVectors(t, "retry.json", names)
	requireVectors(t, "retry.json attempt_timeouts", timeoutNames)

	for _, v := range file.Vectors {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			var seg Segment
			if err := json.Unmarshal(v.Segment, &seg); err != nil {
				t.Fatalf("%s: segment does not parse: %v", v.Name, err)
			}
			if len(v.Steps) == 0 {
				t.Fatalf("%s: no steps", v.Name)
			}
			var st RetryState
			var last Decision
			var lastFailure Failure
			for i, step := range v.Steps {
				if i > 0 && !last.Retry {
					t.Fatalf("%s: step %d follows a stop", v.Name, i)
				}
				f, ok := corpusFailures[step.Failure]
				if !ok {
					t.Fatalf("%s: step %d: unknown failure %q", v.Name, i, step.Failure)
				}
				pick := step.PickUs
				last = Decide(&seg, f, v.KeyGiven, &st, time.Duration(step.RemainingUs)*time.Microsecond,
					func(uint64) uint64 { return pick })
				lastFailure = f
				if msg := compareDecision(last, step.Expect); msg != "" {
					t.Errorf("%s: step %d: %s (got %+v)", v.Name, i, msg, last)
				}
			}
			switch {
			case last.Retry && v.Outcome != nil:
				t.Errorf("%s: a call still retrying has no outcome, the vector gives %q", v.Name, *v.Outcome)
			case !last.Retry && v.Outcome == nil:
				t.Errorf("%s: the call stopped but the vector gives no outcome", v.Name)
			case !last.Retry:
				if got := OutcomeAfterFailure(&seg, v.KeyGiven, lastFailure); got != *v.Outcome {
					t.Errorf("%s: outcome %q, want %q", v.Name, got, *v.Outcome)
				}
			}
		})
	}

	for _, v := range file.AttemptTimeouts {
		got, ok := AttemptTimeout(v.TimeoutMs, time.Duration(v.RemainingUs)*time.Microsecond)
		switch {
		case v.ExpectUs == nil && ok:
			t.Errorf("attempt_timeouts %s: got a %v attempt, want none", v.Name, got)
		case v.ExpectUs != nil && (!ok || got != time.Duration(*v.ExpectUs)*time.Microsecond):
			t.Errorf("attempt_timeouts %s: got %v (attempt %v), want %d µs", v.Name, got, ok, *v.ExpectUs)
		}
	}
}

// compareDecision is what differs between d and the corpus's expectation, or "".
func compareDecision(d Decision, want retryExpect) string {
	us := func(p *int64) time.Duration { return time.Duration(*p) * time.Microsecond }
	switch want.Decision {
	case "retry":
		switch {
		case !d.Retry:
			return "stopped, want a retry"
		case want.Cause == nil || want.Retry == nil || want.BackoffUs == nil:
			return "the vector's retry lacks cause, retry or backoff_us"
		case d.Cause.String() != *want.Cause:
			return "cause " + d.Cause.String() + ", want " + *want.Cause
		case d.RetryN != *want.Retry:
			return "wrong retry number"
		case d.Backoff != us(want.BackoffUs):
			return "wrong backoff"
		}
	case "stop":
		switch {
		case d.Retry:
			return "retried, want a stop"
		case want.Reason == nil:
			return "the vector's stop lacks a reason"
		case d.Stop.String() != *want.Reason:
			return "reason " + d.Stop.String() + ", want " + *want.Reason
		case want.Cause != nil && d.Cause.String() != *want.Cause:
			return "cause " + d.Cause.String() + ", want " + *want.Cause
		case want.BackoffUs != nil && d.Backoff != us(want.BackoffUs):
			return "wrong backoff"
		case want.RemainingUs != nil && d.Remaining != us(want.RemainingUs):
			return "wrong remaining time"
		case d.Stop == StopOutOfBudget && (want.BackoffUs == nil || want.RemainingUs == nil):
			return "the vector's out_of_budget lacks backoff_us or remaining_us"
		}
	default:
		return "unknown decision " + want.Decision
	}
	return ""
}

func TestConformanceCache(t *testing.T) {
	var file struct {
		Comment string `json:"comment"`
		Vectors []struct {
			vectorHeader
			File     string   `json:"file"`
			Expect   string   `json:"expect"`
			Revision *int64   `json:"revision"`
			Chains   []string `json:"chains"`
			Reason   string   `json:"reason"`
		} `json:"vectors"`
	}
	loadCorpus(t, "cache.json", &file)
	var names []string
	for _, v := range file.Vectors {
		names = append(names, v.Name)
	}
	requireVectors(t, "cache.json", names)

	for _, v := range file.Vectors {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "budgets.json")
			if err := os.WriteFile(path, []byte(v.File), 0o644); err != nil {
				t.Fatal(err)
			}
			started, reason := startFromCache(t, path)
			switch v.Expect {
			case "start":
				if started == nil {
					t.Fatalf("%s: refused (%s), want a start", v.Name, reason)
				}
				if v.Revision == nil || started.Revision != *v.Revision {
					t.Errorf("%s: revision %d, want %v", v.Name, started.Revision, v.Revision)
				}
				got := started.chainNames()
				want := append([]string{}, v.Chains...)
				sort.Strings(want)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: chains %v, want %v", v.Name, got, want)
				}
				// What this client writes back is what it read, for either client to start from.
				again := filepath.Join(t.TempDir(), "again.json")
				if err := WriteCache(again, started); err != nil {
					t.Fatal(err)
				}
				written, err := os.ReadFile(again)
				if err != nil {
					t.Fatal(err)
				}
				if !sameJSON(t, written, []byte(v.File)) {
					t.Errorf("%s: the rewritten cache differs\n got: %s\nwant: %s", v.Name, written, v.File)
				}
			case "refuse":
				if started != nil {
					t.Fatalf("%s: started, want a refusal for %s", v.Name, v.Reason)
				}
				if reason != v.Reason {
					t.Errorf("%s: refused for %s, want %s", v.Name, reason, v.Reason)
				}
			default:
				t.Fatalf("%s: unknown expectation %q", v.Name, v.Expect)
			}
		})
	}
}

// startFromCache is what a client does at start with the control plane down: read the cache
// and check it. It returns the snapshot started from, or the reason of the refusal.
func startFromCache(t *testing.T, path string) (*Snapshot, string) {
	s, err := ReadCache(path)
	if err != nil {
		var format *CacheFormatError
		if !errors.As(err, &format) {
			t.Fatalf("reading the cache failed, and not for its format: %v", err)
		}
		return nil, "format"
	}
	if err := s.Check(); err != nil {
		var refusal *Refusal
		if !errors.As(err, &refusal) {
			t.Fatalf("Check returned %T, want *Refusal: %v", err, err)
		}
		return nil, refusal.Check
	}
	return s, ""
}
