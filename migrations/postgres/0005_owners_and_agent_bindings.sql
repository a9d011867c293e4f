-- People, not token names (SPEC §7): every token belongs to an owner (a person or a pipeline),
-- and each run records the owner of the token that uploaded it, so four eyes compares owners.
-- Existing tokens and runs get the token name as owner (the default for new tokens too).
ALTER TABLE api_tokens ADD COLUMN owner TEXT;
UPDATE api_tokens SET owner = name;
ALTER TABLE runs ADD COLUMN uploaded_by_owner TEXT;
UPDATE runs SET uploaded_by_owner = uploaded_by;

-- Agents are bound to their token: the hash of the token that first watched an agent_id.
-- Existing entries are unbound (the next token to watch them claims them).
ALTER TABLE agents ADD COLUMN token_hash TEXT;
-- Expiry of agents gone longer than the retention period, and the pages of GET /agents.
CREATE INDEX agents_last_seen ON agents (last_seen);
CREATE INDEX agents_page ON agents (service, agent_id);
-- Pages of GET /chains/{chain}/baselines, newest first.
CREATE INDEX baselines_page ON baselines (chain, created_at, id);
