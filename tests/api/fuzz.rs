//! Robustness harness (issue 10): a fixed-seed stream of malformed and mutated requests to every
//! HTTP endpoint (the OpenAPI document's paths, the console, unknown routes) and every upload
//! format (`?format=locust|oha|k6|jmeter|hdrhistogram|wrk2|artillery|autocannon|k6_points|locust_json`,
//! mutating the real fixtures under `tests/fixtures/`: truncated, flipped bytes, huge numbers, NaN, deep nesting, wrong content
//! types, random methods, long and many headers, broken multipart). Whatever arrives, budgetd
//! answers: never a 5xx, never a dropped connection (a panicking handler drops it), every error
//! as `{"error":{"code","message","details"}}` (SPEC §5), every answer with the security
//! headers, and `/healthz`, `/readyz` and the API still answer afterwards.
//!
//! `BUDGETD_FUZZ_CASES` (default 2000 per backend) and `BUDGETD_FUZZ_SEED` (default below)
//! set the run; a failure prints the seed and the case number to replay it. The longer
//! documented run is in docs/testing.md.

use std::collections::BTreeMap;
use std::time::Duration;

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY};
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng, SeedableRng as _};
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{
    fixture, multipart_body, raw_request_bytes, RawAnswer, RawBody, TestApp, ADMIN_TOKEN,
};

const DEFAULT_CASES: u64 = 2000;
const DEFAULT_SEED: u64 = 0x6275_6467_6574_6431; // "budgetd1"
/// Largest body a case sends (some exceed `max_body_bytes` on purpose).
const MAX_CASE_BODY: usize = 1536 * 1024;

#[allow(clippy::disallowed_methods)] // the run's size and seed come from the environment
fn env_u64(name: &str) -> Option<u64> {
    let raw = std::env::var(name).ok()?;
    let raw = raw.trim();
    match raw.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => raw.parse().ok(),
    }
}

const FORMATS: [&str; 10] = [
    "locust",
    "oha",
    "k6",
    "jmeter",
    "hdrhistogram",
    "wrk2",
    "artillery",
    "autocannon",
    "k6_points",
    "locust_json",
];

/// Real outputs of every load tool, by format.
fn fixtures(format: &str) -> Vec<Vec<u8>> {
    let files: &[&str] = match format {
        "locust" => &["locust/shop_stats.csv", "locust/idle_stats.csv"],
        "oha" => &["oha/inventory.json", "oha/payment.json", "oha/user.json"],
        "k6" => &[
            "k6/handle-summary.json",
            "k6/summary-export.json",
            "k6/default-trend-stats.json",
        ],
        "jmeter" => &["jmeter/shop_2x_default.jtl", "jmeter/shop_header.jtl"],
        "hdrhistogram" => &["hdrhistogram/tagged.hlog", "hdrhistogram/untagged.hlog"],
        "wrk2" => &[
            "wrk2/checkout.txt",
            "wrk2/health-us.txt",
            "wrk2/search-errors.txt",
            "wrk2/wrk-plain.txt",
        ],
        "artillery" => &["artillery/report.json"],
        "locust_json" => &["locust/shop.json", "locust/idle.json"],
        "autocannon" => &["autocannon/inventory.json", "autocannon/payment-rate.json"],
        "k6_points" => &[
            "k6/points-small.csv",
            "k6/points.json.gz",
            "k6/points.csv.gz",
        ],
        _ => return vec![CHECKOUT_RUN_A.as_bytes().to_vec()],
    };
    files.iter().map(|f| fixture(f)).collect()
}

/// What the fuzzer knows about the app: tokens, real ids, routes.
struct Ctx {
    /// (role, secret)
    tokens: Vec<(&'static str, String)>,
    baselines: Vec<String>,
    runs: Vec<String>,
    /// (method, path template)
    routes: Vec<(String, String)>,
    fixtures: BTreeMap<&'static str, Vec<Vec<u8>>>,
}

struct Case {
    method: Method,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    what: Vec<String>,
}

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    items.choose(rng).expect("a non-empty list")
}

