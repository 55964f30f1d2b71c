"""A trace read into spans and marks per agent: what the HTML report draws and the
Perfetto export writes, in one vocabulary (``KINDS``: the legend's words are the
tooltips' and the slices' names)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..messages import (
    ActorFailed,
    BudgetExhausted,
    PhaseEnded,
    PhaseError,
    PhaseStarted,
    RuntimeOpened,
    Stalled,
    ToolEnded,
    ToolStarted,
    TurnEnded,
    TurnStarted,
    Waited,
)
from .reader import TraceRecord

# Each kind of bar (a span) and of mark (an instant): its label, said alike by the
# legend, the tooltips and the Perfetto slices, and its colour.
KINDS: dict[str, tuple[str, str]] = {
    "phase": ("phase", "#cfe3ff"),
    "model": ("model call", "#4a8bdf"),
    "tool": ("tool call", "#f0a030"),
    "wait": ("wait", "#e8c547"),
    "budget": ("budget refused", "#d33"),
    "stall": ("stalled", "#a0a"),
    "error": ("error", "#111"),
}

LAYER = {"phase": 0, "model": 1, "tool": 2, "wait": 3}  # drawn in this order: waits on top

Span = tuple[str, float, float, str]  # kind, start, end (seconds from the first record), text
Mark = tuple[float, str, str]  # time, kind, text


class Spans:
    """Spans and marks by path, gathered record by record (``add``), in bounded
    work per record: a span is made when it ends, from the start kept for it."""

    def __init__(self) -> None:
        self.spans: dict[str, list[Span]] = {}
        self.marks: dict[str, list[Mark]] = {}
        self.tokens: list[tuple[float, int]] = []  # (time, tokens so far) after each turn
        self.budget: int | None = None
        self.start: float | None = None
        self.end = 0.0
        self.wait_kinds: dict[str, int] = {}  # what was waited for, how many times
        self._opened: dict[tuple[str, str], float] = {}
        self._total = 0

    def tap(self, records: Iterable[TraceRecord]) -> Iterator[TraceRecord]:
        """*records*, each added on its way through (so one pass feeds two readers)."""
        for record in records:
            self.add(record)
            yield record

    def add(self, record: TraceRecord) -> None:
        """Take one record."""
        if self.start is None:
            self.start = record.t
        t = record.t - self.start
        self.end = max(self.end, t)
        e = record.e
        if isinstance(e, PhaseStarted | TurnStarted | ToolStarted):
            self._opened[e.path, _key(e)] = t
        elif isinstance(e, PhaseEnded):
            self._span(e.path, "phase", _key(e), t, e.stop_reason)
        elif isinstance(e, TurnEnded):
            self._turn(e, t)
        elif isinstance(e, ToolEnded):
            self._span(e.path, "tool", _key(e), t, f"{e.tool}, {e.status}")
        elif isinstance(e, Waited):
            self._wait(e, t)
        elif isinstance(e, RuntimeOpened):
            self.budget = e.max_total_tokens
        elif isinstance(e, BudgetExhausted):
            self.marks.setdefault(e.path, []).append((t, "budget", e.limit))
        elif isinstance(e, Stalled):
            self.marks.setdefault(e.path, []).append((t, "stall", e.why))
        elif isinstance(e, PhaseError | ActorFailed):
            self.marks.setdefault(e.path, []).append((t, "error", f"{e.error_type}: {e.error}"))

    def finish(self) -> None:
        """Close what the trace left open (the process died, or the trace was cut)
        at its last record, said so in their text."""
        for (path, key), start in self._opened.items():
            kind = key.split(":", 1)[0]
            text = "still open when the trace ended"
            if kind == "tool":
                text = f"{key.split(':', 1)[1]}: {text}"  # the call's id: its tool is unknown
            self.spans.setdefault(path, []).append((kind, start, self.end, text))
        self._opened.clear()

    def _span(self, path: str, kind: str, key: str, t: float, text: str) -> None:
        start = self._opened.pop((path, key), t)
        self.spans.setdefault(path, []).append((kind, start, t, text))

    def _turn(self, e: TurnEnded, t: float) -> None:
        usage = e.usage
        text = f"turn {e.iteration}, {usage.input_tokens} in, {usage.output_tokens} out"
        if usage.cost_usd:
            text += f", ${usage.cost_usd:.4f}"
        self._span(e.path, "model", _key(e), t, text)
        self._total += usage.input_tokens + usage.output_tokens
        self.tokens.append((t, self._total))

    def _wait(self, e: Waited, t: float) -> None:
        self.wait_kinds[e.what] = self.wait_kinds.get(e.what, 0) + 1
        where = f" at {e.provider}" if e.provider else ""
        start = max(0.0, t - e.seconds)
        self.spans.setdefault(e.path, []).append(("wait", start, t, f"for {e.what}{where}"))


def _key(e: PhaseStarted | PhaseEnded | TurnStarted | TurnEnded | ToolStarted | ToolEnded) -> str:
    """What pairs a start with its end on one path: one phase and one turn at a
    time, tool calls (in parallel) by their call id."""
    if isinstance(e, PhaseStarted | PhaseEnded):
        return "phase"
    if isinstance(e, TurnStarted | TurnEnded):
        return "model"
    return "tool:" + e.call_id
