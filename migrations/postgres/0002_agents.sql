-- Fleet status: every agent seen by any replica, with what it was sent and what it acknowledged.
CREATE TABLE agents (
    agent_id        TEXT PRIMARY KEY,
    service         TEXT NOT NULL,
    labels          TEXT NOT NULL,
    chains          TEXT NOT NULL,
    replica         TEXT NOT NULL,
    connected       BIGINT NOT NULL,
    delivered       BIGINT NOT NULL,
    acked           BIGINT NOT NULL,
    nack_revision   BIGINT,
    nack_error      TEXT,
    first_seen      TEXT NOT NULL,
    last_seen       TEXT NOT NULL
);
