"""Routing: modes (presets of a run's limits) and the router that picks mode and tier."""