fn alnum(rng: &mut StdRng, n: usize) -> String {
    (0..n)
        .map(|_| {
            char::from(*pick(
                rng,
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            ))
        })
        .collect()
}

/// Odd numbers and number-like tokens.
const NUMBERS: [&str; 18] = [
    "18446744073709551616",
    "-9223372036854775809",
    "99999999999999999999999999999999999999999",
    "1e309",
    "-1e309",
    "1e-400",
    "1.7976931348623157e308",
    "4294967296",
    "NaN",
    "-NaN",
    "Infinity",
    "-inf",
    "-0",
    "-1",
    "0",
    "0x1F",
    "1_000",
    "\u{663}\u{664}",
];

fn weird_segment(rng: &mut StdRng) -> String {
    match rng.gen_range(0..24) {
        0 => String::new(),
        1 => "..".into(),
        2 => "%2e%2e".into(),
        3 => "%2F".into(),
        4 => "%00".into(),
        5 => "%FF%FE".into(),
        6 => "%zz".into(),
        7 => "a%20b".into(),
        8 => "\u{fc}n\u{ef}".into(),
        9 => "%E9%93%BE".into(),
        10 => "\u{1f642}".into(),
        11 => "bl-99999999-999".into(),
        12 => "run-0".into(),
        13 => "a".repeat(300),
        14 => "x".repeat(rng.gen_range(1000..6000)),
        15 => "-".into(),
        16 => "{chain}".into(),
        17 => "null".into(),
        18 => (*pick(rng, &NUMBERS)).into(),
        19 => "checkout;drop table runs".into(),
        20 => "%".into(),
        21 => "bl-20260101-001".into(),
        22 => "run-20260101-001".into(),
        _ => alnum(rng, 12),
    }
}

fn fill_path(rng: &mut StdRng, ctx: &Ctx, template: &str) -> String {
    let mut out = String::new();
    for seg in template.split('/').skip(1) {
        out.push('/');
        let valid: Vec<String> = match seg {
            "{chain}" => vec!["checkout".into(), "fz-other".into()],
            "{id}" => ctx.baselines.clone(),
            "{run_id}" => ctx.runs.clone(),
            "{name}" if template.starts_with("/schemas/") => vec![
                "topology.json".into(),
                "run.json".into(),
                "baseline.json".into(),
            ],
            "{name}" => vec!["fz-victim".into(), "fz-nobody".into()],
            s if s.starts_with('{') => vec!["x".into()],
            s => {
                out.push_str(s);
                continue;
            }
        };
        if rng.gen_bool(0.7) && !valid.is_empty() {
            let v: &String = pick(rng, &valid);
            out.push_str(v);
        } else {
            out.push_str(&weird_segment(rng));
        }
    }
    if rng.gen_bool(0.03) {
        out.push('/');
    }
    out
}

fn random_query(rng: &mut StdRng, ctx: &Ctx, upload_format: Option<&str>) -> String {
    let mut q: Vec<String> = Vec::new();
    if let Some(f) = upload_format {
        q.push(format!("format={f}"));
    }
    for _ in 0..rng.gen_range(0..4) {
        let key = *pick(
            rng,
            &[
                "format",
                "unit",
                "label",
                "map",
                "state",
                "against",
                "limit",
                "date",
                "baseline_id",
                "cursor",
                "before",
                "chain",
                "x",
            ],
        );
        let value = match rng.gen_range(0..12) {
            0 => (*pick(rng, &FORMATS)).to_owned(),
            1 => (*pick(rng, &["ns", "us", "ms", "s", "h", ""])).to_owned(),
            2 => (*pick(
                rng,
                &["draft", "approved", "superseded", "rejected", "current"],
            ))
            .to_owned(),
            3 => (*pick(rng, &NUMBERS)).to_owned(),
            4 => r#"{"inventory":"order->inventory"}"#.to_owned(),
            5 => "{\"a\":".to_owned(),
            6 => "%FF%FE".to_owned(),
            7 => "a".repeat(rng.gen_range(100..5000)),
            8 => pick(rng, &ctx.baselines).clone(),
            9 => "2026-13-45".to_owned(),
            10 => String::new(),
            _ => alnum(rng, 8),
        };
        q.push(format!("{key}={value}"));
    }
    if q.is_empty() {
        String::new()
    } else {
        format!("?{}", q.join("&"))
    }
}

