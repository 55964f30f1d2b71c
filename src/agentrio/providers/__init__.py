"""Talking to models: the Model protocol (HTTP providers come with the next issue)."""
