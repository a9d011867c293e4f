//! Locust's final statistics as JSON: `locust --headless --json` (printed on stdout; Locust's
//! log goes to stderr) or `--json-file NAME` (written to `NAME.json`).
//!
//! What is read (checked against Locust 2.47.0, `stats.py`: `print_stats_json` dumps
//! `RequestStats.serialize_stats()`): a JSON array with one object per request name and method,
//! `{"name": "inventory", "method": "GET", "num_requests": 1444, "num_none_requests": 0,
//! "num_failures": 0, …, "response_times": {"7": 175, "120": 1, …}, "num_reqs_per_sec": …}`.
//! `response_times` is Locust's own histogram: each request's response time in milliseconds,
//! rounded by `bucket_response_time` (to whole ms below 100 ms, to 10 ms below 1 s, to 100 ms
//! below 10 s, to 1 s above), as a string key, with the number of requests that had it. Every
//! other member (`total_response_time`, `min_response_time`, the per-second counts, …) is
//! validated and dropped.
//!
//! **Per entry.** The label is `name`; when one `name` has entries of several `method`s (`GET
//! user` and `POST user`) those entries are labelled `"{method} {name}"`, as the Locust CSV parser
//! labels its rows ([`super::locust`]); a second entry with the same label is an error. Each
//! `response_times` key (ms, fractional keys accepted: `bucket_response_time` can be replaced)
//! × its count is recorded into an HDR histogram in µs ([`Recorder`], 3 significant digits),
//! which is the label's stored distribution. `samples` = Σ counts, `failures` = `num_failures`.
//! p50 / p99 / p99.9 are the recorder's nearest-rank quantiles, as the JMeter parser takes them,
//! each then snapped to the `response_times` key it was recorded from (the largest key at or
//! below the HDR value; JMeter truncates to whole ms the same way): Locust's keys are at least
//! 1 % apart, further than HDR's 0.1 %, so this is the exact nearest-rank percentile of Locust's
//! rounded times.
//!
//! **Counts that disagree.** Locust counts in `num_requests` every request, also those logged
//! without a response time (`num_none_requests`, a custom client firing `request` with
//! `response_time=None`), and puts the others in `response_times`. So Σ counts +
//! `num_none_requests` (0 when absent) must equal `num_requests`; when it does not, the file was
//! edited or cut and its histogram does not describe the requests it counts: it is **refused**
//! (an IngestError at `/i/num_requests` giving both numbers) rather than read into percentiles
//! of another population, because a budget derived from such a file cannot be trusted and the
//! user can only fix that by regenerating the file. When the counts agree but some requests have
//! no response time, the file is read: `samples` is Σ counts (the population of the percentiles
//! and of the stored histogram, which must agree), and since Locust does not say whether the
//! failures were among the timed requests, `failures` is unknown (`None`) unless there are none;
//! a note says so. Locust's request event logs a failure with its request, so `num_failures` is
//! at most `num_requests`; a locustfile calling `stats.log_error` itself can make it larger, and
//! then the failures are unknown too (a note says so) rather than the file refused.
//!
//! **Aggregated.** Locust 2.47 writes no total entry in its JSON (only in the CSV and the text
//! summary). An entry named `Aggregated`, if present, is a label like the others, as the CSV
//! parser reads its `Aggregated` row; the mapping layer ignores it unless mapped.
//!
//! **No request.** An entry without a timed request (`response_times` empty: Locust lists an
//! entry with failures and no request) gives no label, like the CSV's `N/A` row. An empty array
//! (`[]`, what Locust writes for a run without requests — and what `--json-file` gets when
//! `--json` is given too, as printing clears Locust's stats) or one without any timed request is
//! an error.
//!
//! **Errors.** Precise and located: a syntax error with its line and column; a semantic one
//! with the JSON pointer of the member at fault (`/2/response_times/abc`, `/0/num_failures`) and
//! the line of that member in the text. A `response_times` key that is not a number of
//! milliseconds (not a number, negative, over one hour), a count that is not a whole
//! non-negative number, a missing or mistyped `name`, `num_requests` or `num_failures` are
//! errors; the first wrong member of an entry's `response_times` in document order is the one
//! reported. A key repeated inside one `response_times` (Locust never repeats one) counts every
//! time.
//!
//! **Size and memory.** The input is buffered up to
//! [`MAX_JSON_SUMMARY_BYTES`](crate::MAX_JSON_SUMMARY_BYTES) (4 MiB; Locust writes a few KiB per
//! entry): the push that would cross it is refused. In `finish` the text is read element by
//! element into at most [`MAX_ENTRIES`] entries, keeping of each only the counts and, per
//! `response_times` member, 16 bytes (µs and count; a member is at least 6 bytes of text); the
//! HDR histograms (~190 KB each) are then built one label at a time and dropped once their
//! percentiles and serialized distribution are taken, so memory stays a small multiple of the
//! text whatever the number of labels.
//!
//! **Tool.** The JSON carries no Locust version: `tool` is `"locust"`. [`Options`] are not used.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::framing::json::{
    contains, count, field_error, json_array_start, skip, Fold, JsonBuffer, Obj, Scalar, Skip,
};
use crate::hdr::Recorder;
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Entries read (Locust writes one per request name and method). More is an error. Each label
/// costs an HDR histogram, built, queried and serialized (~0.1 ms of CPU, ~190 KB while it
/// lives): this bounds the work a small hostile file can ask for (the Locust CSV parser, which
/// builds none, accepts 10 000 rows; JMeter and HdrHistogram logs, which keep them all, 256).
pub const MAX_ENTRIES: usize = 1_000;

