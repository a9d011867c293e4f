-- budgetd initial schema (PostgreSQL). Timestamps are RFC 3339 UTC text, documents are JSON text.

CREATE TABLE chains (
    name        TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE TABLE topology_versions (
    chain       TEXT NOT NULL REFERENCES chains (name),
    version     BIGINT NOT NULL,
    document    TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (chain, version)
);

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    chain            TEXT NOT NULL REFERENCES chains (name),
    topology_version BIGINT NOT NULL,
    format           TEXT NOT NULL,
    tool             TEXT,
    note             TEXT,
    source_sha256    TEXT NOT NULL,
    source_size      BIGINT NOT NULL,
    data             TEXT NOT NULL,
    uploaded_by      TEXT NOT NULL,
    created_at       TEXT NOT NULL
);
CREATE INDEX runs_chain ON runs (chain, created_at);

CREATE TABLE baselines (
    id               TEXT PRIMARY KEY,
    chain            TEXT NOT NULL REFERENCES chains (name),
    run_id           TEXT NOT NULL REFERENCES runs (id),
    topology_version BIGINT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('draft', 'approved', 'superseded', 'rejected')),
    reason           TEXT NOT NULL,
    has_errors       BIGINT NOT NULL,
    document         TEXT NOT NULL,
    sha256           TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    created_by       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX baselines_chain ON baselines (chain, state);
-- At most one approved baseline per chain.
CREATE UNIQUE INDEX baselines_one_approved ON baselines (chain) WHERE state = 'approved';

CREATE TABLE publications (
    revision     BIGINT PRIMARY KEY,
    chain        TEXT NOT NULL REFERENCES chains (name),
    baseline_id  TEXT NOT NULL REFERENCES baselines (id),
    kind         TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX publications_chain ON publications (chain, revision);

CREATE TABLE approvals (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    baseline_id  TEXT NOT NULL REFERENCES baselines (id),
    decision     TEXT NOT NULL,
    actor        TEXT NOT NULL,
    comment      TEXT,
    created_at   TEXT NOT NULL
);

CREATE TABLE audit_log (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       TEXT NOT NULL,
    actor    TEXT NOT NULL,
    action   TEXT NOT NULL,
    chain    TEXT,
    subject  TEXT,
    detail   TEXT NOT NULL
);
CREATE INDEX audit_log_chain ON audit_log (chain, id);

CREATE TABLE idempotency_keys (
    principal     TEXT NOT NULL,
    key           TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    status        BIGINT,
    content_type  TEXT,
    body          TEXT,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (principal, key)
);

CREATE TABLE api_tokens (
    name        TEXT PRIMARY KEY,
    role        TEXT NOT NULL CHECK (role IN ('reader', 'uploader', 'approver', 'agent', 'admin')),
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL
);

-- Human-readable ids (bl-YYYYMMDD-NNN) and publication revisions come from locked counters.
CREATE TABLE counters (
    scope  TEXT PRIMARY KEY,
    n      BIGINT NOT NULL
);
