//! Lifecycle of a baseline (SPEC §2, §5, §7): `draft` → `approved` → `superseded`, or
//! `draft` → `rejected`, or `draft` → `superseded` by a newer draft; and who may move it.
//!
//! - a new draft of a chain supersedes the chain's older pending drafts ([`superseded_by`]):
//!   they leave review, linked to the newer one, and can no longer be approved;
//! - only a pending draft can be approved or rejected, and only if it is the chain's newest
//!   baseline can it be approved: approving an older one would bring back older numbers
//!   ([`decide`]);
//! - error findings block approval and publication ([`approve`], [`publish`]);
//! - four eyes, by owner: whoever owns the token that uploaded the run may not approve a
//!   baseline computed from it, whichever token they use ([`approve`]);
//! - a reviewer can be told every reason they may not approve, before trying
//!   ([`approval_blockers`]);
//! - a rejection says why ([`rejection_comment`]);
//! - only a baseline that was approved and replaced since can be rolled back to
//!   ([`roll_back_to`]), and only a baseline that was approved can be cited ([`citable`]).
//!
//! The caller passes the baseline, the chain's newest baseline and the actor. The state checks
//! ([`decide`], [`roll_back_to`]) and [`superseded_by`] belong inside the transaction that
//! moves the baselines, after the chain is locked, so that concurrent writers of one chain (on
//! any replica) see each other's drafts and a repeat of a committed request finds its result
//! rather than a conflict.

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

/// Why a decision cannot be made on a baseline (checked inside the deciding transaction).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDecidable {
    /// The baseline was decided already (approved, rejected, or superseded after approval).
    #[error("baseline {id} is {}; only a draft can be {}", state.as_str(), verdict_label(*verdict))]
    NotDraft {
        id: String,
        state: BaselineState,
        verdict: Verdict,
    },
    /// A newer draft of the chain replaced this draft before anyone decided on it.
    #[error(
        "baseline {id} was superseded by the newer draft {by} before any decision; only a pending draft can be {}: review {by}",
        verdict_label(*verdict)
    )]
    SupersededDraft {
        id: String,
        by: String,
        verdict: Verdict,
    },
    /// A newer baseline of the chain exists: approving this one would bring back older numbers.
    #[error(
        "baseline {id} is not the newest baseline of {chain:?}: {newest} came after it, and approving {id} would bring back older numbers"
    )]
    NotNewest {
        id: String,
        chain: String,
        newest: String,
    },
}

/// A rollback to a baseline that was never approved, or is live.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "baseline {id} is {}; only a previously approved (superseded) baseline can be rolled back to",
    if *never_approved { "a superseded draft that was never approved" } else { state.as_str() }
)]
pub struct NotSuperseded {
    pub id: String,
    pub state: BaselineState,
    /// A draft replaced by a newer draft: superseded, but never approved.
    pub never_approved: bool,
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

/// One reason a person may not approve a baseline now (see [`approval_blockers`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Blocker {
    /// Not a pending draft, superseded by a newer draft, or not the chain's newest baseline.
    #[error(transparent)]
    Decision(NotDecidable),
    /// Error findings, or the person owns the run's upload (four eyes).
    #[error(transparent)]
    Approval(ApproveError),
}

impl Blocker {
    /// A stable name for clients: `not_draft`, `superseded`, `not_newest`, `error_findings`
    /// or `four_eyes`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Decision(NotDecidable::NotDraft { .. }) => "not_draft",
            Self::Decision(NotDecidable::SupersededDraft { .. }) => "superseded",
            Self::Decision(NotDecidable::NotNewest { .. }) => "not_newest",
            Self::Approval(ApproveError::ErrorFindings { .. }) => "error_findings",
            Self::Approval(ApproveError::FourEyes { .. }) => "four_eyes",
        }
    }
}

/// Every reason `approver_owner` may not approve `doc` now — what [`decide`] and [`approve`]
/// would refuse, all of them rather than the first — so a reviewer is told before trying. Empty:
/// they may. `newest` is the chain's newest baseline, as for [`decide`].
pub fn approval_blockers(
    doc: &BaselineDocument,
    uploader: Uploader<'_>,
    approver_owner: &str,
    policy: Policy,
    newest: Option<&str>,
) -> Vec<Blocker> {
    let mut blockers = Vec::new();
    if let Err(e) = decide(doc, Verdict::Approve, newest) {
        blockers.push(Blocker::Decision(e));
    }
    let errors = errors_of(doc);
    if !errors.is_empty() {
        blockers.push(Blocker::Approval(ApproveError::ErrorFindings {
            id: doc.id.clone(),
            errors,
        }));
    }
    if policy.require_distinct_approver && uploader.owner == approver_owner {
        blockers.push(Blocker::Approval(ApproveError::FourEyes {
            owner: approver_owner.to_owned(),
            token: uploader.token.to_owned(),
            run_id: doc.run_id.clone(),
        }));
    }
    blockers
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

/// The state `doc` moves to on `verdict`: only a pending draft can be decided, and it can be
/// approved only while it is the chain's newest baseline (`newest`, in the order the chain's
/// baselines were committed, read in the same transaction).
pub fn decide(
    doc: &BaselineDocument,
    verdict: Verdict,
    newest: Option<&str>,
) -> Result<BaselineState, NotDecidable> {
    match (doc.state, &doc.superseded_by) {
        (BaselineState::Draft, _) => {}
        (BaselineState::Superseded, Some(by)) if !doc.was_approved() => {
            return Err(NotDecidable::SupersededDraft {
                id: doc.id.clone(),
                by: by.clone(),
                verdict,
            })
        }
        (state, _) => {
            return Err(NotDecidable::NotDraft {
                id: doc.id.clone(),
                state,
                verdict,
            })
        }
    }
    match newest {
        Some(newest) if verdict == Verdict::Approve && newest != doc.id => {
            Err(NotDecidable::NotNewest {
                id: doc.id.clone(),
                chain: doc.chain.clone(),
                newest: newest.to_owned(),
            })
        }
        _ => Ok(verdict.target()),
    }
}

/// The drafts a new draft `new_id` of a chain supersedes: every other draft of the chain still
/// pending (`pending`, read after the chain is locked). Each moves to `superseded`, with
/// `superseded_by` naming the new draft.
pub fn superseded_by<'a>(new_id: &str, pending: &'a [String]) -> Vec<&'a str> {
    pending
        .iter()
        .map(String::as_str)
        .filter(|id| *id != new_id)
        .collect()
}

/// Whether `doc` can be rolled back to: only a superseded baseline that was approved before (a
/// draft superseded by a newer draft never was).
pub fn roll_back_to(doc: &BaselineDocument) -> Result<(), NotSuperseded> {
    if doc.state == BaselineState::Superseded && doc.was_approved() {
        Ok(())
    } else {
        Err(NotSuperseded {
            id: doc.id.clone(),
            state: doc.state,
            never_approved: doc.state == BaselineState::Superseded,
        })
    }
}

/// Whether a release may cite `doc`: it must have been approved (it is live, or was).
pub fn citable(doc: &BaselineDocument) -> bool {
    doc.was_approved()
}

#[cfg(test)]
mod tests;
