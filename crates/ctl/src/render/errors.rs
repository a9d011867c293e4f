//! The lines under a failed request's message: violations, findings, or the raw details.

use budget_api::errors::ErrorDetails;
use serde::Deserialize as _;
use serde_json::Value;

use super::{opt, text, wire};

/// The lines explaining a failed request's `details`: violations, findings, or the raw value.
pub fn error_details(details: &Value) -> Vec<String> {
    if details.is_null() {
        return Vec::new();
    }
    let Ok(d) = ErrorDetails::deserialize(details) else {
        return vec![format!("  details: {details}")];
    };
    let mut lines = Vec::new();
    for v in &d.violations {
        let at = match (v.pointer.as_deref(), &v.segment) {
            (Some(""), _) => "(document)".to_owned(),
            (Some(p), _) => p.to_owned(),
            (None, seg) => opt(seg),
        };
        lines.push(format!("  {at}: {}", text(&v.message)));
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
    // Keys the message already states.
    const SHOWN: [&str; 3] = ["line", "column", "limit_bytes"];
    if let Some(schema) = &d.schema {
        lines.push(format!("  (schema: {schema})"));
    }
    if !d.other.keys().all(|k| SHOWN.contains(&k.as_str())) {
        lines.push(format!("  details: {details}"));
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
        assert_eq!(
            error_details(&json!({"retry_after": 2})),
            ["  details: {\"retry_after\":2}"]
        );
        assert!(error_details(&Value::Null).is_empty());
    }
}
