-- The agents that have refused a revision, for the alert evaluator's read of those still
-- refusing one (every `feedback.evaluate_every_ms`, 10 s by default): an index of those agents
-- alone, in agent-id order as the read returns them, so that the read does not go through
-- every agent of the fleet. A refusal stays on its agent's row (until the agent refuses
-- another revision), so the index holds every agent that ever refused one.
CREATE INDEX agents_nacking ON agents (agent_id) WHERE nack_revision IS NOT NULL;
