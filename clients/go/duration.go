package budgetagent

import (
	"fmt"
	"strconv"
)

// Duration is a span written with one unit, as topologies and live configs write
// idempotency TTLs and the longest recovery: "18h", "24h", "7d", "1500ms". It is kept in
// milliseconds and reads and writes exactly the strings the control plane does, so a config
// survives a round trip through either client byte for byte.
type Duration struct {
	Ms uint64
}

// durationUnits lists the units from the largest down; String picks the first that divides
// the value exactly.
var durationUnits = [...]struct {
	name   string
	factor uint64
}{
	{"d", 86_400_000},
	{"h", 3_600_000},
	{"m", 60_000},
	{"s", 1_000},
	{"ms", 1},
}

// ParseDuration reads a whole number followed by one unit: ms, s, m, h or d. Nothing else is
// accepted: no sign, no fraction, no space, no unit-less number.
func ParseDuration(s string) (Duration, error) {
	split := 0
	for split < len(s) && s[split] >= '0' && s[split] <= '9' {
		split++
	}
	digits, unit := s[:split], s[split:]
	if digits == "" || unit == "" {
		return Duration{}, durationError(s)
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return Duration{}, durationError(s)
	}
	for _, u := range durationUnits {
		if u.name != unit {
			continue
		}
		if n > ^uint64(0)/u.factor {
			return Duration{}, durationError(s)
		}
		return Duration{Ms: n * u.factor}, nil
	}
	return Duration{}, durationError(s)
}

func durationError(input string) error {
	return fmt.Errorf("invalid duration %s: expected a whole number followed by ms, s, m, h or d (e.g. \"24h\")", rustQuote(input))
}

// String writes the largest unit that divides the value exactly, except that one day is
// written "24h", the way TTLs are usually written: "7d", "24h", "18h", "1500ms", "0s".
func (d Duration) String() string {
	if d.Ms == 0 {
		return "0s"
	}
	last := len(durationUnits) - 1
	for _, u := range durationUnits[:last] {
		if u.name == "d" && d.Ms <= u.factor {
			continue
		}
		if d.Ms%u.factor == 0 {
			return strconv.FormatUint(d.Ms/u.factor, 10) + u.name
		}
	}
	return strconv.FormatUint(d.Ms, 10) + durationUnits[last].name
}

// MarshalJSON writes the duration as its string form, e.g. "24h".
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + d.String() + `"`), nil
}

// UnmarshalJSON reads a duration string; anything else (a number, null) is an error.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := decodeString(data, &s); err != nil {
		return err
	}
	parsed, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = parsed
	return nil
}
