//! `cache.json`: the text of a cache file found at start → start, or refuse and why.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{failed, pretty, CorpusError, File};
use crate::checks::Severity;
use crate::example::{checkout_live, CHECKOUT_TOPOLOGY, CHECKOUT_TOPOLOGY_B};
use crate::live::LiveChain;

/// The cache file every client writes and reads: `{"revision": N, "chains": {name: config}}`.
#[derive(Serialize, Deserialize)]
struct CacheFile {
    revision: i64,
    chains: BTreeMap<String, LiveChain>,
}

#[derive(Serialize)]
pub(super) struct CacheVector {
    name: &'static str,
    description: &'static str,
    file: String,
    #[serde(flatten)]
    verdict: Verdict,
}

#[derive(Serialize)]
#[serde(tag = "expect", rename_all = "snake_case")]
enum Verdict {
    Start { revision: i64, chains: Vec<String> },
    Refuse { reason: &'static str },
}

/// What a client does at start with `text` as its cache: it parses it strictly, then checks
/// every chain in name order; the first error finding refuses the whole file.
fn verdict(text: &str) -> Verdict {
    let Ok(cache) = serde_json::from_str::<CacheFile>(text) else {
        return Verdict::Refuse { reason: "format" };
    };
    let first_error = cache
        .chains
        .values()
        .flat_map(LiveChain::findings)
        .find(|f| f.severity == Severity::Error);
    match first_error {
        Some(f) => Verdict::Refuse {
            reason: f.kind.check_name(),
        },
        None => Verdict::Start {
            revision: cache.revision,
            chains: cache.chains.into_keys().collect(),
        },
    }
}

const COMMENT: &str = "The exact text of the cache file a client finds at start with the \
    control plane down, and whether it starts from it (at revision, with chains) or refuses \
    (reason: format, or the check of the first error finding, chains checked in name order).";

pub(super) fn file() -> Result<File<CacheVector>, CorpusError> {
    let a = checkout_live(CHECKOUT_TOPOLOGY, 7).map_err(failed)?;
    let b = checkout_live(CHECKOUT_TOPOLOGY_B, 8).map_err(failed)?;
    let renamed = |chain: &LiveChain, name: &str, revision| {
        let mut c = chain.clone();
        c.chain = name.into();
        c.revision = revision;
        c
    };
    let mut short_window = a.clone();
    short_window.breaker_window_ms = 400;

    let valid_a = cache_text(7, [a.clone()])?;
    let edited = |edit: &dyn Fn(&mut Value)| -> Result<String, CorpusError> {
        let mut v: Value = serde_json::from_str(&valid_a).map_err(failed)?;
        edit(&mut v);
        pretty(&v)
    };
    let truncated: String = valid_a.chars().take(valid_a.chars().count() / 2).collect();
    // Written by hand so the refund chain comes first in the file, yet checkout is checked
    // first: a client must not follow the file's (or its map's) order.
    let reverse_order = format!(
        "{{\"revision\": 8, \"chains\": {{\"refund\": {}, \"checkout\": {}}}}}\n",
        serde_json::to_string(&renamed(&b, "refund", 8)).map_err(failed)?,
        serde_json::to_string(&short_window).map_err(failed)?,
    );

    let cases: Vec<(&str, &str, String)> = vec![
        (
            "example-a",
            "SPEC example A as the agent caches it: start at revision 7",
            valid_a.clone(),
        ),
        (
            "example-b-inverted",
            "example B in the cache: refuse to start on an inversion",
            cache_text(8, [b.clone()])?,
        ),
        (
            "two-chains",
            "two valid chains: start with both",
            cache_text(8, [a.clone(), renamed(&a, "refund", 8)])?,
        ),
        (
            "two-chains-one-inverted",
            "one chain of two is inverted: the whole cache is refused",
            cache_text(8, [a.clone(), renamed(&b, "refund", 8)])?,
        ),
        (
            "two-chains-checked-in-name-order",
            "refund (inverted) comes first in the file, but checkout (a 400 ms breaker \
             window) comes first by name: refused for breaker_window",
            reverse_order,
        ),
        (
            "no-chains",
            "an empty chains object is a valid cache with nothing in it",
            cache_text(3, [])?,
        ),
        (
            "zero-timeout",
            "inventory's timeout is 0 ms (every call would fail before its first attempt): \
             refused for structure, as the same config received on a stream is",
            edited(&|v| {
                let inventory = &mut v["chains"]["checkout"]["segments"][1];
                inventory["timeout_ms"] = 0.into();
                inventory["budget_ms"] = 0.into();
            })?,
        ),
        (
            "format-truncated",
            "the first half of a valid file",
            truncated,
        ),
        (
            "format-not-json",
            "a file that is not JSON",
            "not a budget cache\n".into(),
        ),
        ("format-empty-file", "an empty file", String::new()),
        (
            "format-revision-string",
            "revision as a string",
            edited(&|v| v["revision"] = "7".into())?,
        ),
        (
            "format-no-chains",
            "no chains field",
            edited(&|v| remove(v, "chains"))?,
        ),
        (
            "format-segment-without-budget",
            "inventory has no budget_ms",
            edited(&|v| remove(&mut v["chains"]["checkout"]["segments"][1], "budget_ms"))?,
        ),
        (
            "format-unknown-class",
            "inventory's class is neither stable nor volatile",
            edited(&|v| v["chains"]["checkout"]["segments"][1]["class"] = "wobbly".into())?,
        ),
        (
            "format-bad-duration",
            "max_recovery 18x is not a duration",
            edited(&|v| v["chains"]["checkout"]["max_recovery"] = "18x".into())?,
        ),
    ];
    Ok(File {
        comment: COMMENT,
        vectors: cases
            .into_iter()
            .map(|(name, description, file)| CacheVector {
                name,
                description,
                verdict: verdict(&file),
                file,
            })
            .collect(),
    })
}

/// The file a client writes for `chains` at `revision`.
fn cache_text(
    revision: i64,
    chains: impl IntoIterator<Item = LiveChain>,
) -> Result<String, CorpusError> {
    pretty(&CacheFile {
        revision,
        chains: chains.into_iter().map(|c| (c.chain.clone(), c)).collect(),
    })
}

fn remove(object: &mut Value, field: &str) {
    if let Some(fields) = object.as_object_mut() {
        fields.remove(field);
    }
}
