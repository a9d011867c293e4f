//! From tool labels to segment ids: the upload's `map` first, then each segment's `labels` in
//! the topology, then a label equal to a segment id. Unmapped labels are reported.
//!
//! When the labels do not cover the chain ([`MappingFailure`]), the answer lists every label
//! found, mapped and unmapped, the segments left without data, and the fix: `labels` in the
//! topology or a map in the upload (`--map LABEL=SEGMENT`), with a copy-pasteable example that
//! pairs each segment with the unmapped label that names it, where one does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use budget_core::distribution::Distribution;
use budget_core::run::{RunUpload, SegmentUpload};
use budget_core::topology::{Topology, TopologyError};

use crate::{Extracted, Format, LabelStats};

/// How the labels of an upload were used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// `label → segment` for every label used.
    pub mapped: BTreeMap<String, String>,
    /// Labels no rule mapped (reported, not used).
    pub unmapped: Vec<String>,
    /// Labels deliberately skipped, e.g. Locust's `Aggregated` row.
    pub ignored: Vec<String>,
}

/// Why the labels of an upload do not make a run of the chain, with everything needed to fix
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MappingFailure {
    /// Every problem, located by a JSON pointer (`/map/…` for the upload's map, `/segments`).
    pub errors: Vec<TopologyError>,
    /// Every label the files hold, in file order.
    pub found: Vec<String>,
    /// How the labels were used before the failure.
    pub mapping: Mapping,
    /// Non-root segments no label gives data to.
    pub missing: Vec<String>,
    /// A map that would cover the missing segments: for each, the unmapped label that names it
    /// (its callee, or its id), or `LABEL` where none does.
    pub suggested_map: BTreeMap<String, String>,
    /// The fix, in plain words, with the example.
    pub fix: String,
}

impl MappingFailure {
    /// One paragraph: what is missing, the labels found, mapped and unmapped, and the fix.
    pub fn message(&self, chain: &str) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        let mut parts = vec![format!(
            "the labels of the upload do not map onto the segments of {chain:?}"
        )];
        if !self.missing.is_empty() {
            parts.push(format!("no data for {}", self.missing.join(", ")));
        }
        for e in self.errors.iter().filter(|e| e.pointer != "/segments") {
            parts.push(e.message.clone());
        }
        let mapped: Vec<String> = self
            .mapping
            .mapped
            .iter()
            .map(|(l, s)| format!("{l} → {s}"))
            .collect();
        let mut labels = format!(
            "labels found: {}; mapped: {}; unmapped: {}",
            list(&self.found),
            list(&mapped),
            list(&self.mapping.unmapped)
        );
        if !self.mapping.ignored.is_empty() {
            labels.push_str(&format!("; ignored: {}", self.mapping.ignored.join(", ")));
        }
        parts.push(labels);
        format!("{}. {}", parts.join(": "), self.fix)
    }
}

