-- Archive items that were uploaded or superseded keep no copy of their body (the baseline's
-- document, about a megabyte for a 1 000-segment chain): they are never uploaded again, and a
-- done item's row is rewritten whole when its state changes. New items are cleared by the store
-- when they end; this clears the ones before.
UPDATE archive_outbox SET body = '' WHERE state <> 'pending';
