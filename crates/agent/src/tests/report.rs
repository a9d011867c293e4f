//! `Report` to an in-process fake control plane (real gRPC on loopback, real time): windows
//! kept while it fails arrive merged, once; the reporter follows the watch to a fallback;
//! the background task reports by itself and on shutdown.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use budget_proto::v1::{ReportRequest, SegmentWindow};
use tonic::Code;

use super::fake::{closed_port, config, eventually, update, Fake};
use crate::test_support::example_a;
use crate::window::decode;
use crate::{Agent, AgentConfig, AgentError, CallError, Failure, ReportError};

const INV: &str = "order->inventory";
const USER: &str = "order->user";
const KEY: Option<&str> = Some("order-42");

/// One call of `segment` whose single attempt ends with `result` at once.
async fn call(agent: &Agent, segment: &str, key: Option<&str>, result: Result<(), Failure>) {
    let r: Result<(), CallError<Failure>> =
        agent.call(segment, key, |_| async move { result }).await;
    assert_eq!(r.is_ok(), result.is_ok(), "{r:?}");
}

/// A segment's calls, attempts, outcomes and latency samples.
type Totals = (u64, u64, BTreeMap<String, u64>, u64);

/// Totals per segment over every window of `reports`.
fn totals(reports: &[ReportRequest]) -> BTreeMap<String, Totals> {
    let mut out: BTreeMap<String, Totals> = BTreeMap::new();
    for w in reports.iter().flat_map(|r| &r.windows) {
        let t = out.entry(w.segment.clone()).or_default();
        t.0 += w.calls;
        t.1 += w.attempts;
        for (o, n) in &w.outcomes {
            *t.2.entry(o.clone()).or_default() += n;
        }
        t.3 += decode(&w.latency_hdr).unwrap().len();
    }
    out
}

fn outcomes(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(o, n)| (o.to_string(), *n)).collect()
}

/// Each request holds at most one window per chain, segment and minute, each within it.
fn check_merged(windows: &[SegmentWindow]) {
    let mut seen = BTreeSet::new();
    for w in windows {
        let minute = w.start_unix_ms.div_euclid(60_000);
        assert!(w.start_unix_ms < w.end_unix_ms, "{w:?}");
        assert!(w.end_unix_ms <= (minute + 1) * 60_000, "{w:?}");
        assert!(w.calls > 0, "no empty window is sent");
        assert!(
            seen.insert((w.chain.clone(), w.segment.clone(), minute)),
            "{} twice in minute {minute}",
            w.segment
        );
    }
}

/// An agent on `fake` with `window`-long reports.
async fn agent(endpoints: &[&Fake], window: Duration) -> Agent {
    let mut urls = Vec::new();
    for fake in endpoints {
        fake.publish(update(7, &example_a()));
        urls.push(format!("http://{}", fake.serve().await));
    }
    let mut c = config(urls.remove(0), None);
    c.fallback_endpoints = urls;
    c.report_window = window;
    Agent::start(c).await.unwrap()
}

