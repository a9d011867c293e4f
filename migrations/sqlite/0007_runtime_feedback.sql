-- Runtime feedback (SPEC §8): agents' reports merged into per-minute rollups, alerts, webhooks.

-- One row per chain segment, minute and writer (one server process): a replica only ever
-- rewrites its own rows (its running total for that minute), so replicas never contend and a
-- restarted process starts new rows; readers add up the writers of a minute.
CREATE TABLE report_rollups (
    chain                 TEXT NOT NULL,
    segment               TEXT NOT NULL,
    -- Start of the minute, milliseconds since the Unix epoch (UTC).
    minute                BIGINT NOT NULL,
    writer                TEXT NOT NULL,
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
    -- Reporting agents: how many, and up to 64 of their ids (JSON array).
    agent_count           BIGINT NOT NULL,
    agents                TEXT NOT NULL,
    updated_at            TEXT NOT NULL,
    PRIMARY KEY (chain, segment, minute, writer)
);
CREATE INDEX report_rollups_minute ON report_rollups (minute);

-- Alerts: a row per firing; at most one firing row per rule and subject (any replica may
-- evaluate: the unique index makes the firing, and so its events, happen once).
CREATE TABLE alerts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    rule         TEXT NOT NULL,
    chain        TEXT NOT NULL,
    segment      TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('firing', 'resolved')),
    value        TEXT NOT NULL,
    threshold    TEXT NOT NULL,
    -- The figures that tripped the rule (JSON object), and the window they came from.
    detail       TEXT NOT NULL,
    since        TEXT NOT NULL,
    resolved_at  TEXT
);
CREATE UNIQUE INDEX alerts_one_firing ON alerts (rule, chain, segment) WHERE state = 'firing';
CREATE INDEX alerts_since ON alerts (since);

-- Webhook endpoints (admin-registered) and their deliveries: a transactional outbox written
-- with the event it carries, delivered with retry and backoff.
CREATE TABLE webhooks (
    id          TEXT PRIMARY KEY,
    url         TEXT NOT NULL,
    secret      TEXT NOT NULL,
    -- JSON array of event names, or ["*"].
    events      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL
);

CREATE TABLE webhook_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id       TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event            TEXT NOT NULL,
    body             TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         BIGINT NOT NULL,
    last_status      BIGINT,
    last_error       TEXT,
    next_attempt_at  TEXT NOT NULL,
    locked_until     TEXT,
    created_at       TEXT NOT NULL,
    delivered_at     TEXT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (webhook_id, id);
