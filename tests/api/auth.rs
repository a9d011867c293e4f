//! Tokens and roles.

use budget_core::example::CHECKOUT_TOPOLOGY;
use reqwest::Method;
use serde_json::json;

use crate::helpers::{TestApp, ADMIN_TOKEN};

async fn tokens_and_roles(app: &TestApp) {
    // No token, a bad token: 401 with a challenge.
    let none = app
        .raw(app.http.get(app.url("/api/v1/chains")))
        .await
        .expect(401);
    assert_eq!(none.code(), "unauthorized");
    assert!(none.headers.contains_key("www-authenticate"));
    app.get("/api/v1/chains", "bgt_nope").await.expect(401);
    // Found by attacking the server: a value that is not `Bearer <token>` (a tab after the
    // word, bytes that are not visible ASCII) was answered "missing bearer token".
    for value in [&b"Bearer\tbgt_x"[..], b"Bearer bgt_x\xff", b"Basic YTpi"] {
        let value = reqwest::header::HeaderValue::from_bytes(value).unwrap();
        let answer = app
            .raw(
                app.http
                    .get(app.url("/api/v1/chains"))
                    .header("authorization", value.clone()),
            )
            .await
            .expect(401);
        assert_eq!(
            answer.json()["error"]["message"],
            budgetd::auth::MALFORMED,
            "{value:?}"
        );
    }

    let reader = app.token("reader", "rita").await;
    assert!(reader.starts_with("bgt_"));
    let me = app.get("/api/v1/whoami", &reader).await.expect(200).json();
    assert_eq!(
        (me["name"].as_str(), me["role"].as_str()),
        (Some("rita"), Some("reader"))
    );
    assert_eq!(
        me["may"],
        json!({"read": true, "upload": false, "approve": false, "admin": false})
    );
    let me = app
        .get("/api/v1/whoami", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(
        me["may"],
        json!({"read": true, "upload": true, "approve": true, "admin": true})
    );
    app.get("/api/v1/chains", &reader).await.expect(200);
    // A reader may not write, nor manage tokens.
    assert_eq!(
        app.apply_topology(&reader, "checkout", CHECKOUT_TOPOLOGY)
            .await
            .expect(403)
            .code(),
        "forbidden"
    );
    app.post(
        "/api/v1/tokens",
        &reader,
        json!({"role": "admin", "name": "evil"}),
    )
    .await
    .expect(403);
    app.get("/api/v1/tokens", &reader).await.expect(403);

    // Duplicate names, bad roles and names.
    app.post(
        "/api/v1/tokens",
        ADMIN_TOKEN,
        json!({"role": "reader", "name": "rita"}),
    )
    .await
    .expect(409);
    app.post(
        "/api/v1/tokens",
        ADMIN_TOKEN,
        json!({"role": "king", "name": "x"}),
    )
    .await
    .expect(422);
    app.post(
        "/api/v1/tokens",
        ADMIN_TOKEN,
        json!({"role": "reader", "name": "has space"}),
    )
    .await
    .expect(422);

    // Listed without secrets, stored hashed, revocable.
    let list = app.get("/api/v1/tokens", ADMIN_TOKEN).await.expect(200);
    assert!(!String::from_utf8_lossy(&list.body).contains(&reader));
    let names: Vec<String> = list.json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["admin", "rita"]);
    app.send(Method::DELETE, "/api/v1/tokens/rita", ADMIN_TOKEN, None)
        .await
        .expect(204);
    app.get("/api/v1/chains", &reader).await.expect(401);
    app.send(Method::DELETE, "/api/v1/tokens/rita", ADMIN_TOKEN, None)
        .await
        .expect(404);

    // Public endpoints need no token.
    let schema = app
        .raw(app.http.get(app.url("/schemas/topology.json")))
        .await
        .expect(200);
    assert_eq!(schema.json()["title"], "budgetd chain topology");
    app.raw(app.http.get(app.url("/schemas/nope.json")))
        .await
        .expect(404);
    app.raw(app.http.get(app.url("/healthz"))).await.expect(200);
    assert_eq!(
        app.raw(app.http.get(app.url("/readyz")))
            .await
            .expect(200)
            .json()["status"],
        "ready"
    );
    let metrics = app.raw(app.http.get(app.url("/metrics"))).await.expect(200);
    assert!(String::from_utf8_lossy(&metrics.body).contains("budgetd_http_requests_total{"));
}

crate::on_both_backends!(tokens_and_roles);
