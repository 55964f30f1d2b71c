"""A trace in the Chrome trace event format, for the Perfetto UI and chrome://tracing.

``agentrio trace run.jsonl --perfetto run.json`` writes it; open the file in
https://ui.perfetto.dev (or chrome://tracing). The run is one process; each
agent is a thread named by its path, in natural order; its phases, model calls,
tool calls and waits are complete events (``"ph": "X"``) nested as they
happened, its errors, stalls and budget refusals instant events (``"ph": "i"``),
and the tokens spent a counter (``"ph": "C"``). Times are microseconds since the
trace's first record. Spans that overlap without nesting (tool calls run in
parallel) go to more threads of the same agent, named ``path #2``, ``path #3``,
since a thread's slices must nest (at most ``LANES`` threads an agent). A span
the trace left open (the process died) ends at the trace's last record.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from ..workspace import write_atomic
from ._spans import KINDS, LAYER, Mark, Span, Spans
from .reader import TraceRecord
from .view import natural
from .writer import scrubbed

__all__ = ["LANES", "NAME_CHARS", "PID", "chrome_trace", "encode", "write_perfetto"]

PID = 1  # the run: one process
LANES = 32  # threads of one agent, at most: past them, spans go to the last, nested or not
NAME_CHARS = 80  # a longer text goes to the event's args.detail, the name keeps the kind

Event = dict[str, Any]


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _lanes(spans: list[Span]) -> list[list[Span]]:
    """*spans* in lanes where each one's spans nest (or follow one another): the
    first lane takes all it can, the next what overlapped it, and so on."""
    stacks: list[list[int]] = []  # per lane, the ends of the spans still open
    lanes: list[list[Span]] = []
    for span in sorted(spans, key=lambda s: (_us(s[1]), -_us(s[2]), LAYER[s[0]])):
        start, end = _us(span[1]), _us(span[2])
        number = _lane(stacks, start, end)
        if number == len(lanes):
            stacks.append([])
            lanes.append([])
        stacks[number].append(end)
        lanes[number].append(span)
    return lanes or [[]]


def _lane(stacks: list[list[int]], start: int, end: int) -> int:
    """The first lane where a span from *start* to *end* nests (its open span
    ends after it) or opens nothing, or a new lane's number."""
    for number, stack in enumerate(stacks):
        while stack and stack[-1] <= start:  # closed before it starts
            stack.pop()
        if not stack or stack[-1] >= end:
            return number
    return len(stacks) if len(stacks) < LANES else LANES - 1  # bounded work per span


def _metadata(name: str, tid: int, args: dict[str, Any]) -> Event:
    return {"name": name, "ph": "M", "pid": PID, "tid": tid, "args": args}


def _named(kind: str, text: str, event: Event) -> Event:
    """*event* named as the legend of the HTML report names its kind, with *text*
    in its name, or in its ``args`` when too long for a slice's name."""
    label = KINDS[kind][0]
    event["cat"] = kind
    if len(text) <= NAME_CHARS:
        event["name"] = f"{label}: {text}"
    else:
        event["name"] = label
        event["args"] = {"detail": text}
    return event


def _slice(span: Span, tid: int) -> Event:
    kind, start, end, text = span
    ts = _us(start)
    event = {"ph": "X", "ts": ts, "dur": _us(end) - ts, "pid": PID, "tid": tid}
    return _named(kind, text, event)


def _instant(mark: Mark, tid: int) -> Event:
    t, kind, text = mark
    return _named(kind, text, {"ph": "i", "s": "t", "ts": _us(t), "pid": PID, "tid": tid})


def chrome_trace(records: Iterable[TraceRecord]) -> dict[str, Any]:
    """*records* as a Chrome trace: ``{"traceEvents": [...], "displayTimeUnit": "ms"}``.

    Args:
        records: the trace's records, read once (a ``read_trace`` reader does).

    Returns:
        The JSON object, as builtins (encode it with any JSON encoder; strings
        from the trace may hold lone surrogates until
        [`write_perfetto`][agentrio.tracing.perfetto.write_perfetto] or
        ``encode`` replaces them).
    """
    gathered = Spans()
    for record in records:
        gathered.add(record)
    gathered.finish()
    out: list[Event] = [_metadata("process_name", 0, {"name": "agentrio run"})]
    tid = 0
    for path in sorted(set(gathered.spans) | set(gathered.marks), key=natural):
        lanes = _lanes(gathered.spans.get(path, []))
        for number, lane in enumerate(lanes):
            tid += 1
            name = path if number == 0 else f"{path} #{number + 1}"
            out.append(_metadata("thread_name", tid, {"name": name}))
            out.append(_metadata("thread_sort_index", tid, {"sort_index": tid}))
            out.extend(_slice(span, tid) for span in lane)
            if number == 0:
                out.extend(_instant(mark, tid) for mark in gathered.marks.get(path, []))
    out.extend(
        {"name": "tokens", "ph": "C", "ts": _us(t), "pid": PID, "tid": 0, "args": {"tokens": n}}
        for t, n in gathered.tokens
    )
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def encode(trace: dict[str, Any]) -> bytes:
    """*trace* as JSON (UTF-8): a lone surrogate from the trace becomes U+FFFD."""
    try:
        return msgspec.json.encode(trace)
    except UnicodeEncodeError:
        return msgspec.json.encode(scrubbed(trace))


def write_perfetto(records: Iterable[TraceRecord], path: str | os.PathLike[str]) -> None:
    """Write *records* to *path* as a Chrome trace (see
    [`chrome_trace`][agentrio.tracing.perfetto.chrome_trace]), atomically: a
    reader sees the old file or the whole new one, never a part.

    Raises:
        OSError: the file could not be written.
        agentrio.errors.TraceError: a record could not be read.
    """
    write_atomic(Path(path), encode(chrome_trace(records)))
