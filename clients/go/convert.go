package budgetagent

import (
	"fmt"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// A received config becomes core values here, at the boundary, and a message that cannot is
// refused naming its bad field (the same rules as the Rust agent's conversion).

// convertError is a field of a received message that cannot become a core value.
type convertError struct {
	field, message string
}

func (e *convertError) Error() string { return e.field + ": " + e.message }

// chainFromProto converts one ChainBudget of a BudgetUpdate.
func chainFromProto(c *pb.ChainBudget) (*Chain, error) {
	if c.GetChain() == "" {
		return nil, &convertError{"chain", "must not be empty"}
	}
	if c.GetEntryBudgetMs() == 0 {
		return nil, &convertError{"entry_budget_ms", "must be greater than 0"}
	}
	if c.GetRevision() <= 0 {
		return nil, &convertError{"revision", "must be positive"}
	}
	out := &Chain{
		Chain:           c.GetChain(),
		Revision:        c.GetRevision(),
		BaselineID:      c.GetBaselineId(),
		PublishedAt:     c.GetPublishedAt(),
		EntryBudgetMs:   c.GetEntryBudgetMs(),
		BreakerWindowMs: c.GetBreakerWindowMs(),
		MaxRecovery:     Duration{Ms: c.GetMaxRecoveryMs()},
		Segments:        make([]Segment, 0, len(c.GetSegments())),
	}
	for i, s := range c.GetSegments() {
		seg, err := segmentFromProto(i, s)
		if err != nil {
			return nil, err
		}
		out.Segments = append(out.Segments, seg)
	}
	return out, nil
}

func segmentFromProto(i int, s *pb.SegmentBudget) (Segment, error) {
	at := func(field, format string, args ...interface{}) error {
		return &convertError{fmt.Sprintf("segments[%d].%s", i, field), fmt.Sprintf(format, args...)}
	}
	if s.GetId() == "" {
		return Segment{}, at("id", "must not be empty")
	}
	if s.GetClass() != ClassVolatile && s.GetClass() != ClassStable {
		return Segment{}, at("class", "unknown class %q", s.GetClass())
	}
	if s.GetTimeoutMs() == 0 {
		return Segment{}, at("timeout_ms", "must be greater than 0")
	}
	if s.GetBudgetMs() < s.GetTimeoutMs() {
		return Segment{}, at("budget_ms", "%d is below the timeout %d", s.GetBudgetMs(), s.GetTimeoutMs())
	}
	if s.GetRetry() == nil {
		return Segment{}, at("retry", "missing")
	}
	var idem *Idempotency
	if i := s.GetIdempotency(); i != nil {
		if i.GetKey() == "" {
			return Segment{}, at("idempotency.key", "must not be empty")
		}
		idem = &Idempotency{Key: i.GetKey(), TTL: Duration{Ms: i.GetTtlMs()}}
	}
	r := s.GetRetry()
	if (r.GetOnDeadline() != nil || r.GetOnUnavailable() != nil) && idem == nil {
		return Segment{}, at("retry", "retries on a segment without an idempotency key")
	}
	seg := Segment{
		ID:        s.GetId(),
		Caller:    s.GetCaller(),
		Callee:    s.GetCallee(),
		Stage:     s.Stage,
		Class:     s.GetClass(),
		TimeoutMs: s.GetTimeoutMs(),
		BudgetMs:  s.GetBudgetMs(),
		ReserveMs: s.GetReserveMs(),
		Retry: RetryPlan{
			Idempotent:    r.GetIdempotent(),
			OnDeadline:    ruleFromProto(r.GetOnDeadline()),
			OnUnavailable: ruleFromProto(r.GetOnUnavailable()),
		},
		Idempotency: idem,
	}
	if p := s.GetParent(); p != "" {
		seg.Parent = &p
	}
	return seg, nil
}

func ruleFromProto(r *pb.RetryRule) *RetryRule {
	if r == nil {
		return nil
	}
	backoffs := append([]uint64{}, r.GetBackoffsMs()...)
	return &RetryRule{
		MaxRetries:         r.GetMaxRetries(),
		BackoffsMs:         backoffs,
		JitterPct:          r.GetJitterPct(),
		WorstCaseBackoffMs: r.GetWorstCaseBackoffMs(),
	}
}

// applyUpdate is the snapshot after update: each chain present replaces the one held and the
// revision becomes the update's. It is refused, leaving cur as it was, when a chain is
// malformed or has an error finding.
func applyUpdate(cur *Snapshot, update *pb.BudgetUpdate) (*Snapshot, *Refusal) {
	next := &Snapshot{Revision: update.GetRevision(), Chains: make(map[string]*Chain, len(cur.Chains))}
	for name, c := range cur.Chains {
		next.Chains[name] = c
	}
	for _, wire := range update.GetChains() {
		chain, err := chainFromProto(wire)
		if err != nil {
			return nil, &Refusal{Chain: wire.GetChain(), Message: "malformed config: " + err.Error()}
		}
		if r := chain.refusal(); r != nil {
			return nil, r
		}
		next.Chains[chain.Chain] = chain
	}
	return next, nil
}
