//! Locust `*_stats.csv` (`locust --csv PREFIX`): one row per request name, then `Aggregated`.
//!
//! Columns are found by name. Locust ≥ 1.0 writes `Type,Name,Request Count,Failure Count,
//! Median Response Time,…,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%`; the
//! older `# requests` / `# failures` names are accepted too. Per row: label = `Name`, samples =
//! `Request Count`, failures = `Failure Count`, p50 / p99 / p99.9 = the `50%`, `99%` and `99.9%`
//! columns: milliseconds as Locust rounded them, turned into µs.
//!
//! - **Distribution**: each label's percentile points are every `N%` column of its row (`50%`,
//!   `66%` … `99.99%`, `100%`: ms as Locust rounded them), `Min Response Time` as percentile 0
//!   and, without a `100%` column, `Max Response Time` as 100 (both exact ms). A cell that is
//!   `N/A` or not a number gives no point (and no error).
//! - A row without requests has `N/A` percentiles: it gives no label (and is no error).
//! - The `Aggregated` row is a label like the others; the mapping layer ignores it unless mapped.
//! - When one `Name` has rows of several `Type`s (`GET user` and `POST user`), those rows are
//!   labelled `"{Type} {Name}"`.
//! - Locust always ends the file with `Aggregated`: a file without it is taken as truncated.

use std::collections::{BTreeMap, HashMap, HashSet};

use budget_core::distribution::Distribution;

use crate::format::percentile_points;
use crate::framing::csv::{first_line, parse_u64, shown, unquote, CsvRecords, Record};
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Rows accepted (Locust writes one per request name; this bounds memory).
const MAX_ROWS: usize = 10_000;
/// Most `N%` columns read as percentile points (Locust writes 11; `PERCENTILES_TO_REPORT` can
/// change them): with [`MAX_ROWS`], this bounds the points kept.
const MAX_PERCENTILE_COLUMNS: usize = 64;
/// `Name` of Locust's total row.
const AGGREGATED: &str = "Aggregated";

/// Whether the start of an input looks like a Locust stats CSV (`Type,Name,Request Count…`).
pub fn sniff(head: &[u8]) -> bool {
    let mut fields = first_line(head).split(|&b| b == b',').map(unquote);
    match (fields.next(), fields.next(), fields.next()) {
        (Some(kind), Some(name), Some(count)) => {
            kind.eq_ignore_ascii_case(b"Type")
                && name.eq_ignore_ascii_case(b"Name")
                && is_requests(count)
        }
        _ => false,
    }
}

pub fn parser(_options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Ok(Box::new(Stats {
        csv: CsvRecords::new(b','),
        body: Body::default(),
    }))
}

fn is_requests(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"Request Count") || name.eq_ignore_ascii_case(b"# requests")
}

fn is_failures(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"Failure Count") || name.eq_ignore_ascii_case(b"# failures")
}

struct Stats {
    csv: CsvRecords,
    body: Body,
}

impl Ingest for Stats {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.csv.push(chunk, |r| self.body.record(r))
    }

    fn finish(mut self: Box<Self>) -> Result<Extracted, IngestError> {
        let this = &mut *self;
        this.csv.finish(|r| this.body.record(r))?;
        self.body.finish()
    }
}

/// Where the columns are.
#[derive(Debug, Clone, Copy)]
struct Columns {
    kind: Option<usize>,
    name: usize,
    requests: usize,
    failures: usize,
    p50: usize,
    p99: usize,
    p999: usize,
    /// `Min Response Time`.
    min: Option<usize>,
    /// `Max Response Time`, when there is no `100%` column.
    max: Option<usize>,
    fields: usize,
}

struct Row {
    line: u64,
    kind: String,
    name: String,
    /// `None` for a row without requests (`N/A` percentiles).
    stats: Option<LabelStats>,
    /// The row's percentile points, for a row with `stats`.
    distribution: Option<Distribution>,
}

#[derive(Default)]
struct Body {
    columns: Option<Columns>,
    /// The header's `N%` columns: (index, percentile N).
    percentiles: Vec<(usize, f64)>,
    rows: Vec<Row>,
    aggregated: bool,
}

impl Body {
    fn record(&mut self, rec: &Record<'_>) -> Result<(), IngestError> {
        let Some(c) = self.columns else {
            self.columns = Some(header(rec)?);
            self.percentiles = percentile_columns(rec);
            return Ok(());
        };
        if rec.len() != c.fields {
            return Err(IngestError::at_line(
                rec.line(),
                format!(
                    "expected {} fields, found {} (truncated or malformed row)",
                    c.fields,
                    rec.len()
                ),
            ));
        }
        if self.rows.len() >= MAX_ROWS {
            return Err(IngestError::at_line(
                rec.line(),
                format!("more than {MAX_ROWS} rows"),
            ));
        }
        let text = |i: usize, field: &str| {
            std::str::from_utf8(rec.field(i))
                .map(str::to_owned)
                .map_err(|_| IngestError::at_line(rec.line(), "not valid UTF-8").field(field))
        };
        let name = text(c.name, "Name")?;
        let kind = match c.kind {
            Some(i) => text(i, "Type")?,
            None => String::new(),
        };
        let count = |i: usize, field: &str| {
            parse_u64(rec.field(i)).ok_or_else(|| {
                IngestError::at_line(
                    rec.line(),
                    format!("{} is not a count", shown(rec.field(i))),
                )
                .field(field)
            })
        };
        let samples = count(c.requests, "Request Count")?;
        let failures = count(c.failures, "Failure Count")?;
        let cells = [(c.p50, "50%"), (c.p99, "99%"), (c.p999, "99.9%")];
        let stats = if cells.iter().any(|&(i, _)| rec.field(i) == b"N/A") {
            None
        } else {
            let [p50, p99, p999] = cells.map(|(i, field)| ms_to_us(rec, i, field));
            Some(LabelStats {
                label: String::new(),
                samples,
                failures: Some(failures),
                p50_us: Some(p50?),
                p99_us: p99?,
                p999_us: p999?,
            })
        };
        let distribution = stats.as_ref().and_then(|_| self.points(&c, rec));
        self.aggregated |= name == AGGREGATED;
        self.rows.push(Row {
            line: rec.line(),
            kind,
            name,
            stats,
            distribution,
        });
        Ok(())
    }

