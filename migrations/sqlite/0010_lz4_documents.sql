-- PostgreSQL's 0010 compresses large JSON text with lz4 instead of pglz. SQLite stores text
-- uncompressed, so its schema does not change; this file keeps the two folders in step.
SELECT 1;