// ---- Mutations ----

fn mutate_bytes(rng: &mut StdRng, b: &mut Vec<u8>) -> &'static str {
    let at = |rng: &mut StdRng, b: &Vec<u8>| rng.gen_range(0..=b.len());
    match rng.gen_range(0..13) {
        0 => {
            let n = at(rng, b);
            b.truncate(n);
            "truncate"
        }
        1 => {
            for _ in 0..rng.gen_range(1..16) {
                if !b.is_empty() {
                    let i = rng.gen_range(0..b.len());
                    b[i] ^= 1 << rng.gen_range(0..8);
                }
            }
            "flip bits"
        }
        2 => {
            let i = at(rng, b);
            let junk: Vec<u8> = (0..rng.gen_range(1..64)).map(|_| rng.gen()).collect();
            b.splice(i..i, junk);
            "insert random bytes"
        }
        3 => {
            let i = at(rng, b);
            let n = *pick(rng, &NUMBERS);
            b.splice(i..i, n.bytes());
            "insert odd number"
        }
        4 => {
            // Replace a run of digits with an odd number.
            let starts: Vec<usize> = (0..b.len())
                .filter(|&i| b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_digit()))
                .collect();
            if let Some(&s) = starts.choose(rng) {
                let e = (s..b.len())
                    .find(|&i| !b[i].is_ascii_digit())
                    .unwrap_or(b.len());
                let n = *pick(rng, &NUMBERS);
                b.splice(s..e, n.bytes());
            }
            "replace a number"
        }
        5 => {
            let depth = rng.gen_range(100..50_000);
            let i = at(rng, b);
            let (open, close) = *pick(rng, &[(b'[', b']'), (b'{', b'}')]);
            let mut nest = vec![open; depth];
            if rng.gen_bool(0.5) {
                nest.extend(std::iter::repeat_n(close, depth));
            }
            b.splice(i..i, nest);
            "deep nesting"
        }
        6 => {
            // Repeat a line many times.
            let lines: Vec<&[u8]> = b.split(|&c| c == b'\n').collect();
            if let Some(line) = lines.choose(rng) {
                let line = [*line, b"\n"].concat();
                let times = (MAX_CASE_BODY / 2 / line.len().max(1)).min(rng.gen_range(2..5000));
                let i = at(rng, b);
                b.splice(i..i, line.repeat(times));
            }
            "repeat a line"
        }
        7 => {
            let i = at(rng, b);
            let bads: [&[u8]; 5] = [b"\xff\xfe", b"\x00", b"\xc3", b"\xed\xa0\x80", b"\r"];
            let bad = bads[rng.gen_range(0..bads.len())];
            b.splice(i..i, bad.iter().copied());
            "invalid UTF-8 / NUL"
        }
        8 => {
            if !b.is_empty() {
                let s = rng.gen_range(0..b.len());
                let e = rng.gen_range(s..=b.len().min(s + 4096));
                b.drain(s..e);
            }
            "delete a range"
        }
        9 => {
            let (from, to) = *pick(
                rng,
                &[
                    (b'\n', b'\r'),
                    (b',', b';'),
                    (b',', b'\t'),
                    (b'"', b'\''),
                    (b':', b'='),
                ],
            );
            for c in b.iter_mut() {
                if *c == from {
                    *c = to;
                }
            }
            "swap separators"
        }
        10 => {
            b.clear();
            "empty"
        }
        11 => {
            let i = at(rng, b);
            b.splice(i..i, b"NaN,Infinity,-Infinity,nan,inf".iter().copied());
            "insert NaN"
        }
        _ => {
            let i = at(rng, b);
            let long = vec![b'9'; rng.gen_range(300..20_000)];
            b.splice(i..i, long);
            "insert a long number"
        }
    }
}

