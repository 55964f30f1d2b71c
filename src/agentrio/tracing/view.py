"""The text view of a trace: a summary, then the tree of actors with each one's phases."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable

from ..messages import (
    ActorFailed,
    PhaseEnded,
    PhaseError,
    PhaseStarted,
    RuntimeOpened,
    TurnEnded,
    Waited,
)
from .reader import TraceRecord

__all__ = [
    "Node",
    "Totals",
    "Trace",
    "build",
    "natural",
    "render",
    "select",
    "summary",
    "totals",
    "visible",
]

COLLAPSED = 20  # agents shown when the view is collapsed

# What a terminal would act on rather than show: C0 and C1 controls, DEL, the
# line and paragraph separators, the bidirectional overrides and isolates (they
# reorder what follows), and lone surrogates (a JSON "\ud800" decodes to one).
_UNSEEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_DIGITS = re.compile(r"(\d+)")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """*text* safe to print: each character a terminal would act on (a control,
    ESC included, a bidirectional override, a lone surrogate) written as its
    escape: ``\\x1b``, ``\\x09``, ``\\u202e``."""
    return _UNSEEN.sub(_escape, text)


def natural(path: str) -> list[tuple[str, int, str]]:
    """A sort key for paths in natural order: ``team/agent-2`` before
    ``team/agent-10``, segment by segment (a number compares by its digits'
    count, then its digits: no int is made of a thousand digits)."""
    key: list[tuple[str, int, str]] = []
    for segment in path.split("/"):
        parts = _DIGITS.split(segment)  # text, number, text, number, ..., text
        for text, number in zip(parts[::2], [*parts[1::2], None], strict=True):
            if number is None:  # the segment's end: before any number, so before "a1"
                key.append((text, -1, ""))
            else:
                digits = number.lstrip("0") or "0"
                key.append((text, len(digits), digits))
    return key


@dataclasses.dataclass
class Node:
    """What a trace says of one path (an actor, supervisor, agent or helper)."""

    path: str
    first: float = 0.0
    last: float = 0.0
    phases: int = 0
    busy: float = 0.0  # seconds inside phases
    stop_reasons: Counter[str] = dataclasses.field(default_factory=Counter)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0
    errors: list[str] = dataclasses.field(default_factory=list)
    open_phase: float | None = None
    waited: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds, by what
    waits: Counter[str] = dataclasses.field(default_factory=Counter)  # how many, by what

    @property
    def is_agent(self) -> bool:
        return self.phases > 0 or bool(self.input_tokens or self.output_tokens)


@dataclasses.dataclass
class Trace:
    """A trace read into nodes by path, and its time span."""

    nodes: dict[str, Node]
    start: float
    end: float
    events: int
    lost: int
    opened: RuntimeOpened | None = None  # the runtime's budget, if the trace recorded it


def build(records: Iterable[TraceRecord]) -> Trace:
    """Read *records* into a ``Trace``: a node per path."""
    nodes: dict[str, Node] = {}
    start = end = 0.0
    count = lost = 0
    opened = None
    for record in records:
        t, event = record.t, record.e
        if not count:
            start = t
        count += 1
        end = t
        path = event.path
        if not path:
            if isinstance(event, RuntimeOpened):
                opened = event
            else:
                lost += getattr(event, "count", 0)
            continue
        node = nodes.get(path)
        if node is None:
            node = nodes[path] = Node(path, first=t)
        node.last = t
        if isinstance(event, PhaseStarted):
            node.open_phase = t
        elif isinstance(event, PhaseEnded):
            node.phases += 1
            node.stop_reasons[event.stop_reason] += 1
            if node.open_phase is not None:
                node.busy += t - node.open_phase
                node.open_phase = None
        elif isinstance(event, TurnEnded):
            node.input_tokens += event.usage.input_tokens
            node.output_tokens += event.usage.output_tokens
            node.cached_input_tokens += event.usage.cached_input_tokens
            node.cost_usd += event.usage.cost_usd or 0.0
        elif isinstance(event, Waited):
            node.waited[event.what] = node.waited.get(event.what, 0.0) + event.seconds
            node.waits[event.what] += 1
        elif isinstance(event, PhaseError | ActorFailed):
            node.errors.append(f"{event.error_type}: {event.error}")
    return Trace(nodes, start, end, count, lost, opened)


def _waits(waits: Counter[str], waited: dict[str, float]) -> str:
    """``budget 2 (1.50s), rate_limit 1 (0.20s)``: the waits by what, the longest first."""
    longest = sorted(waited.items(), key=lambda item: -item[1])
    return ", ".join(f"{w} {waits[w]} ({s:.2f}s)" for w, s in longest)


def _budget(opened: RuntimeOpened) -> str:
    limits = [
        f"{name} {value}"
        for name in (
            "max_total_tokens",
            "max_input_tokens",
            "max_output_tokens",
            "max_requests",
            "max_tool_calls",
            "max_cost_usd",
        )
        if (value := getattr(opened, name)) is not None
    ]
    return ", ".join(limits)


def _cache_hits(cached: int, tokens_in: int) -> str:
    """``, cache hit ratio 42.0%`` once some input was read from a prompt cache."""
    return f", cache hit ratio {cached / tokens_in:.1%}" if cached and tokens_in else ""


def _cause(error: str) -> str:
    return error.split(":", 1)[0]


def _line(node: Node, depth: int) -> str:
    name = node.path.rsplit("/", 1)[-1]
    parts = [f"{'  ' * depth}{name}"]
    if node.is_agent:
        stops = ", ".join(f"{r} {n}" for r, n in sorted(node.stop_reasons.items()))
        parts.append(f"phases {node.phases} ({stops})" if stops else f"phases {node.phases}")
        parts.append(f"tokens {node.input_tokens + node.output_tokens}")
        if node.cost_usd:
            parts.append(f"${node.cost_usd:.4f}")
        parts.append(f"{node.busy:.2f}s")
        if node.waits:
            parts.append(f"waited {_waits(node.waits, node.waited)}")
    if node.errors:
        parts.append(f"errors {len(node.errors)}: {node.errors[-1][:120]}")
    return "  ".join(parts)


@dataclasses.dataclass
class Totals:
    """What a whole trace adds up to: the summary of the text view and the HTML report."""

    events: int
    seconds: float  # wall time, from the first record to the last
    actors: int
    agents: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float
    stop_reasons: Counter[str]
    waits: Counter[str]  # how many, by what was waited for
    waited: dict[str, float]  # seconds, by what was waited for
    causes: Counter[str]  # errors by cause (the exception's class)
    slowest: list[Node]  # the five agents longest in phases
    lost: int


def totals(trace: Trace) -> Totals:
    """Add *trace* up: its agents, wall time, tokens, cost, stop reasons, waits, errors."""
    nodes = list(trace.nodes.values())
    agents = [n for n in nodes if n.is_agent]
    stops: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for node in nodes:
        stops.update(node.stop_reasons)
        causes.update(_cause(e) for e in node.errors)
    waits: Counter[str] = Counter()
    waited: dict[str, float] = {}
    for node in agents:
        waits.update(node.waits)
        for what, seconds in node.waited.items():
            waited[what] = waited.get(what, 0.0) + seconds
    return Totals(
        events=trace.events,
        seconds=trace.end - trace.start,
        actors=len(nodes),
        agents=len(agents),
        input_tokens=sum(n.input_tokens for n in agents),
        output_tokens=sum(n.output_tokens for n in agents),
        cached_input_tokens=sum(n.cached_input_tokens for n in agents),
        cost_usd=sum(n.cost_usd for n in agents),
        stop_reasons=stops,
        waits=waits,
        waited=waited,
        causes=causes,
        slowest=sorted(agents, key=lambda n: (-n.busy, natural(n.path)))[:5],
        lost=trace.lost,
    )


def summary(trace: Trace) -> list[str]:
    """The summary's lines (raw: make them [`visible`][agentrio.tracing.view.visible]
    before a terminal shows them): events, wall time, actors and agents, stop
    reasons, tokens and cost, the budget, waits, events lost, the slowest agents
    and the errors by cause."""
    sums = totals(trace)
    tokens_in, tokens_out = sums.input_tokens, sums.output_tokens
    lines = [
        f"trace: {sums.events} events over {sums.seconds:.2f}s,"
        f" {sums.actors} actors, {sums.agents} agents",
        "stop reasons: "
        + (", ".join(f"{r} {n}" for r, n in sums.stop_reasons.most_common()) or "none"),
        f"tokens: {tokens_in + tokens_out} ({tokens_in} in, {tokens_out} out),"
        f" cost ${sums.cost_usd:.4f}" + _cache_hits(sums.cached_input_tokens, tokens_in),
    ]
    budget = _budget(trace.opened) if trace.opened is not None else ""
    if budget:
        lines.append(f"budget: {budget}")
    if sums.waits:
        lines.append(f"waits: {_waits(sums.waits, sums.waited)}")
    if sums.lost:
        lines.append(f"events lost: {sums.lost}")
    if sums.slowest:
        lines.append("slowest: " + ", ".join(f"{n.path} {n.busy:.2f}s" for n in sums.slowest))
    if sums.causes:
        lines.append(
            "errors by cause: " + ", ".join(f"{c} {n}" for c, n in sums.causes.most_common())
        )
    return lines


def render(
    trace: Trace,
    *,
    expand: bool = False,
    path: str | None = None,
    stop_reason: str | None = None,
    error: str | None = None,
    limit: int = COLLAPSED,
) -> list[str]:
    """The view's lines: the summary, then the tree (at most *limit* agents unless
    *expand*: the erring and slowest first), filtered by *path* prefix, *stop_reason*
    and *error* text (see [`select`][agentrio.tracing.view.select]); paths in natural
    order (``agent-2`` before ``agent-10``). Text from the trace is made
    [`visible`][agentrio.tracing.view.visible]: no control character is left raw."""
    lines = [*summary(trace), ""]
    chosen = select(trace, expand=expand, path=path, stop_reason=stop_reason, error=error)
    hidden = 0
    if not expand and len(chosen) > limit:
        ranked = sorted(chosen, key=lambda n: (not n.errors, -n.busy, natural(n.path)))
        keep = {n.path for n in ranked[:limit]}
        hidden = len(chosen) - limit
        chosen = [n for n in chosen if n.path in keep]
    shown: set[str] = set()
    for node in sorted(chosen, key=lambda n: natural(n.path)):
        segments = node.path.split("/")
        for depth in range(len(segments) - 1):  # the ancestors not shown yet
            ancestor = "/".join(segments[: depth + 1])
            if ancestor not in shown:
                shown.add(ancestor)
                parent = trace.nodes.get(ancestor) or Node(ancestor)
                lines.append(_line(parent, depth))
        shown.add(node.path)
        lines.append(_line(node, len(segments) - 1))
    if hidden:
        lines.append(
            f"... {hidden} more (use --expand, or filter with --path, --stop-reason, --error)"
        )
    return [visible(line) for line in lines]


def select(
    trace: Trace,
    *,
    expand: bool = False,
    path: str | None = None,
    stop_reason: str | None = None,
    error: str | None = None,
) -> list[Node]:
    """The nodes the tree shows (before it is collapsed): the agents and the
    erring actors (every actor if *expand*) under the *path* prefix, with
    *stop_reason* among their phases' and *error* in one of their errors."""

    def wanted(node: Node) -> bool:
        if path is not None and not (node.path == path or node.path.startswith(path + "/")):
            return False
        if stop_reason is not None and stop_reason not in node.stop_reasons:
            return False
        return error is None or any(error in e for e in node.errors)

    return [n for n in trace.nodes.values() if wanted(n) and (n.is_agent or n.errors or expand)]
