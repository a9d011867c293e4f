//! Lifecycle of a baseline (SPEC §2, §5, §7): `draft` → `approved` → `superseded`, or
//! `draft` → `rejected`, and who may move it.
//!
//! - only a draft can be approved or rejected ([`decide`]);
//! - error findings block approval and publication ([`approve`], [`publish`]);
//! - four eyes, by owner: whoever owns the token that uploaded the run may not approve a
//!   baseline computed from it, whichever token they use ([`approve`]);
//! - a rejection says why ([`rejection_comment`]);
//! - only a previously approved (superseded) baseline can be rolled back to ([`roll_back_to`]).
//!
//! The caller passes the baseline and the actor. The state checks ([`decide`],
//! [`roll_back_to`]) belong inside the transaction that moves the baseline, so that a repeat
//! of a committed request finds its result rather than a conflict.

use serde::Serialize;

use crate::baseline::{BaselineDocument, BaselineState};
use crate::checks::{Finding, Severity};

/// A person's decision on a draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    Reject,
}

impl Verdict {
    /// The state a draft moves to.
    pub fn target(self) -> BaselineState {
        match self {
            Self::Approve => BaselineState::Approved,
            Self::Reject => BaselineState::Rejected,
        }
    }
}

/// Approval policy (`approval.*` in the server's settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Four eyes: the owner of the run's uploading token may not approve.
    pub require_distinct_approver: bool,
}

/// Who uploaded the run a baseline was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uploader<'a> {
    /// The token's name.
    pub token: &'a str,
    /// The token's owner (a person or a pipeline).
    pub owner: &'a str,
}

/// Why a baseline cannot be approved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApproveError {
    /// The baseline has error findings (they are listed).
    #[error("baseline {id} has {} error finding(s) and cannot be approved", errors.len())]
    ErrorFindings { id: String, errors: Vec<Finding> },
    /// The approver owns the token that uploaded the run.
    #[error(
        "four eyes: {owner:?} owns the token {token:?} that uploaded run {run_id} and cannot approve its baseline; another person must"
    )]
    FourEyes {
        owner: String,
        token: String,
        run_id: String,
    },
}

/// Why a rejection is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RejectError {
    #[error("a rejection needs a comment saying why")]
    CommentRequired,
}

/// Why a baseline cannot be published again (rolled back to).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PublishError {
    /// The baseline belongs to another chain.
    #[error("baseline {id} belongs to chain {actual:?}, not {chain:?}")]
    OtherChain {
        id: String,
        chain: String,
        actual: String,
    },
    /// The baseline has error findings (every finding is listed).
    #[error("baseline {id} has error findings and cannot be published")]
    ErrorFindings { id: String, findings: Vec<Finding> },
}

/// A decision on a baseline that is no longer a draft.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("baseline {id} is {}; only a draft can be {}", state.as_str(), verdict_label(*verdict))]
pub struct NotDraft {
    pub id: String,
    pub state: BaselineState,
    pub verdict: Verdict,
}

/// A rollback to a baseline that was never approved, or is live.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "baseline {id} is {}; only a previously approved (superseded) baseline can be rolled back to",
    state.as_str()
)]
pub struct NotSuperseded {
    pub id: String,
    pub state: BaselineState,
}

fn verdict_label(v: Verdict) -> &'static str {
    match v {
        Verdict::Approve => "approved",
        Verdict::Reject => "rejected",
    }
}

fn errors_of(doc: &BaselineDocument) -> Vec<Finding> {
    doc.findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .cloned()
        .collect()
}

/// Whether `approver_owner` may approve `doc`, computed from a run `uploader` uploaded: no
/// error finding, then four eyes (when the policy asks for it). Error findings come first: a
/// blocked baseline is blocked for everyone.
pub fn approve(
    doc: &BaselineDocument,
    uploader: Uploader<'_>,
    approver_owner: &str,
    policy: Policy,
) -> Result<(), ApproveError> {
    let errors = errors_of(doc);
    if !errors.is_empty() {
        return Err(ApproveError::ErrorFindings {
            id: doc.id.clone(),
            errors,
        });
    }
    if policy.require_distinct_approver && uploader.owner == approver_owner {
        return Err(ApproveError::FourEyes {
            owner: approver_owner.to_owned(),
            token: uploader.token.to_owned(),
            run_id: doc.run_id.clone(),
        });
    }
    Ok(())
}

/// The comment of a rejection, which must say something (blank is not a reason).
pub fn rejection_comment(comment: Option<String>) -> Result<String, RejectError> {
    comment
        .filter(|c| !c.trim().is_empty())
        .ok_or(RejectError::CommentRequired)
}

/// Whether `doc` may be published again as the live config of `chain` (a rollback): it must
/// belong to the chain and have no error finding.
pub fn publish(doc: &BaselineDocument, chain: &str) -> Result<(), PublishError> {
    if doc.chain != chain {
        return Err(PublishError::OtherChain {
            id: doc.id.clone(),
            chain: chain.to_owned(),
            actual: doc.chain.clone(),
        });
    }
    if doc.has_errors() {
        return Err(PublishError::ErrorFindings {
            id: doc.id.clone(),
            findings: doc.findings.clone(),
        });
    }
    Ok(())
}

/// The state a baseline in `state` moves to on `verdict`: only a draft can be decided.
pub fn decide(id: &str, state: BaselineState, verdict: Verdict) -> Result<BaselineState, NotDraft> {
    if state == BaselineState::Draft {
        Ok(verdict.target())
    } else {
        Err(NotDraft {
            id: id.to_owned(),
            state,
            verdict,
        })
    }
}

/// Whether a baseline in `state` can be rolled back to: only a superseded one (a baseline
/// that was approved and replaced since).
pub fn roll_back_to(id: &str, state: BaselineState) -> Result<(), NotSuperseded> {
    if state == BaselineState::Superseded {
        Ok(())
    } else {
        Err(NotSuperseded {
            id: id.to_owned(),
            state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::BaselineReason;
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

    #[test]
    fn only_a_draft_is_decided() {
        use BaselineState::*;
        let check = |input: (BaselineState, Verdict), expect: Result<BaselineState, &str>| {
            let got = decide("bl-1", input.0, input.1).map_err(|e| e.to_string());
            assert_eq!(
                got.as_ref().map_err(String::as_str),
                expect.as_ref().map_err(|e| *e),
                "{input:?}"
            );
        };
        check((Draft, Verdict::Approve), Ok(Approved));
        check((Draft, Verdict::Reject), Ok(Rejected));
        check(
            (Approved, Verdict::Approve),
            Err("baseline bl-1 is approved; only a draft can be approved"),
        );
        check(
            (Superseded, Verdict::Approve),
            Err("baseline bl-1 is superseded; only a draft can be approved"),
        );
        check(
            (Rejected, Verdict::Reject),
            Err("baseline bl-1 is rejected; only a draft can be rejected"),
        );
        check(
            (Approved, Verdict::Reject),
            Err("baseline bl-1 is approved; only a draft can be rejected"),
        );
    }

    #[test]
    fn only_a_superseded_baseline_is_rolled_back_to() {
        use BaselineState::*;
        let check = |state: BaselineState, allowed: bool| {
            assert_eq!(roll_back_to("bl-1", state).is_ok(), allowed, "{state:?}");
        };
        check(Superseded, true);
        check(Approved, false);
        check(Draft, false);
        check(Rejected, false);
        assert_eq!(
            roll_back_to("bl-1", Draft).unwrap_err().to_string(),
            "baseline bl-1 is draft; only a previously approved (superseded) baseline can be rolled back to"
        );
    }
}