/// Longest plausible response time: one hour, in milliseconds (the [`Recorder`]'s range).
const MAX_LATENCY_MS: f64 = 3_600_000.0;

/// Whether the start of an input looks like Locust's JSON: an array whose first element is an
/// object, with Locust's `"num_requests"` and `"response_times"` members. No other JSON format
/// read here is an array (oha, k6, Artillery and autocannon write an object, k6's raw points
/// one object per line).
pub fn sniff(head: &[u8]) -> bool {
    let Some(text) = json_array_start(head) else {
        return false;
    };
    let mut after = text
        .iter()
        .skip_while(|&&b| b != b'[')
        .skip(1)
        .skip_while(|b| b.is_ascii_whitespace());
    after.next() == Some(&b'{')
        && contains(head, b"\"num_requests\"")
        && contains(head, b"\"response_times\"")
}

pub fn parser(_options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Ok(Box::new(LocustJson {
        buf: JsonBuffer::new("Locust"),
    }))
}

struct LocustJson {
    buf: JsonBuffer,
}

impl Ingest for LocustJson {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.buf.push(chunk)
    }

    fn finish(self: Box<Self>) -> Result<Extracted, IngestError> {
        let doc = self.buf.parse_array::<Doc>()?;
        extract(doc).map_err(|e| self.buf.locate(e))
    }
}

// ---- What is read ----------------------------------------------------------------------------

/// The top-level array, element by element: at most [`MAX_ENTRIES`] are kept.
#[derive(Debug, Default)]
struct Doc {
    entries: Vec<Obj<Entry>>,
    /// Whether elements were left out because there were more than [`MAX_ENTRIES`].
    too_many: bool,
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;

        impl<'de> Visitor<'de> for V {
            type Value = Doc;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of Locust stats entries")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
                let mut doc = Doc::default();
                loop {
                    if doc.entries.len() < MAX_ENTRIES {
                        match seq.next_element::<Obj<Entry>>()? {
                            Some(entry) => doc.entries.push(entry),
                            None => break,
                        }
                    } else if seq.next_element::<Skip>()?.is_some() {
                        doc.too_many = true;
                    } else {
                        break;
                    }
                }
                Ok(doc)
            }
        }

        d.deserialize_seq(V)
    }
}

/// The members of one entry that are read; the others are validated and dropped. A member
/// repeated in the entry keeps its last value (as a JSON object map does).
#[derive(Debug, Default)]
struct Entry {
    name: Option<Scalar>,
    method: Option<Scalar>,
    num_requests: Option<Scalar>,
    num_none_requests: Option<Scalar>,
    num_failures: Option<Scalar>,
    response_times: Option<Obj<ResponseTimes>>,
}

