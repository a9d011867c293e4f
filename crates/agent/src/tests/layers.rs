//! The module graph drawn in the crate's top-level doc is the one in the code: every module
//! imports exactly the modules its line lists, and only modules on later lines (no circle).
//! Test modules (after `#[cfg(test)]`) and doc comments are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The graph block of `lib.rs`: module → (its line, the modules it may import).
fn drawn(lib: &str) -> BTreeMap<String, (usize, BTreeSet<String>)> {
    let block: Vec<&str> = lib
        .lines()
        .skip_while(|l| !l.starts_with("//! agent"))
        .take_while(|l| *l != "//! ```")
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    assert!(!block.is_empty(), "no graph in lib.rs");
    let mut graph = BTreeMap::new();
    for (line, text) in block.iter().enumerate() {
        match text.split_once("->") {
            Some((name, deps)) => {
                let deps = deps.split_whitespace().map(str::to_owned).collect();
                graph.insert(name.trim().to_owned(), (line, deps));
            }
            None => {
                for leaf in text.split_whitespace().take_while(|w| !w.starts_with('(')) {
                    graph.insert(leaf.to_owned(), (line, BTreeSet::new()));
                }
            }
        }
    }
    graph
}

/// The crate modules `source` names as `crate::<module>` outside tests and comments.
fn imports(source: &str, modules: &BTreeSet<&str>) -> BTreeSet<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            assert!(!rest.starts_with('{'), "name one module per path: {line}");
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(name.as_str()) {
                found.insert(name);
            }
        }
    }
    found
}

#[test]
fn the_module_graph_in_the_crate_doc_is_true_and_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let graph = drawn(&lib);
    let modules: BTreeSet<&str> = graph.keys().map(String::as_str).collect();

    let on_disk: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".rs").map(str::to_owned))
        .filter(|m| m != "lib" && m != "test_support")
        .collect();
    let drawn_names: BTreeSet<String> = graph.keys().cloned().collect();
    assert_eq!(drawn_names, on_disk, "every module is in the graph, once");

    for (module, (line, deps)) in &graph {
        let source = std::fs::read_to_string(src.join(format!("{module}.rs"))).unwrap();
        assert_eq!(
            &imports(&source, &modules),
            deps,
            "{module}.rs imports other modules than its line in lib.rs lists"
        );
        for dep in deps {
            assert!(
                graph[dep].0 > *line,
                "{module} -> {dep} points up the graph (a circle is possible)"
            );
        }
    }
}
