//! What the benchmark examples share: one JSON call to budgetd's HTTP API that must succeed.

use serde_json::Value;

/// `method url` with a bearer `token` and a JSON `body`; the answer's JSON. Panics (the
/// benchmark cannot go on) when budgetd does not answer or answers an error.
pub async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Value,
) -> Value {
    let answer = http
        .request(method, url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("budgetd answers");
    let status = answer.status();
    let value: Value = answer.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {value}");
    value
}
