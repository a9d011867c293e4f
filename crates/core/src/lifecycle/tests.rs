//! The lifecycle rules, table by table.

use super::*;
use crate::baseline::{BaselineReason, Decision};
use crate::checks::FindingKind;
use crate::duration::HumanDuration;

fn finding(severity: Severity) -> Finding {
    Finding {
        kind: FindingKind::EntryHeadroom {
            p999_ms: 900.0,
            entry_budget_ms: 800,
        },
        segment: "gateway->order".into(),
        severity,
        message: "headroom".into(),
    }
}

fn doc(chain: &str, findings: &[Severity]) -> BaselineDocument {
    BaselineDocument {
        id: "bl-20261130-002".into(),
        chain: chain.into(),
        state: BaselineState::Draft,
        reason: BaselineReason::FirstRun,
        run_id: "run-20261130-001".into(),
        topology_version: 1,
        created_at: "2026-11-30T09:15:02.123Z".into(),
        created_by: "uma".into(),
        entry_budget_ms: 800,
        breaker_window_ms: 5000,
        max_recovery: HumanDuration::from_ms(3_600_000),
        segments: Vec::new(),
        findings: findings.iter().map(|s| finding(*s)).collect(),
        drift: Vec::new(),
        drift_baseline_id: None,
        decision: None,
        superseded_by: None,
    }
}

const UMA: Uploader<'static> = Uploader {
    token: "uma-ci",
    owner: "uma",
};
const FOUR_EYES: Policy = Policy {
    require_distinct_approver: true,
};
const ONE_PAIR: Policy = Policy {
    require_distinct_approver: false,
};

/// `(findings, approver's owner, policy)` → the error message, or `None` when allowed.
fn check(input: (&[Severity], &str, Policy), expect: Option<&str>) {
    let (findings, approver, policy) = input;
    let got = approve(&doc("checkout", findings), UMA, approver, policy);
    assert_eq!(
        got.as_ref().err().map(ToString::to_string).as_deref(),
        expect,
        "{input:?}"
    );
}

#[test]
fn who_may_approve() {
    use Severity::{Error, Warning};
    let four_eyes = "four eyes: \"uma\" owns the token \"uma-ci\" that uploaded run run-20261130-001 and cannot approve its baseline; another person must";
    let blocked = "baseline bl-20261130-002 has 1 error finding(s) and cannot be approved";
    check((&[], "ada", FOUR_EYES), None);
    check((&[Warning], "ada", FOUR_EYES), None);
    check((&[], "uma", FOUR_EYES), Some(four_eyes));
    check((&[], "uma", ONE_PAIR), None);
    check((&[Error], "ada", FOUR_EYES), Some(blocked));
    // errors first: blocked for everyone, the uploader included
    check((&[Error], "uma", FOUR_EYES), Some(blocked));
    check((&[Error], "uma", ONE_PAIR), Some(blocked));
    check(
        (&[Error, Warning, Error], "ada", ONE_PAIR),
        Some("baseline bl-20261130-002 has 2 error finding(s) and cannot be approved"),
    );
}

