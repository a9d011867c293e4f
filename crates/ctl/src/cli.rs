//! The command line: clap's tree of subcommands and flags, with the long help texts that
//! document each command's exit codes. Parsing only; [`crate::run`] executes it.

use std::path::PathBuf;

use budget_api::feedback::WEBHOOK_EVENTS;
use clap::{Args, Parser, Subcommand};
use reqwest::Url;

use self::parse::{parse_date, parse_hook_url, parse_secret};
use crate::client::parse_base_url;

/// The top-level `--help` text: what the tool does, how to authenticate, the exit codes.
pub const LONG_ABOUT: &str = "\
Command-line client of budgetd, the control plane for timeout budgets.

Typical flow: `topology apply` a chain's call tree, `run upload` a load test (the first run and
every drifting run open a draft baseline), `baseline show` / `baseline diff` the draft, then
`baseline approve` it with another person's token (four eyes) to publish it; `budgets show`
prints the live config and `rollback` republishes an older approved baseline. Release
pipelines `release record` the baseline a version ships with and gate on `release check`;
`archive verify` compares the archived documents with the store.

In production, agents report what their calls did: `production` shows a chain's figures
(amplification, kill rate, key coverage, p99/p999 against the live baseline), `alerts` lists
the alerts raised from them, and `webhook add` sends alerts and decisions to a receiver.

Every request sends --token (or BUDGETD_TOKEN) as a bearer token; its role decides what is
allowed (reader, uploader, approver, agent, admin). Output is a readable table; --json prints
the server's JSON answer instead (pretty-printed; on failure the error body goes to stderr).

Exit codes:
  0  ok
  1  unexpected failure: server error (5xx), an answer that is not JSON, a bug
  2  usage error: bad flags or arguments, or an input FILE that cannot be read
  3  not found (404): no such chain, run, baseline, token or webhook
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
tool wrote — Locust *_stats.csv, oha JSON, k6 summary JSON or raw points (--out json/csv),
Artillery JSON report, autocannon JSON (-j), JMeter JTL, HdrHistogram .hlog (with --unit), wrk2
--latency text — gzip-compressed or not (.gz). The format is detected when unambiguous; --format
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

const WATCH_ABOUT: &str = "\
Opens N Watch streams (over M HTTP/2 connections) as agents of a fresh benchmark chain, then,
round after round, uploads a run that drifts, approves the new draft, and measures the time from
the approve response until every stream has received the new revision. Prints p50, p99 and max
over the rounds, and the server's resident memory per idle stream (from /metrics).

Needs an admin token (--token): it creates its own uploader, approver and agent tokens and a
chain named bench-<random>. Point it at a server on this machine only.";

const PRODUCTION_ABOUT: &str = "\
Show what a chain's agents reported over the last complete window (1m, 5m or 1h), per
segment: calls and attempts, retry amplification (attempts / calls), timeout kill rate
(deadline-exceeded attempts / attempts), idempotency-key coverage, the production p99 and
p999 next to the live baseline's, the segment's timeout, whether production drifted from the
baseline (more than 20 % either way), the latency samples and the agents that reported; then
retries by cause and how calls ended. Every figure is the server's; `-` means nothing was
counted. Any role may read.

Example:
  budgetctl production --chain checkout --window 1h
  budgetctl production --chain checkout --json | jq '.segments[] | {segment, p999_ms}'";

const ALERTS_ABOUT: &str = "\
List the alerts budgetd raised from the agents' reports and its own state: retry
amplification, timeout kill rate, production drift, agents refusing a config (NACK) and the
archive backlog. Each fires once and resolves once; the table shows the value that tripped it
next to the rule's threshold, when it fired and when it resolved. --json adds the figures
behind each value (`detail`: the window and its counts). Any role may read.

Example:
  budgetctl alerts --firing";

const WEBHOOK_ADD_ABOUT: &str = "\
Register a receiver of events: budgetd POSTs each event as JSON to HOOK_URL with the header
`X-Budgetd-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the secret>`, and
retries with backoff until the receiver answers 2xx or the attempts run out (see `webhook
deliveries`). Private and loopback addresses are allowed. Needs the admin role; the secret is
never shown again.

HOOK_URL is an argument, not --url: --url is budgetd's own address, as for every command. Prefer
BUDGETD_WEBHOOK_SECRET to --secret, which other users can see in the process list.

Example:
  export BUDGETD_WEBHOOK_SECRET=\"$(cat hook.secret)\"   # the secret the receiver checks
  budgetctl webhook add https://hooks.example.com/budgetd \\
      --event alert.firing --event alert.resolved";

const WEBHOOK_DELIVERIES_ABOUT: &str = "\
Show a webhook's deliveries, newest first (at most 200): the event, its state (pending,
delivered, or failed once the attempts ran out), the attempts made, the receiver's last
status or error, and when the next attempt is due. Needs the admin role.

Example:
  budgetctl webhook deliveries wh-0a1b2c3d4e5f";

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
        /// native, locust, oha, k6, k6_points, artillery, autocannon, jmeter, hdrhistogram or
        /// wrk2 [default: detected]
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
    /// The server's gRPC address; https://… is verified against --ca-cert (only it), or the
    /// system's roots without one
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub grpc: String,
}

mod parse;
#[cfg(test)]
mod tests;
