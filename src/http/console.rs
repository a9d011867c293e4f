//! The web console: static files embedded in the binary, served on the HTTP listener. It talks
//! to the public API only (`/api/v1`, with the token the user signs in with), so the API's
//! authorisation applies to everything it does.
//!
//! The script is a set of ES modules: `index.html` loads `/assets/app.js` with
//! `<script type="module">`, which imports the rest from `/assets/js/` (same origin, so the CSP's
//! `script-src 'self'` covers them).

use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::state::AppState;

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

const INDEX: &str = include_str!("../../web/index.html");

/// One embedded file under `/assets/`: its path below `web/`, content type and content.
macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        (
            $path,
            $content_type,
            include_str!(concat!("../../web/", $path)),
        )
    };
}

/// Every file served under `/assets/` (a test checks that nothing under `web/` is missing).
const ASSETS: &[(&str, &str, &str)] = &[
    asset!("style.css", CSS),
    asset!("app.js", JS),
    asset!("js/api.js", JS),
    asset!("js/cdf.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/drift.js", JS),
    asset!("js/format.js", JS),
    asset!("js/router.js", JS),
    asset!("js/tree.js", JS),
    asset!("js/ui.js", JS),
    asset!("js/pages/agents.js", JS),
    asset!("js/pages/alerts.js", JS),
    asset!("js/pages/baseline.js", JS),
    asset!("js/pages/chains.js", JS),
    asset!("js/pages/history.js", JS),
    asset!("js/pages/production.js", JS),
    asset!("js/pages/runs.js", JS),
    asset!("js/pages/signin.js", JS),
];

/// Everything from this origin only: no CDN, no inline script.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "no-cache"),
            (CONTENT_SECURITY_POLICY, CSP),
        ],
        body,
    )
        .into_response()
}

pub fn router() -> Router<AppState> {
    let pages = Router::new()
        .route("/", get(|| async { file(HTML, INDEX) }))
        .route("/console", get(|| async { file(HTML, INDEX) }));
    ASSETS
        .iter()
        .fold(pages, |router, &(path, content_type, body)| {
            router.route(
                &format!("/assets/{path}"),
                get(move || async move { file(content_type, body) }),
            )
        })
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::ASSETS;

    fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files_under(&path, out);
            } else {
                out.push(path);
            }
        }
    }

    /// A module added under `web/` but not embedded would fail only in the browser.
    #[test]
    fn every_web_file_is_embedded() {
        let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("web");
        let mut files = Vec::new();
        files_under(&web, &mut files);
        let mut on_disk: Vec<String> = files
            .iter()
            .map(|p| {
                p.strip_prefix(&web)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/")
            })
            .filter(|p| p != "index.html")
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|(p, _, _)| (*p).to_owned()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }
}