/// Every JSON pointer in `v`.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                pointers(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn odd_value(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..18) {
        0 => json!(u64::MAX),
        1 => json!(i64::MIN),
        2 => json!(f64::MAX),
        3 => json!(-1),
        4 => json!(0),
        5 => json!(1.5),
        6 => Value::Null,
        7 => json!(true),
        8 => json!(""),
        9 => json!("a".repeat(rng.gen_range(1000..70_000))),
        10 => json!("nul\u{0}byte"),
        11 => json!("line\nbreak\r\u{1b}[31mred\u{7f}"),
        12 => json!("\u{94fe}\u{8def}\u{1f642}"),
        13 => {
            let mut v = json!(1);
            for _ in 0..rng.gen_range(2..200) {
                v = json!([v]);
            }
            v
        }
        14 => Value::Object(
            (0..rng.gen_range(10..600))
                .map(|i| (format!("k{i}"), json!(i)))
                .collect(),
        ),
        15 => json!((0..rng.gen_range(10..5000)).collect::<Vec<u32>>()),
        16 => json!("NaN"),
        _ => json!({"segments": []}),
    }
}

fn mutate_json(rng: &mut StdRng, v: &mut Value) -> String {
    let mut ptrs = Vec::new();
    pointers(v, String::new(), &mut ptrs);
    let ptr = pick(rng, &ptrs).clone();
    match rng.gen_range(0..4) {
        0 | 1 => {
            let new = odd_value(rng);
            if ptr.is_empty() {
                *v = new;
            } else if let Some(x) = v.pointer_mut(&ptr) {
                *x = new;
            }
            format!("replace {ptr:?}")
        }
        2 => {
            if let Some((parent, key)) = ptr.rsplit_once('/') {
                match v.pointer_mut(parent) {
                    Some(Value::Object(m)) => {
                        m.remove(key);
                    }
                    Some(Value::Array(a)) => {
                        if let Ok(i) = key.parse::<usize>() {
                            if i < a.len() {
                                a.remove(i);
                            }
                        }
                    }
                    _ => {}
                }
            }
            format!("remove {ptr:?}")
        }
        _ => {
            if let Some(Value::Object(m)) = v.pointer_mut(&ptr) {
                let key = alnum(rng, 6);
                let val = odd_value(rng);
                m.insert(key, val);
            }
            format!("add a key at {ptr:?}")
        }
    }
}

/// A valid body for a write route, to mutate.
fn seed_body(rng: &mut StdRng, ctx: &Ctx, template: &str) -> Option<Value> {
    let baseline = pick(rng, &ctx.baselines).clone();
    Some(match template {
        "/api/v1/chains/{chain}/topology" => serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap(),
        "/api/v1/chains/{chain}/runs" => {
            let run = [CHECKOUT_RUN_A, CHECKOUT_RUN_C][rng.gen_range(0..2)];
            serde_json::from_str(run).unwrap()
        }
        "/api/v1/chains/{chain}/baselines" => json!({"run_id": pick(rng, &ctx.runs)}),
        "/api/v1/chains/{chain}/rollback" => json!({"baseline_id": baseline}),
        "/api/v1/releases" => json!({
            "service": "order", "version": "1.2.3", "baseline_id": baseline, "ticket": "OPS-1"
        }),
        "/api/v1/tokens" => json!({
            "role": pick(rng, &["reader", "uploader", "approver", "agent", "admin", "root"]),
            "name": format!("fz-{}", alnum(rng, 6)),
            "owner": "fuzz",
        }),
        t if t.ends_with("/approve") || t.ends_with("/reject") => json!({"comment": "fuzz"}),
        _ => return None,
    })
}

const CONTENT_TYPES: [&str; 14] = [
    "application/json",
    "application/json; charset=utf-8",
    "application/vnd.budgetd+json",
    "text/plain",
    "text/csv",
    "application/octet-stream",
    "multipart/form-data",
    "multipart/form-data; boundary=",
    "multipart/form-data; boundary=zz",
    "application/x-www-form-urlencoded",
    "",
    "; ;",
    "*/*",
    "application/json; charset=latin1; boundary=\"x\"",
];

