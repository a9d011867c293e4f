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

/// Parses `--canary`: `10%` (agents whose id hashes below 10 of 100) or `zone=a[,k=v…]`
/// (agents declaring every one of these labels).
pub(super) fn parse_canary(raw: &str) -> Result<budget_core::canary::Selector, String> {
    use budget_core::canary::Selector;
    let raw = raw.trim();
    if let Some(pct) = raw.strip_suffix('%') {
        return match pct.trim().parse::<u8>() {
            Ok(p @ 1..=99) => Ok(Selector::Percent(p)),
            _ => Err(format!(
                "{raw:?}: a canary percent is 1% to 99% (100% is every agent: approve without --canary)"
            )),
        };
    }
    let mut labels = std::collections::BTreeMap::new();
    for pair in raw.split(',') {
        match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                if labels.insert(k.trim().to_owned(), v.trim().to_owned()).is_some() {
                    return Err(format!(
                        "{raw:?}: label {:?} twice; a canary selects agents holding every pair (one value per key)",
                        k.trim()
                    ));
                }
            }
            _ => {
                return Err(format!(
                    "{raw:?}: a canary is a percent (10%) or agents' labels (zone=a or zone=a,tier=web)"
                ))
            }
        }
    }
    Ok(Selector::Labels(labels))
}

/// Parses `whatif --timeout`: whole milliseconds (`100`) or a duration (`100ms`, `2s`), 1 ms
/// to an hour (the longest latency a run's histogram holds).
pub(super) fn parse_timeout(raw: &str) -> Result<u64, String> {
    let raw = raw.trim();
    let ms = match raw.parse::<u64>() {
        Ok(ms) => ms,
        Err(_) => {
            let d: budget_core::HumanDuration = raw
                .parse()
                .map_err(|e| format!("{raw:?}: {e} (e.g. 100 or 100ms)"))?;
            d.as_ms()
        }
    };
    if !(1..=3_600_000).contains(&ms) {
        return Err(format!("{raw:?}: a timeout is 1 ms to 1 hour"));
    }
    Ok(ms)
}

/// Parses `--bake`: a whole number of seconds, minutes, hours or days (`90s`, `5m`, `1h`).
pub(super) fn parse_bake(raw: &str) -> Result<u64, String> {
    let d: budget_core::HumanDuration = raw.trim().parse().map_err(|e| format!("{e}"))?;
    let secs = d.as_ms() / 1000;
    if d.as_ms() % 1000 != 0 || !(1..=budget_core::canary::MAX_BAKE_S).contains(&secs) {
        return Err(format!(
            "{raw:?}: a bake is whole seconds, 1s to 7d (e.g. 5m)"
        ));
    }
    Ok(secs)
}
