package budgetagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"
)

// The classes of a segment (SPEC §3 R-margin).
const (
	ClassVolatile = "volatile"
	ClassStable   = "stable"
)

// Snapshot is the live config an agent enforces: one publication revision and the complete
// config of each chain it watches. Its JSON is the disk cache's format, the same the Rust
// agent writes, so either client can start from the other's cache.
type Snapshot struct {
	Revision int64             `json:"revision"`
	Chains   map[string]*Chain `json:"chains"`
}

// Chain is one chain's published budgets at one revision, in the JSON that
// GET /api/v1/chains/{chain}/budgets serves.
type Chain struct {
	Chain           string    `json:"chain"`
	Revision        int64     `json:"revision"`
	BaselineID      string    `json:"baseline_id"`
	PublishedAt     string    `json:"published_at"`
	EntryBudgetMs   uint64    `json:"entry_budget_ms"`
	BreakerWindowMs uint64    `json:"breaker_window_ms"`
	MaxRecovery     Duration  `json:"max_recovery"`
	Segments        []Segment `json:"segments"`
}

// Segment is one call (`caller->callee`) of a chain with its timeout, budget and retry plan.
type Segment struct {
	ID     string `json:"id"`
	Caller string `json:"caller"`
	Callee string `json:"callee"`
	// Parent is the segment whose handler makes this call; nil for the root.
	Parent *string `json:"parent"`
	// Stage groups siblings that run in parallel; nil for a child that is its own stage.
	Stage       *uint32      `json:"stage,omitempty"`
	Class       string       `json:"class"`
	TimeoutMs   uint64       `json:"timeout_ms"`
	BudgetMs    uint64       `json:"budget_ms"`
	ReserveMs   uint64       `json:"reserve_ms"`
	Retry       RetryPlan    `json:"retry"`
	Idempotency *Idempotency `json:"idempotency,omitempty"`
}

// RetryPlan is R-retry for one segment: a rule per cause it retries on, none for the others.
type RetryPlan struct {
	Idempotent    bool       `json:"idempotent"`
	OnDeadline    *RetryRule `json:"on_deadline,omitempty"`
	OnUnavailable *RetryRule `json:"on_unavailable,omitempty"`
}

// RetryRule is how one cause is retried.
type RetryRule struct {
	MaxRetries uint32   `json:"max_retries"`
	BackoffsMs []uint64 `json:"backoffs_ms"`
	JitterPct  uint64   `json:"jitter_pct"`
	// WorstCaseBackoffMs is Σ backoffs × (1 + jitter): the longest the waits can take.
	WorstCaseBackoffMs uint64 `json:"worst_case_backoff_ms"`
}

// Idempotency names the de-duplication key a caller sends and how long the callee keeps it.
type Idempotency struct {
	Key string   `json:"key"`
	TTL Duration `json:"ttl"`
}

