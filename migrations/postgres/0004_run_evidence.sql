-- The evidence of a run: every uploaded file (name, format, SHA-256, size) and how the load
-- tool's labels were mapped to segments.
ALTER TABLE runs ADD COLUMN sources TEXT NOT NULL DEFAULT '[]';
ALTER TABLE runs ADD COLUMN mapping TEXT;
