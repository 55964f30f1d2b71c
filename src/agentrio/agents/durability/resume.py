"""plan: a store read once, as the durable agents and their unfinished phases."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ..._checks import check_int, check_name
from ...errors import (
    InvalidArgument,
    StoreCorrupt,
)
from ...messages import (
    ChatMessage,
    PhaseResult,
)
from ...store.base import Entry, Loaded
from ..loop.spec import AgentSpec
from ..routing.modes import check_mode_timeout
from ..tools.lanes import check_lane

if TYPE_CHECKING:
    pass

from .recorder import Resume
from .records import (
    MemoryKept,
    PhaseBegun,
    PhaseDone,
    Record,
    ToolsDone,
    Totals,
    decode_records,
)

__all__ = ["plan"]


class _Plan:
    """What the store says is to be resumed, worked out once when the runtime opens."""

    __slots__ = ("agents", "finished", "memories", "records", "torn", "totals")

    def __init__(self) -> None:
        self.records: list[Record] = []  # the records decoded (for a compaction, then let go)
        # agent_id -> (path, spec, its phases' records in order, by phase)
        self.agents: dict[str, _AgentLog] = {}
        self.finished: dict[str, PhaseResult[object]] = {}
        self.totals: Totals | None = None
        self.torn: tuple[Entry, ...] = ()
        self.memories: dict[str, list[bytes]] = {}  # a memory's records, by its name


class _AgentLog:
    __slots__ = ("agent_id", "made", "path", "phases", "runs", "spec", "where")

    def __init__(self, begun: PhaseBegun, where: Entry) -> None:
        self.agent_id = begun.agent_id
        self.path = begun.agent
        self.spec = begun.spec
        self.where = where  # its last PhaseBegun (where an error about it points)
        # Every phase it began, in order, each as [its PhaseBegun, its other
        # records...]; and each phase id's last run (a phase id may be run again).
        self.runs: list[list[Record]] = []
        self.phases: dict[str, list[Record]] = {}
        self.made: AgentSpec[object] | None = None  # its spec, made to resume it


def plan(loaded: Loaded) -> _Plan:
    """Read the store's records into what must be resumed.

    An agent whose path a later agent took was gone by then (names are unique
    among live actors): its phases left unfinished were abandoned (the agent
    cancelled, or given up by its supervisor), and are not resumed. So is a
    phase whose id a later phase took.

    Raises:
        StoreCorrupt: a record that cannot be decoded, of an unknown type or
            shape (negative totals included), or a ``PhaseBegun`` that no
            runtime writes (a path that is no agent's, a command ``run()``
            refuses), naming its source and offset.
    """
    out = _Plan()
    out.torn = tuple(loaded.torn)
    records = out.records = decode_records(loaded.entries)
    owner: dict[str, _AgentLog] = {}  # phase id -> the agent that last began it
    by_path: dict[str, _AgentLog] = {}  # path -> the agent that last had it
    for entry, record in zip(loaded.entries, records, strict=True):
        if type(record) is PhaseBegun:
            _check_begun(record, entry)
            log = out.agents.get(record.agent_id)
            if log is None:
                log = out.agents[record.agent_id] = _AgentLog(record, entry)
            else:
                log.path, log.spec, log.where = record.agent, record.spec, entry
            earlier = by_path.get(log.path)
            if earlier is not None and earlier is not log:
                _abandon(earlier, owner)
            by_path[log.path] = log
            earlier = owner.get(record.phase)
            if earlier is not None and earlier is not log:
                _abandon(earlier, owner, record.phase)
            begun: list[Record] = [record]
            log.phases[record.phase] = begun
            log.runs.append(begun)
            owner[record.phase] = log
            continue
        if isinstance(record, MemoryKept):
            out.memories.setdefault(record.memory, []).append(record.data)
            continue
        totals = getattr(record, "totals", None)
        if totals is not None:
            out.totals = totals
        log = owner.get(record.phase)
        if log is None:
            continue  # (a phase whose beginning is not in the store: nothing to resume)
        run = log.phases[record.phase]
        if type(run[-1]) is PhaseDone:
            continue  # (a record after the phase's end: a duplicate)
        run.append(record)
        if type(record) is PhaseDone:
            calls = tuple(result for r in run if type(r) is ToolsDone for result in r.results)
            out.finished[record.phase] = msgspec.structs.replace(record.result, tool_calls=calls)
    return out


def _abandon(log: _AgentLog, owner: dict[str, _AgentLog], phase: str | None = None) -> None:
    """Leave out the unfinished phases of *log* (or its phase *phase*): they are not
    resumed."""
    for pid in [phase] if phase is not None else list(log.phases):
        run = log.phases.get(pid)
        if run is not None and type(run[-1]) is not PhaseDone:
            del log.phases[pid]
            if owner.get(pid) is log:
                del owner[pid]


def _check_begun(begun: PhaseBegun, entry: Entry) -> None:
    """Raise StoreCorrupt, naming *entry*, if *begun* is not what a runtime writes."""
    try:
        if not begun.phase or not begun.agent_id or not begun.spec:
            raise InvalidArgument("an empty phase id, agent id or spec name")
        for part in begun.agent.split("/"):
            check_name("the agent's path", part)
        cmd = begun.command
        check_int("max_iterations", cmd.max_iterations, 1)
        if cmd.max_continuation_turns is not None:
            check_int("max_continuation_turns", cmd.max_continuation_turns, 0)
        check_mode_timeout("timeout", cmd.timeout)
        if cmd.lane is not None:
            check_lane(cmd.lane)
    except InvalidArgument as exc:
        raise StoreCorrupt(
            f"checkpoint record at {entry.source!r} offset {entry.offset} is a PhaseBegun "
            f"no runtime writes: {str(exc)[:200]}",
            source=entry.source,
            offset=entry.offset,
        ) from None


def _unfinished(log: _AgentLog) -> list[str]:
    """The phases of *log* not ended (a parked one included: #27's, it waits for a
    decision, ``durability/deferred.py``, and is not started when the store opens)."""
    return [pid for pid, run in log.phases.items() if type(run[-1]) is not PhaseDone]


def _contexts(log: _AgentLog) -> dict[str | None, tuple[list[ChatMessage], list[float]]]:
    """The histories of the agent's contexts, as its finished phases left them."""
    contexts: dict[str | None, tuple[list[ChatMessage], list[float]]] = {}
    for run in log.runs:
        begun, done = run[0], run[-1]
        assert type(begun) is PhaseBegun
        if type(done) is not PhaseDone:
            continue
        part = Resume(restart=False)
        for record in run[1:]:
            part.add(record)
        part.messages += done.messages
        part.timestamps += done.timestamps
        if not part.messages:
            continue  # it did nothing: its context was left as it was
        label = begun.command.context_label
        if not begun.command.continue_context or label not in contexts:
            contexts[label] = ([], [])
        messages, stamps = contexts[label]
        messages += part.messages
        stamps += part.timestamps
    return contexts