#[tokio::test]
async fn a_failed_report_goes_again_as_it_was_before_newer_windows_and_arrives_once() {
    let fake = Fake::default();
    // A minute-long window: the background task stays out of the way (but may send at a
    // minute boundary; the totals below hold either way).
    let a = agent(&[&fake], Duration::from_secs(60)).await;
    fake.fail_reports(Some(Code::Unavailable));

    for _ in 0..3 {
        call(&a, INV, KEY, Ok(())).await;
    }
    for _ in 0..2 {
        call(&a, INV, None, Err(Failure::Unavailable)).await;
    }
    call(&a, USER, KEY, Err(Failure::Business)).await;
    let err = a.flush_report().await.unwrap_err();
    assert!(
        matches!(err, ReportError::Failed(ref e) if e.contains("told to fail")),
        "{err}"
    );
    let stats = a.report_stats();
    assert!(stats.failed_reports >= 1, "{stats:?}");
    assert!(stats.pending_windows >= 2, "{stats:?}");
    assert_eq!(stats.sent_windows, 0);

    for _ in 0..4 {
        call(&a, INV, KEY, Ok(())).await;
    }
    call(&a, USER, KEY, Err(Failure::Unavailable)).await;
    assert!(a.flush_report().await.is_err(), "still failing");

    fake.fail_reports(None);
    call(&a, INV, KEY, Ok(())).await;
    let sent = a.flush_report().await.unwrap();

    // The report that failed was sent again as it was (its id, its windows, `resend`), and
    // nothing newer went before it was answered.
    let failed = fake.failed_reports();
    assert_eq!(failed[0].report_id.len(), 16);
    assert!(!failed[0].resend);
    for again in &failed[1..] {
        assert!(again.resend);
        assert_eq!(
            (&again.report_id, &again.windows),
            (&failed[0].report_id, &failed[0].windows)
        );
    }
    let reports: Vec<ReportRequest> = fake.reports().into_iter().map(|(r, _)| r).collect();
    assert!(reports.len() >= 2, "{reports:?}");
    assert!(reports[0].resend);
    assert_eq!(
        (&reports[0].report_id, &reports[0].windows),
        (&failed[0].report_id, &failed[0].windows)
    );
    // The windows taken meanwhile, merged, in reports of their own, each with a new id.
    let ids: std::collections::BTreeSet<_> = reports.iter().map(|r| &r.report_id).collect();
    assert_eq!(ids.len(), reports.len());
    assert!(reports[1..]
        .iter()
        .all(|r| !r.resend && r.report_id.len() == 16));
    for (r, auth) in fake.reports() {
        assert_eq!(auth, "Bearer s3cret-agent-token");
        assert_eq!(r.agent_id, "order-1");
        check_merged(&r.windows);
    }
    let last = reports.last().unwrap();
    assert!(sent >= last.windows.len() as u64, "{sent}");
    // Nothing lost, nothing counted twice: exactly the calls made, across what was accepted.
    let got = totals(&reports);
    assert_eq!(
        got[INV],
        (
            10,
            10,
            outcomes(&[("ok", 8), ("retry_refused_no_key", 2)]),
            8
        )
    );
    assert_eq!(
        got[USER],
        (
            2,
            2,
            outcomes(&[("business_error", 1), ("unavailable", 1)]),
            0
        )
    );
    assert_eq!(got.len(), 2, "only segments with calls: {:?}", got.keys());
    let stats = a.report_stats();
    assert_eq!((stats.pending_windows, stats.dropped_windows), (0, 0));
    assert_eq!(
        stats.sent_windows,
        reports.iter().map(|r| r.windows.len() as u64).sum::<u64>()
    );
    assert!(!fake.failed_reports().is_empty());

    // Nothing new: no request at all.
    let before = fake.reports().len();
    assert_eq!(a.flush_report().await.unwrap(), 0);
    assert_eq!(fake.reports().len(), before);
}

#[tokio::test]
async fn a_flush_given_up_while_its_report_is_unanswered_loses_nothing() {
    let fake = Fake::default();
    let a = agent(&[&fake], Duration::from_secs(60)).await;
    fake.hang_reports(true);
    for _ in 0..3 {
        call(&a, INV, KEY, Ok(())).await;
    }
    // The caller stops waiting (a timeout around the flush): the request is left unanswered.
    let flush = tokio::time::timeout(Duration::from_millis(300), a.flush_report()).await;
    assert!(flush.is_err(), "the flush should still wait: {flush:?}");
    let hung = fake.hung_reports();
    assert_eq!(hung.len(), 1);
    assert_eq!(
        a.report_stats().pending_windows,
        1,
        "the report is kept, in doubt"
    );

    fake.hang_reports(false);
    call(&a, INV, KEY, Ok(())).await;
    a.flush_report().await.unwrap();
    let reports: Vec<ReportRequest> = fake.reports().into_iter().map(|(r, _)| r).collect();
    // It goes again as it was, marked as a resend; the newer call in a report of its own.
    assert!(reports[0].resend, "{reports:?}");
    assert_eq!(
        (&reports[0].report_id, &reports[0].windows),
        (&hung[0].report_id, &hung[0].windows)
    );
    let got = totals(&reports);
    assert_eq!(got[INV].0, 4, "every call, once: {got:?}");
    assert_eq!(a.report_stats().pending_windows, 0);
}

