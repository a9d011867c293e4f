-- A run's latency distributions (issue 17: kill rates, what-if) live beside its percentiles,
-- not inside them: a histogram is kilobytes per segment, and listing a chain's runs reads
-- `data` only. JSON: segment id → {"kind": "histogram", "hdr"} or {"kind": "percentiles",
-- "points"}; null for a run without any.
ALTER TABLE runs ADD COLUMN distributions TEXT;
DO $$
BEGIN
    EXECUTE 'ALTER TABLE runs ALTER COLUMN distributions SET COMPRESSION lz4';
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 compression is not available (%); distributions keep pglz', SQLERRM;
END
$$;
