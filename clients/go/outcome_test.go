package budgetagent

import (
	"reflect"
	"testing"
)

func TestOutcomeAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		segment string
		key     bool
		failure Failure
		want    Outcome
	}{
		// inventory: idempotent, rules for both causes
		{"order->inventory", true, FailureDeadline, OutcomeDeadlineExceeded},
		{"order->inventory", true, FailureUnavailable, OutcomeUnavailable},
		{"order->inventory", false, FailureDeadline, OutcomeRetryRefusedNoKey},
		{"order->inventory", false, FailureUnavailable, OutcomeRetryRefusedNoKey},
		{"order->inventory", false, FailureBusiness, OutcomeBusinessError},
		{"order->inventory", true, FailureOther, OutcomeBusinessError},
		// user: not idempotent, so a missing key refuses nothing
		{"order->user", false, FailureDeadline, OutcomeDeadlineExceeded},
		{"order->user", false, FailureUnavailable, OutcomeUnavailable},
		// payment: idempotent without a deadline rule
		{"order->payment", false, FailureDeadline, OutcomeDeadlineExceeded},
		{"order->payment", false, FailureUnavailable, OutcomeRetryRefusedNoKey},
	} {
		seg, _ := exampleA().Segment(tc.segment)
		if got := OutcomeAfterFailure(seg, tc.key, tc.failure); got != tc.want {
			t.Errorf("%s, key %v, %v: %q, want %q", tc.segment, tc.key, tc.failure, got, tc.want)
		}
	}
}

func TestARuleAllowingNoRetryRefusesNothing(t *testing.T) {
	seg, _ := exampleA().Segment("order->inventory")
	seg.Retry.OnUnavailable.MaxRetries = 0
	if got := OutcomeAfterFailure(seg, false, FailureUnavailable); got != OutcomeUnavailable {
		t.Errorf("unavailable: %q", got)
	}
	if got := OutcomeAfterFailure(seg, false, FailureDeadline); got != OutcomeRetryRefusedNoKey {
		t.Errorf("deadline: %q", got)
	}
}

func TestAllOutcomesInCounterOrder(t *testing.T) {
	want := []Outcome{"ok", "deadline_exceeded", "unavailable", "business_error", "budget_exhausted", "retry_refused_no_key"}
	if !reflect.DeepEqual(AllOutcomes, want) {
		t.Errorf("AllOutcomes = %v", AllOutcomes)
	}
}
