-- Transactional outbox of archive uploads: written in the same transaction as the baseline
-- change it archives; a worker uploads it with backoff until it succeeds.
CREATE TABLE archive_outbox (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    baseline_id      TEXT NOT NULL REFERENCES baselines (id),
    object_key       TEXT NOT NULL,
    body             TEXT NOT NULL,
    sha256           TEXT NOT NULL,
    -- pending → done; or superseded when a newer item for the same key replaced it
    state            TEXT NOT NULL CHECK (state IN ('pending', 'done', 'superseded')),
    attempts         BIGINT NOT NULL,
    last_error       TEXT,
    next_attempt_at  TEXT NOT NULL,
    locked_until     TEXT,
    created_at       TEXT NOT NULL,
    archived_at      TEXT
);
CREATE INDEX archive_outbox_pending ON archive_outbox (state, next_attempt_at);
CREATE INDEX archive_outbox_key ON archive_outbox (object_key, state);
CREATE INDEX archive_outbox_baseline ON archive_outbox (baseline_id, id);

-- Releases citing a baseline, with the SHA-256 of the document they cited.
CREATE TABLE releases (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    service          TEXT NOT NULL,
    version          TEXT NOT NULL,
    baseline_id      TEXT NOT NULL REFERENCES baselines (id),
    baseline_sha256  TEXT NOT NULL,
    ticket           TEXT NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL
);
CREATE INDEX releases_baseline ON releases (baseline_id, id);
CREATE INDEX releases_service ON releases (service, id);
