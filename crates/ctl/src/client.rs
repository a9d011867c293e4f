//! A small HTTP client for `/api/v1`: bearer token, `Idempotency-Key`, `--ca-cert`,
//! pagination, streamed uploads; every failure becomes a [`CtlError`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, Url};
use serde_json::Value;

use crate::error::CtlError;

impl CtlError {
    /// A request that got no answer: the server is unreachable (connect, timeout), or the
    /// request failed otherwise.
    fn from_reqwest(url: &Url, e: reqwest::Error) -> Self {
        // reqwest's Display is terse ("error sending request for url (…)"); the cause says why.
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            reason = s.to_string();
            source = s.source();
        }
        let origin = url.origin().ascii_serialization();
        if e.is_connect() {
            Self::Unreachable {
                url: origin,
                reason,
                setting: URL_SETTING,
            }
        } else if e.is_timeout() {
            Self::Unreachable {
                url: origin,
                reason: format!("no answer within {}s", TIMEOUT.as_secs()),
                setting: URL_SETTING,
            }
        } else {
            Self::Internal(format!("request to {url} failed: {reason}"))
        }
    }
}

/// How long one request may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Where the server's address comes from, for the hint when it cannot be reached.
const URL_SETTING: &str = "--url or BUDGETD_URL";
/// Large load-test files take longer than an API call.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(3600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Talks to one budgetd: base URL, bearer token, optional `Idempotency-Key` for writes.
#[derive(Debug, Clone)]
pub struct Client {
    base: Url,
    token: Option<String>,
    idempotency_key: Option<String>,
    ca_cert: Option<PathBuf>,
    http: reqwest::Client,
}

impl Client {
    /// `base` is the server's root (e.g. `http://127.0.0.1:8080`); requests go under `/api/v1`.
    /// `https://` servers are verified against the system's roots and, when given, the CA
    /// certificates of the PEM file `ca_cert`.
    pub fn new(
        base: Url,
        token: Option<String>,
        idempotency_key: Option<String>,
        ca_cert: Option<&Path>,
    ) -> Result<Self, CtlError> {
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("budgetctl/", env!("CARGO_PKG_VERSION")))
            .timeout(TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .use_rustls_tls();
        for cert in ca_certificates(ca_cert)? {
            builder = builder.add_root_certificate(cert);
        }
        let http = builder
            .build()
            .map_err(|e| CtlError::Internal(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            base,
            token: token.filter(|t| !t.is_empty()),
            idempotency_key,
            ca_cert: ca_cert.map(Path::to_owned),
            http,
        })
    }

    /// The `--ca-cert` file, for other connections to the same server (gRPC).
    pub fn ca_cert(&self) -> Option<&Path> {
        self.ca_cert.as_deref()
    }

