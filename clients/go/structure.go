package budgetagent

import (
	"fmt"
	"strings"
	"unicode"
)

// MaxConfigMs is the longest time, in milliseconds, a config may give (about 31.7 years): a
// longer one is no timeout budget, and below it a deadline (now + budget, 10^18 ns at most)
// fits a time.Duration and the checks' sums stay exact. Longer durations are structure errors.
const MaxConfigMs uint64 = 1_000_000_000_000

// MaxSegments is the most segments a chain may have (the control plane's topology schema
// refuses more). A config with more gets one finding alone, before any check whose cost grows
// faster than its segments.
const MaxSegments = 1000

// MaxRuleRetries is the most retries a received rule may allow for one cause (R-retry allows
// 1 and 2): more is no plan the control plane derives, and could turn a fast failure into a
// retry storm.
const MaxRuleRetries uint32 = 10

// structure finds every way the config fails to be one call tree, as the control plane's
// topology validation does, then what no server derives but a received config may carry
// (see receivedFaults): each problem located by a JSON pointer into the config, with the
// control plane's message, in its order.
func (c *Chain) structure() []Finding {
	var findings []Finding
	push := func(pointer, message string) {
		findings = append(findings, Finding{
			Check:    CheckStructure,
			Severity: SeverityError,
			Message:  pointer + ": " + message,
			Pointer:  pointer,
		})
	}

	if len(c.Segments) > MaxSegments {
		push("/segments", fmt.Sprintf("a chain has at most %d segments", MaxSegments))
		return findings
	}
	if c.EntryBudgetMs == 0 {
		push("/entry_budget_ms", "must be greater than 0")
	}
	if c.BreakerWindowMs == 0 {
		push("/breaker_window_ms", "must be greater than 0")
	}
	if len(c.Segments) == 0 {
		push("/segments", "a chain needs at least its root segment")
	}

	firstIndex := map[string]int{}
	for i, s := range c.Segments {
		at := func(field string) string { return fmt.Sprintf("/segments/%d/%s", i, field) }
		if prev, dup := firstIndex[s.ID]; dup {
			push(at("id"), fmt.Sprintf("duplicate segment id %s (first at /segments/%d)", rustQuote(s.ID), prev))
		} else {
			firstIndex[s.ID] = i
		}
		if s.Caller == "" || s.Callee == "" {
			push(at("caller"), "caller and callee must not be empty")
		}
		if expected := s.Caller + "->" + s.Callee; s.ID != expected {
			push(at("id"), fmt.Sprintf("id %s does not match caller->callee %s", rustQuote(s.ID), rustQuote(expected)))
		}
		// A rule in the plan is a retry the config asks for; only an idempotent call may have one.
		if (s.Retry.OnDeadline != nil || s.Retry.OnUnavailable != nil) && s.Idempotency == nil {
			push(at("retry"), fmt.Sprintf("segment %s retries but has no idempotency key; only idempotent calls may retry", rustQuote(s.ID)))
		}
		if s.Idempotency != nil {
			if strings.TrimSpace(s.Idempotency.Key) == "" {
				push(at("idempotency/key"), "must not be empty")
			}
			if s.Idempotency.TTL.Ms == 0 {
				push(at("idempotency/ttl"), "must be greater than 0")
			}
		}
		if s.Parent == nil && s.Stage != nil {
			push(at("stage"), "the root segment has no siblings; stage does not apply")
		}
	}

	var roots []int
	for i, s := range c.Segments {
		if s.Parent == nil {
			roots = append(roots, i)
		}
	}
	switch {
	case len(roots) == 0 && len(c.Segments) > 0:
		push("/segments", `no root segment: exactly one segment must have "parent": null`)
	case len(roots) > 1:
		// Each extra root names the first one only, so the findings grow with the roots, not
		// with their square.
		first := rustQuote(c.Segments[roots[0]].ID)
		for _, i := range roots[1:] {
			push(fmt.Sprintf("/segments/%d/parent", i),
				fmt.Sprintf("more than one root segment (%s is already the root); exactly one may have no parent", first))
		}
	}

	// A later segment of the same id shadows an earlier one, as in the control plane.
	byID := make(map[string]*Segment, len(c.Segments))
	for i := range c.Segments {
		byID[c.Segments[i].ID] = &c.Segments[i]
	}
	for i, s := range c.Segments {
		if s.Parent == nil {
			continue
		}
		parent, ok := byID[*s.Parent]
		switch {
		case !ok:
			push(fmt.Sprintf("/segments/%d/parent", i),
				fmt.Sprintf("parent %s of %s is not a segment of this chain", rustQuote(*s.Parent), rustQuote(s.ID)))
		case parent.Callee != s.Caller:
			push(fmt.Sprintf("/segments/%d/caller", i),
				fmt.Sprintf("%s is called by %s, but its parent %s is handled by %s",
					rustQuote(s.ID), rustQuote(s.Caller), rustQuote(parent.ID), rustQuote(parent.Callee)))
		}
	}

	// Cycles: follow parents from every segment; a walk longer than the chain loops.
	reported := map[string]bool{}
	for i := range c.Segments {
		s := &c.Segments[i]
		cur := s
		for steps := 1; ; steps++ {
			if cur.Parent == nil {
				break
			}
			p, ok := byID[*cur.Parent]
			if !ok {
				break
			}
			if p.ID == s.ID || steps > len(c.Segments) {
				if p.ID == s.ID && !reported[s.ID] {
					reported[s.ID] = true
					push(fmt.Sprintf("/segments/%d/parent", i),
						fmt.Sprintf("segment %s is its own ancestor: parents form a cycle", rustQuote(s.ID)))
				}
				break
			}
			cur = p
		}
	}

	c.receivedFaults(push)
	return findings
}

