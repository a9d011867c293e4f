//! `budgetctl`: the command-line client of the budgetd HTTP API.
//!
//! [`Cli`] is the clap definition, [`run`] executes it and answers the process exit code
//! ([`Exit`]); [`Client`] speaks `/api/v1`, [`render`] turns answers into tables. The binary's
//! `main` only parses and calls [`run`].

pub mod bench;
mod client;
pub mod render;
mod upload;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use reqwest::Url;
use serde_json::{json, Value};

pub use client::{api_url, parse_base_url, Client, CtlError, Exit};

/// The top-level `--help` text: what the tool does, how to authenticate, the exit codes.
pub const LONG_ABOUT: &str = "\
Command-line client of budgetd, the control plane for timeout budgets.

Typical flow: `topology apply` a chain's call tree, `run upload` a load test (the first run and
every drifting run open a draft baseline), `baseline show` / `baseline diff` the draft, then
`baseline approve` it with another person's token (four eyes) to publish it; `budgets show`
prints the live config and `rollback` republishes an older approved baseline. Release
pipelines `release record` the baseline a version ships with and gate on `release check`;
`archive verify` compares the archived documents with the store.

Every request sends --token (or BUDGETD_TOKEN) as a bearer token; its role decides what is
allowed (reader, uploader, approver, agent, admin). Output is a readable table; --json prints
the server's JSON answer instead (pretty-printed; on failure the error body goes to stderr).

Exit codes:
  0  ok
  1  unexpected failure: server error (5xx), an answer that is not JSON, a bug
  2  usage error: bad flags or arguments, or an input FILE that cannot be read
  3  not found (404): no such chain, run, baseline or token
  4  input rejected (400, 413, 415, 422): schema violations, invalid call tree, error findings
  5  conflict (409): wrong state (e.g. approving a non-draft), duplicate name, reused
     Idempotency-Key with another body; also a failed check: `release check` of a baseline
     that is not the current approved one of its chain (superseded, draft, rejected, or of
     another --chain), `archive verify` finding an object missing or differing
  6  unauthorized or forbidden (401, 403): missing or revoked token, wrong role, four eyes
  7  cannot connect to the server (connection refused, DNS failure, timeout)";

const ROLLBACK_ABOUT: &str = "\
Republish an older approved (now superseded) baseline of a chain as its live config, under a
new revision. Needs the approver role; a baseline with error findings is refused.";

const TOPOLOGY_APPLY_ABOUT: &str = "\
Create or update a chain's topology from a JSON file (schema: /schemas/topology.json).
Each change makes a new version; applying the same document again changes nothing.
Schema violations and call-tree errors are listed with their JSON pointers (exit 4).";

const RUN_UPLOAD_ABOUT: &str = "\
Upload a load-test run: budgetd's native JSON (schema: /schemas/run.json), or the files a load
tool wrote — Locust *_stats.csv, oha JSON, k6 summary JSON, JMeter JTL, HdrHistogram .hlog
(with --unit), wrk2 --latency text. The format is detected when unambiguous; --format
names it. Several files make one run (e.g. one oha file per endpoint: inventory=inv.json …).
Tool labels map to segments through the topology's `labels`, or --map LABEL=SEGMENT. Large
files are streamed, with a progress bar on a terminal.

The run is compared with the chain's approved baseline: a p999 (or, for stable segments, a p99)
that moved more than 20 % is drift and opens a draft baseline; the chain's first run always
opens one. Prints the run id, the comparison table and the draft id, or \"no draft\".";

const APPROVE_ABOUT: &str = "\
Approve a draft baseline: it becomes the chain's live config, published to every agent under a
new revision, and the previous approved baseline is superseded.

Needs the approver role, and the approver must not be whoever uploaded the run (four eyes,
exit 6). A draft with error findings cannot be approved (exit 4, the findings are listed); only
a draft can be approved (exit 5).";

