//! What a command writes: answers on stdout (a table, or the JSON with `--json`), failures on
//! stderr (the server's message in budgetctl's words and its code, each violation, finding or
//! detail on a line, a hint).

use std::io::Write;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::CtlError;
use crate::render;

/// Prints a failure to stderr: the server's message and code, then each violation or finding.
pub(crate) fn report(e: &CtlError, json: bool, has_token: bool) {
    let mut err = std::io::stderr().lock();
    match (json, e) {
        (true, CtlError::Api { body, .. }) => {
            let _ = writeln!(err, "{}", pretty(body));
            return;
        }
        (
            true,
            CtlError::Refused {
                code,
                message,
                details,
                ..
            },
        ) => {
            let body = json!({"error": {"code": code, "message": message, "details": details}});
            let _ = writeln!(err, "{}", pretty(&body));
            return;
        }
        _ => {}
    }
    let _ = match e {
        CtlError::Api { code, message, .. } => {
            writeln!(err, "error: {} ({code})", render::error_message(message))
        }
        other => writeln!(err, "error: {other}"),
    };
    match e {
        CtlError::Api { details, .. } => {
            for line in render::error_details(details) {
                let _ = writeln!(err, "{line}");
            }
        }
        CtlError::Unreachable { reason, .. } if reason.contains("certificate") => {
            let _ = writeln!(
                err,
                "hint: trust the CA of budgetd's certificate with --ca-cert FILE or BUDGETD_CA_CERT"
            );
        }
        CtlError::Unreachable { setting, .. } => {
            let _ = writeln!(err, "hint: is budgetd running there? set {setting}");
        }
        _ => {}
    }
    if let (CtlError::Api { status: 401, .. }, false) = (e, has_token) {
        let _ = writeln!(err, "hint: pass a token with --token or BUDGETD_TOKEN");
    }
}

/// A JSON answer as `--json` prints it (pretty-printed).
pub(crate) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// Writes to stdout, ignoring a closed pipe (e.g. `budgetctl audit | head`).
pub(crate) fn print(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Prints an answer: as JSON with `--json`, else read as `T` (one of `budget_api`'s types)
/// and shown through `view`. An answer that is not a `T` (a much older or newer server) is
/// printed as JSON.
pub(crate) fn show<T: DeserializeOwned>(json: bool, value: &Value, view: fn(&T) -> String) {
    if json {
        if !value.is_null() {
            print(&pretty(value));
        }
        return;
    }
    print(&render_as(value, view));
}

/// An answer read as `T` and shown through `view`; as JSON when it is not a `T`.
pub(crate) fn render_as<T: DeserializeOwned>(value: &Value, view: fn(&T) -> String) -> String {
    match T::deserialize(value) {
        Ok(typed) => view(&typed),
        Err(_) => pretty(value),
    }
}
