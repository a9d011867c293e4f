package budgetagent

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseDuration(t *testing.T) {
	for input, want := range map[string]uint64{
		"24h": 86_400_000, "18h": 64_800_000, "7d": 604_800_000, "500ms": 500,
		"30s": 30_000, "15m": 900_000, "0s": 0, "007h": 7 * 3_600_000,
		"18446744073709551615ms": 18446744073709551615,
	} {
		got, err := ParseDuration(input)
		if err != nil || got.Ms != want {
			t.Errorf("ParseDuration(%q) = %d, %v; want %d", input, got.Ms, err, want)
		}
	}
	for _, bad := range []string{
		"", "h", "24", "24 h", " 24h", "1.5h", "-1h", "+1h", "24hours", "24H", "1us",
		"99999999999999999999d", "213503982335d", "18446744073709551616ms",
	} {
		if got, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) = %d, want an error", bad, got.Ms)
		}
	}
	_, err := ParseDuration("1.5h")
	if want := `invalid duration "1.5h": expected a whole number followed by ms, s, m, h or d (e.g. "24h")`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

func TestDurationStringUsesTheLargestExactUnit(t *testing.T) {
	for ms, want := range map[uint64]string{
		86_400_000:  "24h", // one day reads as the usual TTL
		604_800_000: "7d",
		172_800_000: "2d",
		64_800_000:  "18h",
		1_500:       "1500ms",
		90_000:      "90s",
		120_000:     "2m",
		0:           "0s",
		1:           "1ms",
	} {
		if got := (Duration{Ms: ms}).String(); got != want {
			t.Errorf("Duration{%d} = %q, want %q", ms, got, want)
		}
	}
}

func TestDurationRoundTrips(t *testing.T) {
	for _, ms := range []uint64{0, 1, 999, 1_000, 1_500, 60_000, 3_600_000, 86_400_000, 86_400_001, 604_800_000, 1 << 60} {
		d := Duration{Ms: ms}
		parsed, err := ParseDuration(d.String())
		if err != nil || parsed != d {
			t.Errorf("%d ms → %q → %d, %v", ms, d.String(), parsed.Ms, err)
		}
		data, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := json.Unmarshal(data, &back); err != nil || back != d {
			t.Errorf("%d ms → %s → %d, %v", ms, data, back.Ms, err)
		}
	}
}

func TestDurationJSONIsAString(t *testing.T) {
	for _, bad := range []string{`3600000`, `null`, `"1 h"`, `{"ms": 1}`} {
		var d Duration
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s decoded as %d ms", bad, d.Ms)
		}
	}
	var d Duration
	err := json.Unmarshal([]byte(`"1.5h"`), &d)
	if err == nil || !strings.Contains(err.Error(), `invalid duration "1.5h"`) {
		t.Errorf("error %v", err)
	}
}