#[tokio::test]
async fn a_malformed_report_is_dropped_and_counted() {
    let fake = Fake::default();
    let a = agent(&[&fake], Duration::from_secs(60)).await;
    fake.fail_reports(Some(Code::InvalidArgument));
    call(&a, INV, KEY, Ok(())).await;
    call(&a, USER, KEY, Ok(())).await;
    let err = a.flush_report().await.unwrap_err();
    assert!(matches!(err, ReportError::Refused(_)), "{err}");
    let stats = a.report_stats();
    assert!(stats.dropped_windows >= 2, "{stats:?}");
    assert_eq!(stats.pending_windows, 0, "not sent again");
    fake.fail_reports(None);
    assert_eq!(a.flush_report().await.unwrap(), 0);
}

#[tokio::test]
async fn the_reporter_follows_the_watch_to_a_fallback() {
    let (primary, fallback) = (Fake::default(), Fake::default());
    let a = agent(&[&primary, &fallback], Duration::from_secs(60)).await;
    primary.fail_reports(Some(Code::Unavailable));
    call(&a, INV, KEY, Ok(())).await;
    assert!(a.flush_report().await.is_err());

    // The primary breaks the watch stream: the watch moves to the fallback, and so do reports.
    primary.drop_streams();
    eventually("a watch on the fallback", || async {
        !fallback.watches().is_empty()
    })
    .await;
    call(&a, INV, KEY, Ok(())).await;
    a.flush_report().await.unwrap();
    let reports: Vec<ReportRequest> = fallback.reports().into_iter().map(|(r, _)| r).collect();
    assert_eq!(
        totals(&reports)[INV].0,
        2,
        "the kept window and the new one"
    );
    assert!(primary.reports().is_empty());
}

#[tokio::test]
async fn the_background_task_reports_every_window_and_at_shutdown() {
    let fake = Fake::default();
    let a = agent(&[&fake], Duration::from_millis(200)).await;
    for _ in 0..5 {
        call(&a, INV, KEY, Ok(())).await;
    }
    eventually("the windows, reported by the task", || async {
        let reports: Vec<_> = fake.reports().into_iter().map(|(r, _)| r).collect();
        totals(&reports).get(INV).is_some_and(|t| t.0 == 5)
    })
    .await;
    for (r, _) in fake.reports() {
        for w in &r.windows {
            // Aligned to the wall clock: every window ends on a 200 ms boundary, or is the
            // first one, or a flush.
            assert!(w.end_unix_ms - w.start_unix_ms <= 200, "{w:?}");
        }
    }

    // On shutdown, the last partial window is sent without waiting for its end.
    let fake = Fake::default();
    let a = agent(&[&fake], Duration::from_secs(60)).await;
    for _ in 0..3 {
        call(&a, USER, KEY, Ok(())).await;
    }
    a.shutdown();
    eventually("the last window", || async {
        let reports: Vec<_> = fake.reports().into_iter().map(|(r, _)| r).collect();
        totals(&reports).get(USER).is_some_and(|t| t.0 == 3)
    })
    .await;
}

#[tokio::test]
async fn a_window_that_does_not_divide_a_minute_is_refused_at_start() {
    let mut c: AgentConfig = config(closed_port().await, None);
    c.report_window = Duration::from_secs(7);
    let err = Agent::start(c).await.unwrap_err();
    assert!(
        matches!(err, AgentError::Config(ref m) if m.contains("report_window")),
        "{err}"
    );
}
