-- A publication changes the revisions every agent was sent and accepted. Rather than rewrite
-- each agent's row, the agents of one token watching the same chains on one replica that are
-- at the same revisions follow a cohort row: a publication updates that row, and writes only
-- the agents that fall behind it or run ahead. An agent's revisions are its cohort's when it
-- has one, else its own. A cohort belongs to one replica's process, one token and the chains
-- watched; it is removed once no agent follows it and it has not changed for the retention
-- period.
CREATE TABLE agent_cohorts (
    id          TEXT PRIMARY KEY,
    delivered   BIGINT NOT NULL,
    acked       BIGINT NOT NULL,
    updated_at  TEXT NOT NULL
);
-- Not indexed: joining or leaving a cohort then rewrites no index entry (on PostgreSQL, the
-- update stays on its page), and the only search by cohort is expiry's, every few minutes.
ALTER TABLE agents ADD COLUMN cohort TEXT;
