//! From tool labels to segment ids: the upload's `map` first, then each segment's `labels` in
//! the topology, then a label equal to a segment id. Unmapped labels are reported.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

/// The native upload equivalent to `files`, and how labels were mapped.
pub fn to_upload(
    files: &[Extracted],
    topology: &Topology,
    map: &BTreeMap<String, String>,
) -> Result<(RunUpload, Mapping), Vec<TopologyError>> {
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
    let mut chosen: BTreeMap<String, (&LabelStats, String)> = BTreeMap::new();
    let mut tool = None;
    for file in files {
        tool = tool.or_else(|| file.tool.clone());
        for stats in &file.labels {
            let target = map
                .get(&stats.label)
                .cloned()
                .or_else(|| by_topology(&stats.label));
            let Some(segment) = target else {
                if file.format == Format::Locust && stats.label == "Aggregated" {
                    mapping.ignored.push(stats.label.clone());
                } else {
                    mapping.unmapped.push(stats.label.clone());
                }
                continue;
            };
            if let Some((_, other)) = chosen.get(&segment) {
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
            chosen.insert(segment, (stats, stats.label.clone()));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let segments = topology
        .segments
        .iter()
        .filter_map(|s| chosen.get(&s.id).map(|(stats, _)| (s, stats)))
        .map(|(s, stats)| SegmentUpload {
            id: s.id.clone(),
            samples: stats.samples,
            failures: stats.failures,
            p50_ms: stats.p50_us.map(budget_core::us_to_ms),
            p99_ms: budget_core::us_to_ms(stats.p99_us),
            p999_ms: budget_core::us_to_ms(stats.p999_us),
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