/// The native upload equivalent to `files`, and how labels were mapped.
pub fn to_upload(
    files: &[Extracted],
    topology: &Topology,
    map: &BTreeMap<String, String>,
) -> Result<(RunUpload, Mapping), Box<MappingFailure>> {
    let mut errors = Vec::new();
    for (label, segment) in map {
        if topology.segment(segment).is_none() {
            errors.push(TopologyError {
                pointer: format!("/map/{}", label.replace('~', "~0").replace('/', "~1")),
                message: format!("label {label:?} is mapped to {segment:?}, which is not a segment of this chain"),
            });
        }
    }
    let by_topology = |label: &str| {
        topology
            .segments
            .iter()
            .find(|s| s.labels.iter().any(|l| l == label))
            .or_else(|| topology.segment(label))
            .map(|s| s.id.clone())
    };
    let mut mapping = Mapping {
        mapped: BTreeMap::new(),
        unmapped: Vec::new(),
        ignored: Vec::new(),
    };
    let mut found = Vec::new();
    let mut chosen: BTreeMap<String, (&LabelStats, String, Option<&Distribution>)> =
        BTreeMap::new();
    let mut tool = None;
    for file in files {
        tool = tool.or_else(|| file.tool.clone());
        for stats in &file.labels {
            found.push(stats.label.clone());
            let target = map
                .get(&stats.label)
                .cloned()
                .or_else(|| by_topology(&stats.label));
            let Some(segment) = target else {
                if matches!(file.format, Format::Locust | Format::LocustJson)
                    && stats.label == "Aggregated"
                {
                    mapping.ignored.push(stats.label.clone());
                } else {
                    mapping.unmapped.push(stats.label.clone());
                }
                continue;
            };
            if let Some((_, other, _)) = chosen.get(&segment) {
                errors.push(TopologyError {
                    pointer: "/map".into(),
                    message: format!(
                        "segment {segment:?} gets data from two labels, {other:?} and {:?}; map only one of them",
                        stats.label
                    ),
                });
                continue;
            }
            mapping.mapped.insert(stats.label.clone(), segment.clone());
            let distribution = file.distributions.get(&stats.label);
            chosen.insert(segment, (stats, stats.label.clone(), distribution));
        }
    }
    let missing: Vec<String> = topology
        .segments
        .iter()
        .filter(|s| !s.is_root() && !chosen.contains_key(&s.id))
        .map(|s| s.id.clone())
        .collect();
    for id in &missing {
        errors.push(TopologyError {
            pointer: "/segments".into(),
            message: format!(
                "no data for segment {id:?}: no label of the upload maps to it (every non-root \
                 segment needs p99 and p999)"
            ),
        });
    }
    if !errors.is_empty() {
        let format = files.first().map_or(Format::Native, |f| f.format);
        let suggested_map = suggest(topology, &missing, &mapping.unmapped);
        let fix = fix(format, &found, &suggested_map);
        return Err(Box::new(MappingFailure {
            errors,
            found,
            mapping,
            missing,
            suggested_map,
            fix,
        }));
    }
    let segments = topology
        .segments
        .iter()
        .filter_map(|s| chosen.get(&s.id).map(|(stats, _, d)| (s, stats, d)))
        .map(|(s, stats, distribution)| SegmentUpload {
            id: s.id.clone(),
            samples: stats.samples,
            failures: stats.failures,
            p50_ms: stats.p50_us.map(budget_core::us_to_ms),
            p99_ms: budget_core::us_to_ms(stats.p99_us),
            p999_ms: budget_core::us_to_ms(stats.p999_us),
            distribution: distribution.cloned(),
        })
        .collect();
    let format = files.first().map(|f| f.format.as_str()).unwrap_or("native");
    Ok((
        RunUpload {
            tool: tool.or_else(|| Some(format.to_owned())),
            note: None,
            segments,
        },
        mapping,
    ))
}

