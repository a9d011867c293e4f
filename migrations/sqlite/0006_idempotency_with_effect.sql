-- An Idempotency-Key's record is written in the transaction of the effect it records:
-- `result` holds the store's result (JSON) so a repeat whose first response was lost answers
-- the committed result instead of writing again. Records of requests that never committed
-- (the old in-flight rows, without a status) are dropped: their keys run afresh.
DELETE FROM idempotency_keys WHERE status IS NULL;
ALTER TABLE idempotency_keys ADD COLUMN result TEXT;
