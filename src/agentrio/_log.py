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
from types import CodeType

import trio

__all__ = ["ACTOR_TASKS", "actor_path", "log_extra"]

logging.getLogger("agentrio").addHandler(logging.NullHandler())

# The code objects of the functions an actor's task runs (the supervisors' add
# theirs): a task running one is an actor's, and its name is the actor's path.
# Found by walking up from the running task when a record is made, rather than
# set in a context variable when each actor starts (a context of its own on
# each of 10k actors, ~120 bytes, for records most never write).
ACTOR_TASKS: set[CodeType] = set()


def actor_path() -> str:
    """The path of the actor whose task runs now, or whose task started the one
    that runs (through its nurseries); ``""`` if none does."""
    try:
        task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    except RuntimeError:  # (not in Trio: a thread's record)
        return ""
    while task is not None:
        if getattr(task.coro, "cr_code", None) in ACTOR_TASKS:
            return task.name
        nursery = task.parent_nursery
        task = None if nursery is None else nursery.parent_task
    return ""


def log_extra(path: str | None = None) -> dict[str, str]:
    """The ``extra`` fields of a record about *path* (None: the running actor's)."""
    fields = {"agentrio_path": actor_path() if path is None else path}
    trace = sys.modules.get("opentelemetry.trace")  # (not imported: OpenTelemetry is off)
    # A record factory may be OpenTelemetry's logging instrumentation, which sets
    # the two ids itself (extra may not set them again); another one (Ray's, say,
    # which `import ray` installs) does not, and they are set here as usual.
    if trace is not None and not _factory_sets_ids(logging.getLogRecordFactory()):
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            fields["otelTraceID"] = format(context.trace_id, "032x")
            fields["otelSpanID"] = format(context.span_id, "016x")
    return fields


_FACTORY_SETS_IDS: dict[object, bool] = {logging.LogRecord: False}


def _factory_sets_ids(factory: object) -> bool:
    """Whether the records *factory* makes carry ``otelTraceID`` already (asked once)."""
    known = _FACTORY_SETS_IDS.get(factory)
    if known is None:
        try:
            record = factory("agentrio", logging.DEBUG, "", 0, "", (), None)  # type: ignore[operator]
            known = hasattr(record, "otelTraceID")
        except Exception:  # a factory of the program's that fails: let logging say so
            known = False
        if len(_FACTORY_SETS_IDS) < 16:  # (a program swapping factories keeps few)
            _FACTORY_SETS_IDS[factory] = known
    return known
