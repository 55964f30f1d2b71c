"""Budgets and limits: what a run may spend, reserved before each model call."""
