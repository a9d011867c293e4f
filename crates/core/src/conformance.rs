//! The conformance corpus of SPEC §10: language-neutral vectors every client library runs.
//!
//! The expected values are computed here, by budget-core's own rules (checks by
//! [`LiveChain::findings`](crate::live::LiveChain::findings), configs by
//! [`checkout_live`](crate::example::checkout_live) and the derivation rules, cache verdicts by
//! serde and the findings, retries, outcomes and deadlines by [`crate::retry`] and
//! [`crate::outcome`]), so the corpus is the truth the server and the Rust agent run; each
//! client's tests prove it agrees.
//!
//! Pure: [`files`] returns the text of every file; `examples/conformance.rs` writes them to
//! `conformance/`, and `tests/conformance.rs` fails when the committed files differ. The format
//! is described in `conformance/README.md`.

use serde::Serialize;

mod cache;
mod checks;
mod deadline;
mod retry;

/// Why the corpus could not be built: the shipped example no longer computes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to build the conformance corpus: {0}")]
pub struct CorpusError(pub String);

/// Every file of the corpus as `(file name, pretty JSON text ending in a newline)`, in a fixed
/// order; the same text on every run.
pub fn files() -> Result<Vec<(&'static str, String)>, CorpusError> {
    Ok(vec![
        ("checks.json", pretty(&checks::file()?)?),
        ("deadline.json", pretty(&deadline::file())?),
        ("retry.json", pretty(&retry::file()?)?),
        ("cache.json", pretty(&cache::file()?)?),
    ])
}

/// One file: what it holds, and its vectors.
#[derive(Serialize)]
struct File<V> {
    comment: &'static str,
    vectors: Vec<V>,
}

fn pretty(value: &impl Serialize) -> Result<String, CorpusError> {
    let mut text = serde_json::to_string_pretty(value).map_err(failed)?;
    text.push('\n');
    Ok(text)
}

fn failed(e: impl std::fmt::Display) -> CorpusError {
    CorpusError(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vector_has_a_unique_name_and_a_description() {
        for (file, text) in files().unwrap() {
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            let vectors = doc["vectors"].as_array().unwrap();
            assert!(!vectors.is_empty(), "{file}");
            let mut names = std::collections::BTreeSet::new();
            for v in vectors {
                let name = v["name"].as_str().unwrap();
                assert!(names.insert(name), "{file}: {name} twice");
                let description = v["description"].as_str().unwrap_or_default();
                assert!(!description.is_empty(), "{file}: {name} has no description");
            }
        }
    }
}
