-- The client library of each agent ("language/version", e.g. "go/0.1.0"), from WatchRequest.client.
-- Empty for agents that do not send it.
ALTER TABLE agents ADD COLUMN client TEXT NOT NULL DEFAULT '';