// ParseSnapshot reads a snapshot (the disk cache's format) as strictly as the Rust agent:
// a missing required field, a value of the wrong type, an unknown class or a malformed
// duration is an error. The snapshot is not validated (a timeout of 0 ms, for one, parses and
// is a structure error); see Snapshot.Check.
func ParseSnapshot(data []byte) (*Snapshot, error) {
	var s Snapshot
	if err := parseDocument(data, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ParseChain reads one chain's live config as strictly as ParseSnapshot. It is not
// validated; see Chain.Findings.
func ParseChain(data []byte) (*Chain, error) {
	var c Chain
	if err := parseDocument(data, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func parseDocument(data []byte, dst json.Unmarshaler) error {
	if !utf8.Valid(data) {
		return errors.New("invalid UTF-8 in the config")
	}
	return json.Unmarshal(data, dst)
}

// Segment finds segment id in any chain. When several chains define it, the one with the
// smallest budget (then the smallest timeout) wins, so a call never exceeds any chain's
// budget; chain is the name its calls are counted under.
func (s *Snapshot) Segment(id string) (chain string, seg *Segment, ok bool) {
	for _, name := range s.chainNames() {
		found, has := s.Chains[name].Segment(id)
		if !has {
			continue
		}
		if seg == nil || found.BudgetMs < seg.BudgetMs ||
			(found.BudgetMs == seg.BudgetMs && found.TimeoutMs < seg.TimeoutMs) {
			chain, seg = name, found
		}
	}
	return chain, seg, seg != nil
}

// chainNames lists the chains in name order, the order the Rust agent walks them in.
func (s *Snapshot) chainNames() []string {
	names := make([]string, 0, len(s.Chains))
	for name, c := range s.Chains {
		if c != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// Segment finds the first segment of the chain with this id.
func (c *Chain) Segment(id string) (*Segment, bool) {
	for i := range c.Segments {
		if c.Segments[i].ID == id {
			return &c.Segments[i], true
		}
	}
	return nil, false
}

// MarshalJSON writes an absent chain map as {}, as the Rust agent does.
func (s Snapshot) MarshalJSON() ([]byte, error) {
	type plain Snapshot
	p := plain(s)
	if p.Chains == nil {
		p.Chains = map[string]*Chain{}
	}
	return marshalPlain(p)
}

// MarshalJSON writes absent segments as [], as the Rust agent does.
func (c Chain) MarshalJSON() ([]byte, error) {
	type plain Chain
	p := plain(c)
	if p.Segments == nil {
		p.Segments = []Segment{}
	}
	return marshalPlain(p)
}

// MarshalJSON writes absent backoffs as [], as the Rust agent does.
func (r RetryRule) MarshalJSON() ([]byte, error) {
	type plain RetryRule
	p := plain(r)
	if p.BackoffsMs == nil {
		p.BackoffsMs = []uint64{}
	}
	return marshalPlain(p)
}

// marshalPlain encodes without escaping '>' (every segment id has one), as serde does.
func marshalPlain(v interface{}) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// UnmarshalJSON reads a snapshot strictly (see ParseSnapshot).
func (s *Snapshot) UnmarshalJSON(data []byte) error {
	o, err := readObject(data, false)
	if err != nil {
		return err
	}
	var next Snapshot
	if err := o.required("revision", &next.Revision); err != nil {
		return err
	}
	raw, err := o.get("chains")
	if err != nil {
		return err
	}
	chains, err := readObject(raw, true)
	if err != nil {
		return at("chains", err)
	}
	next.Chains = make(map[string]*Chain, len(chains.members))
	for _, m := range chains.list {
		var c Chain
		if err := decodeInto(m.raw, &c); err != nil {
			return at("chains", at(m.name, err))
		}
		next.Chains[m.name] = &c
	}
	*s = next
	return nil
}

// UnmarshalJSON reads one chain's config strictly (see ParseChain).
func (c *Chain) UnmarshalJSON(data []byte) error {
	o, err := readObject(data, false)
	if err != nil {
		return err
	}
	var next Chain
	for _, f := range []struct {
		name string
		dst  interface{}
	}{
		{"chain", &next.Chain},
		{"revision", &next.Revision},
		{"baseline_id", &next.BaselineID},
		{"published_at", &next.PublishedAt},
		{"entry_budget_ms", &next.EntryBudgetMs},
		{"breaker_window_ms", &next.BreakerWindowMs},
		{"max_recovery", &next.MaxRecovery},
	} {
		if err := o.required(f.name, f.dst); err != nil {
			return err
		}
	}
	raw, err := o.get("segments")
	if err != nil {
		return err
	}
	err = decodeList(raw, func(item json.RawMessage) error {
		var s Segment
		if err := s.UnmarshalJSON(item); err != nil {
			return err
		}
		next.Segments = append(next.Segments, s)
		return nil
	})
	if err != nil {
		return at("segments", err)
	}
	if next.Segments == nil {
		next.Segments = []Segment{}
	}
	*c = next
	return nil
}

// UnmarshalJSON reads one segment strictly; parent, stage, reserve_ms and idempotency may
// be absent, as in the Rust agent.
func (s *Segment) UnmarshalJSON(data []byte) error {
	o, err := readObject(data, false)
	if err != nil {
		return err
	}
	var next Segment
	for _, f := range []struct {
		name string
		dst  interface{}
	}{
		{"id", &next.ID},
		{"caller", &next.Caller},
		{"callee", &next.Callee},
		{"class", &next.Class},
		{"timeout_ms", &next.TimeoutMs},
		{"budget_ms", &next.BudgetMs},
		{"retry", &next.Retry},
	} {
		if err := o.required(f.name, f.dst); err != nil {
			return err
		}
	}
	if next.Class != ClassVolatile && next.Class != ClassStable {
		return at("class", fmt.Errorf("unknown class %q, expected %q or %q", next.Class, ClassVolatile, ClassStable))
	}
	if err := o.defaulted("reserve_ms", &next.ReserveMs); err != nil {
		return err
	}
	if err := optional(o, "parent", &next.Parent); err != nil {
		return err
	}
	if err := optional(o, "stage", &next.Stage); err != nil {
		return err
	}
	if err := optional(o, "idempotency", &next.Idempotency); err != nil {
		return err
	}
	*s = next
	return nil
}

// UnmarshalJSON reads a retry plan strictly; a cause without a rule is never retried.
func (p *RetryPlan) UnmarshalJSON(data []byte) error {
	o, err := readObject(data, false)
	if err != nil {
		return err
	}
	var next RetryPlan
	if err := o.required("idempotent", &next.Idempotent); err != nil {
		return err
	}
	if err := optional(o, "on_deadline", &next.OnDeadline); err != nil {
		return err
	}
	if err := optional(o, "on_unavailable", &next.OnUnavailable); err != nil {
		return err
	}
	*p = next
	return nil
}

// UnmarshalJSON reads a retry rule strictly: every field is required.
func (r *RetryRule) UnmarshalJSON(data []byte) error {
	o, err := readObject(data, false)
	if err != nil {
		return err
	}
	var next RetryRule
	if err := o.required("max_retries", &next.MaxRetries); err != nil {
		return err
	}
	raw, err := o.get("backoffs_ms")
	if err != nil {
		return err
	}
	next.BackoffsMs = []uint64{}
	err = decodeList(raw, func(item json.RawMessage) error {
		var ms uint64
		if err := decodeInto(item, &ms); err != nil {
			return err
		}
		next.BackoffsMs = append(next.BackoffsMs, ms)
		return nil
	})
	if err != nil {
		return at("backoffs_ms", err)
	}
	if err := o.required("jitter_pct", &next.JitterPct); err != nil {
		return err
	}
	if err := o.required("worst_case_backoff_ms", &next.WorstCaseBackoffMs); err != nil {
		return err
	}
	*r = next
	return nil
}

// UnmarshalJSON reads an idempotency rule strictly; like the control plane, it refuses
// fields it does not know (a misspelt "ttl" must not pass as a missing one).
func (i *Idempotency) UnmarshalJSON(data []byte) error {
	o, err := readObject(data, false)
	if err != nil {
		return err
	}
	for _, m := range o.list {
		if m.name != "key" && m.name != "ttl" {
			return fmt.Errorf("unknown field %q, expected \"key\" or \"ttl\"", m.name)
		}
	}
	var next Idempotency
	if err := o.required("key", &next.Key); err != nil {
		return err
	}
	if err := o.required("ttl", &next.TTL); err != nil {
		return err
	}
	*i = next
	return nil
}
