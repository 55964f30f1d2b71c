"""agentrio's logging, as a library's: a NullHandler, and what each record carries.

The package's logger (``agentrio``) gets a `logging.NullHandler`, so that a
program that configures no logging sees nothing (Python's last-resort
handler is not used); a program that does (``logging.basicConfig()``) sees
agentrio's records as any library's.

Each record agentrio writes carries, as ``extra`` fields: ``agentrio_path``,
the path of the actor it concerns (the agent whose task logs it, or the
actor named in it; ``""`` when none), and, while an OpenTelemetry span is
current (the runtime's ``otel=``, or the program's own), ``otelTraceID`` and
``otelSpanID`` as OpenTelemetry's logging instrumentation names them (which,
when it is on, sets them itself).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from contextvars import ContextVar

__all__ = ["ACTOR_PATH", "log_extra"]

logging.getLogger("agentrio").addHandler(logging.NullHandler())

# The path of the actor whose task runs (set once when its task starts; the
# tasks it starts inherit it): who a provider's retry was for, say.
ACTOR_PATH: ContextVar[str] = ContextVar("agentrio_actor_path", default="")


def log_extra(path: str | None = None) -> dict[str, str]:
    """The ``extra`` fields of a record about *path* (None: the running actor's)."""
    fields = {"agentrio_path": ACTOR_PATH.get() if path is None else path}
    trace = sys.modules.get("opentelemetry.trace")  # (not imported: OpenTelemetry is off)
    # OpenTelemetry's logging instrumentation installs a record factory that sets
    # the two ids itself (extra may not set them again); other factories (Ray's,
    # once agentrio.ray imports it) do not.
    if trace is not None and not _factory_sets_ids(logging.getLogRecordFactory()):
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            fields["otelTraceID"] = format(context.trace_id, "032x")
            fields["otelSpanID"] = format(context.span_id, "016x")
    return fields


_probed: list[tuple[object, bool]] = []  # (the last record factory probed, its answer)


def _factory_sets_ids(factory: Callable[..., logging.LogRecord]) -> bool:
    """Does the record factory *factory* set ``otelSpanID`` itself? (Asked of one
    record it makes, once per factory.)"""
    if factory is logging.LogRecord:
        return False
    if _probed and _probed[0][0] is factory:
        return _probed[0][1]
    record = factory("agentrio", logging.DEBUG, "", 0, "", (), None)
    answer = hasattr(record, "otelSpanID")
    _probed[:] = [(factory, answer)]
    return answer
