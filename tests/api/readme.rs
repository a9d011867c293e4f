//! The README's quickstart works when pasted: every `sh` block of its "Quickstart" section, taken
//! from README.md as written and run in order by one bash (`set -euo pipefail`: any failing
//! command fails the test), against a server built from this tree.
//!
//! What differs from a reader's terminal, and why: `budgetd` and `budgetctl` on `PATH` are the
//! binaries `cargo test` built from this tree, so the block's `cargo build --release` is a stub
//! that says so (a release build would take minutes); the blocks run in a scratch directory
//! holding `schemas/` (so no binary of an older build under `target/release` is picked up);
//! `BUDGETD_URL`, `BUDGETD_HTTP` and `BUDGETD_GRPC` name free loopback ports (the block keeps a
//! `BUDGETD_URL` it is given, and `budgetd serve` reads the other two), so the test never meets a
//! server a developer runs on 8080; `TMPDIR` is the scratch directory, where the block's
//! `mktemp -d` data directory lands.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every ```` ```sh ```` block of the README's section whose heading starts with `heading`.
fn sh_blocks(readme: &str, heading: &str) -> Vec<String> {
    let start = readme
        .find(&format!("\n## {heading}"))
        .unwrap_or_else(|| panic!("README.md has no section \"## {heading}…\""));
    let section = &readme[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    let mut blocks = Vec::new();
    let mut lines = section[..end].lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == "```sh" {
            let body: Vec<&str> = lines
                .by_ref()
                .take_while(|l| l.trim_end() != "```")
                .collect();
            blocks.push(body.join("\n"));
        }
    }
    blocks
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_blocks_of_a_section_are_found() {
    let readme = "# x\n\n## Quickstart: y\n\ntext\n\n```sh\na\nb\n```\n\n```rust\nno\n```\n\n```sh\nc\n```\n\n## Next\n\n```sh\nd\n```\n";
    assert_eq!(sh_blocks(readme, "Quickstart"), ["a\nb", "c"]);
    assert_eq!(sh_blocks(readme, "Next"), ["d"]);
}

#[test]
fn the_quickstart_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = sh_blocks(&readme, "Quickstart");
    assert!(
        blocks.len() >= 5,
        "the quickstart lost its blocks: {blocks:#?}"
    );
    let script = blocks.join("\n\n");
    for needed in [
        "/readyz",
        "mktemp -d",
        "--quiet",
        "checkout-topology-b-inverted.json",
        "--canary 10%",
        "rollout abort",
        "baseline whatif",
    ] {
        assert!(
            script.contains(needed),
            "the quickstart no longer uses {needed:?}"
        );
    }

    // The scratch directory: the examples, and the tools on PATH.
    let scratch = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root.join("schemas"), scratch.path().join("schemas")).unwrap();
    let bin = scratch.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_budgetd"), bin.join("budgetd")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_budgetctl"), bin.join("budgetctl")).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\necho \"(test) cargo $*: skipped, budgetd and budgetctl on PATH are this tree's test build\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let (http, grpc) = (free_port(), free_port());
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}\n"))
        .current_dir(scratch.path())
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", scratch.path())
        .env("TMPDIR", scratch.path())
        .env("BUDGETD_URL", format!("http://127.0.0.1:{http}"))
        .env("BUDGETD_HTTP", format!("127.0.0.1:{http}"))
        .env("BUDGETD_GRPC", format!("127.0.0.1:{grpc}"))
        .env("RUST_LOG", "warn")
        // Its own process group: the server it starts in the background goes with it.
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let group = child.id();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever happened, nothing it started outlives the test (the group is ours).
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
    let _ = child.wait();
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let status =
        status.unwrap_or_else(|| panic!("the quickstart ran over 120 s\n{stdout}\n{stderr}"));
    assert!(
        status.success(),
        "the quickstart failed ({status}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );

    // What the prose around the blocks says they show.
    for expect in [
        // run A's draft: inventory 44 / 208, payment 390, user 9, no error finding
        "│ order->inventory ┆ stable   ┆ p99_plus10  ┆  100000 ┆  unknown ┆  40 ┆  150 ┆      44 ┆    208 ┆",
        "│ order->payment   ┆ volatile ┆ p999_plus30 ┆  100000 ┆  unknown ┆ 210 ┆  300 ┆     390 ┆    390 ┆",
        "│ order->user      ┆ stable   ┆ p99_plus10  ┆  100000 ┆  unknown ┆   8 ┆   20 ┆       9 ┆      9 ┆",
        "findings: none",
        // C drifts: payment 390 → 507
        "dry run:       nothing stored (no run, no draft)",
        "would open a draft (reason: drift) holding:",
        "390 → 507 (+30.0 %)",
        // B: the inversion, refused
        "children of gateway->order need 909 ms (500 + 400 + 9), only 800 ms available — 109 ms over",
        "refused (exit 4)",
        // the canary of C2: 10 % of the agents, a person decides, aborted
        "canary: 10% of agents (by id) for 600 s, then a person promotes or aborts it",
        "canary baking until ",
        "canary:          baking",
        "canary:          aborted",
        "reason:          aborted by abe: not this week",
        // the seed's incident: inventory pinned at 100 ms kills a quarter of its calls
        "order->inventory: the 100 ms timeout (pinned) kills 25 % of the load test's calls \
         (2500 of 10000 samples were slower; p99 180 ms, p999 420 ms), above 10 %",
        "25 % (1.25 attempts/call)",
        "25 % of the load test's calls (2500 of 10000 samples slower)",
        "1 % of the load test's calls (100 of 10000 samples slower)",
    ] {
        assert!(
            stdout.contains(expect),
            "{expect:?} missing from the quickstart's output:\n{stdout}\n--- stderr\n{stderr}"
        );
    }
    assert!(
        stderr.contains("cannot be approved"),
        "approving B was not refused for its error findings:\n{stderr}"
    );
}
