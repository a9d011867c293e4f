//! The percentile points an oha file keeps (its distribution).

use super::*;

/// `inventory.json`: `summary.fastest` 0.004225057 s as 0, `latencyPercentiles` p10
/// 0.004462162 … p99.99 0.081499809, `summary.slowest` 0.081499809 as 100 (s → µs, rounded).
#[test]
fn fixture_percentiles_give_the_points() {
    let e = read(INVENTORY, Some("inventory"), 4096).unwrap();
    assert_eq!(
        points(&e, "inventory"),
        [
            (0.0, 4_225),
            (10.0, 4_462),
            (25.0, 4_643),
            (50.0, 4_887),
            (75.0, 5_138),
            (90.0, 5_316),
            (95.0, 5_467),
            (99.0, 31_007),
            (99.9, 81_090),
            (99.99, 81_500),
            (100.0, 81_500),
        ]
    );
    assert_eq!(e.distributions.len(), 1);
}

/// Points need no summary; a point that is not a number, or a key outside 0–100, gives none.
#[test]
fn points_without_summary_and_with_odd_keys() {
    let d = r#"{"latencyPercentiles": {"p50": 0.01, "p99": 0.02, "p99.9": 0.03, "p75": "x",
        "p101": 0.5, "p99.99": 0.025}, "statusCodeDistribution": {"200": 10}}"#;
    let e = read(d.as_bytes(), Some("a"), 4096).unwrap();
    assert_eq!(
        points(&e, "a"),
        [
            (50.0, 10_000),
            (99.0, 20_000),
            (99.9, 30_000),
            (99.99, 30_000)
        ]
    );
}