fn auth(rng: &mut StdRng, ctx: &Ctx, prefer: &str) -> Option<Vec<u8>> {
    let secret = |role: &str| {
        ctx.tokens
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, s)| s.clone())
            .unwrap()
    };
    Some(match rng.gen_range(0..30) {
        0..=17 => format!("Bearer {}", secret(prefer)).into_bytes(),
        18..=22 => format!("Bearer {}", pick(rng, &ctx.tokens).1).into_bytes(),
        23 => return None,
        24 => b"Bearer ".to_vec(),
        25 => format!("Bearer {}", alnum(rng, 40)).into_bytes(),
        26 => b"Basic YWRtaW46YWRtaW4=".to_vec(),
        27 => format!("bearer {}", secret("admin")).into_bytes(),
        28 => format!("Bearer {}", "A".repeat(rng.gen_range(1000..9000))).into_bytes(),
        _ => format!("Bearer {}\u{e9}", secret("admin")).into_bytes(),
    })
}

fn add_noise_headers(rng: &mut StdRng, h: &mut Vec<(String, Vec<u8>)>, what: &mut Vec<String>) {
    if rng.gen_bool(0.2) {
        let key: Vec<u8> = match rng.gen_range(0..6) {
            0 => b"k1".to_vec(),
            1 => b"k2".to_vec(),
            2 => vec![b'k'; 300],
            3 => b"with space".to_vec(),
            4 => "caf\u{e9}".as_bytes().to_vec(),
            _ => alnum(rng, 12).into_bytes(),
        };
        h.push(("idempotency-key".into(), key));
        what.push("idempotency-key".into());
    }
    if rng.gen_bool(0.1) {
        h.push((
            "x-fuzz-long".into(),
            vec![b'a'; rng.gen_range(1..32 * 1024)],
        ));
        what.push("long header".into());
    }
    if rng.gen_bool(0.05) {
        for i in 0..60 {
            h.push((format!("x-fuzz-{i}"), alnum(rng, 20).into_bytes()));
        }
        what.push("60 headers".into());
    }
    if rng.gen_bool(0.05) {
        let v = *pick(rng, &["gzip", "br", "identity, chunked", "\u{e9}"]);
        h.push(("content-encoding".into(), v.as_bytes().to_vec()));
        what.push(format!("content-encoding {v}"));
    }
    if rng.gen_bool(0.05) {
        let v = *pick(rng, &["text/html", "*/*;q=abc", "application/json;q=0"]);
        h.push(("accept".into(), v.as_bytes().to_vec()));
    }
}

fn maybe_other_method(rng: &mut StdRng, method: &str) -> Method {
    match rng.gen_range(0..20) {
        0 | 1 => pick(
            rng,
            &[
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::DELETE,
                Method::PATCH,
                Method::HEAD,
                Method::OPTIONS,
                Method::TRACE,
            ],
        )
        .clone(),
        2 => {
            let len = rng.gen_range(1..64);
            Method::from_bytes(format!("FZ{}", alnum(rng, len)).as_bytes()).unwrap()
        }
        _ => Method::from_bytes(method.as_bytes()).unwrap(),
    }
}

/// A request to a route (API, health, schemas, console, unknown).
fn route_case(rng: &mut StdRng, ctx: &Ctx) -> Case {
    let (method, template) = pick(rng, &ctx.routes).clone();
    let mut what = vec![format!("route {method} {template}")];
    let method = maybe_other_method(rng, &method);
    let mut path = fill_path(rng, ctx, &template);
    if rng.gen_bool(0.3) {
        path.push_str(&random_query(rng, ctx, None));
    }
    let mut headers = Vec::new();
    let prefer = *pick(rng, &["admin", "uploader", "approver", "reader", "agent"]);
    if let Some(a) = auth(rng, ctx, prefer) {
        headers.push(("authorization".into(), a));
    }
    let mut body = Vec::new();
    let write = !matches!(method, Method::GET | Method::HEAD);
    if write {
        match seed_body(rng, ctx, &template) {
            Some(mut v) => {
                for _ in 0..rng.gen_range(0..3) {
                    what.push(mutate_json(rng, &mut v));
                }
                body = serde_json::to_vec(&v).unwrap();
                if rng.gen_bool(0.3) {
                    what.push(mutate_bytes(rng, &mut body).into());
                }
            }
            None if rng.gen_bool(0.3) => {
                body = (0..rng.gen_range(0..512)).map(|_| rng.gen()).collect();
                what.push("random body".into());
            }
            None => {}
        }
        let ct = if rng.gen_bool(0.75) {
            "application/json"
        } else {
            pick(rng, &CONTENT_TYPES)
        };
        headers.push(("content-type".into(), ct.as_bytes().to_vec()));
        what.push(format!("content-type {ct:?}"));
    } else if rng.gen_bool(0.05) {
        body = (0..rng.gen_range(0..1024)).map(|_| rng.gen()).collect();
        what.push("random body on a read".into());
    }
    add_noise_headers(rng, &mut headers, &mut what);
    body.truncate(MAX_CASE_BODY);
    Case {
        method,
        path,
        headers,
        body,
        what,
    }
}