/// Lowercase letters and digits only: `GET /api/Inventory` → `getapiinventory`.
fn squash(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// For each missing segment, the one unmapped label that names its callee (or its id); `LABEL`
/// where no label, or more than one, does. A label is suggested for one segment at most.
fn suggest(
    topology: &Topology,
    missing: &[String],
    unmapped: &[String],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut placeholders = 0;
    for id in missing {
        let Some(seg) = topology.segment(id) else {
            continue;
        };
        let (callee, whole) = (squash(&seg.callee), squash(&seg.id));
        let names = |l: &&String| {
            let l = squash(l);
            !callee.is_empty() && (l.contains(&callee) || l == whole)
        };
        let candidates: Vec<&String> = unmapped
            .iter()
            .filter(names)
            .filter(|l| !out.contains_key(*l))
            .collect();
        match candidates.as_slice() {
            [one] => {
                out.insert((*one).clone(), id.clone());
            }
            _ => {
                placeholders += 1;
                let label = if placeholders == 1 {
                    "LABEL".to_owned()
                } else {
                    format!("LABEL{placeholders}")
                };
                out.insert(label, id.clone());
            }
        }
    }
    out
}

/// A word for the shell: single-quoted when it holds anything but letters, digits and `._/:-`
/// (`->` must be quoted, or the shell redirects).
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/:=".contains(c) || c == '-')
        && !s.contains('>');
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The fix in plain words, with a copy-pasteable example built from `suggested`.
fn fix(format: Format, found: &[String], suggested: &BTreeMap<String, String>) -> String {
    let mut out = Vec::new();
    if format == Format::K6 && found == ["http_req_duration"] {
        out.push(
            "this k6 summary has one label for all requests (http_req_duration, no sub-metrics): \
             give each endpoint a threshold in the script, e.g. thresholds: \
             {'http_req_duration{name:inventory}': ['p(99)<1000']}, so k6 writes one sub-metric \
             per endpoint, or upload k6's raw points (k6 run --out json=points.json) instead"
                .to_owned(),
        );
    }
    if format.single_endpoint() {
        out.push(format!(
            "{format} files hold one endpoint each and are labelled by their upload part's name \
             (budgetctl: LABEL=FILE, else the file's name without extension), e.g. \
             budgetctl run upload --chain CHAIN --format {format} {}",
            suggested
                .values()
                .map(|seg| shell_word(&format!("{seg}=FILE")))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if !suggested.is_empty() {
        let flags: Vec<String> = suggested
            .iter()
            .map(|(label, seg)| format!("--map {}", shell_word(&format!("{label}={seg}"))))
            .collect();
        let json = serde_json::to_string(suggested).unwrap_or_default();
        let (label, seg) = suggested.iter().next().expect("not empty");
        out.push(format!(
            "map the labels in the upload: budgetctl run upload … {} (HTTP: ?map={json}, \
             URL-encoded, or a multipart part named map), or once for all uploads in the \
             topology: \"labels\": [{}] on segment {seg}",
            flags.join(" "),
            serde_json::to_string(label).unwrap_or_default(),
        ));
    }
    if out.is_empty() {
        return "fix: check the upload's map against the chain's segments".to_owned();
    }
    format!("fix: {}", out.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use budget_core::example::CHECKOUT_TOPOLOGY;

    fn topology() -> Topology {
        serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap()
    }

    fn file(format: Format, labels: &[&str]) -> Extracted {
        Extracted {
            distributions: Default::default(),
            format,
            tool: None,
            labels: labels
                .iter()
                .map(|l| LabelStats {
                    label: (*l).to_owned(),
                    samples: 10,
                    failures: Some(0),
                    p50_us: None,
                    p99_us: 1000,
                    p999_us: 2000,
                })
                .collect(),
            notes: Vec::new(),
        }
    }

    fn fail(files: &[Extracted], map: &[(&str, &str)]) -> MappingFailure {
        let map = map
            .iter()
            .map(|(l, s)| ((*l).to_owned(), (*s).to_owned()))
            .collect();
        *to_upload(files, &topology(), &map).unwrap_err()
    }

    #[test]
    fn locust_without_labels_lists_what_it_found_and_the_fix() {
        let f = fail(
            &[file(
                Format::Locust,
                &["/inventory", "/payment", "/user", "Aggregated"],
            )],
            &[],
        );
        assert_eq!(f.found, ["/inventory", "/payment", "/user", "Aggregated"]);
        assert_eq!(f.mapping.unmapped, ["/inventory", "/payment", "/user"]);
        assert_eq!(f.mapping.ignored, ["Aggregated"]);
        assert_eq!(
            f.missing,
            ["order->inventory", "order->payment", "order->user"]
        );
        assert_eq!(
            f.suggested_map,
            [
                ("/inventory", "order->inventory"),
                ("/payment", "order->payment"),
                ("/user", "order->user")
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into()
        );
        let m = f.message("checkout");
        assert!(
            m.starts_with(
                "the labels of the upload do not map onto the segments of \"checkout\": no data \
                 for order->inventory, order->payment, order->user: labels found: /inventory, \
                 /payment, /user, Aggregated; mapped: none; unmapped: /inventory, /payment, \
                 /user; ignored: Aggregated. fix: map the labels in the upload: budgetctl run \
                 upload … --map '/inventory=order->inventory' --map '/payment=order->payment' \
                 --map '/user=order->user' (HTTP: ?map={\"/inventory\":\"order->inventory\","
            ),
            "{m}"
        );
        assert!(
            m.ends_with("topology: \"labels\": [\"/inventory\"] on segment order->inventory"),
            "{m}"
        );
    }

    /// Locust's `Aggregated` is ignored in its JSON as in its CSV (Locust 2.47 writes none in
    /// the JSON, an older or edited file may); another format's label of that name is not.
    #[test]
    fn locust_json_aggregated_is_ignored_too() {
        let f = fail(
            &[file(Format::LocustJson, &["/inventory", "Aggregated"])],
            &[],
        );
        assert_eq!(f.mapping.unmapped, ["/inventory"]);
        assert_eq!(f.mapping.ignored, ["Aggregated"]);
        let f = fail(&[file(Format::Jmeter, &["Aggregated"])], &[]);
        assert_eq!(f.mapping.unmapped, ["Aggregated"]);
        assert!(f.mapping.ignored.is_empty());
    }

    #[test]
    fn partial_mappings_and_placeholders() {
        // One label mapped by the map, one named after its segment, one that names nothing.
        let f = fail(
            &[file(Format::Jmeter, &["inv", "GET /api/payments", "misc"])],
            &[("inv", "order->inventory")],
        );
        assert_eq!(
            f.mapping.mapped,
            [("inv".to_owned(), "order->inventory".to_owned())].into()
        );
        assert_eq!(f.missing, ["order->payment", "order->user"]);
        assert_eq!(
            f.suggested_map,
            [
                ("GET /api/payments", "order->payment"),
                ("LABEL", "order->user")
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into()
        );
        let m = f.message("checkout");
        assert!(m.contains("mapped: inv → order->inventory"), "{m}");
        assert!(
            m.contains("--map 'GET /api/payments=order->payment' --map 'LABEL=order->user'"),
            "{m}"
        );
        // Two labels naming one segment: no guess.
        let f = fail(&[file(Format::Jmeter, &["user-a", "user-b"])], &[]);
        assert_eq!(
            f.suggested_map.get("LABEL3").map(String::as_str),
            Some("order->user")
        );
    }

    #[test]
    fn k6_without_sub_metrics_and_single_endpoint_files_say_how_to_label() {
        let f = fail(&[file(Format::K6, &["http_req_duration"])], &[]);
        assert!(f.fix.contains("one label for all requests"), "{}", f.fix);
        assert!(f.fix.contains("--out json"), "{}", f.fix);
        let f = fail(
            &[
                file(Format::Wrk2, &["checkout"]),
                file(Format::Wrk2, &["search-errors"]),
            ],
            &[],
        );
        assert!(
            f.fix.contains(
                "budgetctl run upload --chain CHAIN --format wrk2 'order->inventory=FILE' \
                 'order->payment=FILE' 'order->user=FILE'"
            ),
            "{}",
            f.fix
        );
        assert!(f
            .message("c")
            .contains("labels found: checkout, search-errors"));
    }

    #[test]
    fn map_errors_come_with_the_labels_too() {
        let f = fail(
            &[file(Format::Locust, &["inventory", "payment", "user"])],
            &[("inventory", "order->nowhere")],
        );
        assert_eq!(f.errors[0].pointer, "/map/inventory");
        assert!(f.message("c").contains("which is not a segment"), "{f:?}");
        let f = fail(
            &[file(Format::Locust, &["a", "b"])],
            &[("a", "order->inventory"), ("b", "order->inventory")],
        );
        assert!(
            f.message("c").contains("gets data from two labels"),
            "{f:?}"
        );
    }

    #[test]
    fn shell_words() {
        assert_eq!(
            shell_word("inventory=order-inventory"),
            "inventory=order-inventory"
        );
        assert_eq!(shell_word("a=order->b"), "'a=order->b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }
}
