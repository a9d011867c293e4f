//! Human-readable durations such as `24h`, `7d`, `18h`, `500ms` as used in topologies.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written with one unit (`ms`, `s`, `m`, `h`, `d`), kept in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration {
    ms: u64,
}

const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

impl HumanDuration {
    pub const fn from_ms(ms: u64) -> Self {
        Self { ms }
    }

    pub const fn as_ms(self) -> u64 {
        self.ms
    }
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: expected a whole number followed by ms, s, m, h or d (e.g. \"24h\")")]
pub struct DurationError {
    pub input: String,
}

impl FromStr for HumanDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || DurationError {
            input: s.to_owned(),
        };
        let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
        let (digits, unit) = s.split_at(split);
        if digits.is_empty() {
            return Err(err());
        }
        let n: u64 = digits.parse().map_err(|_| err())?;
        let factor = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, f)| *f)
            .ok_or_else(err)?;
        n.checked_mul(factor).map(Self::from_ms).ok_or_else(err)
    }
}

impl fmt::Display for HumanDuration {
    /// The largest unit that divides the value exactly, except that one day prints as `24h`
    /// (the way TTLs are usually written): `7d`, `24h`, `18h`, `1500ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ms == 0 {
            return f.write_str("0s");
        }
        let (name, factor) = UNITS
            .iter()
            .filter(|(name, factor)| *name != "d" || self.ms > *factor)
            .find(|(_, factor)| self.ms % factor == 0)
            .copied()
            .unwrap_or(("ms", 1));
        write!(f, "{}{}", self.ms / factor, name)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: Option<u64>) {
        assert_eq!(
            input.parse::<HumanDuration>().ok().map(|d| d.as_ms()),
            expect,
            "{input}"
        );
    }

    #[test]
    fn parses_units() {
        check("24h", Some(86_400_000));
        check("18h", Some(64_800_000));
        check("7d", Some(604_800_000));
        check("500ms", Some(500));
        check("30s", Some(30_000));
        check("15m", Some(900_000));
        check("0s", Some(0));
    }

    #[test]
    fn refuses_garbage() {
        for bad in [
            "",
            "h",
            "24",
            "24 h",
            "1.5h",
            "-1h",
            "24hours",
            "99999999999999999999d",
        ] {
            check(bad, None);
        }
    }

    #[test]
    fn displays_largest_exact_unit() {
        assert_eq!(HumanDuration::from_ms(86_400_000).to_string(), "24h");
        assert_eq!(HumanDuration::from_ms(604_800_000).to_string(), "7d");
        assert_eq!(HumanDuration::from_ms(64_800_000).to_string(), "18h");
        assert_eq!(HumanDuration::from_ms(1_500).to_string(), "1500ms");
        assert_eq!(HumanDuration::from_ms(90_000).to_string(), "90s");
    }
}
