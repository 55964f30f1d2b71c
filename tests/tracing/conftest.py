"""Fixtures of the tracing tests: a synthetic trace of many agents."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentrio import events
from agentrio.messages import Usage
from agentrio.tracing import TraceRecord

HOSTILE = "</script><img src=x onerror=\"document.body.dataset.error='xss'\">&amp;"


def synthetic(agents: int, *, budget: int | None = None) -> list[TraceRecord]:
    """*agents* agents under team/, one phase each: every 7th ends with an error (a
    hostile text), every 5th with max_iterations; agent i takes i milliseconds.

    With *budget*, the trace begins with the runtime's (``max_total_tokens``), and
    every 3rd agent waits for the budget before its model call (a sixth of its
    time), every 4th at its provider within it (a tenth): for a slot of its
    ``max_concurrent`` (every 8th from the 4th), else for a rate limit."""
    out: list[TraceRecord] = []
    t = 1_000.0
    if budget is not None:
        out.append(TraceRecord(t, events.RuntimeOpened(path="", max_total_tokens=budget)))
    for i in range(agents):
        p = f"team/agent-{i}"
        d = i / 1000
        waits = budget is not None
        out.append(TraceRecord(t, events.ActorStarted(path=p)))
        out.append(TraceRecord(t, events.PhaseStarted(path=p)))
        if waits and i % 3 == 0:
            out.append(TraceRecord(t + d / 6, events.Waited(path=p, what="budget", seconds=d / 6)))
        turn = t + d / 6 if waits else t
        out.append(TraceRecord(turn, events.TurnStarted(path=p, iteration=1)))
        if waits and i % 4 == 0:
            what = "concurrency" if i % 8 == 4 else "rate_limit"
            wait = events.Waited(path=p, what=what, seconds=d / 10, provider="openai")
            out.append(TraceRecord(t + d / 3, wait))
        usage = Usage(input_tokens=10, output_tokens=5, cost_usd=0.001)
        out.append(TraceRecord(t + d / 3, events.TurnEnded(path=p, iteration=1, usage=usage)))
        out.append(TraceRecord(t + d / 3, events.ToolStarted(path=p, tool="grep", call_id="c")))
        out.append(TraceRecord(t + d / 2, events.ToolEnded(path=p, tool="grep", call_id="c")))
        stop = "done"
        if i % 7 == 3:
            stop = "error"
            out.append(
                TraceRecord(t + d, events.PhaseError(path=p, error_type="Boom", error=HOSTILE))
            )
        elif i % 5 == 1:
            stop = "max_iterations"
            out.append(TraceRecord(t + d, events.BudgetExhausted(path=p, limit="max_total_tokens")))
        out.append(TraceRecord(t + d, events.PhaseEnded(path=p, stop_reason=stop, iterations=1)))
    return out


@pytest.fixture
def make_trace() -> Callable[..., list[TraceRecord]]:
    """``synthetic``, as a fixture."""
    return synthetic
