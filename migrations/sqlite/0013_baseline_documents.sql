-- A baseline's document (about 0.9 MB of pretty JSON for a 1,000-segment chain) moves to a
-- table of its own, written when the baseline is created and when a decision is recorded.
-- A state change without a decision (a draft superseded by the next upload, the approved
-- baseline by the next approval, a rollback, a canary's abort) updates the baseline's row
-- alone: SQLite rewrites a whole row, large values included, on any update of it, and every
-- upload supersedes a draft. (An SQLite store serves one process, which an upgrade restarts;
-- PostgreSQL's 0013 keeps the document in its row for the replicas still running.)
CREATE TABLE baseline_documents (
    baseline_id TEXT PRIMARY KEY REFERENCES baselines (id),
    document    TEXT NOT NULL
);
INSERT INTO baseline_documents (baseline_id, document) SELECT id, document FROM baselines;
ALTER TABLE baselines DROP COLUMN document;
-- 1: the stored document's `state` and `superseded_by` are behind the row's, and are rendered
-- from them when it is read (the row's `sha256` is that of the rendered bytes); 0 or null: the
-- stored document is the baseline's as it is.
ALTER TABLE baselines ADD COLUMN document_behind BIGINT;
