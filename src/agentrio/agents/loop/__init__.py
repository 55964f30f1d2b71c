"""The agent loop: the spec, the agent actor, its phases (model and tool calls), its context."""
