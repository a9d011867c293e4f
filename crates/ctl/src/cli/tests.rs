//! The command line parses as documented: global flags anywhere, usage errors caught locally
//! (exit 2), and every exit code in the help texts.

use clap::{CommandFactory, Parser};

use super::*;
use crate::Exit;

#[test]
fn the_command_line_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn global_flags_work_after_the_subcommand() {
    let cli = Cli::try_parse_from([
        "budgetctl",
        "baseline",
        "approve",
        "bl-20261130-001",
        "--comment",
        "ok",
        "--json",
        "--url",
        "http://10.0.0.1:9000",
        "--idempotency-key",
        "k1",
    ])
    .unwrap();
    assert!(cli.global.json);
    assert_eq!(cli.global.url.as_str(), "http://10.0.0.1:9000/");
    assert_eq!(cli.global.idempotency_key.as_deref(), Some("k1"));
    assert!(
        matches!(cli.command, Command::Baseline(BaselineCommand::Approve { ref comment, .. }) if comment.as_deref() == Some("ok"))
    );
}

#[test]
fn usage_errors_are_caught_locally() {
    for args in [
        &["budgetctl", "baseline", "reject", "bl-1"][..],
        &[
            "budgetctl",
            "baseline",
            "list",
            "--chain",
            "c",
            "--state",
            "live",
        ],
        &[
            "budgetctl",
            "token",
            "create",
            "--role",
            "root",
            "--name",
            "x",
        ],
        &["budgetctl", "audit", "--limit", "0"],
        &[
            "budgetctl",
            "run",
            "upload",
            "--chain",
            "c",
            "run.json",
            "--quiet",
            "--json",
        ],
        &["budgetctl", "release", "list", "--chain", "c"],
        &["budgetctl", "--url", "ftp://x", "chains"],
    ] {
        let err = Cli::try_parse_from(args).unwrap_err();
        assert_eq!(err.exit_code(), Exit::Usage as i32, "{args:?}");
    }
}

#[test]
fn release_and_archive_commands_parse() {
    let cli = Cli::try_parse_from([
        "budgetctl",
        "release",
        "record",
        "--service",
        "order",
        "--version",
        "1.4.2",
        "--baseline",
        "bl-20261130-001",
        "--ticket",
        "CHG-1",
    ])
    .unwrap();
    assert!(matches!(
        cli.command,
        Command::Release(ReleaseCommand::Record { ref release_version, ref baseline_id, .. })
            if release_version == "1.4.2" && baseline_id == "bl-20261130-001"
    ));
    let cli = Cli::try_parse_from([
        "budgetctl",
        "release",
        "check",
        "--baseline",
        "bl-1",
        "--chain",
        "checkout",
        "--allow-superseded",
    ])
    .unwrap();
    assert!(matches!(
        cli.command,
        Command::Release(ReleaseCommand::Check { ref chain, allow_superseded: true, .. })
            if chain.as_deref() == Some("checkout")
    ));
    let cli =
        Cli::try_parse_from(["budgetctl", "archive", "verify", "--date", "2026-11-30"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Archive(ArchiveCommand::Verify { ref date }) if date.as_deref() == Some("2026-11-30")
    ));
    for args in [
        &["budgetctl", "release", "check"][..],
        &["budgetctl", "release", "record", "--service", "s"],
        &["budgetctl", "release", "list", "--limit", "0"],
        &["budgetctl", "archive", "verify", "--date", "2026-13-01"],
        &["budgetctl", "archive", "verify", "--date", "2026-1-1"],
        &["budgetctl", "archive", "verify", "--date", "yesterday"],
    ] {
        let err = Cli::try_parse_from(args).unwrap_err();
        assert_eq!(err.exit_code(), Exit::Usage as i32, "{args:?}");
    }
}

#[test]
fn subcommand_help_documents_their_exit_codes() {
    let mut cli = Cli::command();
    let release = cli.find_subcommand_mut("release").unwrap();
    let check = release
        .find_subcommand_mut("check")
        .unwrap()
        .render_long_help()
        .to_string();
    for line in ["\n  0  ", "\n  3  ", "\n  5  the baseline is superseded"] {
        assert!(check.contains(line), "{line:?} missing from:\n{check}");
    }
    let mut cli = Cli::command();
    let verify = cli
        .find_subcommand_mut("archive")
        .unwrap()
        .find_subcommand_mut("verify")
        .unwrap()
        .render_long_help()
        .to_string();
    for line in ["\n  0  ", "\n  5  at least one object"] {
        assert!(verify.contains(line), "{line:?} missing from:\n{verify}");
    }
    let top = Cli::command().render_long_help().to_string();
    assert!(top.contains("`release check` of a baseline"), "{top}");
    assert!(top.contains("`archive verify` finding"), "{top}");
}

#[test]
fn help_documents_every_exit_code() {
    let help = Cli::command().render_long_help().to_string();
    for code in 0..=7 {
        assert!(
            help.contains(&format!("\n  {code}  ")),
            "exit code {code} missing from --help"
        );
    }
}

