//! The long help texts of the commands (`--help`), apart from the clap tree that shows them.

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

Wherever a baseline id is taken, `current` (the chain's approved, live baseline) and
`latest-draft` (its newest pending draft) name one with --chain, e.g. `baseline approve
latest-draft --chain checkout`; `run upload --quiet` prints only the id of the draft it opened.

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

pub(super) const ROLLBACK_ABOUT: &str = "\
Republish an older approved (now superseded) baseline of a chain as its live config, under a
new revision. Needs the approver role; a baseline with error findings is refused.";

pub(super) const TOPOLOGY_APPLY_ABOUT: &str = "\
Create or update a chain's topology from a JSON file (schema: /schemas/topology.json).
Each change makes a new version; applying the same document again changes nothing.
Schema violations and call-tree errors are listed with their JSON pointers (exit 4).";

pub(super) const RUN_UPLOAD_ABOUT: &str = "\
Upload a load-test run: budgetd's native JSON (schema: /schemas/run.json), or the files a load
tool wrote — Locust *_stats.csv, oha JSON, k6 summary JSON or raw points (--out json/csv),
Artillery JSON report, autocannon JSON (-j), JMeter JTL, HdrHistogram .hlog (with --unit), wrk2
--latency text — gzip-compressed or not (.gz). The format is detected when unambiguous; --format
names it. Several files make one run (e.g. one oha file per endpoint: inventory=inv.json …).
Tool labels map to segments through the topology's `labels`, or --map LABEL=SEGMENT, quoted
in a shell, which reads `>` as a redirection: --map 'inventory=order->inventory'. Large files
are streamed, with a progress bar on a terminal.

The run is compared with the chain's approved baseline: a p999 (or, for stable segments, a p99)
that moved more than 20 % is drift and opens a draft baseline; the chain's first run always
opens one. Prints the run id, the comparison table and the draft id (`draft: bl-…`), or
\"draft: none\"; with --quiet only the draft id, so scripts can capture it:

  DRAFT=$(budgetctl run upload --quiet --chain checkout run.json)
  budgetctl baseline show \"$DRAFT\"        # or: baseline show latest-draft --chain checkout

--dry-run reads, maps and computes the run exactly as an upload would and shows the label
mapping, the segments, the comparison, whether a draft would open and the budgets and findings
it would hold — and stores nothing (no run, no draft, no archive item).";

pub(super) const APPROVE_ABOUT: &str = "\
Approve a draft baseline: it becomes the chain's live config, published to every agent under a
new revision, and the previous approved baseline is superseded.

Needs the approver role, and the approver must not be whoever uploaded the run (four eyes,
exit 6). A draft with error findings cannot be approved (exit 4, the findings are listed); only
a draft can be approved (exit 5).

With --canary the draft goes first to a share of agents (--canary 10%: agents whose id hashes
below 10 of 100, the same ones every time) or to agents declaring labels (--canary zone=a);
every other agent keeps the live baseline. After --bake (default 5m) it is promoted to every
agent if every canary agent ACKed and none broke the amplification, kill-rate or drift rule; a NACK
or a broken rule aborts it at once (canary agents get the previous baseline back). With
--manual a person decides: budgetctl rollout promote|abort. Follow it with budgetctl rollout
status.";

pub(super) const RELEASE_RECORD_ABOUT: &str = "\
Record that a service's version ships with a baseline's budgets, under a change ticket. The
release keeps the SHA-256 of the baseline document it cites. The baseline must be approved (or
superseded: a release cites a baseline id, not \"whatever is live\"); a draft, rejected or unknown
baseline is refused (exit 4). Needs the uploader, approver or admin role.";

pub(super) const RELEASE_CHECK_ABOUT: &str = "\
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

pub(super) const ARCHIVE_VERIFY_ABOUT: &str = "\
Compare the archive with the store: for every baseline (created on --date, or all of them) the
object {prefix}/{date}/{baseline_id}.json must exist and hold the stored document (same
SHA-256). Lists each baseline whose object is missing, differs or cannot be read, and whether
an upload of it is still queued (archiving is retried until it succeeds).

Exit codes:
  0  every checked baseline is archived as stored
  5  at least one object is missing, differs or cannot be read
Other failures exit as for every command (see budgetctl --help). With --json, the server's
report {date, checked, problems: [...]} is printed in both cases.";

pub(super) const TOKEN_CREATE_ABOUT: &str = "\
Create a token and print its secret. The secret is shown once, and only the secret goes to
stdout, so `T=$(budgetctl token create --role uploader --name uma)` captures it.";

pub(super) const WATCH_ABOUT: &str = "\
Opens N Watch streams (over M HTTP/2 connections) as agents of a fresh benchmark chain, then,
round after round, uploads a run that drifts, approves the new draft, and measures the time from
just before the approve request (its durable commit included) until every stream has received
the new revision, and from the approve response. Prints p50, p99 and max over the rounds, the
approve call's own time, the server's CPU per delivery (uploads and approvals included) and its
resident memory per idle stream (from /metrics, 1.5 s after the streams are open; it includes
code first paged in by the streams, so it reads high for small N, and what opening them freed
and the allocator has not yet given back: --settle S reads it again S seconds later).

Needs an admin token (--token): it creates its own uploader, approver and agent tokens and a
chain named bench-<random>. Point it at a server on this machine only.";

pub(super) const REPORT_ABOUT: &str = "\
Opens N agents (each with a Watch stream of a fresh benchmark chain, as real agents hold) and
has each send one Report per window, at a random moment within a quarter of the window after
its boundary (at most 2.5 s), as the client libraries do. A Report carries one window per
segment of the chain (4), each with a busy histogram (--latencies values spread over 1-100 ms).
Prints how many Reports the server accepted and refused (by gRPC status, with the first
refusal's message), the windows it stored, each Report's time from just before the call to its
answer (the group commit included), the server's CPU per Report and its resident memory
(before, holding the agents, peak while reporting sampled every 100 ms, after; from /metrics).

Needs an admin token (--token): it creates its own uploader, approver and agent tokens and a
chain named bench-<random>. Point it at a server on this machine only.";

pub(super) const PRODUCTION_ABOUT: &str = "\
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

pub(super) const ALERTS_ABOUT: &str = "\
List the alerts budgetd raised from the agents' reports and its own state: retry
amplification, timeout kill rate, production drift, agents refusing a config (NACK) and the
archive backlog. Each fires once and resolves once; the table shows the value that tripped it
next to the rule's threshold, when it fired and when it resolved. --json adds the figures
behind each value (`detail`: the window and its counts). Any role may read.

Example:
  budgetctl alerts --firing";

pub(super) const WEBHOOK_ADD_ABOUT: &str = "\
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

pub(super) const WEBHOOK_DELIVERIES_ABOUT: &str = "\
Show a webhook's deliveries, newest first (at most 200): the event, its state (pending,
delivered, or failed once the attempts ran out), the attempts made, the receiver's last
status or error, and when the next attempt is due. Needs the admin role.

Example:
  budgetctl webhook deliveries wh-0a1b2c3d4e5f";

pub(super) const BASELINE_REF_HELP: &str = "\
ID is a baseline id (bl-YYYYMMDD-NNN), or with --chain CHAIN one of:
  current       the chain's approved baseline, the one live now
  latest-draft  the chain's newest pending draft (a new draft supersedes older ones)
budgetctl resolves the alias to an id first (GET /chains/CHAIN/baselines?state=…) and acts on
that id; a chain without such a baseline exits 3. With an id, --chain is checked: a baseline of
another chain exits 5.";
