//! The command line: clap's tree of subcommands and flags, with the long help texts that
//! document each command's exit codes. Parsing only; [`crate::run`] executes it.

use std::path::PathBuf;

use budget_api::feedback::WEBHOOK_EVENTS;
use clap::{Args, Parser, Subcommand};
use reqwest::Url;

use self::help::{
    ALERTS_ABOUT, APPROVE_ABOUT, ARCHIVE_VERIFY_ABOUT, BASELINE_REF_HELP, PRODUCTION_ABOUT,
    RELEASE_CHECK_ABOUT, RELEASE_RECORD_ABOUT, REPORT_ABOUT, ROLLBACK_ABOUT, RUN_UPLOAD_ABOUT,
    TOKEN_CREATE_ABOUT, TOPOLOGY_APPLY_ABOUT, WATCH_ABOUT, WEBHOOK_ADD_ABOUT,
    WEBHOOK_DELIVERIES_ABOUT,
};
use self::parse::{
    parse_bake, parse_canary, parse_date, parse_hook_url, parse_secret, parse_timeout,
};
use crate::client::parse_base_url;

#[derive(Debug, Parser)]
#[command(
    name = "budgetctl",
    version,
    about = "Command-line client of budgetd: topologies, runs, baselines, live budgets, releases, \
             archive, tokens, production feedback, alerts, webhooks",
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
    /// Follow, promote or abort a canary rollout (baseline approve --canary)
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Republish an older approved baseline of a chain (approver)
    #[command(long_about = ROLLBACK_ABOUT)]
    Rollback {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// The baseline to serve again, e.g. bl-20261130-001 (an id: an alias names no
        /// superseded baseline)
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
    /// Show a chain's production figures per segment, against the live baseline
    #[command(long_about = PRODUCTION_ABOUT)]
    Production {
        /// The chain, e.g. checkout
        #[arg(long)]
        chain: String,
        /// The last complete window of this length
        #[arg(long, default_value = "5m", value_parser = ["1m", "5m", "1h"])]
        window: String,
    },
    /// List alerts (firing and resolved) with the value that tripped each
    #[command(long_about = ALERTS_ABOUT)]
    Alerts {
        /// Only the alerts firing now
        #[arg(long)]
        firing: bool,
    },
    /// Register, list or remove webhooks, and show their deliveries (admin)
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// Measure budgetd (benchmarks against a running server; loopback only)
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Open N Watch streams, approve new baselines, and time until every stream has them
    #[command(long_about = WATCH_ABOUT)]
    Watch(WatchArgs),
    /// Open N agents that each send one Report per window; count what the server accepts
    #[command(long_about = REPORT_ABOUT)]
    Report(ReportArgs),
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
        /// `LABEL=PATH` names a single-endpoint file's label (oha, wrk2, autocannon), e.g.
        /// `inventory=oha-inventory.json`; without it the file name's stem is the label.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// native, locust, locust_json, oha, k6, k6_points, artillery, autocannon, jmeter, hdrhistogram or
        /// wrk2 [default: detected]
        #[arg(long)]
        format: Option<String>,
        /// Unit of HdrHistogram values (ns, us, ms, s): the .hlog format does not record it
        #[arg(long)]
        unit: Option<String>,
        /// Map a tool label to a segment, overriding the topology's labels (repeatable); quote
        /// it in a shell, which reads `->` as a redirection: --map 'inventory=order->inventory'
        #[arg(long = "map", value_name = "LABEL=SEGMENT")]
        map: Vec<String>,
        /// Print only the id of the draft the run opened (nothing when it opened none), for
        /// scripts: DRAFT=$(budgetctl run upload --quiet …)
        #[arg(long, short, conflicts_with = "json")]
        quiet: bool,
        /// Read, map and compute the run and show what the upload would give (labels, segments,
        /// drift, the draft's budgets and findings), storing nothing
        #[arg(long, conflicts_with = "quiet")]
        dry_run: bool,
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
    #[command(after_help = BASELINE_REF_HELP)]
    Show {
        #[command(flatten)]
        baseline: BaselineRef,
    },
    /// How far a baseline's publication has rolled out: agents of its chain that ACKed it
    #[command(after_help = BASELINE_REF_HELP)]
    Rollout {
        #[command(flatten)]
        baseline: BaselineRef,
    },
    /// Compare a baseline with the live one (or another baseline)
    #[command(after_help = BASELINE_REF_HELP)]
    Diff {
        #[command(flatten)]
        baseline: BaselineRef,
        /// What to compare it with: `current` (the approved, live baseline), `latest-draft`
        /// (with --chain) or a baseline id
        #[arg(
            long,
            value_name = "current|latest-draft|ID",
            default_value = "current"
        )]
        against: String,
    },
    /// What a timeout would kill of a segment's load-test calls, and the attempts per call it
    /// costs, from the latency distribution stored with the baseline's run
    #[command(after_help = BASELINE_REF_HELP)]
    Whatif {
        #[command(flatten)]
        baseline: BaselineRef,
        /// The segment, e.g. order->inventory
        #[arg(long)]
        segment: String,
        /// The timeout to try: milliseconds (`100`) or a duration (`100ms`, `2s`)
        #[arg(long, value_parser = parse_timeout, value_name = "MS")]
        timeout: u64,
    },
    /// Approve a draft and publish it as the live config (approver, not the run's uploader)
    #[command(long_about = APPROVE_ABOUT, after_help = BASELINE_REF_HELP)]
    Approve {
        #[command(flatten)]
        baseline: BaselineRef,
        /// Why, for the record
        #[arg(long)]
        comment: Option<String>,
        /// Publish to a canary first: a share of agents (`10%`) or agents with labels
        /// (`zone=a`, `zone=a,tier=web`)
        #[arg(long, value_parser = parse_canary, value_name = "PERCENT%|KEY=VALUE")]
        canary: Option<budget_core::canary::Selector>,
        /// How long the canary bakes before it is promoted (e.g. 5m; with --canary)
        #[arg(long, value_parser = parse_bake, requires = "canary", default_value = "5m")]
        bake: u64,
        /// Wait for a person to promote or abort (`budgetctl rollout promote|abort`) instead
        /// of deciding from ACKs, NACKs and the canary agents' reports
        #[arg(long, requires = "canary")]
        manual: bool,
    },
    /// Reject a draft, saying why (approver)
    #[command(after_help = BASELINE_REF_HELP)]
    Reject {
        #[command(flatten)]
        baseline: BaselineRef,
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

/// A baseline named on the command line: an id, or an alias of a chain's baseline.
// No doc comment on the fields' struct shown by clap: the fields document themselves.
#[derive(Debug, Clone, Args)]
pub struct BaselineRef {
    /// e.g. bl-20261130-002, or `current` / `latest-draft` with --chain
    #[arg(value_name = "ID")]
    pub id: String,
    /// The chain of `current` or `latest-draft`; with an id, the chain it must belong to
    #[arg(long)]
    pub chain: Option<String>,
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
        /// The baseline the release uses, e.g. bl-20261130-001, or `current` with --chain (the
        /// release records the id it resolves to)
        #[arg(long = "baseline", value_name = "ID")]
        baseline_id: String,
        /// The chain of `--baseline current`; with an id, the chain it must belong to
        #[arg(long)]
        chain: Option<String>,
        /// The change ticket, e.g. CHG-1234
        #[arg(long)]
        ticket: String,
    },
    /// List releases, newest first
    List {
        /// Only releases citing this baseline (an id, or `current` / `latest-draft` with --chain)
        #[arg(long = "baseline", value_name = "ID")]
        baseline_id: Option<String>,
        /// The chain of `--baseline current` or `latest-draft`
        #[arg(long, requires = "baseline_id")]
        chain: Option<String>,
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
        /// The baseline the release cites, e.g. bl-20261130-001 (or `current` / `latest-draft`
        /// with --chain)
        #[arg(long = "baseline", value_name = "ID")]
        baseline_id: String,
        /// The chain the baseline must belong to (and of `current` or `latest-draft`)
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

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Register a URL that receives events, signed with a secret (admin)
    #[command(long_about = WEBHOOK_ADD_ABOUT)]
    Add {
        /// Where events are POSTed: an http:// or https:// URL, e.g.
        /// `https://hooks.example.com/budgetd` (an argument: --url is budgetd's own address)
        #[arg(id = "hook_url", value_name = "HOOK_URL", value_parser = parse_hook_url)]
        url: String,
        /// Key of the HMAC-SHA256 signature, 16 to 512 bytes (prefer the environment
        /// variable: a flag shows in the process list)
        #[arg(
            long,
            env = "BUDGETD_WEBHOOK_SECRET",
            hide_env_values = true,
            value_parser = parse_secret
        )]
        secret: String,
        /// An event to send (repeatable) [default: every event]
        #[arg(long = "event", value_name = "EVENT", value_parser = WEBHOOK_EVENTS)]
        events: Vec<String>,
    },
    /// List the registered webhooks (never their secrets)
    #[command(after_help = "Example:\n  budgetctl webhook list")]
    List,
    /// Remove a webhook: no further events are sent to it
    #[command(after_help = "Example:\n  budgetctl webhook rm wh-0a1b2c3d4e5f")]
    Rm {
        /// The webhook's id, as `webhook list` shows it
        id: String,
    },
    /// Show a webhook's deliveries: state, attempts, the receiver's last answer
    #[command(long_about = WEBHOOK_DELIVERIES_ABOUT)]
    Deliveries {
        /// The webhook's id, as `webhook list` shows it
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// A canary's state: members, their ACKs, the figures that decide, time left
    #[command(after_help = BASELINE_REF_HELP)]
    Status {
        #[command(flatten)]
        baseline: BaselineRef,
    },
    /// Promote a baking canary: every agent gets its baseline (approver)
    #[command(after_help = BASELINE_REF_HELP)]
    Promote {
        #[command(flatten)]
        baseline: BaselineRef,
        /// Why, for the record
        #[arg(long)]
        comment: Option<String>,
    },
    /// Abort a baking canary: its agents get the previous baseline back (approver)
    #[command(after_help = BASELINE_REF_HELP)]
    Abort {
        #[command(flatten)]
        baseline: BaselineRef,
        /// Why, for the record
        #[arg(long)]
        comment: Option<String>,
    },
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

// No doc comment here: clap would show it in `bench watch --help`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Number of Watch streams to hold open
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub subscribers: u32,
    /// HTTP/2 connections to spread them over [default: one per 1000 streams]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub connections: Option<u32>,
    /// Publications to time
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Also read the server's memory per idle stream this many seconds later, before the
    /// rounds, once the allocator has given back what opening the streams freed [default: 0,
    /// not read]
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=120))]
    pub settle: u32,
    /// The server's gRPC address; https://… is verified against --ca-cert (only it), or the
    /// system's roots without one
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub grpc: String,
}

// No doc comment here: clap would show it in `bench report --help`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Agents, each holding a Watch stream and sending one Report per window
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub agents: u32,
    /// HTTP/2 connections to spread them over [default: one per 100 agents, at most 1000]; a
    /// connection carries at most 1,024 streams at once (a Watch and a Report per agent)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub connections: Option<u32>,
    /// Windows each agent reports (one Report each)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub windows: u32,
    /// Length of a window in seconds (the agents' report_window)
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub window_secs: u32,
    /// Latencies recorded in each window's histogram, spread over 1-100 ms
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub latencies: u32,
    /// The server's gRPC address; https://… is verified against --ca-cert (only it), or the
    /// system's roots without one
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub grpc: String,
}

mod help;
mod parse;
#[cfg(test)]
mod tests;

pub use help::LONG_ABOUT;
