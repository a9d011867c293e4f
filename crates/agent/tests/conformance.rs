//! The Rust agent runs every vector of the conformance corpus (`conformance/`, SPEC §10)
//! through its real code: the validation it applies to a received config, its deadline, its
//! R-retry policy and outcomes, and its start from the disk cache. A vector it disagrees with
//! fails here by name; the Go client runs the same files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use budget_agent::cache::{self, CacheError};
use budget_agent::policy::{self, Decision, Failure, RetryState, Stop};
use budget_agent::{LiveChain, LiveSegment, Outcome, Snapshot};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conformance")
}

#[derive(Deserialize)]
struct CorpusFile<V> {
    vectors: Vec<V>,
    #[serde(default)]
    attempt_timeouts: Vec<AttemptTimeout>,
}

fn load<V: DeserializeOwned>(name: &str) -> CorpusFile<V> {
    let path = folder().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not a corpus file: {e}"))
}

/// Runs `check` on every vector; fails listing every vector the agent disagrees with.
fn run_all<V>(
    file: &str,
    vectors: &[V],
    name: impl Fn(&V) -> &str,
    check: impl Fn(&V) -> Result<(), String>,
) {
    assert!(!vectors.is_empty(), "{file} holds no vectors");
    let failures: Vec<String> = vectors
        .iter()
        .filter_map(|v| check(v).err().map(|e| format!("{file}: {}: {e}", name(v))))
        .collect();
    assert!(
        failures.is_empty(),
        "the agent disagrees with {} of {} vectors:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}

fn parse<T: DeserializeOwned>(what: &str, value: &Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|e| format!("{what} does not parse: {e}"))
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

#[derive(Deserialize)]
struct CheckVector {
    name: String,
    config: Value,
    accept: bool,
    findings: Value,
}

#[test]
fn checks() {
    let file: CorpusFile<CheckVector> = load("checks.json");
    run_all(
        "checks.json",
        &file.vectors,
        |v| &v.name,
        |v| {
            let chain: LiveChain = parse("config", &v.config)?;
            let findings = serde_json::to_value(chain.findings()).map_err(|e| e.to_string())?;
            if findings != v.findings {
                return Err(format!(
                    "findings\n  got:  {findings}\n  want: {}",
                    v.findings
                ));
            }
            // The verdict an agent acts on: a received config is NACKed, a cached one refused.
            match (Snapshot::from_chains([chain]).check(), v.accept) {
                (Ok(()), true) => Ok(()),
                (Err(refusal), false) => {
                    let first_error = v
                        .findings
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|f| f["severity"] == "error");
                    match first_error {
                        Some(f) if f["segment"] == refusal.segment.as_str() => Ok(()),
                        _ => Err(format!("refused on the wrong segment: {refusal}")),
                    }
                }
                (Ok(()), false) => Err("accepted, the vector refuses".into()),
                (Err(refusal), true) => Err(format!("refused ({refusal}), the vector accepts")),
            }
        },
    );
}

#[derive(Deserialize)]
struct DeadlineVector {
    name: String,
    now_us: u64,
    budget_ms: u64,
    inherited_us: Option<u64>,
    expect_us: u64,
}

#[test]
fn deadline() {
    let file: CorpusFile<DeadlineVector> = load("deadline.json");
    run_all(
        "deadline.json",
        &file.vectors,
        |v| &v.name,
        |v| {
            let got = policy::earliest(
                Duration::from_micros(v.now_us),
                Duration::from_millis(v.budget_ms),
                v.inherited_us.map(Duration::from_micros),
            );
            match us(got) {
                got if got == v.expect_us => Ok(()),
                got => Err(format!("deadline {got} µs, want {} µs", v.expect_us)),
            }
        },
    );
}

#[derive(Deserialize)]
struct RetryVector {
    name: String,
    segment: Value,
    key_given: bool,
    steps: Vec<RetryStep>,
    outcome: Option<String>,
}

#[derive(Deserialize)]
struct RetryStep {
    failure: String,
    remaining_us: u64,
    pick_us: u64,
    expect: Value,
}

#[derive(Deserialize)]
struct AttemptTimeout {
    name: String,
    timeout_ms: u64,
    remaining_us: u64,
    expect_us: Option<u64>,
}

fn failure(name: &str) -> Result<Failure, String> {
    Ok(match name {
        "deadline" => Failure::Deadline,
        "unavailable" => Failure::Unavailable,
        "business" => Failure::Business,
        "other" => Failure::Other,
        other => return Err(format!("unknown failure {other:?}")),
    })
}

/// A decision in the corpus's words.
fn decision_json(decision: Decision) -> Value {
    let stop = |reason: &str| json!({"decision": "stop", "reason": reason});
    match decision {
        Decision::Retry {
            cause,
            retry,
            backoff,
        } => json!({
            "decision": "retry", "cause": cause.as_str(), "retry": retry, "backoff_us": us(backoff)
        }),
        Decision::Stop(Stop::Business) => stop("business"),
        Decision::Stop(Stop::Other) => stop("other"),
        Decision::Stop(Stop::NotIdempotent) => stop("not_idempotent"),
        Decision::Stop(Stop::NoRule(cause)) => {
            json!({"decision": "stop", "reason": "no_rule", "cause": cause.as_str()})
        }
        Decision::Stop(Stop::MaxRetries(cause)) => {
            json!({"decision": "stop", "reason": "max_retries", "cause": cause.as_str()})
        }
        Decision::Stop(Stop::OutOfBudget { backoff, remaining }) => json!({
            "decision": "stop", "reason": "out_of_budget",
            "backoff_us": us(backoff), "remaining_us": us(remaining)
        }),
    }
}

fn run_call(v: &RetryVector) -> Result<(), String> {
    let segment: LiveSegment = parse("segment", &v.segment)?;
    let mut state = RetryState::default();
    let mut ended = None;
    for (i, step) in v.steps.iter().enumerate() {
        if ended.is_some() {
            return Err(format!("step {i} follows a stop"));
        }
        let f = failure(&step.failure)?;
        let remaining = Duration::from_micros(step.remaining_us);
        let decision = policy::decide(&segment, f, v.key_given, &mut state, remaining, |_| {
            step.pick_us
        });
        let got = decision_json(decision);
        if got != step.expect {
            return Err(format!("step {i}: got {got}, want {}", step.expect));
        }
        if matches!(decision, Decision::Stop(_)) {
            ended = Some(Outcome::after_failure(&segment, v.key_given, f));
        }
    }
    let got = ended.map(Outcome::as_str);
    match (got, v.outcome.as_deref()) {
        (got, want) if got == want => Ok(()),
        (got, want) => Err(format!("outcome {got:?}, want {want:?}")),
    }
}

#[test]
fn retry() {
    let file: CorpusFile<RetryVector> = load("retry.json");
    run_all("retry.json", &file.vectors, |v| &v.name, run_call);
    run_all(
        "retry.json attempt_timeouts",
        &file.attempt_timeouts,
        |v| &v.name,
        |v| {
            let got = policy::attempt_timeout(v.timeout_ms, Duration::from_micros(v.remaining_us));
            match got.map(us) {
                got if got == v.expect_us => Ok(()),
                got => Err(format!(
                    "attempt timeout {got:?} µs, want {:?} µs",
                    v.expect_us
                )),
            }
        },
    );
}

/// What the agent does at start with `text` as its cache, in the corpus's words.
fn start_from(text: &str) -> Result<Value, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("budgets.json");
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    let snapshot = match cache::read(&path) {
        Ok(snapshot) => snapshot,
        Err(CacheError::Format { .. }) => {
            return Ok(json!({"expect": "refuse", "reason": "format"}))
        }
        Err(e) => return Err(e.to_string()),
    };
    match snapshot.check() {
        Ok(()) => Ok(json!({
            "expect": "start",
            "revision": snapshot.revision,
            "chains": snapshot.chains.keys().collect::<Vec<_>>(),
        })),
        // The refusal lists the error findings as "check: message; …", the first first.
        Err(refusal) => match refusal.message.split_once(':') {
            Some((check, _)) => Ok(json!({"expect": "refuse", "reason": check})),
            None => Err(format!("a refusal without a check: {refusal}")),
        },
    }
}

#[test]
fn cache_at_start() {
    let file: CorpusFile<Value> = load("cache.json");
    run_all(
        "cache.json",
        &file.vectors,
        |v| v["name"].as_str().unwrap_or("(unnamed)"),
        |v| {
            let mut want = v.clone();
            let fields = want.as_object_mut().ok_or("not an object")?;
            let text = fields.remove("file").ok_or("no file")?;
            fields.remove("name");
            fields.remove("description");
            let got = start_from(text.as_str().ok_or("file is not a string")?)?;
            if got != want {
                return Err(format!("got {got}, want {want}"));
            }
            Ok(())
        },
    );
}