/// A load-tool upload: raw or multipart, real fixtures mutated.
fn upload_case(rng: &mut StdRng, ctx: &Ctx) -> Case {
    let format = *pick(
        rng,
        &[
            "locust",
            "oha",
            "k6",
            "jmeter",
            "hdrhistogram",
            "wrk2",
            "artillery",
            "autocannon",
            "k6_points",
            "locust_json",
            "native",
        ],
    );
    // Usually the format's own files; sometimes another format's under this name.
    let source = if rng.gen_bool(0.85) {
        format
    } else {
        *pick(rng, &FORMATS)
    };
    let files = &ctx.fixtures[source];
    let mut what = vec![format!("upload format={format} files={source}")];
    let declared = match rng.gen_range(0..10) {
        0 => None,
        1 => Some(pick(rng, &["junk", "", "OHA", "k7", "native"]).to_string()),
        _ => Some(format.to_owned()),
    };
    let mut path = format!(
        "/api/v1/chains/{}/runs",
        if rng.gen_bool(0.9) {
            "checkout".to_owned()
        } else {
            weird_segment(rng)
        }
    );
    path.push_str(&random_query(rng, ctx, declared.as_deref()));
    let mutate = |rng: &mut StdRng, mut b: Vec<u8>, what: &mut Vec<String>| {
        for _ in 0..rng.gen_range(0..4) {
            what.push(mutate_bytes(rng, &mut b).into());
        }
        b.truncate(MAX_CASE_BODY / 2);
        b
    };
    let mut headers = Vec::new();
    if let Some(a) = auth(rng, ctx, "uploader") {
        headers.push(("authorization".into(), a));
    }
    let body;
    if rng.gen_bool(0.6) {
        let file = pick(rng, files).clone();
        body = mutate(rng, file, &mut what);
        let ct = if rng.gen_bool(0.5) {
            if format == "native" || format == "oha" || format == "k6" {
                "application/json"
            } else {
                "application/octet-stream"
            }
        } else {
            pick(rng, &CONTENT_TYPES)
        };
        headers.push(("content-type".into(), ct.as_bytes().to_vec()));
        what.push(format!("raw, content-type {ct:?}"));
    } else {
        let boundary = format!("fz{}", alnum(rng, 10));
        let labels = ["inventory", "payment", "user"];
        let mut parts = Vec::new();
        for i in 0..rng.gen_range(0..4) {
            let name = match rng.gen_range(0..10) {
                0 => String::new(),
                1 => "a\"b".to_owned(),
                2 => alnum(rng, 8),
                _ => labels[i % 3].to_owned(),
            };
            let file = pick(rng, files).clone();
            parts.push((name, mutate(rng, file, &mut what)));
        }
        if rng.gen_bool(0.3) {
            let mut map =
                br#"{"inventory":"order->inventory","payment":"order->payment"}"#.to_vec();
            if rng.gen_bool(0.5) {
                what.push(format!("map: {}", mutate_bytes(rng, &mut map)));
            }
            let at = rng.gen_range(0..=parts.len());
            parts.insert(at, ("map".to_owned(), map));
        }
        let mut b = multipart_body(&boundary, &parts);
        let declared_boundary = match rng.gen_range(0..12) {
            0 => {
                b.truncate(b.len().saturating_sub(rng.gen_range(1..40)));
                what.push("multipart: no closing boundary".into());
                boundary.clone()
            }
            1 => {
                what.push("multipart: other boundary declared".into());
                "another".into()
            }
            2 => {
                b.splice(0..0, b"preamble junk\r\n".iter().copied());
                boundary.clone()
            }
            3 => {
                what.push(format!("multipart body: {}", mutate_bytes(rng, &mut b)));
                boundary.clone()
            }
            _ => boundary.clone(),
        };
        body = b;
        let ct = if rng.gen_bool(0.9) {
            format!("multipart/form-data; boundary={declared_boundary}")
        } else {
            pick(rng, &CONTENT_TYPES).to_string()
        };
        what.push(format!(
            "multipart, {} parts, content-type {ct:?}",
            parts.len()
        ));
        headers.push(("content-type".into(), ct.into_bytes()));
    }
    add_noise_headers(rng, &mut headers, &mut what);
    let method = if rng.gen_bool(0.95) {
        Method::POST
    } else {
        maybe_other_method(rng, "PUT")
    };
    Case {
        method,
        path,
        headers,
        body,
        what,
    }
}

