//! Bounds a request must meet on the wire, checked on its encoded bytes before it is decoded.
//!
//! Decoding makes more of some messages than their bytes: a `SegmentWindow` of a few bytes
//! becomes a struct of about 200 bytes with two hash maps, so a 4 MiB `ReportRequest` of
//! 144,000 tiny windows took about 40 MiB while it was decoded, although no Report may hold
//! more than [`MAX_REPORT_WINDOWS`] windows. Counting the repeated fields first bounds what
//! decoding can allocate by what a valid request can hold.

use budget_core::feedback::{MAX_REPORT_WINDOWS, OUTCOMES, RETRY_CAUSES};
use prost::encoding::{decode_key, decode_varint, skip_field, WireType};

use crate::wire;

/// A request checked on its encoded bytes before it is decoded.
pub trait WireBounds {
    /// Why `bytes` (one encoded message) may not be decoded; the default accepts any.
    fn check_wire(_bytes: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

impl WireBounds for wire::WatchRequest {}
impl WireBounds for wire::AckRequest {}

/// `ReportRequest.windows`.
const REPORT_WINDOWS: u32 = 2;
/// `SegmentWindow.retries` and `SegmentWindow.outcomes`.
const WINDOW_RETRIES: u32 = 7;
const WINDOW_OUTCOMES: u32 = 8;

/// At most [`MAX_REPORT_WINDOWS`] windows, each with at most one map entry per retry cause
/// and per outcome.
impl WireBounds for wire::ReportRequest {
    fn check_wire(bytes: &[u8]) -> Result<(), String> {
        let mut windows = 0usize;
        for_each_field(bytes, |number, value| {
            if number != REPORT_WINDOWS {
                return Ok(());
            }
            windows += 1;
            if windows > MAX_REPORT_WINDOWS {
                return Err(format!(
                    "a report holds at most {MAX_REPORT_WINDOWS} windows; send the rest in another"
                ));
            }
            check_window(value.unwrap_or_default())
                .map_err(|e| format!("window {}: {e}", windows - 1))
        })
    }
}

fn check_window(bytes: &[u8]) -> Result<(), String> {
    let (mut retries, mut outcomes) = (0usize, 0usize);
    for_each_field(bytes, |number, _| {
        let (n, most, field, names) = match number {
            WINDOW_RETRIES => (&mut retries, RETRY_CAUSES.len(), "retries", "retry causes"),
            WINDOW_OUTCOMES => (&mut outcomes, OUTCOMES.len(), "outcomes", "outcomes"),
            _ => return Ok(()),
        };
        *n += 1;
        if *n > most {
            return Err(format!(
                "{field} has more than {most} entries; a window names each of the {most} {names} once"
            ));
        }
        Ok(())
    })
}

/// Calls `each` with the number of every field of the message `bytes`, and the value of
/// those that are length-delimited, in wire order; the first refusal ends the walk. Bytes
/// that are not protobuf end it too, without a refusal: prost's decoder finds them as well,
/// no later than the walk did, and names them.
fn for_each_field(
    mut bytes: &[u8],
    mut each: impl FnMut(u32, Option<&[u8]>) -> Result<(), String>,
) -> Result<(), String> {
    while !bytes.is_empty() {
        let Ok((number, wire_type)) = decode_key(&mut bytes) else {
            return Ok(());
        };
        let value = match wire_type {
            WireType::LengthDelimited => {
                let Some(value) = decode_varint(&mut bytes)
                    .ok()
                    .and_then(|len| usize::try_from(len).ok())
                    .and_then(|len| bytes.get(..len))
                else {
                    return Ok(());
                };
                bytes = &bytes[value.len()..];
                Some(value)
            }
            _ => {
                let ctx = prost::encoding::DecodeContext::default();
                if skip_field(wire_type, number, &mut bytes, ctx).is_err() {
                    return Ok(());
                }
                None
            }
        };
        each(number, value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message as _;

    use super::*;
    use crate::wire::{ReportRequest, SegmentWindow};

    fn window(retries: &[&str], outcomes: &[&str]) -> SegmentWindow {
        let counts = |keys: &[&str]| -> HashMap<String, u64> {
            keys.iter().map(|k| (k.to_string(), 1)).collect()
        };
        SegmentWindow {
            chain: "checkout".into(),
            segment: "order->inventory".into(),
            start_unix_ms: 1,
            end_unix_ms: 60_001,
            calls: 3,
            attempts: 4,
            retries: counts(retries),
            outcomes: counts(outcomes),
            latency_hdr: prost::bytes::Bytes::from_static(b"\x1c\x84\x93\x14"),
        }
    }

    /// The refusal of window `i` for `why`.
    fn refused(i: usize, why: &str) -> Result<(), String> {
        Err(format!("window {i}: {why}"))
    }

    fn check(req: &ReportRequest) -> Result<(), String> {
        ReportRequest::check_wire(&req.encode_to_vec())
    }

    #[test]
    fn a_report_of_full_windows_passes_and_decodes() {
        let req = ReportRequest {
            agent_id: "a-1".into(),
            windows: vec![window(&RETRY_CAUSES, &OUTCOMES); MAX_REPORT_WINDOWS],
            ..Default::default()
        };
        assert_eq!(check(&req), Ok(()));
        assert_eq!(check(&ReportRequest::default()), Ok(()));
    }

    #[test]
    fn a_report_of_too_many_windows_is_refused_before_decoding() {
        // Empty windows: two bytes each on the wire, about 200 decoded.
        let req = ReportRequest {
            agent_id: "a-1".into(),
            windows: vec![SegmentWindow::default(); MAX_REPORT_WINDOWS + 1],
            ..Default::default()
        };
        assert_eq!(
            check(&req),
            Err("a report holds at most 4096 windows; send the rest in another".into())
        );
    }

    #[test]
    fn a_window_names_each_retry_cause_and_outcome_once() {
        let req = ReportRequest {
            agent_id: "a-1".into(),
            windows: vec![window(&[], &[]), window(&RETRY_CAUSES, &OUTCOMES)],
            ..Default::default()
        };
        assert_eq!(check(&req), Ok(()));

        // A key sent twice is two entries on the wire: prost decodes it (the last one wins),
        // the check refuses it.
        let mut w = window(&[], &OUTCOMES).encode_to_vec();
        w.extend(window(&[], &["ok"]).encode_to_vec());
        let mut bytes = vec![0x12];
        prost::encoding::encode_varint(w.len() as u64, &mut bytes);
        bytes.extend(&w);
        assert_eq!(
            ReportRequest::decode(&bytes[..]).unwrap().windows[0]
                .outcomes
                .len(),
            6
        );
        assert_eq!(
            ReportRequest::check_wire(&bytes),
            refused(
                0,
                "outcomes has more than 6 entries; a window names each of the 6 outcomes once"
            )
        );

        let many = SegmentWindow {
            outcomes: (0..100_000).map(|i| (format!("o{i}"), 1)).collect(),
            ..SegmentWindow::default()
        };
        let req = ReportRequest {
            agent_id: "a-1".into(),
            windows: vec![window(&[], &[]), many],
            ..Default::default()
        };
        assert_eq!(
            check(&req),
            refused(
                1,
                "outcomes has more than 6 entries; a window names each of the 6 outcomes once"
            )
        );
        let causes = SegmentWindow {
            retries: (0..3).map(|i| (format!("c{i}"), 1)).collect(),
            ..SegmentWindow::default()
        };
        let req = ReportRequest {
            agent_id: "a-1".into(),
            windows: vec![causes],
            ..Default::default()
        };
        assert_eq!(
            check(&req),
            refused(
                0,
                "retries has more than 2 entries; a window names each of the 2 retry causes once"
            )
        );
    }

    #[test]
    fn malformed_bytes_are_left_to_the_decoder() {
        // Field 2, length 10, but 1 byte follows; field 2 as a start group; a varint that
        // never ends: prost refuses each of them.
        for bytes in [&[0x12, 10, 0][..], &[0x13], &[0x08, 0xff]] {
            assert_eq!(ReportRequest::check_wire(bytes), Ok(()));
            assert!(ReportRequest::decode(bytes).is_err());
        }
        assert_eq!(ReportRequest::check_wire(&[]), Ok(()));
        // A group in an unknown field is skipped, as prost skips it, and the walk goes on.
        let mut bytes = vec![0x7b, 0x7c]; // field 15: start group, end group
        bytes.extend(
            ReportRequest {
                agent_id: "a-1".into(),
                windows: vec![SegmentWindow::default(); MAX_REPORT_WINDOWS + 1],
                ..Default::default()
            }
            .encode_to_vec(),
        );
        assert_eq!(
            ReportRequest::decode(&bytes[..]).unwrap().windows.len(),
            4097
        );
        assert!(ReportRequest::check_wire(&bytes).is_err());
    }
}
