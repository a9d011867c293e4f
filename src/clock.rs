//! The wall clock, read in one place. Core rules never read it: the service passes the time
//! in, as stored and shown.

/// Now, as stored and shown: RFC 3339 UTC with milliseconds.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `unix_ms` as stored and shown (RFC 3339 UTC with milliseconds).
pub fn rfc3339_ms(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Now minus `d`, as stored and shown.
pub fn before(d: std::time::Duration) -> String {
    rfc3339_ms(now_ms().saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
}

/// Now plus `d`, as stored and shown.
pub fn after(d: std::time::Duration) -> String {
    rfc3339_ms(now_ms().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
}
