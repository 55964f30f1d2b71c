"""The Chrome trace event format (what the Perfetto UI and chrome://tracing open):
the documented fields of each event, slices that nest, JSON-safe text, an atomic write.

The format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentrio import events
from agentrio.errors import TraceError
from agentrio.messages import Usage
from agentrio.tracing import TraceRecord
from agentrio.tracing._spans import KINDS
from agentrio.tracing.perfetto import LANES, NAME_CHARS, PID, chrome_trace, encode, write_perfetto

Make = Callable[..., list[TraceRecord]]
PHASES = {"X", "i", "M", "C"}


def _events(records: list[TraceRecord]) -> list[dict[str, Any]]:
    data = json.loads(encode(chrome_trace(records)).decode("utf-8"))
    assert set(data) == {"traceEvents", "displayTimeUnit"} and data["displayTimeUnit"] == "ms"
    return data["traceEvents"]  # type: ignore[no-any-return]


def _threads(trace: list[dict[str, Any]]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace if e["name"] == "thread_name"}


def _check_shape(event: dict[str, Any]) -> None:
    """The fields the format documents for each kind of event we write."""
    assert event["ph"] in PHASES and event["pid"] == PID and isinstance(event["tid"], int)
    assert isinstance(event["name"], str) and event["name"]
    if event["ph"] == "M":
        assert event["name"] in {"process_name", "thread_name", "thread_sort_index"}
        assert set(event["args"]) <= {"name", "sort_index"}
        return
    assert isinstance(event["ts"], int) and event["ts"] >= 0  # microseconds
    if event["ph"] == "X":
        assert isinstance(event["dur"], int) and event["dur"] >= 0
    if event["ph"] == "i":
        assert event["s"] == "t"  # an instant of its thread
    if event["ph"] in {"X", "i"}:
        assert event["cat"] in KINDS
        assert event["name"].split(":")[0] == KINDS[event["cat"]][0]  # the legend's word
    if event["ph"] == "C":
        assert event["name"] == "tokens" and isinstance(event["args"]["tokens"], int)


def _nested(slices: list[dict[str, Any]]) -> bool:
    """Whether *slices* (of one thread) nest: each ends before the next begins, or
    holds it whole."""
    ends: list[int] = []
    for s in sorted(slices, key=lambda s: (s["ts"], -s["dur"])):
        while ends and ends[-1] <= s["ts"]:
            ends.pop()
        if ends and s["ts"] + s["dur"] > ends[-1]:
            return False
        ends.append(s["ts"] + s["dur"])
    return True


def test_every_event_has_the_documented_fields(make_trace: Make) -> None:
    trace = _events(make_trace(20, budget=900))
    for event in trace:
        _check_shape(event)
    assert {e["ph"] for e in trace} == PHASES
    assert trace[0] == {
        "name": "process_name",
        "ph": "M",
        "pid": PID,
        "tid": 0,
        "args": {"name": "agentrio run"},
    }


def test_agents_are_threads_in_natural_order(make_trace: Make) -> None:
    trace = _events(make_trace(12))
    threads = _threads(trace)
    assert [threads[t] for t in sorted(threads)] == [f"team/agent-{i}" for i in range(12)]
    order = {e["tid"]: e["args"]["sort_index"] for e in trace if e["name"] == "thread_sort_index"}
    assert sorted(order, key=order.__getitem__) == sorted(threads)
    used = {e["tid"] for e in trace if e["ph"] in {"X", "i"}}
    assert used <= set(threads)  # every slice's thread is named


def test_calls_and_waits_are_slices_nested_in_their_phase(make_trace: Make) -> None:
    trace = _events(make_trace(12, budget=900))
    agent8 = {v: k for k, v in _threads(trace).items()}["team/agent-8"]
    slices = [e for e in trace if e["ph"] == "X" and e["tid"] == agent8]
    assert sorted(s["name"].split(":")[0] for s in slices) == [
        "model call",
        "phase",
        "tool call",
        "wait",
    ]
    named = {s["cat"]: s for s in slices}
    assert named["phase"]["ts"] == 0 and named["phase"]["dur"] == 8000  # 8 ms, in µs
    assert named["wait"]["name"] == "wait: for rate_limit at openai"
    assert named["model"]["name"] == "model call: turn 1, 10 in, 5 out, $0.0010"
    assert named["tool"]["name"] == "tool call: grep, ok"
    model, wait = named["model"], named["wait"]
    assert model["ts"] <= wait["ts"] and wait["ts"] + wait["dur"] <= model["ts"] + model["dur"]
    threads = {e["tid"] for e in trace if e["ph"] == "X"}
    for tid in threads:
        assert _nested([e for e in trace if e["ph"] == "X" and e["tid"] == tid])
    concurrency = [e for e in trace if e.get("name") == "wait: for concurrency at openai"]
    assert len(concurrency) == 1  # agent-4's: a wait, as the others


def test_errors_stalls_and_refusals_are_instants(make_trace: Make) -> None:
    trace = _events(make_trace(12))
    instants = [e for e in trace if e["ph"] == "i"]
    assert {e["cat"] for e in instants} == {"error", "budget"}
    error = next(e for e in instants if e["cat"] == "error")
    assert error["name"].startswith("error: Boom: </script><img")  # text, kept whole
    stalled = [TraceRecord(1.0, events.Stalled(path="a", why="loop"))]
    assert [e["name"] for e in _events(stalled) if e["ph"] == "i"] == ["stalled: loop"]


def test_parallel_tool_calls_go_to_a_second_thread_of_their_agent() -> None:
    def tool(t: float, event: type[events.ToolStarted | events.ToolEnded], call: str) -> Any:
        return TraceRecord(t, event(path="a", tool="fetch", call_id=call))

    records = [
        TraceRecord(0.0, events.PhaseStarted(path="a")),
        tool(0.1, events.ToolStarted, "1"),
        tool(0.2, events.ToolStarted, "2"),
        tool(0.3, events.ToolEnded, "1"),
        tool(0.4, events.ToolEnded, "2"),
        TraceRecord(0.5, events.PhaseEnded(path="a")),
    ]
    trace = _events(records)
    threads = _threads(trace)
    assert sorted(threads.values()) == ["a", "a #2"]
    for tid in threads:
        mine = [e for e in trace if e["ph"] == "X" and e["tid"] == tid]
        assert mine and _nested(mine)
    second = {v: k for k, v in threads.items()}["a #2"]
    (moved,) = [e for e in trace if e["ph"] == "X" and e["tid"] == second]
    assert (moved["ts"], moved["dur"]) == (200_000, 200_000)


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_every_string_is_json_safe() -> None:
    hostile = 'bad \ud800 "quoted" \\ \x00\x1b[2J\u2028</script>'
    records = [
        TraceRecord(1.0, events.PhaseStarted(path="team/\ud800")),
        TraceRecord(1.5, events.PhaseError(path="team/\ud800", error_type="X", error=hostile)),
        TraceRecord(2.0, events.Stalled(path="team/b", why="y" * (NAME_CHARS + 1))),
        TraceRecord(
            2.0,
            events.TurnEnded(path="team/b", iteration=1, usage=Usage(1, 1)),
        ),
    ]
    raw = encode(chrome_trace(records))
    text = raw.decode("utf-8")  # strict: no lone surrogate made it to the bytes
    assert "\x00" not in text and "\x1b" not in text  # control characters are escaped
    trace = json.loads(text)
    for string in _strings(trace):
        string.encode("utf-8")  # each one valid
    (error,) = [e for e in trace["traceEvents"] if e.get("cat") == "error"]
    assert error["name"] == 'error: X: bad \ufffd "quoted" \\ \x00\x1b[2J\u2028</script>'
    assert "team/\ufffd" in _threads(trace["traceEvents"]).values()
    (stall,) = [e for e in trace["traceEvents"] if e.get("cat") == "stall"]
    assert stall["name"] == "stalled" and stall["args"]["detail"] == "y" * (NAME_CHARS + 1)


def test_written_atomically(
    make_trace: Make, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run.json"
    write_perfetto(make_trace(5), out)
    assert json.loads(out.read_bytes())["traceEvents"]
    out.write_text("the old one")

    def broken() -> Iterator[TraceRecord]:
        yield from make_trace(5)
        raise TraceError("trace file 'x', line 21: not a record")

    with pytest.raises(TraceError):
        write_perfetto(broken(), out)
    assert out.read_text() == "the old one"  # untouched

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # the disk fills as the new file is written
    with pytest.raises(OSError, match="No space"):
        write_perfetto(make_trace(5), out)
    assert out.read_text() == "the old one"  # the old file or the new, never a part
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temporary left


def test_an_agent_has_at_most_lanes_threads() -> None:
    calls = 3 * LANES  # every call overlapping every other: a lane each, were there no bound
    records = [TraceRecord(0.0, events.PhaseStarted(path="a"))]
    records += [
        TraceRecord(i / 1000, events.ToolStarted(path="a", tool="t", call_id=str(i)))
        for i in range(calls)
    ]
    records += [
        TraceRecord(1 + i / 1000, events.ToolEnded(path="a", tool="t", call_id=str(i)))
        for i in range(calls)
    ]
    trace = _events(records)
    assert len(_threads(trace)) == LANES
    assert sum(e["ph"] == "X" for e in trace) == calls + 1  # none left out (and the phase)


def test_what_the_trace_left_open_ends_with_it() -> None:
    records = [  # the process died in a tool call
        TraceRecord(1.0, events.PhaseStarted(path="a")),
        TraceRecord(1.5, events.ToolStarted(path="a", tool="sh", call_id="c7")),
        TraceRecord(3.0, events.Stalled(path="b", why="loop")),
    ]
    slices = {e["cat"]: e for e in _events(records) if e["ph"] == "X"}
    assert slices["phase"]["name"] == "phase: still open when the trace ended"
    assert (slices["phase"]["ts"], slices["phase"]["dur"]) == (0, 2_000_000)
    assert slices["tool"]["name"] == "tool call: c7: still open when the trace ended"
