"""Observation: OpenTelemetry spans and metrics of phases, model calls and tool calls."""