impl Fold for Entry {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "name" => self.name = Some(map.next_value()?),
            "method" => self.method = Some(map.next_value()?),
            "num_requests" => self.num_requests = Some(map.next_value()?),
            "num_none_requests" => self.num_none_requests = Some(map.next_value()?),
            "num_failures" => self.num_failures = Some(map.next_value()?),
            "response_times" => self.response_times = Some(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `response_times`, checked and kept compact as it is read.
#[derive(Debug, Default)]
struct ResponseTimes {
    /// (µs, count) of each member with a count above 0, in document order.
    times: Vec<(u64, u64)>,
    /// Σ counts.
    total: u64,
    /// Whether Σ counts overflowed.
    overflow: bool,
    /// The first member, in document order, that is wrong: its key and what is wrong.
    error: Option<(String, String)>,
}

impl Fold for ResponseTimes {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        let n: Scalar = map.next_value()?;
        if self.error.is_some() {
            return Ok(());
        }
        let checked = key_us(&key).and_then(|us| {
            let n = count(&n, &[""]).map_err(|e| e.message)?;
            Ok((us, n))
        });
        match checked {
            Ok((_, 0)) => {}
            Ok((us, n)) => {
                match self.total.checked_add(n) {
                    Some(total) => self.total = total,
                    None => self.overflow = true,
                }
                self.times.push((us, n));
            }
            Err(message) => {
                self.error = Some((key, message));
                self.times = Vec::new();
            }
        }
        Ok(())
    }
}

/// A `response_times` key: a response time in ms as Locust rounded it, in µs (rounded).
fn key_us(key: &str) -> Result<u64, String> {
    let ms = key
        .parse::<f64>()
        .ok()
        .filter(|ms| ms.is_finite())
        .ok_or_else(|| {
            format!(
                "key {} is not a number of milliseconds (Locust's response_times maps a response \
                 time in ms to a count of requests)",
                quoted(key)
            )
        })?;
    if ms < 0.0 {
        return Err(format!(
            "key {} is negative: not a response time",
            quoted(key)
        ));
    }
    if ms > MAX_LATENCY_MS {
        return Err(format!(
            "key {} is over one hour: Locust writes response times in milliseconds",
            quoted(key)
        ));
    }
    Ok((ms * 1000.0).round() as u64)
}

fn quoted(s: &str) -> String {
    let cut: String = s.chars().take(40).collect();
    let more = if cut.len() < s.len() { "…" } else { "" };
    format!("{:?}{more}", cut)
}

// ---- Checks ----------------------------------------------------------------------------------

/// One entry, checked.
struct Row {
    index: usize,
    name: String,
    method: String,
    samples: u64,
    failures: u64,
    /// `num_none_requests`.
    untimed: u64,
    times: Vec<(u64, u64)>,
}

fn extract(doc: Doc) -> Result<Extracted, IngestError> {
    if doc.too_many {
        return Err(IngestError::new(format!(
            "more than {MAX_ENTRIES} entries: Locust writes one per request name, is this the \
             right file?"
        )));
    }
    if doc.entries.is_empty() {
        return Err(IngestError::new(
            "empty array: Locust lists no request. It writes `[]` for a run in which no user made \
             a request, and into the --json-file when --json is given too (printing its stats \
             clears them)",
        ));
    }
    let mut rows = Vec::with_capacity(doc.entries.len());
    for (index, entry) in doc.entries.into_iter().enumerate() {
        rows.push(row(index, entry)?);
    }

    let mut per_name: HashMap<&str, usize> = HashMap::new();
    for row in &rows {
        *per_name.entry(&row.name).or_default() += 1;
    }
    let labels_of: Vec<String> = rows
        .iter()
        .map(|row| {
            if per_name[row.name.as_str()] > 1 && !row.method.is_empty() {
                format!("{} {}", row.method, row.name)
            } else {
                row.name.clone()
            }
        })
        .collect();
    let mut seen = HashSet::new();
    for (row, label) in rows.iter().zip(&labels_of) {
        if !seen.insert(label.as_str()) {
            return Err(field_error(
                &[row.index.to_string(), "name".to_owned()],
                format!(
                    "a second entry for method {:?} and name {:?}",
                    row.method, row.name
                ),
            ));
        }
    }

    let mut labels = Vec::new();
    let mut distributions = BTreeMap::new();
    let mut notes = Vec::new();
    for (row, label) in rows.into_iter().zip(labels_of) {
        if row.samples == 0 {
            continue;
        }
        let failures = (row.failures == 0 || (row.untimed == 0 && row.failures <= row.samples))
            .then_some(row.failures);
        if failures.is_none() && row.untimed == 0 {
            notes.push(format!(
                "{label}: Locust counts {} failures but only {} requests (errors logged without \
                 a request, e.g. by calling stats.log_error): failures unknown",
                row.failures, row.samples
            ));
        }
        if row.untimed > 0 {
            notes.push(format!(
                "{label}: {} of {} requests have no response time (Locust's num_none_requests): \
                 samples and percentiles count the other {}; failures {}",
                row.untimed,
                row.samples + row.untimed,
                row.samples,
                match failures {
                    Some(_) => "0".to_owned(),
                    None => format!(
                        "unknown (Locust counts {} but does not say how many had a response time)",
                        row.failures
                    ),
                }
            ));
        }
        let (stats, distribution) = measure(&label, row.samples, row.times, failures);
        distributions.insert(label, distribution);
        labels.push(stats);
    }
    if labels.is_empty() {
        return Err(IngestError::new(
            "no entry has a request with a response time: Locust measured nothing",
        ));
    }
    Ok(Extracted {
        format: Format::LocustJson,
        tool: Some("locust".to_owned()),
        labels,
        distributions,
        notes,
    })
}

/// Entry `index`, checked.
fn row(index: usize, entry: Obj<Entry>) -> Result<Row, IngestError> {
    let i = index.to_string();
    let at = |field: &str| [i.clone(), field.to_owned()];
    let entry = match entry {
        Obj::Object(e) => e,
        Obj::Null | Obj::Other => {
            return Err(field_error(
                &[i.as_str()],
                "must be an object (one Locust stats entry)",
            ))
        }
    };
    let name = match &entry.name {
        Some(Scalar::Str(s)) if !s.is_empty() => s.clone(),
        Some(Scalar::Str(_)) => return Err(field_error(&at("name"), "is empty")),
        Some(_) => return Err(field_error(&at("name"), "must be a string")),
        None => {
            return Err(field_error(
                &at("name"),
                "missing: every Locust stats entry has a name",
            ))
        }
    };
    let method = match &entry.method {
        Some(Scalar::Str(s)) => s.clone(),
        None | Some(Scalar::Null) => String::new(),
        Some(_) => return Err(field_error(&at("method"), "must be a string")),
    };
    let required = |v: &Option<Scalar>, field: &str| match v {
        Some(v) => count(v, &at(field)),
        None => Err(field_error(
            &at(field),
            "missing: this is not Locust's --json output",
        )),
    };
    let requests = required(&entry.num_requests, "num_requests")?;
    let failures = required(&entry.num_failures, "num_failures")?;
    let untimed = match &entry.num_none_requests {
        Some(v) => count(v, &at("num_none_requests"))?,
        None => 0,
    };
    let times = match entry.response_times {
        Some(Obj::Object(t)) => t,
        Some(_) => return Err(field_error(&at("response_times"), "must be an object")),
        None => {
            return Err(field_error(
                &at("response_times"),
                "missing: Locust writes each entry's response times there",
            ))
        }
    };
    if let Some((key, message)) = times.error {
        return Err(field_error(&[i.as_str(), "response_times", &key], message));
    }
    if times.overflow {
        return Err(field_error(
            &at("response_times"),
            "the counts overflow: not a real run",
        ));
    }
    let samples = times.total;
    if samples.checked_add(untimed) != Some(requests) {
        let untimed = if untimed > 0 {
            format!(" and {untimed} requests without a response time (num_none_requests)")
        } else {
            String::new()
        };
        return Err(field_error(
            &at("num_requests"),
            format!(
                "is {requests} but response_times counts {samples} requests{untimed}: the entry \
                 was edited or cut, its response times do not describe its requests"
            ),
        ));
    }
    Ok(Row {
        index,
        name,
        method,
        samples,
        failures,
        untimed,
        times: times.times,
    })
}

/// The label's statistics and histogram from its (µs, count) pairs (`samples` > 0).
fn measure(
    label: &str,
    samples: u64,
    mut times: Vec<(u64, u64)>,
    failures: Option<u64>,
) -> (LabelStats, budget_core::distribution::Distribution) {
    times.sort_unstable_by_key(|&(us, _)| us);
    let mut recorder = Recorder::new();
    for &(us, n) in &times {
        recorder.record_n_us(us, n);
    }
    let mut keys: Vec<u64> = times.into_iter().map(|(us, _)| us).collect();
    keys.dedup();
    // The largest key recorded at or below the HDR value (the highest value of the bucket the
    // nearest rank falls in, which holds the key).
    let at = |q: f64| {
        let v = recorder.quantile_us(q);
        match keys.partition_point(|&k| k <= v) {
            0 => v,
            n => keys[n - 1],
        }
    };
    let stats = LabelStats {
        label: label.to_owned(),
        samples,
        failures,
        p50_us: Some(at(0.50)),
        p99_us: at(0.99),
        p999_us: at(0.999),
    };
    (stats, recorder.distribution())
}

#[cfg(test)]
mod tests;