    /// The server's root URL.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// The same server with another token.
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            token: Some(token.to_owned()),
            idempotency_key: None,
            ..self.clone()
        }
    }

    /// `GET {base}/{path}` outside the API (e.g. `metrics`), as text.
    pub async fn get_text(&self, path: &str) -> Result<String, CtlError> {
        let url = self
            .base
            .join(path)
            .map_err(|e| CtlError::Input(format!("bad path {path}: {e}")))?;
        let resp = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| CtlError::from_reqwest(&url, e))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .map_err(|e| CtlError::from_reqwest(&url, e))?;
        if !(200..300).contains(&status) {
            return Err(CtlError::from_response(status, &text));
        }
        Ok(text)
    }

    /// Whether a token will be sent.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// `{base}/api/v1/{segments…}`, each segment percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        api_url(&self.base, segments)
    }

    pub async fn get(&self, url: Url) -> Result<Value, CtlError> {
        self.send(Method::GET, url, None).await
    }

    /// GET a paginated list, following `next_cursor` page after page: one answer with every
    /// item of the array `field` (and no `next_cursor`).
    pub async fn get_all(&self, url: Url, field: &str) -> Result<Value, CtlError> {
        let mut first = self.get(url.clone()).await?;
        let mut cursor = first
            .get("next_cursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        while let Some(c) = cursor {
            let mut next = url.clone();
            next.query_pairs_mut().append_pair("cursor", &c);
            let mut page = self.get(next).await?;
            if let (Some(all), Some(more)) = (
                first.get_mut(field).and_then(Value::as_array_mut),
                page.get_mut(field).and_then(Value::as_array_mut),
            ) {
                all.append(more);
            }
            cursor = page
                .get("next_cursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if let Some(obj) = first.as_object_mut() {
            obj.remove("next_cursor");
        }
        Ok(first)
    }

    /// PUT a JSON body (sent as is).
    pub async fn put(&self, url: Url, body: Vec<u8>) -> Result<Value, CtlError> {
        self.send(Method::PUT, url, Some(body)).await
    }

    /// POST a JSON body (sent as is), or nothing.
    pub async fn post(&self, url: Url, body: Option<Vec<u8>>) -> Result<Value, CtlError> {
        self.send(Method::POST, url, body).await
    }

    pub async fn delete(&self, url: Url) -> Result<Value, CtlError> {
        self.send(Method::DELETE, url, None).await
    }

    /// POST a streamed body with its content type (large uploads).
    pub async fn post_body(
        &self,
        url: Url,
        body: reqwest::Body,
        content_type: &str,
    ) -> Result<Value, CtlError> {
        let req = self
            .request(Method::POST, url.clone())
            .timeout(UPLOAD_TIMEOUT)
            .header(CONTENT_TYPE, content_type)
            .body(body);
        self.finish(req, &url).await
    }

    /// POST a multipart form (several load-tool files).
    pub async fn post_form(
        &self,
        url: Url,
        form: reqwest::multipart::Form,
    ) -> Result<Value, CtlError> {
        let req = self
            .request(Method::POST, url.clone())
            .timeout(UPLOAD_TIMEOUT)
            .multipart(form);
        self.finish(req, &url).await
    }

    fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let write = method != Method::GET;
        let mut req = self.http.request(method, url);
        if let Some(token) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        if let (true, Some(key)) = (write, &self.idempotency_key) {
            req = req.header("Idempotency-Key", key);
        }
        req
    }

    /// Sends one request; a success answers its JSON body (`null` when empty).
    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
    ) -> Result<Value, CtlError> {
        let mut req = self.request(method, url.clone());
        if let Some(body) = body {
            req = req.header(CONTENT_TYPE, "application/json").body(body);
        }
        self.finish(req, &url).await
    }

    async fn finish(&self, req: reqwest::RequestBuilder, url: &Url) -> Result<Value, CtlError> {
        let resp = req
            .send()
            .await
            .map_err(|e| CtlError::from_reqwest(url, e))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .map_err(|e| CtlError::from_reqwest(url, e))?;
        if !(200..300).contains(&status) {
            return Err(CtlError::from_response(status, &text));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| {
            let snippet: String = text.chars().take(200).collect();
            CtlError::Internal(format!(
                "the server answered {status} with a body that is not JSON ({e}): {snippet}"
            ))
        })
    }
}

/// The certificates of a `--ca-cert` PEM file (none without one).
fn ca_certificates(path: Option<&Path>) -> Result<Vec<reqwest::Certificate>, CtlError> {
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    let pem = std::fs::read(path)
        .map_err(|e| CtlError::Input(format!("cannot read --ca-cert {}: {e}", path.display())))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        CtlError::Input(format!(
            "--ca-cert {} is not a PEM certificate file: {e}",
            path.display()
        ))
    })?;
    if certs.is_empty() {
        return Err(CtlError::Input(format!(
            "--ca-cert {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// `{base}/api/v1/{segments…}`; keeps a path prefix of `base` (e.g. behind a proxy).
pub fn api_url(base: &Url, segments: &[&str]) -> Url {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(["api", "v1"]).extend(segments);
    }
    url
}

/// Parses `--url`: an `http://` or `https://` URL with a host.
pub fn parse_base_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| format!("{raw:?} is not a URL: {e}"))?;
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(url),
        "http" | "https" => Err(format!("{raw:?} has no host")),
        other => Err(format!(
            "unsupported scheme {other:?}: use http://HOST:PORT or https://HOST:PORT"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_built_under_api_v1_and_encoded() {
        let base = parse_base_url("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            api_url(&base, &["chains"]).as_str(),
            "http://127.0.0.1:8080/api/v1/chains"
        );
        let prefixed = parse_base_url("http://lb.local/budgetd/").unwrap();
        assert_eq!(
            api_url(&prefixed, &["tokens", "a/b?c"]).as_str(),
            "http://lb.local/budgetd/api/v1/tokens/a%2Fb%3Fc"
        );
        assert_eq!(
            parse_base_url("https://budgetd.internal").unwrap().as_str(),
            "https://budgetd.internal/"
        );
        assert!(parse_base_url("ftp://x").is_err());
        assert!(parse_base_url("localhost:8080").is_err());
        assert!(parse_base_url("not a url").is_err());
    }
}
