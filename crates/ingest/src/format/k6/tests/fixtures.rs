//! The real k6 files (k6 v1.1.0, `tests/fixtures/k6/produce.sh`) against what k6 wrote and
//! printed.

use super::*;

/// The real k6 files (k6 v1.1.0, `produce.sh`): the numbers k6 wrote, to the µs.
#[test]
fn fixtures_give_the_numbers_they_hold() {
    let export = read(SUMMARY_EXPORT, 4096).unwrap();
    assert_eq!(
        export.labels,
        vec![
            stats("inventory", 1200, Some(0), Some(5_520), 31_590, 71_819),
            stats("payment", 1200, Some(27), Some(16_539), 61_716, 64_353),
            stats("user", 1200, Some(10), Some(3_533), 12_378, 1_207_732),
        ]
    );
    assert!(export.notes.is_empty());
    let handle = read(HANDLE_SUMMARY, 4096).unwrap();
    assert_eq!(
        handle.labels,
        vec![
            stats("inventory", 1200, Some(0), Some(5_493), 31_726, 71_648),
            stats("payment", 1200, Some(27), Some(16_565), 61_597, 75_648),
            stats("user", 1200, Some(10), Some(3_451), 12_665, 1_208_958),
        ]
    );
}

/// The numbers k6 printed at the end of the run (its text summary, two decimals) are the
/// file's, and its failure counts are those of the `http_req_failed{name:…}` lines.
#[test]
fn fixtures_match_the_text_summary_k6_printed() {
    for (json, text) in [(SUMMARY_EXPORT, SUMMARY_TXT), (NO_FAILED, NO_FAILED_TXT)] {
        let got = read(json, 4096).unwrap();
        for l in &got.labels {
            let line = text
                .lines()
                .find(|t| t.contains(&format!("{{ name:{} }}", l.label)) && t.contains("p(99)="))
                .unwrap_or_else(|| panic!("{} not in the text summary", l.label));
            let stat = |name: &str| -> f64 {
                let v = line.split(&format!(" {name}=")).nth(1).unwrap();
                let v = v.split_whitespace().next().unwrap();
                match v.strip_suffix("ms") {
                    Some(ms) => ms.parse().unwrap(),
                    None => v.strip_suffix('s').unwrap().parse::<f64>().unwrap() * 1000.0,
                }
            };
            // k6 prints two decimals (one for seconds): within the last printed digit.
            for (printed, us) in [(stat("p(99)"), l.p99_us), (stat("p(99.9)"), l.p999_us)] {
                let tolerance = if printed >= 1000.0 { 100.0 } else { 0.01 };
                assert!(
                    (printed - us as f64 / 1000.0).abs() <= tolerance,
                    "{}: {printed} / {us}",
                    l.label
                );
            }
        }
    }
    let no_failed = read(NO_FAILED, 4096).unwrap();
    assert!(no_failed.labels.iter().all(|l| l.failures.is_none()));
    assert!(
        no_failed.notes[0].starts_with("failures: unknown for inventory, payment, user — k6 reports them per endpoint only with a threshold on http_req_failed{name:…}"),
        "{:?}",
        no_failed.notes
    );
    // What k6 printed for the same run: failures only for the whole, never per name.
    assert!(NO_FAILED_TXT.contains("http_req_failed"));
    assert!(!NO_FAILED_TXT.contains("http_req_failed{name:"));
}

#[test]
fn default_trend_stats_fixture_explains_the_option() {
    let err = read(DEFAULT_STATS, 4096).unwrap_err();
    assert!(err.message.contains("--summary-trend-stats"), "{err}");
    assert!(err.message.contains("summaryTrendStats"), "{err}");
    assert!(err.field.as_deref().unwrap().ends_with("/p(99)"), "{err:?}");
}