/// Tokens, a published and a draft baseline, their runs, and every route to aim at.
async fn prepare(app: &TestApp) -> Ctx {
    let p = app.people().await;
    let reader = app.token("reader", "rita").await;
    let agent = app.token("agent", "order-1").await;
    app.token("reader", "fz-victim").await;
    let mut topology: Value = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
    for (i, label) in [(1, "inventory"), (2, "payment"), (3, "user")] {
        topology["segments"][i]["labels"] = json!([label]);
    }
    app.put("/api/v1/chains/checkout/topology", &p.uploader, topology)
        .await
        .expect(201);
    let mut baselines = Vec::new();
    let mut runs = Vec::new();
    for run in [CHECKOUT_RUN_A, CHECKOUT_RUN_C] {
        let up = app
            .upload(&p.uploader, "checkout", crate::helpers::example(run))
            .await
            .expect(201)
            .json();
        runs.push(up["run_id"].as_str().unwrap().to_owned());
        let id = up["baseline_id"].as_str().unwrap().to_owned();
        if baselines.is_empty() {
            app.approve(&p.approver, &id).await.expect(200);
        }
        baselines.push(id);
    }
    let openapi = app.get("/openapi.json", "").await.expect(200).json();
    let mut routes = Vec::new();
    for (path, item) in openapi["paths"].as_object().unwrap() {
        for method in ["get", "put", "post", "delete", "patch"] {
            if item.get(method).is_some() {
                routes.push((method.to_ascii_uppercase(), path.clone()));
            }
        }
    }
    assert!(routes.len() > 20, "{routes:?}");
    for (m, p) in [
        ("GET", "/"),
        ("GET", "/console"),
        ("GET", "/assets/app.js"),
        ("GET", "/assets/style.css"),
        ("GET", "/no-such-route"),
        ("POST", "/api/v1/no-such-route"),
        ("GET", "/api/v1"),
    ] {
        routes.push((m.to_owned(), p.to_owned()));
    }
    let fixtures = FORMATS
        .iter()
        .chain(&["native"])
        .map(|f| (*f, fixtures(f)))
        .collect();
    Ctx {
        tokens: vec![
            ("admin", ADMIN_TOKEN.to_owned()),
            ("uploader", p.uploader),
            ("approver", p.approver),
            ("reader", reader),
            ("agent", agent),
        ],
        baselines,
        runs,
        routes,
        fixtures,
    }
}