const RELEASE_RECORD_ABOUT: &str = "\
Record that a service's version ships with a baseline's budgets, under a change ticket. The
release keeps the SHA-256 of the baseline document it cites. The baseline must be approved (or
superseded: a release cites a baseline id, not \"whatever is live\"); a draft, rejected or unknown
baseline is refused (exit 4). Needs the uploader, approver or admin role.";

const RELEASE_CHECK_ABOUT: &str = "\
Gate a release pipeline on the baseline it cites: the baseline must be approved, i.e. the
current baseline of its chain (and, with --chain, belong to that chain). When it is not, the
message names the chain's current approved baseline.

Exit codes:
  0  the baseline is approved and current (or superseded, with --allow-superseded)
  3  no such baseline
  5  the baseline is superseded (without --allow-superseded), a draft or rejected, or belongs
     to another chain than --chain
Other failures exit as for every command (see budgetctl --help), e.g. 6 for a missing or
revoked token, 7 when budgetd cannot be reached.

With --json, a pass prints the verdict {baseline_id, chain, state, current_baseline_id, ok,
message}; a failure prints {\"error\": {code, message, details}} to stderr, code being
superseded, not_approved or wrong_chain and details the same fields.";

const ARCHIVE_VERIFY_ABOUT: &str = "\
Compare the archive with the store: for every baseline (created on --date, or all of them) the
object {prefix}/{date}/{baseline_id}.json must exist and hold the stored document (same
SHA-256). Lists each baseline whose object is missing, differs or cannot be read, and whether
an upload of it is still queued (archiving is retried until it succeeds).

Exit codes:
  0  every checked baseline is archived as stored
  5  at least one object is missing, differs or cannot be read
Other failures exit as for every command (see budgetctl --help). With --json, the server's
report {date, checked, problems: [...]} is printed in both cases.";

const TOKEN_CREATE_ABOUT: &str = "\
Create a token and print its secret. The secret is shown once, and only the secret goes to
stdout, so `T=$(budgetctl token create --role uploader --name uma)` captures it.";

#[derive(Debug, Parser)]
#[command(
    name = "budgetctl",
    version,
    about = "Command-line client of budgetd: topologies, runs, baselines, live budgets, releases, \
             archive, tokens",
    long_about = LONG_ABOUT
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand accepts.
#[derive(Debug, Args)]
pub struct Global {
    /// Root URL of the budgetd server (the API is under /api/v1)
    #[arg(
        long,
        env = "BUDGETD_URL",
        default_value = "http://127.0.0.1:8080",
        value_parser = parse_base_url,
        global = true
    )]
    pub url: Url,
    /// Bearer token; its role decides what you may do
    #[arg(long, env = "BUDGETD_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Print the server's JSON answer (pretty-printed) instead of tables, for scripts
    #[arg(long, global = true)]
    pub json: bool,
    /// Idempotency-Key for writes: the same key and input answer the first result again
    /// without acting twice
    #[arg(long, value_name = "KEY", global = true)]
    pub idempotency_key: Option<String>,
    /// PEM file of a CA to trust for https:// servers (HTTP API and `bench watch --grpc`),
    /// in addition to the system's roots
    #[arg(long, env = "BUDGETD_CA_CERT", value_name = "FILE", global = true)]
    pub ca_cert: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply or show a chain's topology (its call tree and policy)
    #[command(subcommand)]
    Topology(TopologyCommand),
    /// Upload or show load-test runs
    #[command(subcommand)]
    Run(RunCommand),
    /// List, show, compare, approve, reject or recompute baselines
    #[command(subcommand)]
    Baseline(BaselineCommand),
    /// Show the live budgets of a chain
    #[command(subcommand)]
    Budgets(BudgetsCommand),
    /// Republish an older approved baseline of a chain (approver)
    #[command(long_about = ROLLBACK_ABOUT)]
    Rollback {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// The baseline to serve again, e.g. bl-20261130-001
        baseline_id: String,
    },
    /// Record releases citing baselines, list them, and check a baseline before shipping
    #[command(subcommand)]
    Release(ReleaseCommand),
    /// Verify the archive of baseline documents
    #[command(subcommand)]
    Archive(ArchiveCommand),
    /// List the chains with their topology version, live baseline and counts
    Chains,
    /// Show the audit log, newest first
    Audit {
        /// Only entries of this chain
        #[arg(long)]
        chain: Option<String>,
        /// At most this many entries [server default: 100]
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: Option<u16>,
        /// Only entries older than this entry id (to page back)
        #[arg(long, value_name = "ID")]
        before: Option<u64>,
    },
    /// Create, revoke or list API tokens (admin)
    #[command(subcommand)]
    Token(TokenCommand),
    /// List every agent seen: service, chains, replica, delivered and acknowledged revisions
    Agents,
    /// Measure budgetd (benchmarks against a running server; loopback only)
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Open N Watch streams, approve new baselines, and time until every stream has them
    #[command(long_about = bench::WATCH_ABOUT)]
    Watch(bench::WatchArgs),
}

