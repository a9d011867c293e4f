package budgetagent

import (
	"bytes"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// The checks a client re-runs on every config it receives (SPEC §3), by their names.
const (
	CheckStructure      = "structure"
	CheckInversion      = "inversion"
	CheckBreakerWindow  = "breaker_window"
	CheckIdempotencyTTL = "idempotency_ttl"
)

// The severities of a finding: any error refuses the config.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// Finding is one problem of a config: which check, on which segment, how bad, the message in
// plain words and the numbers behind it. Only the numbers of its check are meaningful; its
// JSON is the control plane's, field for field.
type Finding struct {
	Check    string
	Segment  string
	Severity string
	Message  string

	// structure: a JSON pointer into the config.
	Pointer string
	// inversion: the children's need against what their parent has.
	NeedMs      uint64
	AvailableMs int64
	ExcessMs    int64
	Stages      []StageNeed
	// breaker_window: the window against the worst-case retry backoff.
	BreakerWindowMs    uint64
	WorstCaseBackoffMs uint64
	Ratio              float64
	// idempotency_ttl: the key's lifetime against the longest recovery.
	Key           string
	TTLMs         uint64
	MaxRecoveryMs uint64
}

// StageNeed is one stage of a parent's children: they run in parallel, so the stage needs its
// largest budget.
type StageNeed struct {
	// Stage is the stage number given in the config, nil for a child that is its own stage.
	Stage       *uint32  `json:"stage"`
	Segments    []string `json:"segments"`
	MaxBudgetMs uint64   `json:"max_budget_ms"`
}

// MarshalJSON writes the control plane's JSON of a finding: the check's name and numbers,
// then segment, severity and message.
func (f Finding) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"check":`)
	writeJSONString(&b, f.Check)
	member := func(name, value string) {
		b.WriteString(`,"` + name + `":` + value)
	}
	switch f.Check {
	case CheckStructure:
		b.WriteString(`,"pointer":`)
		writeJSONString(&b, f.Pointer)
	case CheckInversion:
		member("need_ms", strconv.FormatUint(f.NeedMs, 10))
		member("available_ms", strconv.FormatInt(f.AvailableMs, 10))
		member("excess_ms", strconv.FormatInt(f.ExcessMs, 10))
		stages := f.Stages
		if stages == nil {
			stages = []StageNeed{}
		}
		encoded, err := marshalPlain(stages)
		if err != nil {
			return nil, err
		}
		member("stages", string(encoded))
	case CheckBreakerWindow:
		member("breaker_window_ms", strconv.FormatUint(f.BreakerWindowMs, 10))
		member("worst_case_backoff_ms", strconv.FormatUint(f.WorstCaseBackoffMs, 10))
		member("ratio", jsonFloat(f.Ratio))
	case CheckIdempotencyTTL:
		b.WriteString(`,"key":`)
		writeJSONString(&b, f.Key)
		member("ttl_ms", strconv.FormatUint(f.TTLMs, 10))
		member("max_recovery_ms", strconv.FormatUint(f.MaxRecoveryMs, 10))
	default:
		return nil, fmt.Errorf("finding of unknown check %q", f.Check)
	}
	b.WriteString(`,"segment":`)
	writeJSONString(&b, f.Segment)
	b.WriteString(`,"severity":`)
	writeJSONString(&b, f.Severity)
	b.WriteString(`,"message":`)
	writeJSONString(&b, f.Message)
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	encoded, _ := marshalPlain(s) // a string always encodes
	b.Write(encoded)
}

// Findings is everything wrong with the config, exactly as the control plane finds it:
// structural problems alone when the config is not a valid call tree, otherwise the budget
// checks in order (inversion, breaker_window, idempotency_ttl), each in segment order.
func (c *Chain) Findings() []Finding {
	if findings := c.structure(); len(findings) > 0 {
		return findings
	}
	var findings []Finding
	findings = append(findings, c.inversions()...)
	findings = append(findings, c.breakerWindows()...)
	findings = append(findings, c.idempotencyTTLs()...)
	return findings
}

// stages groups the children of parent by stage, in order of first appearance. Only called
// once the structure is valid, so every id names one segment.
func (c *Chain) stages(parent string) []StageNeed {
	var stages []StageNeed
	for _, child := range c.Segments {
		if child.Parent == nil || *child.Parent != parent {
			continue
		}
		budget := child.BudgetMs
		joined := false
		if child.Stage != nil {
			for i := range stages {
				st := &stages[i]
				if st.Stage != nil && *st.Stage == *child.Stage {
					st.Segments = append(st.Segments, child.ID)
					if budget > st.MaxBudgetMs {
						st.MaxBudgetMs = budget
					}
					joined = true
					break
				}
			}
		}
		if !joined {
			stages = append(stages, StageNeed{Stage: child.Stage, Segments: []string{child.ID}, MaxBudgetMs: budget})
		}
	}
	return stages
}

func (c *Chain) inversions() []Finding {
	var findings []Finding
	for _, parent := range c.Segments {
		stages := c.stages(parent.ID)
		if len(stages) == 0 {
			continue
		}
		need := uint64(0)
		parts := make([]string, len(stages))
		for i, st := range stages {
			need += st.MaxBudgetMs
			parts[i] = strconv.FormatUint(st.MaxBudgetMs, 10)
		}
		available := int64(parent.TimeoutMs) - int64(parent.ReserveMs)
		excess := int64(need) - available
		if excess <= 0 {
			continue
		}
		findings = append(findings, Finding{
			Check:    CheckInversion,
			Segment:  parent.ID,
			Severity: SeverityError,
			Message: fmt.Sprintf("children of %s need %d ms (%s), only %d ms available — %d ms over: budget inversion",
				parent.ID, need, strings.Join(parts, " + "), available, excess),
			NeedMs:      need,
			AvailableMs: available,
			ExcessMs:    excess,
			Stages:      stages,
		})
	}
	return findings
}

func (c *Chain) breakerWindows() []Finding {
	window := c.BreakerWindowMs
	var findings []Finding
	for _, s := range c.Segments {
		worst, retries := s.Retry.worstCaseBackoffMs()
		// A plan whose waits take no time cannot outlast any window.
		if !retries || worst == 0 {
			continue
		}
		var severity, verdict string
		switch {
		case window <= worst:
			severity, verdict = SeverityError, "the breaker opens before the retries finish"
		case window/10 < worst: // window < 10 × worst, without overflowing
			severity, verdict = SeverityWarning, "under 10×: probing and retries interfere"
		default:
			continue
		}
		// window × 100 ÷ worst, rounded down, then two decimals; under 1000 here, so exact.
		hi, lo := bits.Mul64(window, 100)
		hundredths, _ := bits.Div64(hi, lo, worst)
		ratio := float64(hundredths) / 100
		findings = append(findings, Finding{
			Check:    CheckBreakerWindow,
			Segment:  s.ID,
			Severity: severity,
			Message: fmt.Sprintf("%s: breaker window %d ms is %s× the worst-case retry backoff %d ms — %s",
				s.ID, window, strconv.FormatFloat(ratio, 'f', -1, 64), worst, verdict),
			BreakerWindowMs:    window,
			WorstCaseBackoffMs: worst,
			Ratio:              ratio,
		})
	}
	return findings
}

// worstCaseBackoffMs is the longest total backoff of any one cause; false when the plan
// never retries.
func (p *RetryPlan) worstCaseBackoffMs() (uint64, bool) {
	worst, found := uint64(0), false
	for _, rule := range []*RetryRule{p.OnDeadline, p.OnUnavailable} {
		if rule != nil && (!found || rule.WorstCaseBackoffMs > worst) {
			worst, found = rule.WorstCaseBackoffMs, true
		}
	}
	return worst, found
}

func (c *Chain) idempotencyTTLs() []Finding {
	recovery := c.MaxRecovery
	var findings []Finding
	for _, s := range c.Segments {
		idem := s.Idempotency
		if idem == nil || idem.TTL.Ms >= recovery.Ms {
			continue
		}
		findings = append(findings, Finding{
			Check:    CheckIdempotencyTTL,
			Segment:  s.ID,
			Severity: SeverityError,
			Message: fmt.Sprintf("%s: idempotency key %s lives %s but the longest recovery is %s; a retry after recovery could run twice",
				s.ID, idem.Key, idem.TTL, recovery),
			Key:           idem.Key,
			TTLMs:         idem.TTL.Ms,
			MaxRecoveryMs: recovery.Ms,
		})
	}
	return findings
}

// jsonFloat writes a float as serde does: integral values keep ".0", and very large or very
// small magnitudes use an exponent ("1e16", "1.5e-7").
func jsonFloat(f float64) string {
	if f == 0 {
		return "0.0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// Shortest round-trip digits d.ddd and exponent, e.g. "1.234e+05".
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	mantissa, expText := sci[:strings.IndexByte(sci, 'e')], sci[strings.IndexByte(sci, 'e')+1:]
	digits := strings.Replace(mantissa, ".", "", 1)
	exp, _ := strconv.Atoi(expText)
	n := len(digits)
	k := exp - (n - 1) // value = digits × 10^k
	kk := n + k        // 10^(kk-1) ≤ value < 10^kk
	switch {
	case k >= 0 && kk <= 16:
		return sign + digits + strings.Repeat("0", k) + ".0"
	case kk > 0 && kk <= 16:
		return sign + digits[:kk] + "." + digits[kk:]
	case kk > -5 && kk <= 0:
		return sign + "0." + strings.Repeat("0", -kk) + digits
	case n == 1:
		return sign + digits + "e" + strconv.Itoa(kk-1)
	default:
		return sign + digits[:1] + "." + digits[1:] + "e" + strconv.Itoa(kk-1)
	}
}

// Refusal is why a config was refused: the first chain and segment with an error finding
// (in chain-name order), the first error's check, and every error message of that chain.
type Refusal struct {
	Chain string
	// Segment is empty when the problem is not tied to one segment (a structural one).
	Segment string
	Message string
	// Check is the name of the first error finding's check, e.g. "inversion".
	Check string
}

// Error gives the Rust agent's text: chain "checkout", segment "gateway->order": inversion: …
func (r *Refusal) Error() string {
	return fmt.Sprintf("chain %s, segment %s: %s", rustQuote(r.Chain), rustQuote(r.Segment), r.Message)
}

// Check validates every chain with the control plane's checks: nil, or a *Refusal for the
// first chain (in name order) with an error finding. A refused snapshot must not be used.
func (s *Snapshot) Check() error {
	for _, name := range s.chainNames() {
		if r := s.Chains[name].refusal(); r != nil {
			return r
		}
	}
	return nil
}

func (c *Chain) refusal() *Refusal {
	var first *Finding
	var messages []string
	findings := c.Findings()
	for i, f := range findings {
		if f.Severity != SeverityError {
			continue
		}
		if first == nil {
			first = &findings[i]
		}
		messages = append(messages, f.Check+": "+f.Message)
	}
	if first == nil {
		return nil
	}
	return &Refusal{Chain: c.Chain, Segment: first.Segment, Message: strings.Join(messages, "; "), Check: first.Check}
}