/// What is wrong with an answer, if anything.
fn check_answer(method: &Method, answer: &RawAnswer) -> Option<String> {
    let (status, body) = (answer.status, &answer.body);
    let text = || String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    if status >= 500 {
        return Some(format!("status {status}: {}", text()));
    }
    if answer.header("x-content-type-options") != Some("nosniff") {
        return Some(format!(
            "status {status} without X-Content-Type-Options: nosniff"
        ));
    }
    if status >= 400 && *method != Method::HEAD && answer.cut.is_none() {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return Some(format!("status {status}, body not JSON: {:?}", text()));
        };
        let code_ok = v["error"]["code"].as_str().is_some_and(|c| !c.is_empty());
        let message_ok = v["error"]["message"].as_str().is_some();
        let has_details = v["error"].get("details").is_some();
        if !code_ok || !message_ok || !has_details {
            return Some(format!("status {status}, not an error document: {v}"));
        }
    }
    None
}

async fn fuzz_http(app: &TestApp) {
    let cases = env_u64("BUDGETD_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let seed = env_u64("BUDGETD_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let ctx = prepare(app).await;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    let mut skipped = 0u64;
    let mut cut_short = 0u64;
    let started = std::time::Instant::now();
    for n in 0..cases {
        let case = if rng.gen_bool(0.4) {
            upload_case(&mut rng, &ctx)
        } else {
            route_case(&mut rng, &ctx)
        };
        let describe = |case: &Case| {
            let path: String = case.path.chars().take(160).collect();
            format!(
                "case {n} (seed {seed:#x}): {} {path} [{}] body {} bytes",
                case.method,
                case.what.join("; "),
                case.body.len()
            )
        };
        let Ok(url) = reqwest::Url::parse(&app.url(&case.path)) else {
            skipped += 1;
            continue;
        };
        // The URL parser percent-encodes what a request line may not carry.
        let target = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let mut head = format!(
            "{} {target} HTTP/1.1\r\nhost: {}\r\nconnection: close",
            case.method, app.addr
        )
        .into_bytes();
        let mut valid = true;
        for (name, value) in &case.headers {
            valid &= HeaderName::from_bytes(name.as_bytes()).is_ok()
                && HeaderValue::from_bytes(value).is_ok();
            head.extend(b"\r\n");
            head.extend(name.as_bytes());
            head.extend(b": ");
            head.extend(value);
        }
        if !valid {
            skipped += 1;
            continue;
        }
        // Raw HTTP/1.1 over a fresh connection, reading while writing: an early answer (a
        // refusal before the body is read) still arrives, and only a dropped connection
        // without any answer — what a panicking handler leaves — counts as one.
        let answer = match raw_request_bytes(
            app.addr,
            head,
            RawBody::whole(case.body.clone()),
            Duration::from_secs(60),
        )
        .await
        {
            Ok(a) => a,
            Err(e) => {
                failures.push(format!("{}: no answer: {e}", describe(&case)));
                continue;
            }
        };
        let status = answer.status;
        if let Some(cut) = &answer.cut {
            // The status line and headers came, the body did not: when the request had a
            // body the server answered without reading, closing the connection with unread
            // bytes makes the kernel reset it, which can cut the answer short on the way.
            // Without a request body it would mean the server died mid-answer.
            if case.body.is_empty() {
                failures.push(format!("{}: answer cut off: {cut}", describe(&case)));
                continue;
            }
            cut_short += 1;
        }
        *statuses.entry(status).or_default() += 1;
        if let Some(problem) = check_answer(&case.method, &answer) {
            failures.push(format!("{}: {problem}", describe(&case)));
        }
    }
    eprintln!(
        "fuzz: {cases} cases (seed {seed:#x}) in {:?}: statuses {statuses:?}, {skipped} skipped, \
         {cut_short} answers cut short by a reset, {} failures",
        started.elapsed(),
        failures.len()
    );
    // Still alive and serving.
    app.get("/healthz", "").await.expect(200);
    app.get("/readyz", "").await.expect(200);
    app.get("/api/v1/chains", ADMIN_TOKEN).await.expect(200);
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed (seed {seed:#x}; replay with BUDGETD_FUZZ_SEED and \
         BUDGETD_FUZZ_CASES):\n{}",
        failures.len(),
        failures
            .iter()
            .take(25)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        skipped < cases / 10,
        "{skipped} of {cases} cases could not be sent"
    );
}

crate::on_both_backends!(fuzz_http);
