package budgetagent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestMetricsCountCallsRetriesAndSuccessfulAttempts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := newCounters(m)
	c.record(okCall("checkout", "order->inventory", 3*time.Millisecond))
	c.record(callRecord{chain: "checkout", segment: "order->inventory", outcome: OutcomeOK,
		attempts: 3, retries: [2]uint32{1, 1}, ok: true, okLatency: 2 * time.Second})
	c.record(callRecord{chain: "checkout", segment: "order->inventory", outcome: OutcomeRetryRefusedNoKey, attempts: 1})
	c.record(callRecord{chain: "checkout", segment: "order->inventory", outcome: OutcomeDeadlineExceeded,
		attempts: 3, retries: [2]uint32{2, 0}})
	// The same segment id in another chain adds to the same series (no chain label).
	c.record(okCall("refund", "order->inventory", 30*time.Millisecond))

	for _, want := range []struct {
		outcome Outcome
		n       float64
	}{
		{OutcomeOK, 3}, {OutcomeRetryRefusedNoKey, 1}, {OutcomeDeadlineExceeded, 1}, {OutcomeUnavailable, 0},
	} {
		if got := testutil.ToFloat64(m.calls.WithLabelValues("order->inventory", string(want.outcome))); got != want.n {
			t.Errorf("calls{outcome=%s} = %v, want %v", want.outcome, got, want.n)
		}
	}
	if got := testutil.ToFloat64(m.retries.WithLabelValues("order->inventory", "deadline")); got != 3 {
		t.Errorf("deadline retries %v", got)
	}
	if got := testutil.ToFloat64(m.retries.WithLabelValues("order->inventory", "unavailable")); got != 1 {
		t.Errorf("unavailable retries %v", got)
	}

	h := histogramOfSeries(t, reg, "order->inventory")
	if h.GetSampleCount() != 3 {
		t.Fatalf("%d successful attempts observed", h.GetSampleCount())
	}
	if sum := h.GetSampleSum(); sum < 2.032 || sum > 2.034 {
		t.Errorf("sum %v s", sum)
	}
	cumulative := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		cumulative[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for bound, n := range map[float64]uint64{0.005: 1, 0.025: 1, 0.05: 2, 2.5: 3} {
		if cumulative[bound] != n {
			t.Errorf("bucket le=%v: %d, want %d", bound, cumulative[bound], n)
		}
	}
}

func histogramOfSeries(t *testing.T, reg *prometheus.Registry, segment string) *dto.Histogram {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "budget_agent_attempt_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) == 1 && s.GetLabel()[0].GetValue() == segment {
				return s.GetHistogram()
			}
		}
	}
	t.Fatalf("no duration series for %s", segment)
	return nil
}

func TestMetricsHaveTheRustAgentsNamesLabelsAndBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A segment's series exist from its first call, every outcome and cause at zero.
	newCounters(m).record(okCall("checkout", "order->user", time.Millisecond))
	want := map[string]struct {
		labels []string
		series int
	}{
		"budget_agent_calls_total":              {[]string{"outcome", "segment"}, 6},
		"budget_agent_retries_total":            {[]string{"cause", "segment"}, 2},
		"budget_agent_attempt_duration_seconds": {[]string{"segment"}, 1},
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != len(want) {
		t.Fatalf("%d families", len(families))
	}
	for _, f := range families {
		w, ok := want[f.GetName()]
		if !ok || len(f.GetMetric()) != w.series {
			t.Errorf("%s: %d series", f.GetName(), len(f.GetMetric()))
			continue
		}
		for _, s := range f.GetMetric() {
			var names []string
			for _, l := range s.GetLabel() {
				names = append(names, l.GetName())
			}
			if len(names) != len(w.labels) || names[0] != w.labels[0] {
				t.Errorf("%s labels %v, want %v", f.GetName(), names, w.labels)
			}
		}
	}
	var bounds []float64
	for _, b := range histogramOfSeries(t, reg, "order->user").GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	rust := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	if len(bounds) != len(rust) {
		t.Fatalf("buckets %v", bounds)
	}
	for i := range rust {
		if bounds[i] != rust[i] {
			t.Errorf("buckets %v, want %v", bounds, rust)
		}
	}

	// Two agents in one process share the collectors of one registry.
	again, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("second NewMetrics on one registry: %v", err)
	}
	newCounters(again).record(okCall("checkout", "order->user", time.Millisecond))
	if got := testutil.ToFloat64(m.calls.WithLabelValues("order->user", "ok")); got != 2 {
		t.Errorf("shared ok calls %v", got)
	}
	if testutil.CollectAndCount(m.calls) != 6 {
		t.Error("one segment, six outcome series")
	}
}
