-- A publication changes the revisions every agent was sent and accepted. Rather than rewrite
-- each agent's row, the agents of one token on one replica that are at the same revisions
-- follow a cohort row: a publication updates that row, and writes only the agents that fall
-- behind it or run ahead. An agent's revisions are its cohort's when it has one, else its own.
-- A cohort belongs to one replica's process and one token; it is removed once no agent follows
-- it and it has not changed for the retention period.
CREATE TABLE agent_cohorts (
    id          TEXT PRIMARY KEY,
    delivered   BIGINT NOT NULL,
    acked       BIGINT NOT NULL,
    updated_at  TEXT NOT NULL
);
ALTER TABLE agents ADD COLUMN cohort TEXT;
CREATE INDEX agents_cohort ON agents (cohort);
