-- The agents whose last word on a revision was a NACK, for the alert evaluator's read (every
-- `feedback.evaluate_every_ms`, 10 s by default): an index of those agents alone, in agent-id
-- order as the read returns them, so that the read does not go through every agent of the
-- fleet to find the few that refused.
CREATE INDEX agents_nacking ON agents (agent_id) WHERE nack_revision IS NOT NULL;