#[test]
fn feedback_commands_parse() {
    let cli = Cli::try_parse_from(["budgetctl", "production", "--chain", "checkout"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Production { ref chain, ref window } if chain == "checkout" && window == "5m"
    ));
    let cli =
        Cli::try_parse_from(["budgetctl", "production", "--chain", "c", "--window", "1h"]).unwrap();
    assert!(matches!(cli.command, Command::Production { ref window, .. } if window == "1h"));
    let cli = Cli::try_parse_from(["budgetctl", "alerts", "--firing", "--json"]).unwrap();
    assert!(matches!(cli.command, Command::Alerts { firing: true }));

    let secret = "0123456789abcdef";
    let cli = Cli::try_parse_from([
        "budgetctl",
        "--url",
        "http://budgetd.internal:8080",
        "webhook",
        "add",
        "https://hooks.example.com/budgetd",
        "--secret",
        secret,
        "--event",
        "alert.firing",
        "--event",
        "agent.nack",
    ])
    .unwrap();
    // the webhook's URL is the argument; --url stays budgetd's address
    assert_eq!(cli.global.url.as_str(), "http://budgetd.internal:8080/");
    assert!(matches!(
        cli.command,
        Command::Webhook(WebhookCommand::Add { ref url, ref events, .. })
            if url == "https://hooks.example.com/budgetd" && events == &["alert.firing", "agent.nack"]
    ));
    let cli = Cli::try_parse_from(["budgetctl", "webhook", "deliveries", "wh-1"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Webhook(WebhookCommand::Deliveries { ref id }) if id == "wh-1"
    ));

    for args in [
        &["budgetctl", "production"][..],
        &["budgetctl", "production", "--chain", "c", "--window", "2m"],
        &["budgetctl", "alerts", "--state", "firing"],
        // --url is budgetd's address: the webhook's URL is missing
        &[
            "budgetctl",
            "webhook",
            "add",
            "--url",
            "https://hooks.example.com/x",
            "--secret",
            secret,
        ],
        &[
            "budgetctl",
            "webhook",
            "add",
            "ftp://hooks.example.com/x",
            "--secret",
            secret,
        ],
        &[
            "budgetctl",
            "webhook",
            "add",
            "hooks.example.com/x",
            "--secret",
            secret,
        ],
        &[
            "budgetctl",
            "webhook",
            "add",
            "https://h.example/x",
            "--secret",
            "short",
        ],
        &[
            "budgetctl",
            "webhook",
            "add",
            "https://h.example/x",
            "--secret",
            secret,
            "--event",
            "alert.fired",
        ],
        &["budgetctl", "webhook", "rm"],
    ] {
        let err = Cli::try_parse_from(args).unwrap_err();
        assert_eq!(err.exit_code(), Exit::Usage as i32, "{args:?}");
    }
}

#[test]
fn usage_errors_name_the_flag_and_the_fix() {
    let err = Cli::try_parse_from([
        "budgetctl",
        "webhook",
        "add",
        "https://h.example/x",
        "--secret",
        "short",
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("--secret"), "{err}");
    assert!(err.contains("16 to 512 bytes"), "{err}");
    let err = Cli::try_parse_from(["budgetctl", "webhook", "add", "ftp://h.example/x"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("http:// or https://"), "{err}");
    let err = Cli::try_parse_from(["budgetctl", "production", "--chain", "c", "--window", "2m"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("[possible values: 1m, 5m, 1h]"), "{err}");
}

#[test]
fn feedback_help_has_an_example_each() {
    for path in [
        &["production"][..],
        &["alerts"],
        &["webhook", "add"],
        &["webhook", "list"],
        &["webhook", "rm"],
        &["webhook", "deliveries"],
    ] {
        let mut cmd = Cli::command();
        let mut sub = &mut cmd;
        for name in path {
            sub = sub.find_subcommand_mut(name).unwrap();
        }
        let help = sub.render_long_help().to_string();
        assert!(
            help.contains(&format!("Example:\n  budgetctl {}", path.join(" ")))
                || help.contains("Example:\n  export BUDGETD_WEBHOOK_SECRET"),
            "no example in `{}` --help:\n{help}",
            path.join(" ")
        );
    }
}

#[test]
fn a_baseline_is_an_id_or_an_alias_with_its_chain() {
    let cli = Cli::try_parse_from([
        "budgetctl",
        "baseline",
        "approve",
        "latest-draft",
        "--chain",
        "checkout",
    ])
    .unwrap();
    match cli.command {
        Command::Baseline(BaselineCommand::Approve { baseline, .. }) => {
            assert_eq!(baseline.id, "latest-draft");
            assert_eq!(baseline.chain.as_deref(), Some("checkout"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn canary_flags_parse_and_bad_ones_are_usage_errors() {
    use budget_core::canary::Selector;
    let parse = |extra: &[&str]| {
        let mut args = vec!["budgetctl", "baseline", "approve", "bl-20261130-002"];
        args.extend_from_slice(extra);
        Cli::try_parse_from(args)
    };
    let approve = |extra: &[&str]| match parse(extra).unwrap().command {
        Command::Baseline(BaselineCommand::Approve {
            canary,
            bake,
            manual,
            ..
        }) => (canary, bake, manual),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        approve(&["--canary", "10%", "--bake", "90s"]),
        (Some(Selector::Percent(10)), 90, false)
    );
    let labels = Selector::Labels(
        [("tier", "web"), ("zone", "a")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
    );
    assert_eq!(
        approve(&["--canary", "zone=a,tier=web", "--manual"]),
        (Some(labels), 300, true)
    );
    assert_eq!(approve(&[]), (None, 300, false));
    for bad in [
        &["--canary", "0%"][..],
        &["--canary", "100%"],
        &["--canary", "zone"],
        &["--canary", "zone=a,zone=b"],
        &["--canary", "10%", "--bake", "0s"],
        &["--canary", "10%", "--bake", "1500ms"],
        &["--canary", "10%", "--bake", "8d"],
        &["--manual"],
        &["--bake", "5m"],
    ] {
        let err = parse(bad).unwrap_err();
        assert_eq!(err.exit_code(), Exit::Usage as i32, "{bad:?}");
    }
    for verb in ["status", "promote", "abort"] {
        let cli = Cli::try_parse_from([
            "budgetctl",
            "rollout",
            verb,
            "current",
            "--chain",
            "checkout",
        ]);
        assert!(cli.is_ok(), "rollout {verb}: {cli:?}");
    }
}
