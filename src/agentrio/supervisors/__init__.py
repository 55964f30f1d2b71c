"""Supervision: strategies and restart intensity, the runtime, budgets and limits."""
