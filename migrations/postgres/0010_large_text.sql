-- Archive items that were uploaded or superseded keep no copy of their body (the baseline's
-- document): they are never uploaded again. New items are cleared by the store when they end;
-- this clears the ones before.
UPDATE archive_outbox SET body = '' WHERE state <> 'pending';

-- Large JSON text is compressed with lz4 rather than PostgreSQL's default pglz. A baseline
-- document of a 1 000-segment chain is about 0.9 MB of pretty JSON, and an upload that opened a
-- draft wrote four of them (the draft, the draft it supersedes, both archive items): pglz took
-- about 7 ms a document to compress, lz4 about half of that. Rows written before keep pglz
-- (PostgreSQL reads both). A server built without lz4 keeps pglz and says so in a notice.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE baselines ALTER COLUMN document SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE archive_outbox ALTER COLUMN body SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE runs ALTER COLUMN data SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE topology_versions ALTER COLUMN document SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE idempotency_keys ALTER COLUMN body SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE idempotency_keys ALTER COLUMN result SET COMPRESSION lz4';
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 compression is not available (%); large text keeps pglz', SQLERRM;
END
$$;
