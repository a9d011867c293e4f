use super::*;

/// Found by attacking the server: a window's reason quoted what the agent sent whole, and
/// it is logged, so a 4 MiB chain name made a 21 MB log line.
#[test]
fn a_skipped_windows_reason_quotes_at_most_64_bytes_of_what_the_agent_sent() {
    let hub = crate::publish::HubState::default();
    let w = ReportWindow {
        chain: "\u{1}".repeat(1 << 20),
        ..ReportWindow::default()
    };
    let reason = check_window(&hub, w, 0, &mut 0).unwrap_err();
    assert_eq!(
        reason,
        format!(
            "chain {:?}… (1048576 bytes) has no published budgets",
            "\u{1}".repeat(64)
        )
    );
    assert!(reason.len() < 500, "{} bytes", reason.len());
    // Short names are quoted whole; a cut never splits a character.
    assert_eq!(echo("checkout"), "\"checkout\"");
    assert_eq!(
        echo(&"é".repeat(40)),
        format!("{:?}… (80 bytes)", "é".repeat(32))
    );
    // "é" is two bytes: the first 64 bytes of "xéxé…" end with an "x".
    assert_eq!(
        echo(&"xé".repeat(22)),
        format!("{:?}… (66 bytes)", "xé".repeat(21) + "x")
    );
}