#[test]
fn error_findings_are_listed_alone() {
    let d = doc("checkout", &[Severity::Warning, Severity::Error]);
    match approve(&d, UMA, "ada", FOUR_EYES) {
        Err(ApproveError::ErrorFindings { errors, .. }) => {
            assert_eq!(errors, [finding(Severity::Error)]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rejection_needs_a_comment() {
    let check = |comment: Option<&str>, expect: Result<&str, RejectError>| {
        let got = rejection_comment(comment.map(str::to_owned));
        assert_eq!(got.as_deref().map_err(Clone::clone), expect, "{comment:?}");
    };
    check(None, Err(RejectError::CommentRequired));
    check(Some(""), Err(RejectError::CommentRequired));
    check(Some(" \n\t"), Err(RejectError::CommentRequired));
    // kept as written
    check(Some(" p999 is off "), Ok(" p999 is off "));
    assert_eq!(
        RejectError::CommentRequired.to_string(),
        "a rejection needs a comment saying why"
    );
}

#[test]
fn what_may_be_published_again() {
    let check = |input: (&str, &[Severity]), expect: Option<&str>| {
        let got = publish(&doc("checkout", input.1), input.0);
        assert_eq!(
            got.err().map(|e| e.to_string()).as_deref(),
            expect,
            "{input:?}"
        );
    };
    check(("checkout", &[]), None);
    check(("checkout", &[Severity::Warning]), None);
    check(
        ("checkout-eu", &[]),
        Some("baseline bl-20261130-002 belongs to chain \"checkout\", not \"checkout-eu\""),
    );
    check(
        ("checkout", &[Severity::Error]),
        Some("baseline bl-20261130-002 has error findings and cannot be published"),
    );
    // the wrong chain first, whatever the findings
    check(
        ("checkout-eu", &[Severity::Error]),
        Some("baseline bl-20261130-002 belongs to chain \"checkout\", not \"checkout-eu\""),
    );
}

/// `doc` in `state`: decided (approved at some point) or not, replaced by `by` or not.
fn in_state(state: BaselineState, decided: bool, by: Option<&str>) -> BaselineDocument {
    let mut d = doc("checkout", &[]);
    d.id = "bl-1".into();
    d.state = state;
    d.decision = decided.then(|| Decision {
        by: "abe".into(),
        at: "2026-11-30T10:00:00.000Z".into(),
        comment: None,
    });
    d.superseded_by = by.map(str::to_owned);
    d
}

#[test]
fn only_the_newest_pending_draft_is_decided() {
    use BaselineState::*;
    // ((state, decided, superseded_by), verdict, newest baseline) → the new state or the message
    type Input<'a> = (
        (BaselineState, bool, Option<&'a str>),
        Verdict,
        Option<&'a str>,
    );
    let check = |input: Input<'_>, expect: Result<BaselineState, &str>| {
        let ((state, decided, by), verdict, newest) = input;
        let got = decide(&in_state(state, decided, by), verdict, newest).map_err(|e| e.to_string());
        assert_eq!(
            got.as_ref().map_err(String::as_str),
            expect.as_ref().map_err(|e| *e),
            "{input:?}"
        );
    };
    let draft = (Draft, false, None);
    check((draft, Verdict::Approve, Some("bl-1")), Ok(Approved));
    check((draft, Verdict::Reject, Some("bl-1")), Ok(Rejected));
    check((draft, Verdict::Approve, None), Ok(Approved));
    // an older draft still pending (stored before drafts superseded each other) while a newer
    // baseline exists, pending or approved: approving it would bring back older numbers;
    // rejecting it is fine
    check(
        (draft, Verdict::Approve, Some("bl-3")),
        Err("baseline bl-1 is not the newest baseline of \"checkout\": bl-3 came after it, and approving bl-1 would bring back older numbers"),
    );
    check((draft, Verdict::Reject, Some("bl-3")), Ok(Rejected));
    // a draft a newer draft replaced: neither approved nor rejected, and the message names it
    check(
        ((Superseded, false, Some("bl-3")), Verdict::Approve, Some("bl-3")),
        Err("baseline bl-1 was superseded by the newer draft bl-3 before any decision; only a pending draft can be approved: review bl-3"),
    );
    check(
        ((Superseded, false, Some("bl-3")), Verdict::Reject, None),
        Err("baseline bl-1 was superseded by the newer draft bl-3 before any decision; only a pending draft can be rejected: review bl-3"),
    );
    check(
        ((Approved, true, None), Verdict::Approve, None),
        Err("baseline bl-1 is approved; only a draft can be approved"),
    );
    check(
        (
            (Superseded, true, Some("bl-2")),
            Verdict::Approve,
            Some("bl-2"),
        ),
        Err("baseline bl-1 is superseded; only a draft can be approved"),
    );
    check(
        ((Rejected, true, None), Verdict::Reject, None),
        Err("baseline bl-1 is rejected; only a draft can be rejected"),
    );
    check(
        ((Approved, true, None), Verdict::Reject, None),
        Err("baseline bl-1 is approved; only a draft can be rejected"),
    );
}

#[test]
fn a_new_draft_supersedes_every_other_pending_draft() {
    let pending = ["bl-1".to_owned(), "bl-2".to_owned(), "bl-3".to_owned()];
    assert_eq!(superseded_by("bl-3", &pending), ["bl-1", "bl-2"]);
    assert_eq!(superseded_by("bl-4", &pending), ["bl-1", "bl-2", "bl-3"]);
    assert!(superseded_by("bl-1", &pending[..1]).is_empty());
    assert!(superseded_by("bl-1", &[]).is_empty());
}

#[test]
fn only_a_previously_approved_baseline_is_rolled_back_to_or_cited() {
    use BaselineState::*;
    // (state, decided, superseded_by) → may be rolled back to, may be cited
    let check = |input: (BaselineState, bool, Option<&str>), expect: (bool, bool)| {
        let d = in_state(input.0, input.1, input.2);
        assert_eq!((roll_back_to(&d).is_ok(), citable(&d)), expect, "{input:?}");
    };
    check((Superseded, true, Some("bl-2")), (true, true));
    check((Approved, true, None), (false, true));
    check((Draft, false, None), (false, false));
    check((Rejected, true, None), (false, false));
    // a draft a newer draft replaced was never approved
    check((Superseded, false, Some("bl-2")), (false, false));
    assert_eq!(
        roll_back_to(&in_state(Draft, false, None)).unwrap_err().to_string(),
        "baseline bl-1 is draft; only a previously approved (superseded) baseline can be rolled back to"
    );
    assert_eq!(
        roll_back_to(&in_state(Superseded, false, Some("bl-2"))).unwrap_err().to_string(),
        "baseline bl-1 is a superseded draft that was never approved; only a previously approved (superseded) baseline can be rolled back to"
    );
}

#[test]
fn every_reason_a_reviewer_may_not_approve() {
    use BaselineState::*;
    // (document, approver's owner, newest) → the blockers' codes
    let check = |d: &BaselineDocument, approver: &str, newest: Option<&str>, expect: &[&str]| {
        let got: Vec<&str> = approval_blockers(d, UMA, approver, FOUR_EYES, newest)
            .iter()
            .map(Blocker::code)
            .collect();
        assert_eq!(got, expect, "{:?} {approver} {newest:?}", d.state);
    };
    let draft = in_state(Draft, false, None);
    check(&draft, "ada", Some("bl-1"), &[]);
    check(&draft, "uma", Some("bl-1"), &["four_eyes"]);
    check(&draft, "uma", Some("bl-3"), &["not_newest", "four_eyes"]);
    let mut inverted = in_state(Draft, false, None);
    inverted.findings = vec![finding(Severity::Error)];
    check(&inverted, "uma", None, &["error_findings", "four_eyes"]);
    check(
        &in_state(Superseded, false, Some("bl-3")),
        "ada",
        Some("bl-3"),
        &["superseded"],
    );
    check(
        &in_state(Approved, true, None),
        "ada",
        Some("bl-1"),
        &["not_draft"],
    );
    // the policy off: the uploader may
    assert!(approval_blockers(&draft, UMA, "uma", ONE_PAIR, None).is_empty());
    // the messages are the refusals' own
    let blockers = approval_blockers(&draft, UMA, "uma", FOUR_EYES, Some("bl-3"));
    assert_eq!(
        blockers[1].to_string(),
        "four eyes: \"uma\" owns the token \"uma-ci\" that uploaded run run-20261130-001 and cannot approve its baseline; another person must"
    );
}
