-- Canary rollouts (SPEC §9): an approval may publish to a subset of agents first.
--
-- One row per baseline approved with a rollout. The canary publication (kind 'canary') is the
-- chain's newest while the row is 'baking'; every other agent keeps the chain's newest
-- publication of another kind (previous_revision). Promote and abort each publish a new
-- revision (kinds 'promote' and 'abort') for everyone, recorded in end_revision.
CREATE TABLE rollouts (
    baseline_id           TEXT PRIMARY KEY,
    chain                 TEXT NOT NULL,
    revision              BIGINT NOT NULL,
    previous_baseline_id  TEXT NOT NULL,
    previous_revision     BIGINT NOT NULL,
    -- {"percent": N} or {"labels": {...}}
    selector              TEXT NOT NULL,
    bake_s                BIGINT NOT NULL,
    auto                  BIGINT NOT NULL,
    state                 TEXT NOT NULL CHECK (state IN ('baking', 'promoted', 'aborted')),
    started_at            TEXT NOT NULL,
    started_by            TEXT NOT NULL,
    bake_ends_at          TEXT NOT NULL,
    ended_at              TEXT,
    ended_by              TEXT,
    reason                TEXT,
    end_revision          BIGINT,
    -- What decided, frozen when it ended (JSON: members, acked, health); null while baking
    -- and for a canary a rollback ended.
    figures               TEXT
);
CREATE INDEX rollouts_state ON rollouts (state);

-- What canary agents reported during the bake, per segment: one row per writer (server
-- process) and rollup (`minute`, its start in Unix milliseconds, as report_rollups; -1 for the
-- whole bake so far), its running totals, rewritten by that process only; readers add up the
-- writers.
CREATE TABLE canary_health (
    baseline_id           TEXT NOT NULL,
    segment               TEXT NOT NULL,
    writer                TEXT NOT NULL,
    minute                BIGINT NOT NULL,
    calls                 BIGINT NOT NULL,
    attempts              BIGINT NOT NULL,
    retries_deadline      BIGINT NOT NULL,
    retries_unavailable   BIGINT NOT NULL,
    ok                    BIGINT NOT NULL,
    deadline_exceeded     BIGINT NOT NULL,
    unavailable           BIGINT NOT NULL,
    business_error        BIGINT NOT NULL,
    budget_exhausted      BIGINT NOT NULL,
    retry_refused_no_key  BIGINT NOT NULL,
    -- Successful attempts' latencies (µs): HdrHistogram V2 compressed, base64.
    latency_hdr           TEXT NOT NULL,
    updated_at            TEXT NOT NULL,
    PRIMARY KEY (baseline_id, segment, writer, minute)
);
CREATE INDEX canary_health_minute ON canary_health (minute);

-- Canary agents that refused the canary's revision (NACK), recorded when the NACK arrives and
-- kept: a later ACK of another revision does not clear it.
CREATE TABLE canary_nacks (
    baseline_id           TEXT NOT NULL,
    agent_id              TEXT NOT NULL,
    error                 TEXT NOT NULL,
    at                    TEXT NOT NULL,
    PRIMARY KEY (baseline_id, agent_id)
);
