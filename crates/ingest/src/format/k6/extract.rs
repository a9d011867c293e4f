//! From the members read to per-label statistics: each `http_req_duration` (sub-)metric is a
//! label, its requests and failures come from the matching `http_reqs` and `http_req_failed`.
//! The trend's percentiles, `min` and `max` are also the label's percentile points.

use super::*;
use crate::format::percentile_points;

/// One metric of the document: its key, tags and stats (either shape).
struct Metric<'a> {
    key: &'a str,
    /// The metric's name without the selector (`http_req_duration`).
    base: &'a str,
    tags: Option<Tags>,
    data: &'a MetricData,
    values: &'a Stats,
    /// The JSON path of `values`.
    path: Vec<&'a str>,
}

impl Metric<'_> {
    fn at(&self, stat: &str) -> String {
        let mut p: Vec<&str> = self.path.clone();
        p.push(stat);
        pointer(&p)
    }

    fn err(&self, stat: &str, message: impl Into<String>) -> IngestError {
        IngestError::new(message).field(self.at(stat))
    }

    /// Checks the `type` (and `contains`) of the handleSummary shape.
    fn check_type(&self, want: &str, contains: Option<&str>) -> Result<(), IngestError> {
        let mut base = self.path.clone();
        if base.last() == Some(&"values") {
            base.pop();
        }
        for (field, want, got) in [
            ("type", Some(want), &self.data.kind),
            ("contains", contains, &self.data.contains),
        ] {
            let (Some(want), Some(got)) = (want, got) else {
                continue;
            };
            if got.as_str() != Some(want) {
                let mut p = base.clone();
                p.push(field);
                return Err(field_error(
                    &p,
                    format!("is {got}, expected \"{want}\" for k6's {}", self.key),
                ));
            }
        }
        Ok(())
    }

    fn count(&self, stat: &str) -> Result<Option<u64>, IngestError> {
        match self.values.get(stat) {
            None => Ok(None),
            Some(v) => {
                let mut p = self.path.clone();
                p.push(stat);
                count(v, &p).map(Some)
            }
        }
    }

    /// The trend stat found for `PERCENTILES[i]` (`med` for 50, `p(N)` matched by number): key
    /// and value.
    fn percentile(&self, i: usize) -> Result<Option<(&str, f64)>, IngestError> {
        let Some((key, v)) = &self.values.percentiles[i] else {
            return Ok(None);
        };
        match v {
            Scalar::Number(n) => n
                .as_f64()
                .map(|v| Some((key.as_str(), v)))
                .ok_or_else(|| self.err(key, "is not a number")),
            Scalar::Null => Err(self.err(key, "is null")),
            _ => Err(self.err(key, "must be a number")),
        }
    }

    /// The label's percentile points: every stat read for [`PERCENTILES`] (`med`, `p(N)`), every
    /// other `p(N)` kept, `min` as 0 and `max` as 100, each when it is a plausible number of ms.
    /// A stat that is not gives no point (the required ones were checked before).
    fn points(&self) -> Option<budget_core::distribution::Distribution> {
        let stats = &self.values;
        let read = PERCENTILES
            .iter()
            .zip(&stats.percentiles)
            .filter_map(|(&percentile, found)| {
                let (_, v) = found.as_ref()?;
                Some((percentile, v.as_f64()?))
            });
        let extremes = [(0.0, stats.min), (100.0, stats.max)]
            .into_iter()
            .filter_map(|(percentile, ms)| Some((percentile, ms?)));
        percentile_points(
            read.chain(stats.other_percentiles.iter().copied())
                .chain(extremes)
                .filter_map(|(percentile, ms)| Some((percentile, self.micros("", ms).ok()?))),
        )
    }

    /// A required percentile, in µs.
    fn required_us(&self, i: usize, name: &str) -> Result<u64, IngestError> {
        match self.percentile(i)? {
            Some((key, ms)) => self.micros(key, ms),
            None => Err(self.err(
                name,
                format!(
                    "missing from the summary of {}: {TREND_STATS_HINT}",
                    self.key
                ),
            )),
        }
    }

    fn micros(&self, stat: &str, ms: f64) -> Result<u64, IngestError> {
        if !ms.is_finite() || ms < 0.0 {
            return Err(self.err(stat, format!("{ms} is not a latency")));
        }
        if ms > MAX_LATENCY_MS {
            return Err(self.err(
                stat,
                format!("{ms} ms is over one hour: k6 writes trend values in milliseconds"),
            ));
        }
        Ok((ms * 1000.0).round() as u64)
    }
}

