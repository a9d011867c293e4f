//! The OpenAPI document (`schemas/openapi.json`, served at `/openapi.json`) describes exactly
//! the routes the router serves.

use std::collections::BTreeSet;

use serde_json::Value;

/// Every `(method, path)` the router serves, read from `src/http/mod.rs` and
/// `src/http/api/*.rs` (the `/api/v1` routes are nested there). Update with the router.
const ROUTES: [(&str, &str); 44] = [
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
    ("get", "/api/v1/baselines/{id}/whatif"),
    ("get", "/api/v1/baselines/{id}/distribution"),
    ("get", "/api/v1/baselines/{id}/approval"),
    ("post", "/api/v1/baselines/{id}/approve"),
    ("post", "/api/v1/baselines/{id}/reject"),
    ("post", "/api/v1/baselines/{id}/promote"),
    ("post", "/api/v1/baselines/{id}/abort"),
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
    // src/http/api/feedback.rs
    ("get", "/api/v1/chains/{chain}/production"),
    ("get", "/api/v1/alerts"),
    ("get", "/api/v1/webhooks"),
    ("post", "/api/v1/webhooks"),
    ("delete", "/api/v1/webhooks/{id}"),
    ("get", "/api/v1/webhooks/{id}/deliveries"),
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

/// The property names of the schema at `pointer` (following one `$ref`).
fn property_names(doc: &Value, pointer: &str) -> BTreeSet<String> {
    let schema = doc
        .pointer(pointer)
        .unwrap_or_else(|| panic!("no schema at {pointer}"));
    let schema = resolve(doc, schema);
    schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{pointer} has no properties"))
        .keys()
        .cloned()
        .collect()
}

/// The field names `sample` serialises to: every optional field of a sample is set, so a
/// field skipped when empty shows too.
fn field_names<T: serde::Serialize>(sample: &T) -> BTreeSet<String> {
    match serde_json::to_value(sample).expect("a sample serialises") {
        Value::Object(m) => m.keys().cloned().collect(),
        other => panic!("a sample is not an object: {other}"),
    }
}

/// The schema of a response answered as JSON (`path` under `/paths`, `~1` for `/`).
fn response(path: &str, method: &str, status: u16) -> String {
    format!("/paths/{path}/{method}/responses/{status}/content/application~1json/schema")
}

/// Every type of `budget_api` that answers or asks something: its OpenAPI schema (a component,
/// or an operation's inline schema, or a nested one) has exactly its serialised field names.
#[test]
fn openapi_schemas_match_the_typed_api() {
    use budget_api::{agents, archive, audit, baselines, chains, errors, releases, runs, tokens};
    use budget_core::baseline::{BaselineDocument, BaselineState};
    use budget_core::drift::{DriftEntry, Metric};

    let doc: Value = serde_json::from_str(budgetd::schemas::OPENAPI).unwrap();
    let some = |s: &str| Some(s.to_owned());
    let drift = DriftEntry {
        segment: "order->payment".into(),
        metric: Metric::P999,
        baseline_ms: Some(300.0),
        run_ms: 390.0,
        change_pct: Some(30.0),
        drift: true,
    };
    let document: BaselineDocument = serde_json::from_value(serde_json::json!({
        "id": "bl-20261130-001", "chain": "checkout", "state": "approved", "reason": "first_run",
        "run_id": "run-20261130-001", "topology_version": 1, "created_at": "2026-11-30T10:00:00Z",
        "created_by": "uma", "entry_budget_ms": 800, "breaker_window_ms": 30000,
        "max_recovery": "18h", "segments": [], "findings": []
    }))
    .unwrap();
    let topology = include_str!("../../schemas/examples/checkout-topology.json");
    let live = budget_core::example::checkout_live(topology, 3).unwrap();
    let canary = baselines::Canary {
        state: budget_core::canary::CanaryState::Baking,
        selector: budget_core::canary::Selector::Percent(10),
        bake_s: 60,
        auto: true,
        revision: 2,
        previous_baseline_id: "bl-20261130-001".into(),
        started_at: String::new(),
        started_by: "abe".into(),
        bake_ends_at: String::new(),
        members: vec!["a1".into()],
        acked: 1,
        nacked: 0,
        health: vec![baselines::CanaryHealth {
            segment: "order->inventory".into(),
            calls: 1,
            attempts: 1,
            amplification: Some(1.0),
            kill_rate: Some(0.0),
            samples: 1,
            p99_ms: Some(1.0),
            p999_ms: Some(1.0),
            drift_pct: Some(0.0),
        }],
        reason: None,
        ended_at: None,
        ended_by: None,
        end_revision: None,
    };
    let mapping = runs::LabelMapping {
        mapped: [("POST /pay".to_owned(), "order->payment".to_owned())].into(),
        unmapped: vec!["GET /health".into()],
        ignored: vec!["Aggregated".into()],
    };
    let run_segment = runs::RunSegment {
        id: "order->payment".into(),
        samples: 10,
        failures: Some(0),
        p50_ms: Some(1.0),
        p99_ms: 2.0,
        p999_ms: 3.0,
        distribution: Some(budget_core::distribution::Source::Histogram),
        distribution_bytes: Some(512),
    };
    let vs_live = runs::LiveComparison {
        baseline_id: "bl-20261130-001".into(),
        comparison: vec![drift.clone()],
        drift: true,
        drift_threshold_pct: 20,
    };
    let run = runs::Run {
        tool: some("k6"),
        note: some("nightly"),
        sources: vec![runs::RunSource {
            name: some("k6.json"),
            ..Default::default()
        }],
        mapping: Some(mapping.clone()),
        segments: vec![run_segment.clone()],
        vs_live: Some(vs_live.clone()),
        draft_id: some("bl-20261130-001"),
        draft_state: Some(BaselineState::Draft),
        ..Default::default()
    };
    let upload = runs::RunUploadResult {
        compared_to: some("bl-20261130-001"),
        baseline_id: some("bl-20261130-002"),
        reason: Some(budget_core::baseline::BaselineReason::Drift),
        tool: some("k6"),
        mapping: Some(mapping.clone()),
        dry_run: true,
        preview: Some(document.clone()),
        ..Default::default()
    };
    let summary = baselines::BaselineSummary {
        id: "bl-20261130-001".into(),
        chain: "checkout".into(),
        state: BaselineState::Draft,
        reason: "first_run".into(),
        run_id: "run-20261130-001".into(),
        topology_version: 1,
        has_errors: false,
        created_at: String::new(),
        created_by: String::new(),
        updated_at: String::new(),
        superseded_by: some("bl-20261130-002"),
        approved_at: some("2026-11-30T10:00:00Z"),
    };
    let change = baselines::Change {
        from: Some(1.0),
        to: Some(2.0),
        change_pct: Some(100.0),
        drift: true,
    };
    let change_u = baselines::Change {
        from: Some(1),
        to: Some(2),
        change_pct: Some(100.0),
        drift: true,
    };
    let segment_diff = baselines::SegmentDiff {
        id: "order->payment".into(),
        status: "changed".into(),
        p99_ms: change.clone(),
        p999_ms: change.clone(),
        timeout_ms: change_u.clone(),
        budget_ms: change_u,
    };
    let agent = agents::Agent {
        nack_revision: Some(2),
        nack_error: some("bad"),
        token: some("agent-1"),
        ..Default::default()
    };
    let entry = audit::AuditEntry {
        chain: some("checkout"),
        subject: some("bl-20261130-001"),
        ..Default::default()
    };
    let token = tokens::Token::default();
    let upload_item = archive::ArchiveUpload {
        last_error: some("refused"),
        archived_at: some("2026-11-30T10:00:00Z"),
        ..Default::default()
    };
    let problem = archive::ArchiveProblem {
        actual_sha256: some("ab"),
        error: some("denied"),
        ..Default::default()
    };
    let release = releases::Release::default();
    let c = |name: &str| format!("/components/schemas/{name}");

    use budget_api::feedback;
    let production_segment = feedback::ProductionSegment::default();
    let checks: Vec<(String, BTreeSet<String>)> = vec![
        // Runtime feedback
        (
            c("Production"),
            field_names(&feedback::Production::default()),
        ),
        (c("ProductionSegment"), field_names(&production_segment)),
        (c("Alert"), field_names(&feedback::Alert::default())),
        (c("AlertList"), field_names(&feedback::AlertList::default())),
        (
            c("WebhookRequest"),
            field_names(&feedback::WebhookRequest::default()),
        ),
        (c("Webhook"), field_names(&feedback::Webhook::default())),
        (
            c("WebhookList"),
            field_names(&feedback::WebhookList::default()),
        ),
        (c("Delivery"), field_names(&feedback::Delivery::default())),
        (
            c("DeliveryList"),
            field_names(&feedback::DeliveryList::default()),
        ),
        // Runs
        (c("RunUploadResult"), field_names(&upload)),
        (c("LabelMapping"), field_names(&mapping)),
        (c("RunSource"), field_names(&run.sources[0])),
        (c("Run"), field_names(&run)),
        (
            c("Run") + "/properties/segments/items",
            field_names(&run_segment),
        ),
        (c("Run") + "/properties/vs_live", field_names(&vs_live)),
        (
            response("~1api~1v1~1chains~1{chain}~1runs", "get", 200),
            field_names(&runs::RunList::default()),
        ),
        // Baselines
        (
            response("~1api~1v1~1chains~1{chain}~1baselines", "get", 200),
            field_names(&baselines::BaselineList::default()),
        ),
        (c("BaselineSummary"), field_names(&summary)),
        (
            c("RecomputeRequest"),
            field_names(&baselines::RecomputeRequest {
                run_id: "run-20261130-001".into(),
                topology_version: Some(1),
                from: some("production"),
                window: some("1h"),
            }),
        ),
        (
            c("Comment"),
            field_names(&baselines::Comment {
                comment: some("ok"),
            }),
        ),
        (
            c("ApproveResult"),
            field_names(&baselines::ApproveResult {
                baseline: document.clone(),
                revision: Some(1),
                superseded: None,
            }),
        ),
        (
            c("RejectResult"),
            field_names(&baselines::RejectResult { baseline: document }),
        ),
        (
            c("BaselineDiff"),
            field_names(&baselines::BaselineDiff {
                segments: vec![segment_diff],
                ..Default::default()
            }),
        ),
        (
            c("BaselineTree"),
            field_names(&baselines::BaselineTree {
                baseline_id: "bl-20261130-001".into(),
                capacity: budget_core::capacity::Capacity {
                    parents: Vec::new(),
                    segments: Vec::new(),
                },
            }),
        ),
        (
            c("Rollout"),
            field_names(&baselines::Rollout {
                baseline_id: String::new(),
                chain: String::new(),
                state: BaselineState::Approved,
                revision: Some(1),
                kind: some("rollback"),
                published_at: some("2026-11-30T10:00:00Z"),
                published_by: some("abe"),
                agents: 0,
                connected: 0,
                acked: 0,
                nacked: 0,
                canary: Some(canary.clone()),
            }),
        ),
        (c("Canary"), field_names(&canary)),
        (
            c("WhatIf"),
            field_names(&baselines::WhatIf {
                baseline_id: String::new(),
                run_id: String::new(),
                segment: String::new(),
                timeout_ms: 100,
                baseline_timeout_ms: 198,
                source: baselines::Source::Histogram,
                kill_rate: Some(0.25),
                kill_rate_bounds: None,
                killed: Some(2500),
                samples: Some(10_000),
                retries_on_deadline: true,
                attempts_per_call: Some(1.25),
            }),
        ),
        (
            c("SegmentDistribution"),
            field_names(&baselines::SegmentDistribution {
                baseline_id: String::new(),
                run_id: String::new(),
                segment: String::new(),
                source: baselines::Source::Percentiles,
                samples: None,
                timeout_ms: 100,
                p99_ms: Some(180.0),
                p999_ms: Some(420.0),
                kill_rate: None,
                kill_rate_bounds: Some([0.01, 0.5]),
                cdf: vec![[50.0, 0.75]],
            }),
        ),
        (c("CanaryHealth"), field_names(&canary.health[0])),
        (
            c("ApproveRequest"),
            field_names(&baselines::ApproveRequest {
                comment: some("ok"),
                rollout: Some(budget_core::canary::Rollout {
                    canary: budget_core::canary::Selector::Percent(10),
                    bake_s: 60,
                    auto: true,
                }),
            }),
        ),
        (
            c("RolloutRequest"),
            field_names(&budget_core::canary::Rollout {
                canary: budget_core::canary::Selector::Percent(10),
                bake_s: 60,
                auto: true,
            }),
        ),
        (
            c("ApprovalCheck"),
            field_names(&baselines::ApprovalCheck {
                newest_baseline: some("bl-20261130-002"),
                ..Default::default()
            }),
        ),
        (
            c("ApprovalBlocker"),
            field_names(&baselines::ApprovalBlocker::default()),
        ),
        // Chains
        (
            response("~1api~1v1~1chains", "get", 200),
            field_names(&chains::ChainList::default()),
        ),
        (
            c("ChainSummary"),
            field_names(&chains::ChainSummary::default()),
        ),
        (
            c("TopologyVersion"),
            field_names(&chains::TopologyVersion {
                chain: "checkout".into(),
                version: 1,
                sha256: String::new(),
                created_at: String::new(),
                created_by: String::new(),
                topology: serde_json::from_str(topology).unwrap(),
            }),
        ),
        (c("LiveChain"), field_names(&live)),
        (
            c("LiveBudgets"),
            field_names(&chains::LiveBudgets {
                live: live.clone(),
                canary: Some(chains::LiveCanary {
                    selector: canary.selector.clone(),
                    bake_ends_at: String::new(),
                    budgets: live.clone(),
                }),
            }),
        ),
        (
            c("LiveCanary"),
            field_names(&chains::LiveCanary {
                selector: canary.selector.clone(),
                bake_ends_at: String::new(),
                budgets: live.clone(),
            }),
        ),
        (
            c("RollbackRequest"),
            field_names(&chains::RollbackRequest::default()),
        ),
        (
            c("RollbackResult"),
            field_names(&chains::RollbackResult::default()),
        ),
        // Releases
        (
            c("ReleaseRequest"),
            field_names(&releases::ReleaseRequest::default()),
        ),
        (c("Release"), field_names(&release)),
        (
            c("ReleaseList"),
            field_names(&releases::ReleaseList::default()),
        ),
        // Tokens
        (c("Token"), field_names(&token)),
        (
            response("~1api~1v1~1tokens", "get", 200),
            field_names(&tokens::TokenList::default()),
        ),
        (
            c("TokenCreateRequest"),
            field_names(&tokens::TokenCreateRequest {
                owner: some("uma"),
                ..Default::default()
            }),
        ),
        (
            c("TokenCreated"),
            field_names(&tokens::TokenCreated {
                token: some("bgt_"),
                message: some("repeat"),
                ..Default::default()
            }),
        ),
        (
            c("TokenRotateRequest"),
            field_names(&tokens::TokenRotateRequest::default()),
        ),
        (
            response("~1api~1v1~1whoami", "get", 200),
            field_names(&tokens::WhoAmI::default()),
        ),
        (
            response("~1api~1v1~1whoami", "get", 200) + "/properties/may",
            field_names(&tokens::May::default()),
        ),
        // Agents
        (
            response("~1api~1v1~1agents", "get", 200),
            field_names(&agents::AgentList::default()),
        ),
        (c("Agent"), field_names(&agent)),
        // Audit
        (
            response("~1api~1v1~1audit", "get", 200),
            field_names(&audit::AuditLog::default()),
        ),
        (c("AuditEntry"), field_names(&entry)),
        // Archive
        (
            c("ArchiveStatus"),
            field_names(&archive::ArchiveStatus::default()),
        ),
        (c("ArchiveUpload"), field_names(&upload_item)),
        (
            c("ArchiveReport"),
            field_names(&archive::ArchiveReport::default()),
        ),
        (c("ArchiveProblem"), field_names(&problem)),
        // Errors
        (c("Error"), field_names(&errors::ErrorBody::default())),
        (
            c("Error") + "/properties/error",
            field_names(&errors::ErrorInfo::default()),
        ),
        (
            c("Violation"),
            field_names(&errors::Violation {
                pointer: some("/run_id"),
                segment: None,
                message: "required".into(),
            }),
        ),
    ];
    let mismatches: Vec<String> = checks
        .iter()
        .filter_map(|(pointer, fields)| {
            let documented = property_names(&doc, pointer);
            (documented != *fields).then(|| {
                format!(
                    "{pointer}: documented only {:?}, serialised only {:?}",
                    documented.difference(fields).collect::<Vec<_>>(),
                    fields.difference(&documented).collect::<Vec<_>>()
                )
            })
        })
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
