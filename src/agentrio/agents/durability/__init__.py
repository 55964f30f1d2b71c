"""Durability: a durable agent's checkpoint records, a phase's recording, resuming it."""