pub(super) fn extract(doc: &K6Doc) -> Result<Extracted, IngestError> {
    if doc.oha {
        return Err(field_error(
            &["latencyPercentiles"],
            "this is oha output, not a k6 summary: upload it as format oha",
        ));
    }
    let (metrics, root): (&Metrics, Vec<&str>) =
        match &doc.metrics {
            Some(Obj::Object(m)) => (m, vec!["metrics"]),
            Some(_) => return Err(field_error(&["metrics"], "must be an object")),
            None if doc.top_duration => (&doc.top, vec![]),
            None => return Err(field_error(
                &["metrics"],
                "missing: this is not a k6 summary (`--summary-export` or `handleSummary()` JSON)",
            )),
        };

    if metrics.too_many {
        let message = format!(
            "more than {MAX_METRICS} {DURATION}, {REQS} and {FAILED} (sub-)metrics: this is not \
             the summary of a load test"
        );
        return Err(if root.is_empty() {
            IngestError::new(message)
        } else {
            field_error(&root, message)
        });
    }

    let mut all: Vec<Metric<'_>> = Vec::new();
    for (key, entry) in &metrics.entries {
        let mut path = root.clone();
        path.push(key.as_str());
        let data = match entry {
            Entry::Malformed => {
                return Err(field_error(
                    &path,
                    "malformed sub-metric name (expected `metric{tag:value}`)",
                ))
            }
            Entry::NotObject => return Err(field_error(&path, "must be an object")),
            Entry::ValuesNotObject => {
                path.push("values");
                return Err(field_error(&path, "must be an object"));
            }
            Entry::Metric(data) => data,
        };
        let Some((base, tags)) = split_key(key) else {
            continue; // Only `Malformed` entries have such keys.
        };
        if data.values == Values::Object {
            path.push("values");
        }
        all.push(Metric {
            key: key.as_str(),
            base,
            tags,
            data,
            values: &data.stats,
            path,
        });
    }

    let find =
        |base: &str, tags: &Option<Tags>| all.iter().find(|m| m.base == base && &m.tags == tags);

    // The trends that are labels.
    let durations: Vec<&Metric<'_>> = all.iter().filter(|m| m.base == DURATION).collect();
    let subs: Vec<&Metric<'_>> = durations
        .iter()
        .copied()
        .filter(|m| {
            m.tags
                .as_ref()
                .is_some_and(|t| t.keys().any(|k| k != "expected_response"))
        })
        .collect();
    let chosen: Vec<(String, &Metric<'_>)> = if subs.is_empty() {
        match durations.iter().find(|m| m.tags.is_none()) {
            Some(plain) => vec![(DURATION.to_owned(), *plain)],
            None => {
                let mut p = root.clone();
                p.push(DURATION);
                return Err(field_error(
                    &p,
                    "missing: the k6 summary has no http_req_duration (did the script make HTTP \
                     requests?)",
                ));
            }
        }
    } else {
        let mut by_label: BTreeMap<String, &Metric<'_>> = BTreeMap::new();
        for m in subs {
            let tags = m.tags.as_ref().expect("sub-metric has tags");
            let label = label_of(tags);
            match by_label.get(&label) {
                Some(other) => {
                    let (n, o) = (tags.len(), other.tags.as_ref().map_or(0, Tags::len));
                    if n == o {
                        return Err(field_error(
                            &m.path[..m.path.len().min(root.len() + 1)],
                            format!(
                                "gives the same label \"{label}\" as {}: name the sub-metrics apart",
                                other.key
                            ),
                        ));
                    }
                    if n < o {
                        by_label.insert(label, m);
                    }
                }
                None => {
                    by_label.insert(label, m);
                }
            }
        }
        by_label.into_iter().collect()
    };

    let mut labels = Vec::with_capacity(chosen.len());
    let mut distributions = BTreeMap::new();
    for (label, trend) in chosen {
        trend.check_type("trend", Some("time"))?;
        let p50_us = match trend.percentile(0)? {
            Some((key, ms)) => Some(trend.micros(key, ms)?),
            None => None,
        };
        let p99_us = trend.required_us(1, "p(99)")?;
        let p999_us = trend.required_us(2, "p(99.9)")?;
        if p50_us.is_some_and(|p| p > p99_us) || p99_us > p999_us {
            return Err(trend.err(
                "p(99.9)",
                "percentiles are not increasing (med ≤ p(99) ≤ p(99.9))",
            ));
        }

        let reqs = find(REQS, &trend.tags);
        let failed = find(FAILED, &trend.tags);
        if let Some(r) = reqs {
            r.check_type("counter", None)?;
        }
        if let Some(f) = failed {
            f.check_type("rate", None)?;
        }
        let fail_counts = match failed {
            Some(f) => Some((
                f.count("passes")?
                    .ok_or_else(|| f.err("passes", "missing (failed requests)"))?,
                f.count("fails")?,
            )),
            None => None,
        };
        let samples = match (
            reqs.map(|r| r.count("count")).transpose()?.flatten(),
            trend.count("count")?,
        ) {
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => match fail_counts {
                Some((passes, Some(fails))) => passes.saturating_add(fails),
                _ => {
                    return Err(trend.err(
                        "count",
                        format!(
                            "cannot tell how many requests {} measured: export `count` in \
                             `--summary-trend-stats`, or add a threshold on `http_reqs{}` \
                             or `http_req_failed{}` so k6 writes that sub-metric",
                            trend.key,
                            selector(&trend.tags),
                            selector(&trend.tags),
                        ),
                    ))
                }
            },
        };
        let failures = fail_counts.map(|(passes, _)| passes);
        if let Some(failures) = failures.filter(|&f| f > samples) {
            let f = failed.expect("failures come from http_req_failed");
            return Err(f.err(
                "passes",
                format!("{failures} failed requests but only {samples} requests for \"{label}\""),
            ));
        }
        if samples == 0 {
            continue;
        }
        if let Some(d) = trend.points() {
            distributions.insert(label.clone(), d);
        }
        labels.push(LabelStats {
            label,
            samples,
            failures,
            p50_us,
            p99_us,
            p999_us,
        });
    }
    if labels.is_empty() {
        return Err(IngestError::new(
            "the k6 summary has no request in any http_req_duration label",
        ));
    }
    let unknown: Vec<&str> = labels
        .iter()
        .filter(|l| l.failures.is_none())
        .map(|l| l.label.as_str())
        .collect();
    let notes = if unknown.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "failures: unknown for {} — {UNKNOWN_FAILURES}",
            unknown.join(", ")
        )]
    };
    Ok(Extracted {
        distributions,
        format: Format::K6,
        tool: Some("k6".to_owned()),
        labels,
        notes,
    })
}

/// Why a k6 summary's failures may be unknown, and how to get them.
pub(crate) const UNKNOWN_FAILURES: &str = "k6 reports them per endpoint only with a threshold on \
    http_req_failed{name:…} (e.g. 'http_req_failed{name:inventory}': ['rate<1']), or upload k6's \
    raw points (--out json) instead";

fn selector(tags: &Option<Tags>) -> String {
    match tags {
        None => String::new(),
        Some(t) => format!(
            "{{{}}}",
            t.iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}
