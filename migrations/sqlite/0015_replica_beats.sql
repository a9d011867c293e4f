-- Fleet status shows an agent `connected` only while the replica process it streams from is
-- alive: each process (one run of a replica, unique even when replicas share a name) rewrites
-- its row here every few seconds, and an agent's entry names its process. An entry whose
-- process stopped beating (killed, host lost) reads as disconnected; entries written before
-- this version name no process and are shown as written.
CREATE TABLE replica_beats (
    process  TEXT PRIMARY KEY,
    replica  TEXT NOT NULL,
    beat_at  TEXT NOT NULL
);
ALTER TABLE agents ADD COLUMN process TEXT;
