//! The lines under a failed request's message: violations, findings, or the raw details.

use serde_json::Value;

use super::{arr, s};

/// The lines explaining a failed request's `details`: violations, findings, or the raw value.
pub fn error_details(details: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    for v in arr(&details["violations"]) {
        let at = match (v["pointer"].as_str(), v["segment"].as_str()) {
            (Some(""), _) => "(document)".to_owned(),
            (Some(p), _) => p.to_owned(),
            (None, Some(seg)) => seg.to_owned(),
            (None, None) => "-".to_owned(),
        };
        lines.push(format!("  {at}: {}", s(&v["message"])));
    }
    for f in arr(&details["findings"]) {
        lines.push(format!(
            "  {} {} at {}: {}",
            s(&f["severity"]),
            s(&f["check"]),
            s(&f["segment"]),
            s(&f["message"])
        ));
    }
    // Keys the message already states, or that the lines above cover.
    const SHOWN: [&str; 6] = [
        "violations",
        "findings",
        "schema",
        "line",
        "column",
        "limit_bytes",
    ];
    if let Some(schema) = details["schema"].as_str() {
        lines.push(format!("  (schema: {schema})"));
    }
    match details {
        Value::Object(m) if m.keys().all(|k| SHOWN.contains(&k.as_str())) => {}
        Value::Null => {}
        other => lines.push(format!("  details: {other}")),
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
        let findings = json!({"findings": [{"check": "inversion", "segment": "gateway->order", "severity": "error", "message": "109 ms over"}]});
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
