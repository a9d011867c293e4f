-- The last report id stored per agent (hex of 16 random bytes), so that a report sent again
-- after its answer was lost is not counted twice: written in the transaction of the rollups
-- that counted the report. `stored_ms` is that commit's time (Unix ms); rows of agents that
-- stopped reporting go with the rollups' retention.
CREATE TABLE agent_reports (
    agent_id   TEXT PRIMARY KEY,
    report_id  TEXT NOT NULL,
    stored_ms  BIGINT NOT NULL
);
