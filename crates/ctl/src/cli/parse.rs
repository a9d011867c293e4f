//! clap value parsers for flags whose values are checked before any request is sent.

use reqwest::Url;

/// Parses `--date`: a calendar date as `YYYY-MM-DD`, the form archive keys use.
pub(super) fn parse_date(raw: &str) -> Result<String, String> {
    match chrono::NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        Ok(_) if raw.len() == 10 => Ok(raw.to_owned()),
        _ => Err(format!("{raw:?} is not a date as YYYY-MM-DD")),
    }
}

/// Parses a webhook's URL: `http://` or `https://` with a host, at most 2048 characters.
pub(super) fn parse_hook_url(raw: &str) -> Result<String, String> {
    let url = raw.trim();
    if url.len() > 2048 {
        return Err("a webhook URL has at most 2048 characters".into());
    }
    match Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(url.to_owned()),
        Ok(u) if matches!(u.scheme(), "http" | "https") => Err(format!("{url:?} has no host")),
        Ok(u) => Err(format!(
            "unsupported scheme {:?}: webhooks are http:// or https:// URLs",
            u.scheme()
        )),
        Err(e) => Err(format!(
            "{url:?} is not a URL ({e}); e.g. https://hooks.example.com/budgetd"
        )),
    }
}

/// Parses `--secret`: 16 to 512 bytes (it keys the signature).
pub(super) fn parse_secret(raw: &str) -> Result<String, String> {
    match raw.len() {
        16..=512 => Ok(raw.to_owned()),
        n => Err(format!(
            "the secret is {n} bytes; it keys the HMAC-SHA256 signature and must be 16 to 512 \
             bytes, e.g. $(openssl rand -hex 32)"
        )),
    }
}
