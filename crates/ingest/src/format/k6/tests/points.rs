//! The percentile points a k6 summary keeps per label (its distribution).

use super::*;

/// `summary-export.json`, `http_req_duration{name:inventory}`: `min` 4.381579 (as 0), `med`
/// 5.520255, `p(90)` 7.618050800000001, `p(95)` 9.819819849999998, `p(99)` 31.59021545,
/// `p(99.9)` 71.81916498300758 and `max` 81.85574 ms (as 100): every trend stat k6 wrote that
/// names a percentile (k6 interpolates them), to the µs. Every label gets its points; a label
/// without requests gets none.
#[test]
fn fixture_trend_gives_the_percentile_points() {
    let e = read(SUMMARY_EXPORT, 4096).unwrap();
    assert_eq!(
        points(&e, "inventory"),
        [
            (0.0, 4_382),
            (50.0, 5_520),
            (90.0, 7_618),
            (95.0, 9_820),
            (99.0, 31_590),
            (99.9, 71_819),
            (100.0, 81_856)
        ]
    );
    // `user`: max 1502.027513 ms, p(99.9) 1207.7322823122336 ms.
    assert_eq!(
        points(&e, "user"),
        [
            (0.0, 2_428),
            (50.0, 3_533),
            (90.0, 5_323),
            (95.0, 7_388),
            (99.0, 12_378),
            (99.9, 1_207_732),
            (100.0, 1_502_028)
        ]
    );
    assert_eq!(
        e.distributions.keys().collect::<Vec<_>>(),
        ["inventory", "payment", "user"]
    );
    // The percentiles of the labels still come from med, p(99) and p(99.9) only.
    let l = &e.labels[0];
    assert_eq!(
        (l.p50_us, l.p99_us, l.p999_us),
        (Some(5_520), 31_590, 71_819)
    );
    // Without `med`, only p(99) and p(99.9).
    let d = hs(&[
        trend(
            "http_req_duration{name:a}",
            r#""p(99)": 30, "p(99.9)": 80, "count": 3"#,
        ),
        trend(
            "http_req_duration{name:b}",
            r#""p(99)": 30, "p(99.9)": 80, "count": 0"#,
        ),
    ]
    .join(","));
    let e = read(d.as_bytes(), 4096).unwrap();
    assert_eq!(points(&e, "a"), [(99.0, 30_000), (99.9, 80_000)]);
    assert!(!e.distributions.contains_key("b"));
}

/// Other `p(N)` stats: N outside 0–100 and values that are not numbers give no point, a stat
/// naming the same N again replaces the earlier one, at most 32 are kept; `min` and `max` are
/// taken when numbers, an implausible one is dropped without an error.
#[test]
fn other_trend_stats_are_points_within_bounds() {
    let d = hs(&[trend(
        "http_req_duration{name:a}",
        r#""min": 1, "p(90)": 20, "p(90.0)": 25, "p(150)": 9, "p(-1)": 0, "p(95)": "x",
        "max": "slow", "p(99)": 30, "p(99.9)": 80, "count": 3"#,
    )]
    .join(","));
    let e = read(d.as_bytes(), 4096).unwrap();
    assert_eq!(
        points(&e, "a"),
        [(0.0, 1_000), (90.0, 25_000), (99.0, 30_000), (99.9, 80_000)]
    );
    // A later non-number for the same N drops the point; max over one hour gives none.
    let d = hs(&[trend(
        "http_req_duration{name:a}",
        r#""p(90)": 20, "p(90)": null, "max": 4000000, "p(99)": 30, "p(99.9)": 80, "count": 3"#,
    )]
    .join(","));
    let e = read(d.as_bytes(), 4096).unwrap();
    assert_eq!(points(&e, "a"), [(99.0, 30_000), (99.9, 80_000)]);
    // 40 other percentiles (p(1) … p(40)): the first 32 are kept.
    let many: Vec<String> = (1..=40).map(|n| format!(r#""p({n})": {n}"#)).collect();
    let d = hs(&[trend(
        "http_req_duration{name:a}",
        &format!(
            r#"{}, "p(99)": 50, "p(99.9)": 80, "count": 3"#,
            many.join(", ")
        ),
    )]
    .join(","));
    let e = read(d.as_bytes(), 4096).unwrap();
    let got = points(&e, "a");
    let want: Vec<(f64, u64)> = (1..=32u32)
        .map(|n| (f64::from(n), u64::from(n) * 1000))
        .chain([(99.0, 50_000), (99.9, 80_000)])
        .collect();
    assert_eq!(got, want);
}