#[derive(Debug, Subcommand)]
pub enum TopologyCommand {
    /// Create or update a chain's topology from a JSON file (uploader)
    #[command(long_about = TOPOLOGY_APPLY_ABOUT)]
    Apply {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// The topology JSON document; `-` reads stdin
        file: PathBuf,
    },
    /// Show a chain's topology (latest version unless --version)
    Show {
        /// The chain, e.g. checkout
        chain: String,
        /// A past version number
        #[arg(long = "version", value_name = "N")]
        topology_version: Option<u64>,
    },
}

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Upload a load-test run (native JSON) and show its drift check (uploader)
    #[command(long_about = RUN_UPLOAD_ABOUT)]
    Upload {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// The run: a native JSON document (`-` reads stdin), or load-tool output files.
        /// `LABEL=PATH` names a single-endpoint file's label (oha, wrk2), e.g.
        /// `inventory=oha-inventory.json`; without it the file name's stem is the label.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// native, locust, oha, k6, jmeter, hdrhistogram or wrk2 [default: detected]
        #[arg(long)]
        format: Option<String>,
        /// Unit of HdrHistogram values (ns, us, ms, s): the .hlog format does not record it
        #[arg(long)]
        unit: Option<String>,
        /// Map a tool label to a segment, overriding the topology's labels (repeatable)
        #[arg(long = "map", value_name = "LABEL=SEGMENT")]
        map: Vec<String>,
    },
    /// Show one run's percentiles
    Show {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// e.g. run-20261130-001
        run_id: String,
    },
    /// List a chain's runs, newest first
    List {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// At most this many runs [server default: 100]
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: Option<u16>,
    },
}