// receivedFaults pushes what no server derives but a received config may carry: segment by
// segment, a timeout of 0, a budget below its timeout and a rule allowing more than
// MaxRuleRetries; then every duration above MaxConfigMs.
func (c *Chain) receivedFaults(push func(pointer, message string)) {
	for i, s := range c.Segments {
		at := func(field string) string { return fmt.Sprintf("/segments/%d/%s", i, field) }
		// Every attempt of a 0 ms timeout would fail before it starts.
		if s.TimeoutMs == 0 {
			push(at("timeout_ms"), "must be greater than 0")
		}
		if s.BudgetMs < s.TimeoutMs {
			push(at("budget_ms"), fmt.Sprintf("%d is below the timeout %d", s.BudgetMs, s.TimeoutMs))
		}
		for _, rule := range []struct {
			cause string
			rule  *RetryRule
		}{{"on_deadline", s.Retry.OnDeadline}, {"on_unavailable", s.Retry.OnUnavailable}} {
			if rule.rule != nil && rule.rule.MaxRetries > MaxRuleRetries {
				push(at("retry/"+rule.cause+"/max_retries"), fmt.Sprintf("must be at most %d", MaxRuleRetries))
			}
		}
	}

	bounded := func(pointer string, ms uint64) {
		if ms > MaxConfigMs {
			push(pointer, fmt.Sprintf("must be at most %d ms", MaxConfigMs))
		}
	}
	bounded("/entry_budget_ms", c.EntryBudgetMs)
	bounded("/breaker_window_ms", c.BreakerWindowMs)
	for i, s := range c.Segments {
		at := func(field string) string { return fmt.Sprintf("/segments/%d/%s", i, field) }
		bounded(at("timeout_ms"), s.TimeoutMs)
		bounded(at("budget_ms"), s.BudgetMs)
		bounded(at("reserve_ms"), s.ReserveMs)
	}
}

// rustQuote quotes s as the control plane's messages quote names (Rust's Debug form of a
// string), so messages match byte for byte: `"a\"b"`, `"tab\t"`, `"\u{7f}"`.
func rustQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		case '\n':
			b.WriteString(`\n`)
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case 0:
			b.WriteString(`\0`)
		default:
			if unicode.IsPrint(r) && !unicode.In(r, unicode.Mn, unicode.Me, unicode.Other_Grapheme_Extend) {
				b.WriteRune(r)
			} else {
				fmt.Fprintf(&b, `\u{%x}`, r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