    /// The percentile points of a data row: its `N%` cells, `Min Response Time` as 0 and
    /// `Max Response Time` as 100 (when there is no `100%` column); cells that are not a number
    /// of ms (`N/A`) are left out.
    fn points(&self, c: &Columns, rec: &Record<'_>) -> Option<Distribution> {
        let cells = self
            .percentiles
            .iter()
            .copied()
            .chain(c.min.map(|i| (i, 0.0)))
            .chain(c.max.map(|i| (i, 100.0)));
        percentile_points(
            cells
                .filter_map(|(i, percentile)| ms_to_us(rec, i, "").ok().map(|us| (percentile, us))),
        )
    }

    fn finish(self) -> Result<Extracted, IngestError> {
        if self.columns.is_none() {
            return Err(IngestError::new("empty input: no Locust stats header"));
        }
        if !self.aggregated {
            return Err(IngestError::new(
                "no `Aggregated` row: Locust always writes it last, the file looks truncated",
            ));
        }
        let mut per_name: HashMap<&str, usize> = HashMap::new();
        for row in &self.rows {
            *per_name.entry(&row.name).or_default() += 1;
        }
        let mut labels: Vec<LabelStats> = Vec::new();
        let mut distributions = BTreeMap::new();
        let mut seen = HashSet::new();
        for row in &self.rows {
            let label = if per_name[row.name.as_str()] > 1 && !row.kind.is_empty() {
                format!("{} {}", row.kind, row.name)
            } else {
                row.name.clone()
            };
            if !seen.insert(label.clone()) {
                return Err(IngestError::at_line(
                    row.line,
                    format!(
                        "a second row for Type {:?} and Name {:?}",
                        row.kind, row.name
                    ),
                )
                .field("Name"));
            }
            if let Some(stats) = &row.stats {
                if let Some(d) = &row.distribution {
                    distributions.insert(label.clone(), d.clone());
                }
                labels.push(LabelStats {
                    label,
                    ..stats.clone()
                });
            }
        }
        Ok(Extracted {
            distributions,
            format: Format::Locust,
            tool: Some("locust".to_owned()),
            labels,
            notes: Vec::new(),
        })
    }
}

fn header(rec: &Record<'_>) -> Result<Columns, IngestError> {
    let find = |field: &str, matches: &dyn Fn(&[u8]) -> bool| {
        (0..rec.len())
            .find(|&i| matches(rec.field(i)))
            .ok_or_else(|| {
                IngestError::at_line(rec.line(), "missing column in the Locust stats header")
                    .field(field)
            })
    };
    let named = |name: &'static str| move |f: &[u8]| f.eq_ignore_ascii_case(name.as_bytes());
    let hundred = percentile_columns(rec).iter().any(|&(_, p)| p == 100.0);
    Ok(Columns {
        kind: find("Type", &named("Type")).ok(),
        name: find("Name", &named("Name"))?,
        requests: find("Request Count", &is_requests)?,
        failures: find("Failure Count", &is_failures)?,
        p50: find("50%", &named("50%"))?,
        p99: find("99%", &named("99%"))?,
        p999: find("99.9%", &named("99.9%"))?,
        min: find("Min Response Time", &named("Min Response Time")).ok(),
        max: find("Max Response Time", &named("Max Response Time"))
            .ok()
            .filter(|_| !hundred),
        fields: rec.len(),
    })
}

/// The header's percentile columns, `N%` with N in 0–100 (`50%`, `99.9%`, `100%`): (index, N),
/// the first [`MAX_PERCENTILE_COLUMNS`].
fn percentile_columns(rec: &Record<'_>) -> Vec<(usize, f64)> {
    (0..rec.len())
        .filter_map(|i| {
            let n = std::str::from_utf8(rec.field(i))
                .ok()?
                .trim()
                .strip_suffix('%')?;
            let p = n.parse::<f64>().ok()?;
            (p.is_finite() && (0.0..=100.0).contains(&p)).then_some((i, p))
        })
        .take(MAX_PERCENTILE_COLUMNS)
        .collect()
}

/// A cell in milliseconds (Locust's unit), in µs.
fn ms_to_us(rec: &Record<'_>, i: usize, field: &str) -> Result<u64, IngestError> {
    let cell = rec.field(i);
    std::str::from_utf8(cell)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|ms| (ms * 1000.0).round() as u64)
        .ok_or_else(|| {
            IngestError::at_line(
                rec.line(),
                format!("{} is not a number of milliseconds", shown(cell)),
            )
            .field(field)
        })
}

#[cfg(test)]
mod tests;
