//! Configuration errors in a user's words.

use std::collections::BTreeMap;

/// Figment's errors in the words of a budgetd user: the setting's key and where its value came
/// from (the environment variable, or the file), what was found and what is expected. Figment's
/// own text names its profile and the Rust type of an internal layer instead.
pub(super) fn describe(errors: figment::Error, from_env: &BTreeMap<String, String>) -> String {
    use figment::error::Kind;
    let described: Vec<String> = errors
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let origin = match (
                from_env.get(&key),
                e.metadata.as_ref().and_then(|m| m.source.as_ref()),
            ) {
                (Some(var), _) => format!("{var} ({key})"),
                (None, Some(figment::Source::File(file))) if key.is_empty() => {
                    format!("{}", file.display())
                }
                (None, Some(figment::Source::File(file))) => format!("{key} in {}", file.display()),
                _ => key,
            };
            let problem = match &e.kind {
                Kind::InvalidType(found, expected) | Kind::InvalidValue(found, expected) => {
                    format!("found {found}, expected {}", in_words(expected))
                }
                Kind::UnknownField(_, known) => {
                    format!("not a setting; the settings here are {}", known.join(", "))
                }
                Kind::UnknownVariant(found, known) => {
                    format!("found {found:?}, expected one of {}", known.join(", "))
                }
                Kind::Message(m) if m.contains("socket address") => {
                    format!("{m}; expected an address and port such as 127.0.0.1:8080")
                }
                other => other.to_string(),
            };
            format!("{origin}: {problem}")
        })
        .collect();
    described.join("; ")
}

/// A Rust type named by serde's "expected …", as a user would say it.
fn in_words(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        "socket address" => "an address and port such as 127.0.0.1:8080".into(),
        other if other.starts_with("struct ") => {
            "a table of settings (its keys: [section] in the file, BUDGETD_SECTION__KEY in the \
             environment)"
                .into()
        }
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::tests::env;
    use crate::config::Settings;

    /// A bad value names the variable or file it came from, the setting, what was found and
    /// what is expected, in a user's words: not figment's profile, nor a Rust type.
    #[test]
    fn bad_values_name_where_they_came_from() {
        let err = |file: Option<&Path>, vars: &[(&str, &str)]| {
            format!("{:#}", Settings::load(file, &env(vars)).unwrap_err())
        };
        let e = err(None, &[("BUDGETD_AGENTS__REPLICA_SILENCE_SECS", "abc")]);
        assert_eq!(
            e,
            "invalid configuration: BUDGETD_AGENTS__REPLICA_SILENCE_SECS \
             (agents.replica_silence_secs): found string \"abc\", expected a whole number, 0 or more"
        );
        let e = err(
            None,
            &[("BUDGETD_APPROVAL__REQUIRE_DISTINCT_APPROVER", "maybe")],
        );
        assert!(
            e.ends_with(
                "BUDGETD_APPROVAL__REQUIRE_DISTINCT_APPROVER (approval.require_distinct_approver): \
                 found string \"maybe\", expected true or false"
            ),
            "{e}"
        );
        let e = err(None, &[("BUDGETD_HTTP", "nowhere")]);
        assert!(
            e.ends_with(
                "BUDGETD_HTTP (http): invalid socket address syntax; expected an address and \
                 port such as 127.0.0.1:8080"
            ),
            "{e}"
        );
        let e = err(None, &[("BUDGETD_AGENTS", "5")]);
        assert!(
            e.contains(
                "BUDGETD_AGENTS (agents): found unsigned int `5`, expected a table of settings"
            ),
            "{e}"
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("budgetd.toml");
        std::fs::write(&file, "[agents]\nreplica_silence_secs = -5\n").unwrap();
        let e = err(Some(&file), &[]);
        assert!(
            e.ends_with(&format!(
                "agents.replica_silence_secs in {}: found signed int `-5`, \
                 expected a whole number, 0 or more",
                file.display()
            )),
            "{e}"
        );
        std::fs::write(&file, "[agents]\nnope = 1\n").unwrap();
        let e = err(Some(&file), &[]);
        assert!(
            e.contains(&format!(
                "agents.nope in {}: not a setting; the settings here are max_streams_per_token, ",
                file.display()
            )),
            "{e}"
        );
        for e in [e, err(None, &[("BUDGETD_GRPC", "x")])] {
            for internal in ["default.", "src/config.rs", "BTreeMap", "figment"] {
                assert!(!e.contains(internal), "{internal:?} in {e}");
            }
        }
    }
}
