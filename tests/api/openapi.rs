//! The OpenAPI document (`schemas/openapi.json`, served at `/openapi.json`) describes exactly
//! the routes the router serves.

use std::collections::BTreeSet;

use serde_json::Value;

/// Every `(method, path)` the router serves, read from `src/http/mod.rs` and
/// `src/http/api/*.rs` (the `/api/v1` routes are nested there). Update with the router.
const ROUTES: [(&str, &str); 33] = [
    // src/http/mod.rs
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/schemas/{name}"),
    ("get", "/openapi.json"),
    // src/http/api/chains.rs
    ("get", "/api/v1/chains"),
    ("get", "/api/v1/chains/{chain}/topology"),
    ("put", "/api/v1/chains/{chain}/topology"),
    ("get", "/api/v1/chains/{chain}/budgets"),
    ("post", "/api/v1/chains/{chain}/rollback"),
    // src/http/api/runs.rs
    ("post", "/api/v1/chains/{chain}/runs"),
    ("get", "/api/v1/chains/{chain}/runs"),
    ("get", "/api/v1/chains/{chain}/runs/{run_id}"),
    // src/http/api/baselines.rs
    ("post", "/api/v1/chains/{chain}/baselines"),
    ("get", "/api/v1/chains/{chain}/baselines"),
    ("get", "/api/v1/baselines/{id}"),
    ("get", "/api/v1/baselines/{id}/diff"),
    ("get", "/api/v1/baselines/{id}/tree"),
    ("post", "/api/v1/baselines/{id}/approve"),
    ("post", "/api/v1/baselines/{id}/reject"),
    // src/http/api/audit.rs
    ("get", "/api/v1/audit"),
    // src/http/api/tokens.rs
    ("get", "/api/v1/tokens"),
    ("post", "/api/v1/tokens"),
    ("delete", "/api/v1/tokens/{name}"),
    ("post", "/api/v1/tokens/{name}/rotate"),
    ("get", "/api/v1/whoami"),
    // src/http/api/agents.rs
    ("get", "/api/v1/agents"),
    ("get", "/api/v1/baselines/{id}/rollout"),
    // src/http/api/archive.rs
    ("get", "/api/v1/baselines/{id}/archive"),
    ("get", "/api/v1/archive/verify"),
    // src/http/api/releases.rs
    ("post", "/api/v1/releases"),
    ("get", "/api/v1/releases"),
    ("get", "/api/v1/baselines/{id}/releases"),
];

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

const ERROR_CODES: [&str; 12] = [
    "bad_request",
    "malformed_json",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "conflict",
    "payload_too_large",
    "unsupported_media_type",
    "validation_failed",
    "internal",
    "unavailable",
];

/// Follows a local `#/...` reference (one level is all the document uses for parameters).
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) if r.starts_with("#/") => doc
            .pointer(&r[1..])
            .unwrap_or_else(|| panic!("unresolvable $ref {r}")),
        _ => v,
    }
}

/// The parameters of an operation: its path item's and its own, resolved.
fn parameters<'a>(doc: &'a Value, path: &str, method: &str) -> Vec<&'a Value> {
    let item = &doc["paths"][path];
    [&item["parameters"], &item[method]["parameters"]]
        .into_iter()
        .filter_map(Value::as_array)
        .flatten()
        .map(|p| resolve(doc, p))
        .collect()
}

#[test]
fn openapi_document_covers_exactly_the_router() {
    let doc: Value =
        serde_json::from_str(budgetd::schemas::OPENAPI).expect("schemas/openapi.json is JSON");
    let version = doc["openapi"]
        .as_str()
        .expect("an `openapi` version string");
    assert!(
        version.starts_with("3.1."),
        "OpenAPI 3.1 expected, got {version}"
    );
    let paths = doc["paths"].as_object().expect("a `paths` object");

    let routes: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(routes.len(), ROUTES.len(), "ROUTES has duplicates");
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            METHODS
                .iter()
                .filter(|m| item.get(**m).is_some())
                .map(move |m| (m.to_string(), path.clone()))
        })
        .collect();

    let missing: Vec<_> = routes.difference(&documented).collect();
    assert!(missing.is_empty(), "routes the document lacks: {missing:?}");
    let extra: Vec<_> = documented.difference(&routes).collect();
    assert!(
        extra.is_empty(),
        "operations the router does not serve: {extra:?}"
    );
    let router_paths: BTreeSet<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
    let extra_paths: Vec<&String> = paths
        .keys()
        .filter(|p| !router_paths.contains(p.as_str()))
        .collect();
    assert!(
        extra_paths.is_empty(),
        "paths the router lacks: {extra_paths:?}"
    );

    // The shared error format with every code.
    let codes: BTreeSet<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("components.schemas.ErrorCode.enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(codes, ERROR_CODES.into_iter().collect::<BTreeSet<_>>());
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    for (method, path) in ROUTES {
        let op = &paths[path][method];
        let where_ = format!("{} {path}", method.to_uppercase());
        assert!(
            op["responses"].as_object().is_some_and(|r| !r.is_empty()),
            "{where_}: no responses"
        );

        // Every `{param}` of the path is a declared, required path parameter.
        let params = parameters(&doc, path, method);
        for name in path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        {
            assert!(
                params
                    .iter()
                    .any(|p| p["in"] == "path" && p["name"] == name && p["required"] == true),
                "{where_}: path parameter {name} is not declared"
            );
        }

        // Bearer auth on /api/v1 (the global requirement), none elsewhere.
        if path.starts_with("/api/v1/") {
            let sec = op.get("security").unwrap_or(&doc["security"]);
            assert!(
                sec.as_array()
                    .is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some())),
                "{where_}: needs the bearer security scheme"
            );
        } else {
            assert_eq!(
                op["security"],
                serde_json::json!([]),
                "{where_}: must not require a token"
            );
        }

        // Every write under /api/v1 takes Idempotency-Key.
        if path.starts_with("/api/v1/") && method != "get" {
            assert!(
                params
                    .iter()
                    .any(|p| p["in"] == "header" && p["name"] == "Idempotency-Key"),
                "{where_}: no Idempotency-Key header parameter"
            );
        }
    }
}

#[tokio::test]
async fn openapi_document_is_served() {
    let app = crate::helpers::spawn_app(crate::helpers::Backend::Sqlite)
        .await
        .unwrap();
    let answer = app
        .raw(app.http.get(app.url("/openapi.json")))
        .await
        .expect(200);
    let content_type = answer
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("application/json"),
        "content-type {content_type:?}"
    );
    assert_eq!(
        answer.body,
        budgetd::schemas::OPENAPI.as_bytes(),
        "served byte for byte"
    );
    assert_eq!(
        answer.json()["openapi"]
            .as_str()
            .map(|v| v.starts_with("3.1.")),
        Some(true)
    );
    app.stop().await;
}