#[derive(Debug, Subcommand)]
pub enum BaselineCommand {
    /// List a chain's baselines
    List {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// Only baselines in this state
        #[arg(long, value_parser = ["draft", "approved", "superseded", "rejected"])]
        state: Option<String>,
    },
    /// Show a baseline: its segments' percentiles, timeouts and budgets, its findings, its
    /// archive state and the releases citing it (--json: the document only)
    Show {
        /// e.g. bl-20261130-001
        id: String,
    },
    /// How far a baseline's publication has rolled out: agents of its chain that ACKed it
    Rollout {
        /// e.g. bl-20261130-001
        id: String,
    },
    /// Compare a baseline with the live one (or another baseline)
    Diff {
        /// The baseline to look at, e.g. a new draft
        id: String,
        /// What to compare it with: `current` (the approved, live baseline) or a baseline id
        #[arg(long, value_name = "current|ID", default_value = "current")]
        against: String,
    },
    /// Approve a draft and publish it as the live config (approver, not the run's uploader)
    #[command(long_about = APPROVE_ABOUT)]
    Approve {
        /// The draft, e.g. bl-20261130-002
        id: String,
        /// Why, for the record
        #[arg(long)]
        comment: Option<String>,
    },
    /// Reject a draft, saying why (approver)
    Reject {
        /// The draft, e.g. bl-20261130-002
        id: String,
        /// Why it is rejected (required)
        #[arg(long)]
        comment: String,
    },
    /// Compute a new draft from a stored run and the chain's latest topology (uploader or approver)
    Recompute {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// The run to compute from, e.g. run-20261130-001
        #[arg(long = "run", value_name = "RUN_ID")]
        run_id: String,
        /// Use this topology version instead of the latest
        #[arg(long, value_name = "N")]
        topology_version: Option<u64>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ReleaseCommand {
    /// Record a release citing a baseline (uploader, approver or admin)
    #[command(long_about = RELEASE_RECORD_ABOUT)]
    Record {
        /// The service shipped, e.g. order
        #[arg(long)]
        service: String,
        /// The version shipped, e.g. 1.4.2
        #[arg(long = "version", value_name = "VERSION")]
        release_version: String,
        /// The baseline the release uses, e.g. bl-20261130-001
        #[arg(long = "baseline", value_name = "ID")]
        baseline_id: String,
        /// The change ticket, e.g. CHG-1234
        #[arg(long)]
        ticket: String,
    },
    /// List releases, newest first
    List {
        /// Only releases citing this baseline
        #[arg(long = "baseline", value_name = "ID")]
        baseline_id: Option<String>,
        /// Only releases of this service
        #[arg(long)]
        service: Option<String>,
        /// At most this many releases [server default: 100]
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: Option<u16>,
    },
    /// Exit 0 when a baseline is approved and current; else non-zero, naming the current one
    #[command(long_about = RELEASE_CHECK_ABOUT)]
    Check {
        /// The baseline the release cites, e.g. bl-20261130-001
        #[arg(long = "baseline", value_name = "ID")]
        baseline_id: String,
        /// The chain the baseline must belong to
        #[arg(long)]
        chain: Option<String>,
        /// Accept a superseded baseline (one that was approved before the current one)
        #[arg(long)]
        allow_superseded: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ArchiveCommand {
    /// List every baseline whose archived object is missing or differs; exit 5 if any
    #[command(long_about = ARCHIVE_VERIFY_ABOUT)]
    Verify {
        /// Only baselines created on this UTC date
        #[arg(long, value_name = "YYYY-MM-DD", value_parser = parse_date)]
        date: Option<String>,
    },
}

/// Parses `--date`: a calendar date as `YYYY-MM-DD`, the form archive keys use.
fn parse_date(raw: &str) -> Result<String, String> {
    match chrono::NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        Ok(_) if raw.len() == 10 => Ok(raw.to_owned()),
        _ => Err(format!("{raw:?} is not a date as YYYY-MM-DD")),
    }
}

#[derive(Debug, Subcommand)]
pub enum BudgetsCommand {
    /// Show the live config of a chain: timeouts, budgets and retry plans per segment
    Show {
        /// The chain, e.g. checkout
        chain: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print its secret (shown once; only the secret goes to stdout)
    #[command(long_about = TOKEN_CREATE_ABOUT)]
    Create {
        /// What the token may do
        #[arg(long, value_parser = ["reader", "uploader", "approver", "agent", "admin"])]
        role: String,
        /// A unique name, recorded as the actor of everything the token does
        #[arg(long)]
        name: String,
        /// The person or pipeline the token belongs to; four eyes compares owners
        /// [default: the name]
        #[arg(long)]
        owner: Option<String>,
    },
    /// Issue a new token (new name and secret) with the role and owner of an existing one;
    /// the old one works until revoked
    Rotate {
        /// The token to rotate
        name: String,
        /// The new token's name
        #[arg(long = "new-name")]
        new_name: String,
    },
    /// Revoke a token by name
    Revoke {
        /// The token's name
        name: String,
    },
    /// List the active tokens (never their secrets)
    List,
}

/// Runs a parsed command line and answers the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    let json = cli.global.json;
    // The benchmark drives thousands of streams: give it every core.
    let mut builder = if matches!(cli.command, Command::Bench(_)) {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Internal.into();
        }
    };
    let client = match Client::new(
        cli.global.url,
        cli.global.token,
        cli.global.idempotency_key,
        cli.global.ca_cert.as_deref(),
    ) {
        Ok(client) => client,
        Err(e) => {
            report(&e, json, false);
            return e.exit().into();
        }
    };
    match runtime.block_on(execute(cli.command, &client, json)) {
        Ok(()) => Exit::Ok.into(),
        Err(e) => {
            report(&e, json, client.has_token());
            e.exit().into()
        }
    }
}

/// Prints a failure to stderr: the server's message and code, then each violation or finding.
fn report(e: &CtlError, json: bool, has_token: bool) {
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
        CtlError::Api {
            status,
            code,
            message,
            ..
        } => writeln!(err, "error: {message} ({code}, HTTP {status})"),
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
        CtlError::Unreachable { .. } => {
            let _ = writeln!(
                err,
                "hint: is budgetd running there? set --url or BUDGETD_URL"
            );
        }
        _ => {}
    }
    if let (CtlError::Api { status: 401, .. }, false) = (e, has_token) {
        let _ = writeln!(err, "hint: pass a token with --token or BUDGETD_TOKEN");
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// Writes to stdout, ignoring a closed pipe (e.g. `budgetctl audit | head`).
fn print(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Prints an answer: as JSON with `--json`, else through `view`.
fn show(json: bool, value: &Value, view: fn(&Value) -> String) {
    if json {
        if !value.is_null() {
            print(&pretty(value));
        }
    } else {
        print(&view(value));
    }
}

/// The bytes of an input file; `-` reads stdin.
fn read_input(path: &Path) -> Result<Vec<u8>, CtlError> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut buf)
            .map_err(|e| CtlError::Input(format!("cannot read stdin: {e}")))?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|e| CtlError::Input(format!("cannot read {}: {e}", path.display())))
}

fn body(v: Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

async fn execute(command: Command, client: &Client, json: bool) -> Result<(), CtlError> {
    match command {
        Command::Topology(TopologyCommand::Apply { chain, file }) => {
            let bytes = read_input(&file)?;
            let v = client
                .put(client.url(&["chains", &chain, "topology"]), bytes)
                .await?;
            show(json, &v, render::topology);
        }
        Command::Topology(TopologyCommand::Show {
            chain,
            topology_version,
        }) => {
            let mut url = client.url(&["chains", &chain, "topology"]);
            if let Some(n) = topology_version {
                url.query_pairs_mut().append_pair("version", &n.to_string());
            }
            show(json, &client.get(url).await?, render::topology);
        }
        Command::Run(RunCommand::Upload {
            chain,
            files,
            format,
            unit,
            map,
        }) => {
            let v = upload::run(
                client,
                &chain,
                &files,
                format.as_deref(),
                unit.as_deref(),
                &map,
                json,
            )
            .await?;
            show(json, &v, render::run_outcome);
        }
        Command::Run(RunCommand::Show { chain, run_id }) => {
            show(
                json,
                &client
                    .get(client.url(&["chains", &chain, "runs", &run_id]))
                    .await?,
                render::run,
            );
        }
        Command::Run(RunCommand::List { chain, limit }) => {
            let mut url = client.url(&["chains", &chain, "runs"]);
            if let Some(n) = limit {
                url.query_pairs_mut().append_pair("limit", &n.to_string());
            }
            show(json, &client.get(url).await?, render::runs);
        }
        Command::Baseline(cmd) => baseline(cmd, client, json).await?,
        Command::Budgets(BudgetsCommand::Show { chain }) => {
            show(
                json,
                &client
                    .get(client.url(&["chains", &chain, "budgets"]))
                    .await?,
                render::budgets,
            );
        }
        Command::Rollback { chain, baseline_id } => {
            let url = client.url(&["chains", &chain, "rollback"]);
            let v = client
                .post(url, Some(body(json!({ "baseline_id": baseline_id }))))
                .await?;
            show(json, &v, render::rolled_back);
        }
        Command::Release(cmd) => release(cmd, client, json).await?,
        Command::Archive(ArchiveCommand::Verify { date }) => {
            let mut url = client.url(&["archive", "verify"]);
            if let Some(d) = &date {
                url.query_pairs_mut().append_pair("date", d);
            }
            let report = client.get(url).await?;
            show(json, &report, render::archive_verify);
            let problems = report["problems"].as_array().map_or(0, Vec::len);
            if problems > 0 {
                return Err(CtlError::conflict(
                    "archive_incomplete",
                    format!(
                        "{problems} archived baseline document(s) missing, differing or \
                         unreadable; `budgetd archive backfill` re-queues their uploads"
                    ),
                    json!({ "date": date, "problems": problems }),
                ));
            }
        }
        Command::Chains => show(
            json,
            &client.get(client.url(&["chains"])).await?,
            render::chains,
        ),
        Command::Audit {
            chain,
            limit,
            before,
        } => {
            let mut url = client.url(&["audit"]);
            {
                let mut q = url.query_pairs_mut();
                if let Some(c) = &chain {
                    q.append_pair("chain", c);
                }
                if let Some(n) = limit {
                    q.append_pair("limit", &n.to_string());
                }
                if let Some(id) = before {
                    q.append_pair("before", &id.to_string());
                }
            }
            // An empty `?` is harmless, but keep the URL clean.
            if url.query() == Some("") {
                url.set_query(None);
            }
            show(json, &client.get(url).await?, render::audit);
        }
        Command::Token(cmd) => token(cmd, client, json).await?,
        Command::Agents => show(
            json,
            &client.get_all(client.url(&["agents"]), "agents").await?,
            render::agents,
        ),
        Command::Bench(BenchCommand::Watch(args)) => bench::watch(args, client, json).await?,
    }
    Ok(())
}

async fn baseline(command: BaselineCommand, client: &Client, json: bool) -> Result<(), CtlError> {
    match command {
        BaselineCommand::List { chain, state } => {
            let mut url = client.url(&["chains", &chain, "baselines"]);
            if let Some(s) = &state {
                url.query_pairs_mut().append_pair("state", s);
            }
            show(
                json,
                &client.get_all(url, "baselines").await?,
                render::baselines,
            );
        }
        BaselineCommand::Show { id } => {
            let doc = client.get(client.url(&["baselines", &id])).await?;
            if json {
                // The document only, byte-for-byte what the archive holds (pretty-printed).
                show(true, &doc, render::baseline);
            } else {
                let (archive, releases) = tokio::join!(
                    client.get(client.url(&["baselines", &id, "archive"])),
                    client.get(client.url(&["baselines", &id, "releases"])),
                );
                // The document is shown even when a side view fails (e.g. an older server).
                let archive = match archive {
                    Ok(v) => render::archive_status(&v),
                    Err(e) => format!("archive: unavailable ({e})"),
                };
                let releases = match releases {
                    Ok(v) => render::baseline_releases(&v),
                    Err(e) => format!("releases: unavailable ({e})"),
                };
                print(&[render::baseline(&doc), archive, releases].join("\n"));
            }
        }
        BaselineCommand::Rollout { id } => show(
            json,
            &client
                .get(client.url(&["baselines", &id, "rollout"]))
                .await?,
            render::rollout,
        ),
        BaselineCommand::Diff { id, against } => {
            let mut url = client.url(&["baselines", &id, "diff"]);
            url.query_pairs_mut().append_pair("against", &against);
            show(json, &client.get(url).await?, render::diff);
        }
        BaselineCommand::Approve { id, comment } => {
            let payload = comment.map(|c| body(json!({ "comment": c })));
            let v = client
                .post(client.url(&["baselines", &id, "approve"]), payload)
                .await?;
            show(json, &v, render::approved);
        }
        BaselineCommand::Reject { id, comment } => {
            let v = client
                .post(
                    client.url(&["baselines", &id, "reject"]),
                    Some(body(json!({ "comment": comment }))),
                )
                .await?;
            show(json, &v, render::rejected);
        }
        BaselineCommand::Recompute {
            chain,
            run_id,
            topology_version,
        } => {
            let mut req = json!({ "run_id": run_id });
            if let Some(n) = topology_version {
                req["topology_version"] = json!(n);
            }
            let v = client
                .post(
                    client.url(&["chains", &chain, "baselines"]),
                    Some(body(req)),
                )
                .await?;
            show(json, &v, render::recomputed);
        }
    }
    Ok(())
}

async fn release(command: ReleaseCommand, client: &Client, json: bool) -> Result<(), CtlError> {
    match command {
        ReleaseCommand::Record {
            service,
            release_version,
            baseline_id,
            ticket,
        } => {
            let req = json!({
                "service": service,
                "version": release_version,
                "baseline_id": baseline_id,
                "ticket": ticket,
            });
            let v = client
                .post(client.url(&["releases"]), Some(body(req)))
                .await?;
            show(json, &v, render::release);
        }
        ReleaseCommand::List {
            baseline_id,
            service,
            limit,
        } => {
            let mut url = client.url(&["releases"]);
            {
                let mut q = url.query_pairs_mut();
                if let Some(id) = &baseline_id {
                    q.append_pair("baseline_id", id);
                }
                if let Some(s) = &service {
                    q.append_pair("service", s);
                }
                if let Some(n) = limit {
                    q.append_pair("limit", &n.to_string());
                }
            }
            if url.query() == Some("") {
                url.set_query(None);
            }
            show(json, &client.get(url).await?, render::releases);
        }
        ReleaseCommand::Check {
            baseline_id,
            chain,
            allow_superseded,
        } => {
            // 404 → exit 3 (unknown baseline).
            let doc = client.get(client.url(&["baselines", &baseline_id])).await?;
            let own_chain = doc["chain"].as_str().unwrap_or_default();
            let state = doc["state"].as_str().unwrap_or_default();
            let chain_ok = chain.as_deref().is_none_or(|c| c == own_chain);
            // Name the chain's current baseline whenever this one is not it.
            let current = if chain_ok && state != "approved" && !own_chain.is_empty() {
                let mut url = client.url(&["chains", own_chain, "baselines"]);
                url.query_pairs_mut().append_pair("state", "approved");
                let list = client.get(url).await?;
                list["baselines"][0]["id"].as_str().map(str::to_owned)
            } else {
                None
            };
            let verdict =
                release_verdict(&doc, chain.as_deref(), current.as_deref(), allow_superseded)?;
            show(json, &verdict, render::release_check);
        }
    }
    Ok(())
}

/// Whether a release may cite the baseline `doc`: the verdict when it may (exit 0), else the
/// failed check (exit 5). `current` is the chain's approved baseline, when it has one.
fn release_verdict(
    doc: &Value,
    chain: Option<&str>,
    current: Option<&str>,
    allow_superseded: bool,
) -> Result<Value, CtlError> {
    let id = doc["id"].as_str().unwrap_or_default();
    let own_chain = doc["chain"].as_str().unwrap_or_default();
    let state = doc["state"].as_str().unwrap_or_default();
    // An approved baseline is its chain's current one.
    let current = if state == "approved" {
        Some(id)
    } else {
        current
    };
    let details = json!({
        "baseline_id": id,
        "chain": own_chain,
        "state": state,
        "current_baseline_id": current,
    });
    if let Some(wanted) = chain.filter(|c| *c != own_chain) {
        return Err(CtlError::conflict(
            "wrong_chain",
            format!("baseline {id} belongs to chain {own_chain}, not {wanted}"),
            json!({ "baseline_id": id, "chain": own_chain, "state": state, "wanted_chain": wanted }),
        ));
    }
    let current_is = match current {
        Some(c) => format!("the current baseline of {own_chain} is {c}"),
        None => format!("{own_chain} has no approved baseline"),
    };
    let ok = |message: String| {
        let mut v = details.clone();
        v["ok"] = json!(true);
        v["message"] = json!(message);
        v
    };
    match state {
        "approved" => Ok(ok(format!(
            "{id} is the approved, current baseline of {own_chain}"
        ))),
        "superseded" if allow_superseded => Ok(ok(format!(
            "{id} is superseded ({current_is}), allowed by --allow-superseded"
        ))),
        "superseded" => Err(CtlError::conflict(
            "superseded",
            format!(
                "baseline {id} is superseded: {current_is} (cite it, or pass --allow-superseded)"
            ),
            details,
        )),
        "draft" => Err(CtlError::conflict(
            "not_approved",
            format!("baseline {id} is a draft, not approved: {current_is}"),
            details,
        )),
        "rejected" => Err(CtlError::conflict(
            "not_approved",
            format!("baseline {id} was rejected: {current_is}"),
            details,
        )),
        other => Err(CtlError::conflict(
            "not_approved",
            format!("baseline {id} is {other:?}, not approved: {current_is}"),
            details,
        )),
    }
}

async fn token(command: TokenCommand, client: &Client, json: bool) -> Result<(), CtlError> {
    match command {
        TokenCommand::Create { role, name, owner } => {
            let v = client
                .post(
                    client.url(&["tokens"]),
                    Some(body(json!({ "name": name, "role": role, "owner": owner }))),
                )
                .await?;
            if json {
                print(&pretty(&v));
            } else {
                // Only the secret on stdout, so `$(budgetctl token create …)` captures it.
                eprintln!(
                    "created token {} (role {}); its secret is shown once, store it now:",
                    v["name"].as_str().unwrap_or(&name),
                    v["role"].as_str().unwrap_or(&role)
                );
                print(v["token"].as_str().unwrap_or_default());
            }
        }
        TokenCommand::Rotate { name, new_name } => {
            let v = client
                .post(
                    client.url(&["tokens", &name, "rotate"]),
                    Some(body(json!({ "name": new_name }))),
                )
                .await?;
            if json {
                print(&pretty(&v));
            } else {
                eprintln!(
                    "created token {} (role {}, owner {}) in place of {name}; revoke {name} once its clients have switched. The secret is shown once, store it now:",
                    v["name"].as_str().unwrap_or(&new_name),
                    v["role"].as_str().unwrap_or_default(),
                    v["owner"].as_str().unwrap_or_default(),
                );
                print(v["token"].as_str().unwrap_or_default());
            }
        }
        TokenCommand::Revoke { name } => {
            let v = client.delete(client.url(&["tokens", &name])).await?;
            if json {
                show(true, &v, render::tokens);
            } else {
                print(&format!("revoked token {name}"));
            }
        }
        TokenCommand::List => show(
            json,
            &client.get(client.url(&["tokens"])).await?,
            render::tokens,
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

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
        let cli = Cli::try_parse_from(["budgetctl", "archive", "verify", "--date", "2026-11-30"])
            .unwrap();
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

    fn doc(state: &str) -> Value {
        json!({"id": "bl-20261130-001", "chain": "checkout", "state": state})
    }

    fn refused(r: Result<Value, CtlError>) -> (String, String) {
        match r {
            Err(CtlError::Refused {
                exit: Exit::Conflict,
                code,
                message,
                ..
            }) => (code, message),
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn release_check_passes_only_the_current_baseline() {
        let v = release_verdict(&doc("approved"), Some("checkout"), None, false).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["current_baseline_id"], "bl-20261130-001");
        assert_eq!(
            v["message"],
            "bl-20261130-001 is the approved, current baseline of checkout"
        );

        let (code, message) = refused(release_verdict(
            &doc("superseded"),
            None,
            Some("bl-20261130-002"),
            false,
        ));
        assert_eq!(code, "superseded");
        assert_eq!(
            message,
            "baseline bl-20261130-001 is superseded: the current baseline of checkout is \
             bl-20261130-002 (cite it, or pass --allow-superseded)"
        );
        let v = release_verdict(&doc("superseded"), None, Some("bl-20261130-002"), true).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["current_baseline_id"], "bl-20261130-002");

        let (code, message) = refused(release_verdict(
            &doc("draft"),
            None,
            Some("bl-20261130-002"),
            true,
        ));
        assert_eq!(code, "not_approved");
        assert!(message.contains("is a draft"), "{message}");
        assert!(message.contains("bl-20261130-002"), "{message}");
        let (_, message) = refused(release_verdict(&doc("rejected"), None, None, true));
        assert_eq!(
            message,
            "baseline bl-20261130-001 was rejected: checkout has no approved baseline"
        );

        let (code, message) = refused(release_verdict(
            &doc("approved"),
            Some("search"),
            None,
            false,
        ));
        assert_eq!(code, "wrong_chain");
        assert_eq!(
            message,
            "baseline bl-20261130-001 belongs to chain checkout, not search"
        );
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
}
