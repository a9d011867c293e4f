//! A stored document's new state without parsing it: the canonical bytes (pretty JSON, see
//! [`BaselineDocument::to_bytes`](super::BaselineDocument::to_bytes)) of a 1,000-segment chain are about a megabyte, and a state
//! change touches three top-level fields. [`restate`] rewrites those three in the bytes and
//! gives exactly what `to_bytes` gives for the changed document.
//!
//! Why the bytes can be cut by text: in pretty JSON every key of the top-level object starts a
//! line indented by two spaces, deeper keys by four or more, and a string never holds a raw
//! newline (it is written `\n`). So `\n  "state": ` occurs once, at the top-level key. The
//! fields that change are `state` (third) and the last two, `decision` and `superseded_by`,
//! both left out when empty.

use super::{BaselineState, Decision};

/// What a state change makes of a document.
#[derive(Debug, Clone, Copy)]
pub struct Restate<'a> {
    pub state: BaselineState,
    /// The decision to record; `None` keeps the document's own.
    pub decision: Option<&'a Decision>,
    /// The baseline that replaced it (written only while `superseded`).
    pub superseded_by: Option<&'a str>,
}

const STATE: &str = "\n  \"state\": \"";
const DECISION: &str = "\n  \"decision\": ";
const SUPERSEDED_BY: &str = "\n  \"superseded_by\": ";
const END: &str = "\n}\n";

/// `bytes` (a document's canonical bytes) with the change applied, byte for byte what
/// `to_bytes` gives for the changed document; `None` when `bytes` are not in the canonical
/// layout (the caller parses and renders instead).
pub fn restate(bytes: &str, change: Restate<'_>) -> Option<String> {
    let body = bytes.strip_suffix(END)?;
    let (decision_at, superseded_at) = (body.find(DECISION), body.find(SUPERSEDED_BY));
    // The optional fields end the document, in this order.
    let cut = match (decision_at, superseded_at) {
        (Some(d), Some(s)) if d < s => d,
        (Some(_), Some(_)) => return None,
        (Some(at), None) | (None, Some(at)) => at,
        (None, None) => body.len(),
    };
    let kept_decision = match decision_at {
        Some(d) => {
            let text = &body[d + DECISION.len()..superseded_at.unwrap_or(body.len())];
            Some(match superseded_at {
                Some(_) => text.strip_suffix(',')?,
                None => text,
            })
        }
        None => None,
    };
    let head = if cut < body.len() {
        body[..cut].strip_suffix(',')?
    } else {
        body
    };
    let state_at = head.find(STATE)? + STATE.len();
    let state_len = head[state_at..].find('"')?;

    let decision = match change.decision {
        // At depth one: every line after the first is indented two more spaces.
        Some(d) => Some(serde_json::to_string_pretty(d).ok()?.replace('\n', "\n  ")),
        None => kept_decision.map(str::to_owned),
    };
    let superseded_by = match change.state {
        BaselineState::Superseded => change
            .superseded_by
            .map(serde_json::to_string)
            .transpose()
            .ok()?,
        _ => None,
    };

    let mut out = String::with_capacity(bytes.len() + 128);
    out.push_str(&head[..state_at]);
    out.push_str(change.state.as_str());
    out.push_str(&head[state_at + state_len..]);
    for (key, text) in [(DECISION, decision), (SUPERSEDED_BY, superseded_by)] {
        if let Some(text) = text {
            out.push(',');
            out.push_str(key);
            out.push_str(&text);
        }
    }
    out.push_str(END);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::BaselineDocument;
    use crate::example;

    fn draft() -> BaselineDocument {
        example::checkout_draft(example::CHECKOUT_TOPOLOGY, example::CHECKOUT_RUN_A).unwrap()
    }

    /// The document as `to_bytes` renders it after the change (what `restate` must equal).
    fn changed(doc: &BaselineDocument, change: Restate<'_>) -> BaselineDocument {
        let mut doc = doc.clone();
        doc.apply(change);
        doc
    }

    fn variants() -> Vec<BaselineDocument> {
        let plain = draft();
        let mut drifted = draft();
        let topology = example::parse_topology(example::CHECKOUT_TOPOLOGY).unwrap();
        let run_c = example::parse_run(&topology, example::CHECKOUT_RUN_C).unwrap();
        drifted.drift = crate::drift::compare(&topology, &plain.segments, &run_c);
        assert!(!drifted.drift.is_empty());
        drifted.drift_baseline_id = Some("bl-20260101-001".into());
        let mut decided = drifted.clone();
        decided.state = BaselineState::Approved;
        decided.decision = Some(Decision {
            by: "alice".into(),
            at: "2026-12-04T05:00:00.000Z".into(),
            // A comment that looks like the layout's markers, newline and quotes included.
            comment: Some("fine\n  \"superseded_by\": \"x\",\n  \"state\": \"draft\"".into()),
        });
        let mut replaced = decided.clone();
        replaced.state = BaselineState::Superseded;
        replaced.superseded_by = Some("bl-20260102-001".into());
        let mut replaced_draft = plain.clone();
        replaced_draft.state = BaselineState::Superseded;
        replaced_draft.superseded_by = Some("bl-20260102-002".into());
        vec![plain, drifted, decided, replaced, replaced_draft]
    }

    #[test]
    fn every_change_of_every_document_renders_as_to_bytes_does() {
        let decision = Decision {
            by: "bob".into(),
            at: "2026-12-04T06:00:00.000Z".into(),
            comment: None,
        };
        let commented = Decision {
            comment: Some("ok \"quoted\" \\ done".into()),
            ..decision.clone()
        };
        let mut checked = 0;
        for doc in variants() {
            let bytes = String::from_utf8(doc.to_bytes()).unwrap();
            for state in [
                BaselineState::Draft,
                BaselineState::Approved,
                BaselineState::Rejected,
                BaselineState::Superseded,
            ] {
                for decision in [None, Some(&decision), Some(&commented)] {
                    for superseded_by in [None, Some("bl-20261204-007")] {
                        let change = Restate {
                            state,
                            decision,
                            superseded_by,
                        };
                        let want = String::from_utf8(changed(&doc, change).to_bytes()).unwrap();
                        assert_eq!(restate(&bytes, change).as_deref(), Some(&*want));
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 5 * 4 * 3 * 2);
    }

    #[test]
    fn bytes_not_in_the_canonical_layout_are_left_to_the_parser() {
        let doc = draft();
        let change = Restate {
            state: BaselineState::Superseded,
            decision: None,
            superseded_by: Some("bl-x"),
        };
        let compact = serde_json::to_string(&doc).unwrap();
        assert_eq!(restate(&compact, change), None);
        let pretty = String::from_utf8(doc.to_bytes()).unwrap();
        assert_eq!(restate(pretty.trim_end(), change), None);
    }
}
