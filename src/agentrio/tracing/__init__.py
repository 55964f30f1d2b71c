"""Trace files: every event of a runtime as one JSON line, and what reads them.

``open_runtime(trace="run.jsonl")`` writes the trace (see
[`TraceWriter`][agentrio.tracing.TraceWriter]);
[`read_trace`][agentrio.tracing.read_trace] yields its records back, typed;
``agentrio trace FILE`` prints it as a tree and ``--html`` draws it.
"""

from __future__ import annotations

from .reader import MAX_LINE_BYTES, TraceReader, TraceRecord, read_trace
from .writer import BATCH, FLUSH_INTERVAL, MAX_PENDING, TraceWriter

__all__ = [
    "BATCH",
    "FLUSH_INTERVAL",
    "MAX_LINE_BYTES",
    "MAX_PENDING",
    "TraceReader",
    "TraceRecord",
    "TraceWriter",
    "read_trace",
]
