//! The committed corpus under `conformance/` is what budget-core computes today: a rule that
//! changes without the corpus being regenerated fails here, before any client runs stale
//! vectors.

use std::path::{Path, PathBuf};

const REGENERATE: &str = "cargo run -p budget-core --example conformance -- conformance";

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance")
}

#[test]
fn the_committed_vectors_are_current() {
    let files = budget_core::conformance::files().unwrap();
    let mut stale = Vec::new();
    for (name, text) in &files {
        let path = folder().join(name);
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == *text => {}
            Ok(committed) => stale.push(format!(
                "{name} differs from what budget-core computes (first difference at line {})",
                first_difference(&committed, text)
            )),
            Err(e) => stale.push(format!("{name} cannot be read ({}): {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nregenerate with `{REGENERATE}` and commit the result",
        stale.join("\n")
    );
}

/// A JSON file in the folder that the generator does not write would be run by the clients
/// yet never kept current.
#[test]
fn every_vector_file_is_generated() {
    let generated: Vec<&str> = budget_core::conformance::files()
        .unwrap()
        .iter()
        .map(|(name, _)| *name)
        .collect();
    for entry in std::fs::read_dir(folder()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".json") || generated.contains(&name.as_str()),
            "conformance/{name} is not written by the generator; remove it or generate it"
        );
    }
}

fn first_difference(a: &str, b: &str) -> usize {
    let same = a.lines().zip(b.lines()).take_while(|(x, y)| x == y).count();
    same + 1
}
