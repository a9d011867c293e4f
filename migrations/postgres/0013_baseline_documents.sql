-- A baseline's document is read and written through `baseline_documents`. On SQLite (one
-- process) that is a table of its own, so that a state change without a decision updates the
-- baseline's row without rewriting its document. On PostgreSQL, where replicas of the previous
-- version keep running on the migrated database during a rolling upgrade, the document stays
-- in its baseline's row, which those replicas read and write: `baseline_documents` is a view
-- of it (updatable; an insert writes the row's document), and the store writes the document
-- on every state change here, so `document_behind` is never set.
ALTER TABLE baselines ALTER COLUMN document SET DEFAULT '';
-- 1: the stored document's `state` and `superseded_by` are behind the row's, and are rendered
-- from them when it is read (the row's `sha256` is that of the rendered bytes); 0 or null: the
-- stored document is the baseline's as it is.
ALTER TABLE baselines ADD COLUMN document_behind BIGINT;
CREATE VIEW baseline_documents AS SELECT id AS baseline_id, document FROM baselines;
CREATE FUNCTION baseline_documents_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE baselines SET document = NEW.document WHERE id = NEW.baseline_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'baseline % does not exist', NEW.baseline_id USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER baseline_documents_insert INSTEAD OF INSERT ON baseline_documents
    FOR EACH ROW EXECUTE FUNCTION baseline_documents_insert();
