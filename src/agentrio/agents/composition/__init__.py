"""Composition: subagents, agents as tools, maps, helpers, and responding (route, escalate)."""
