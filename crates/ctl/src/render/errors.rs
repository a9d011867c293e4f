//! A failed request in budgetctl's words: the server's message with query parameters turned
//! into the flags that set them, and the lines under it — violations, findings, the nearest
//! known chains, every other detail as `key: value` — never raw JSON or HTTP asides.

use budget_api::errors::ErrorDetails;
use serde::Deserialize as _;
use serde_json::Value;

use super::{opt, text, wire};

/// Query parameters of the API and the budgetctl flags that set them.
const FLAGS: [(&str, &str); 5] = [
    ("format", "--format"),
    ("unit", "--unit"),
    ("map", "--map"),
    ("dry_run", "--dry-run"),
    ("limit", "--limit"),
];

/// The flag of query parameter `name`: a known one, else `--name` (underscores as dashes).
fn flag(name: &str) -> String {
    FLAGS.iter().find(|(p, _)| *p == name).map_or_else(
        || format!("--{}", name.replace('_', "-")),
        |(_, f)| (*f).to_owned(),
    )
}

/// `message` without its `(HTTP: …)` asides (what an HTTP client would send instead).
fn without_http_asides(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("(HTTP: ") {
        out.push_str(rest[..at].trim_end_matches(' '));
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest[at..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `?name=value` and `query parameter name…` as the flag that sets them.
fn params_as_flags(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    loop {
        let next = [
            ("?", rest.find('?')),
            ("query parameter ", rest.find("query parameter ")),
        ]
        .into_iter()
        .filter_map(|(m, at)| at.map(|a| (a, m)))
        .min();
        let Some((at, marker)) = next else { break };
        out.push_str(&rest[..at]);
        let after = &rest[at + marker.len()..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..name_len];
        let tail = &after[name_len..];
        let is_param = !name.is_empty() && (marker != "?" || tail.starts_with('='));
        if is_param {
            out.push_str(&flag(name));
            rest = match tail.strip_prefix('=') {
                Some(value) => {
                    out.push(' ');
                    value
                }
                None => tail,
            };
        } else {
            out.push_str(marker);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Drops `, budgetctl FLAG…` where the message said `FLAG…` already (a message written for both
/// HTTP and budgetctl users names the flag twice once its parameters are flags).
fn without_repeats(message: &str) -> String {
    const SEP: &str = ", budgetctl ";
    let mut out = message.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find(SEP) {
        let at = from + found;
        let phrase_at = at + SEP.len();
        let phrase_len = out[phrase_at..]
            .find([')', ',', ';'])
            .unwrap_or(out.len() - phrase_at);
        let phrase = out[phrase_at..phrase_at + phrase_len].trim_end().to_owned();
        if phrase.starts_with("--") && out[..at].contains(&phrase) {
            out.replace_range(at..phrase_at + phrase.len(), "");
            from = at;
        } else {
            from = phrase_at;
        }
    }
    out
}

/// The server's message as budgetctl says it: `?format=k6` becomes `--format k6`, `query
/// parameter limit` `--limit`, and `(HTTP: …)` asides go.
pub fn error_message(message: &str) -> String {
    without_repeats(&params_as_flags(&without_http_asides(message)))
}

/// A detail's value on one line: text as is, numbers and lists of them plainly, anything else
/// as compact JSON.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(|i| !i.is_array() && !i.is_object()) => {
            items.iter().map(plain).collect::<Vec<_>>().join(", ")
        }
        other => other.to_string(),
    }
}

/// The lines explaining a failed request's `details`: violations, findings, the nearest known
/// chains of an unknown one, and every other detail as `key: value`.
pub fn error_details(details: &Value) -> Vec<String> {
    if details.is_null() {
        return Vec::new();
    }
    let Ok(d) = ErrorDetails::deserialize(details) else {
        return vec![format!("  {}", plain(details))];
    };
    let mut lines = Vec::new();
    for v in &d.violations {
        let at = match (v.pointer.as_deref(), &v.segment) {
            (Some(""), _) => "(document)".to_owned(),
            (Some(p), _) => p.to_owned(),
            (None, seg) => opt(seg),
        };
        lines.push(format!("  {at}: {}", text(&error_message(&v.message))));
    }
    for f in &d.findings {
        lines.push(format!(
            "  {} {} at {}: {}",
            wire(&f.severity),
            f.kind.check_name(),
            text(&f.segment),
            text(&f.message)
        ));
    }
    if let Some(schema) = &d.schema {
        lines.push(format!("  (schema: {schema})"));
    }
    // An unknown chain: the names a typo was likely meant to be.
    if let (Some(Value::String(chain)), Some(Value::Array(nearest))) =
        (d.other.get("chain"), d.other.get("nearest"))
    {
        lines.push(if nearest.is_empty() {
            "  no known chain is named like it; `budgetctl chains` lists them".to_owned()
        } else {
            let names: Vec<String> = nearest.iter().map(plain).collect();
            format!("  known chains nearest to {chain:?}: {}", names.join(", "))
        });
    }
    // Keys the message or the lines above already state.
    const SHOWN: [&str; 6] = [
        "line",
        "column",
        "limit_bytes",
        "message",
        "chain",
        "nearest",
    ];
    for (key, value) in &d.other {
        if !SHOWN.contains(&key.as_str()) && !value.is_null() {
            lines.push(format!("  {key}: {}", plain(value)));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn error_details_list_violations_and_findings() {
        let details = json!({"schema": "/schemas/topology.json", "violations": [
            {"pointer": "/entry_budget_ms", "message": "\"x\" is not of type \"integer\""},
            {"pointer": "", "message": "expected an object"},
            {"segment": "order->user", "message": "no data"}
        ]});
        assert_eq!(
            error_details(&details),
            [
                "  /entry_budget_ms: \"x\" is not of type \"integer\"",
                "  (document): expected an object",
                "  order->user: no data",
                "  (schema: /schemas/topology.json)"
            ]
        );
        let findings = json!({"findings": [{"check": "inversion", "need_ms": 909, "available_ms": 800, "excess_ms": 109, "stages": [], "segment": "gateway->order", "severity": "error", "message": "109 ms over"}]});
        assert_eq!(
            error_details(&findings),
            ["  error inversion at gateway->order: 109 ms over"]
        );
        assert!(
            error_details(&json!({"line": 3, "column": 0})).is_empty(),
            "the message says where"
        );
        assert!(error_details(&Value::Null).is_empty());
    }

    #[test]
    fn other_details_are_readable_lines() {
        assert_eq!(
            error_details(&json!({"retry_after": 2})),
            ["  retry_after: 2"]
        );
        assert_eq!(
            error_details(
                &json!({"file": "inv.json", "line": 3, "field": "p99", "message": "bad"})
            ),
            ["  field: p99", "  file: inv.json"]
        );
        assert_eq!(
            error_details(&json!({"file": null, "labels": ["/inventory", "Aggregated"]})),
            ["  labels: /inventory, Aggregated"]
        );
        assert_eq!(
            error_details(&json!({"chain": "chekout", "nearest": ["checkout", "checkout-eu"]})),
            ["  known chains nearest to \"chekout\": checkout, checkout-eu"]
        );
        assert_eq!(
            error_details(&json!({"chain": "zzz", "nearest": []})),
            ["  no known chain is named like it; `budgetctl chains` lists them"]
        );
        for line in error_details(&json!({"limits": {"files": 256}, "names": [{"a": 1}]})) {
            assert!(!line.contains("details:"), "{line}");
        }
    }

    #[test]
    fn messages_speak_in_flags() {
        let check = |server: &str, cli: &str| assert_eq!(error_message(server), cli, "{server}");
        check(
            "inv.json: cannot tell the load-test format from the content; pass ?format=locust|oha|k6|jmeter|hdrhistogram|wrk2",
            "inv.json: cannot tell the load-test format from the content; pass --format locust|oha|k6|jmeter|hdrhistogram|wrk2",
        );
        check(
            "HdrHistogram logs do not record the unit of their values: say it with ?unit=ns|us|ms|s",
            "HdrHistogram logs do not record the unit of their values: say it with --unit ns|us|ms|s",
        );
        check(
            "upload the .hlog interval log it was made from, with its unit (?unit=ns|us|ms|s, budgetctl --unit)",
            "upload the .hlog interval log it was made from, with its unit (--unit ns|us|ms|s)",
        );
        check(
            "looks like k6 (or name it: ?format=k6, budgetctl --format k6)",
            "looks like k6 (or name it: --format k6)",
        );
        check(
            "map the labels: budgetctl run upload … --map '/inventory=order->inventory' (HTTP: ?map={\"/inventory\":\"order->inventory\"} (JSON)), or add labels",
            "map the labels: budgetctl run upload … --map '/inventory=order->inventory', or add labels",
        );
        check(
            "query parameter map must be a JSON object of label → segment id: EOF",
            "--map must be a JSON object of label → segment id: EOF",
        );
        check(
            "query parameter limit=\"0\" must be an integer from 1 to 1000",
            "--limit \"0\" must be an integer from 1 to 1000",
        );
        // a question mark that is no parameter stays
        check("what? no such run", "what? no such run");
        check("is it k6?", "is it k6?");
    }
}
