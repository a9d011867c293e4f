-- A new draft of a chain supersedes the chain's older pending drafts, and only the chain's
-- newest baseline can be approved.
--
-- superseded_by: what replaced a superseded baseline (the newer draft, or the baseline approved
-- or rolled back to after it); null otherwise, and for baselines superseded before this column.
ALTER TABLE baselines ADD COLUMN superseded_by TEXT;
-- chain_seq: the baseline's place among its chain's baselines in commit order (a per-chain
-- counter drawn in the inserting transaction, the chain's row locked), which clocks of several
-- replicas cannot give; null for baselines created before this column, which come first.
ALTER TABLE baselines ADD COLUMN chain_seq BIGINT;
CREATE INDEX baselines_chain_seq ON baselines (chain, chain_seq);
