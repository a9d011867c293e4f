package budgetagent

// The agent's Prometheus series, named and labelled as the Rust agent's so that one dashboard
// serves services in either language:
//
//   - budget_agent_calls_total{segment,outcome}: calls by outcome name;
//   - budget_agent_retries_total{segment,cause}: retries made, cause "deadline" or "unavailable";
//   - budget_agent_attempt_duration_seconds{segment}: histogram of successful attempts.
//
// A segment id found in several chains is one series (the labels carry no chain). A segment's
// series are resolved once, when its counters are made, so a call does no label lookup.

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// attemptDurationBuckets are the bucket bounds of budget_agent_attempt_duration_seconds, in
// seconds: 5 ms to 5 s, those the Rust agent's documentation sets for its exporter.
var attemptDurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// Metrics are the agent's Prometheus collectors. Make them once with NewMetrics and pass them
// in Options.Metrics; several agents in one process may share them.
type Metrics struct {
	calls    *prometheus.CounterVec
	retries  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics makes the agent's collectors and registers them with reg
// (prometheus.DefaultRegisterer when nil). If reg already holds collectors of the same
// names and labels (a second NewMetrics on one registry), those are used.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	calls, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "budget_agent_calls_total",
		Help: "Calls made through the budget agent, by segment and outcome.",
	}, []string{"segment", "outcome"}))
	if err != nil {
		return nil, err
	}
	retries, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "budget_agent_retries_total",
		Help: "Retries made by the budget agent under R-retry, by segment and cause.",
	}, []string{"segment", "cause"}))
	if err != nil {
		return nil, err
	}
	duration, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "budget_agent_attempt_duration_seconds",
		Help:    "Duration of successful attempts, by segment.",
		Buckets: attemptDurationBuckets,
	}, []string{"segment"}))
	if err != nil {
		return nil, err
	}
	return &Metrics{calls: calls, retries: retries, duration: duration}, nil
}

// register registers c, or returns the equal collector reg already holds.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// segmentSeries are one segment's series, resolved once.
type segmentSeries struct {
	calls    [6]prometheus.Counter // by index in AllOutcomes
	retries  [2]prometheus.Counter // deadline, unavailable
	duration prometheus.Observer
}

// series resolves the series of segment, creating them at zero.
func (m *Metrics) series(segment string) *segmentSeries {
	s := &segmentSeries{duration: m.duration.WithLabelValues(segment)}
	for i, o := range AllOutcomes {
		s.calls[i] = m.calls.WithLabelValues(segment, string(o))
	}
	for i, cause := range retryCauses {
		s.retries[i] = m.retries.WithLabelValues(segment, cause)
	}
	return s
}

// add counts one finished call whose outcome is at index outcome of AllOutcomes.
func (s *segmentSeries) add(r *callRecord, outcome int) {
	s.calls[outcome].Inc()
	for i, n := range r.retries {
		if n > 0 {
			s.retries[i].Add(float64(n))
		}
	}
	if r.ok {
		s.duration.Observe(r.okLatency.Seconds())
	}
}
