//! The wall clock, read in one place. Core rules never read it: the service passes the time
//! in, as stored and shown.

/// Now, as stored and shown: RFC 3339 UTC with milliseconds.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
