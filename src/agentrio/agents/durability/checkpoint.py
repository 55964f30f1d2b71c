"""Durable agents: what a phase records in the runtime's checkpoint store, and
how a phase cut short goes on from its last completed turn.

A runtime opened with a store (``open_runtime(store=...)``) makes one
`Checkpoints`. Each agent spawned with ``Runtime.spawn_agent`` from a
registered spec is *durable*: its phases record, as tagged msgspec Structs
encoded with one module-level msgpack encoder and handed to the runtime's
checkpoint writer (``put_nowait``: the phase never waits for the disk but
where the durability policy says so):

- ``PhaseBegun``: the agent (path, spec's registered name, its durable id)
  and the ``RunPhase`` itself (its ``phase_id`` included);
- ``TurnsAdded``: each model reply, with the turns before it that the phase
  added since its last record (its user message, a continuation prompt...),
  their times, and the budget's totals once the reply is settled;
- ``ToolsDone``: each turn's tool results, in call order;
- ``ToolBegun``: a call of a tool not declared idempotent, synced *before*
  the tool runs, so that a call in flight at a crash is known;
- ``ToolDone``: each call of a parallel batch as it ends (a crash in the
  middle of the batch does not lose the calls that ended);
- ``ApprovalAsked`` and ``ApprovalAnswered``;
- ``PhaseDone``: the result, the turns added after the last record, the
  budget's totals.

A phase goes on from those records in two cases. Its agent's actor crashed
and was restarted (``AgentActor`` hands the crashed phase to `Checkpoints`,
and ``AgentRef.run`` asks the new incarnation with the same ``RunPhase``); or
a new runtime opened on the store found it unfinished (`load` and `resume`:
its agent is spawned again from its registered spec, its contexts restored,
and its ``RunPhase`` asked again by a task of the runtime). Either way the
``Phase`` finds a `Resume` for its id: the turns recorded, the calls begun,
ended and approved.

Nothing here runs for a runtime without a store: ``Services.checkpoints`` is
None, and the agent loop tests it once per phase (and ``Phase.rec`` once per
turn).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Literal, Union, cast

import msgspec
import trio

from ..._checks import check_int, check_name
from ..._log import log_extra
from ...errors import (
    ActorCrashed,
    ActorError,
    InvalidArgument,
    StoreCorrupt,
    StoreError,
    UnknownName,
)
from ...messages import (
    ChatMessage,
    CheckpointTorn,
    ContextAppend,
    PhaseResult,
    PhaseResumed,
    ResumedPhaseEnded,
    RunPhase,
    ToolCallRequest,
    ToolResult,
)
from ...store.base import Entry, Loaded
from ..budgets.budget import UsageTotals
from ..loop.agent import new_phase_id
from ..loop.ref import AgentRef, spawn_agent
from ..loop.spec import AgentSpec
from ..routing.modes import check_mode_timeout
from ..tools.lanes import check_lane

if TYPE_CHECKING:
    from ...store.base import CheckpointStore
    from ...store.writer import CheckpointWriter
    from ...supervisors.ref import SupervisorRef
    from ..budgets.budget import Budget
    from ..loop.agent import _AgentState
    from ..loop.phase import Phase
    from ..loop.services import Services
    from ..tools.tool_call import ToolRunner

__all__ = [
    "INTERRUPTED",
    "Checkpoints",
    "Durability",
    "Resume",
    "SpecFactory",
    "decode_records",
    "tool_message",
]

Durability = Literal["batch", "turn"]
"""When a phase's records are on disk: ``"batch"`` (the writer syncs each batch it
writes; the agents never wait for it) or ``"turn"`` (each turn's records are
synced before the phase's next model call)."""

SpecFactory = Callable[[], AgentSpec[object]]

INTERRUPTED = (
    "tool {name!r} was interrupted by a restart (a crash of the process or of the "
    "agent) while it ran: it may have taken effect, or not. It was not run again, "
    "as it is not declared idempotent"
)
"""The content of the ``"failed"`` result a model sees for a call that was in flight
at a crash, of a tool not declared idempotent."""

_log = logging.getLogger("agentrio.agents.durability.checkpoint")


# -- the records -------------------------------------------------------------------------


class _Record(msgspec.Struct, frozen=True, tag=True, array_like=True, gc=False):
    """A checkpoint record: tagged with its class's name like a ``Message``, and
    frozen, but encoded as an array, not a map (a record is written for every turn
    of every durable agent, and field names would be most of its bytes). What it
    holds is the actors' own messages (``RunPhase``, ``ChatMessage``, ``ToolResult``,
    ``PhaseResult``)."""


# (Totals read back from a store go into the root budget, and are written again
# with its next totals: a count that is negative or over _MAX_COUNT (the budget's
# sums would soon pass what msgpack can hold, 2**64 - 1), or a cost that is
# negative, NaN or infinite, is refused as the record is decoded, and so is a
# time that is not one time.time() gives. Checked only when decoding: making and
# encoding records pays nothing for it.)
_MAX_COUNT = 2**53
_Count = Annotated[int, msgspec.Meta(ge=0, le=_MAX_COUNT)]
_Cost = Annotated[float, msgspec.Meta(ge=0.0, le=1e300)]
_Time = Annotated[float, msgspec.Meta(ge=0.0, le=1e12)]


class Totals(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The root budget's settled totals (``UsageTotals`` but ``total_tokens``)."""

    input_tokens: _Count = 0
    output_tokens: _Count = 0
    requests: _Count = 0
    tool_calls: _Count = 0
    cost_usd: _Cost = 0.0
    overruns: _Count = 0
    attempts: _Count = 0
    cached_input_tokens: _Count = 0
    cache_write_tokens: _Count = 0
    reasoning_tokens: _Count = 0

    def usage(self) -> UsageTotals:
        return UsageTotals(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens,
            requests=self.requests,
            tool_calls=self.tool_calls,
            cost_usd=self.cost_usd,
            overruns=self.overruns,
            attempts=self.attempts,
            cached_input_tokens=self.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens,
        )


class PhaseBegun(_Record, frozen=True):
    phase: str
    agent: str  # the agent's path
    agent_id: str  # the durable agent's id, the same in each life
    spec: str  # its spec's registered name
    command: RunPhase
    at: _Time = 0.0


class TurnsAdded(_Record, frozen=True):
    phase: str
    messages: tuple[ChatMessage, ...]
    timestamps: tuple[_Time, ...]
    totals: Totals | None = None


class ToolsDone(_Record, frozen=True):
    phase: str
    results: tuple[ToolResult, ...]
    at: _Time = 0.0


class ToolBegun(_Record, frozen=True):
    phase: str
    call_id: str
    tool: str = ""


class ToolDone(_Record, frozen=True):
    phase: str
    result: ToolResult


class ApprovalAsked(_Record, frozen=True):
    phase: str
    call_id: str
    tool: str = ""


class ApprovalAnswered(_Record, frozen=True):
    phase: str
    call_id: str
    approved: bool = False
    reason: str = ""


class PhaseDone(_Record, frozen=True):
    phase: str
    result: PhaseResult[str]
    messages: tuple[ChatMessage, ...] = ()
    timestamps: tuple[_Time, ...] = ()
    totals: Totals | None = None


Record = Union[  # noqa: UP007  (msgspec reads a Union of the tagged records)
    PhaseBegun,
    TurnsAdded,
    ToolsDone,
    ToolBegun,
    ToolDone,
    ApprovalAsked,
    ApprovalAnswered,
    PhaseDone,
]

_QUOTED = re.compile(r"'.*'", re.DOTALL)
_ENCODE = msgspec.msgpack.Encoder().encode
_DECODER = msgspec.msgpack.Decoder(Record)


def decode_records(entries: list[Entry]) -> list[Record]:
    """The records of *entries*, in order.

    Raises:
        StoreCorrupt: a record that is not msgpack, or of no known type or shape,
            naming its source and offset (never its content).
    """
    decode = _DECODER.decode
    out: list[Record] = []
    for entry in entries:
        try:
            out.append(decode(entry.data))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            kind = (
                "of an unknown type or shape"
                if isinstance(exc, msgspec.ValidationError)
                else ("not a checkpoint record (undecodable bytes)")
            )
            # (msgspec quotes a bad value, 'like this': not shown.)
            why = _QUOTED.sub("(a value not shown)", str(exc))[:200]
            raise StoreCorrupt(
                f"checkpoint record at {entry.source!r} offset {entry.offset} is {kind}: {why}",
                source=entry.source,
                offset=entry.offset,
            ) from None
    return out


def tool_message(result: ToolResult) -> ChatMessage:
    """The history's message for the tool call's *result* (as ``Phase._settle_batch``
    adds it)."""
    return ChatMessage(
        "tool",
        result.content,
        tool_call_id=result.id,
        name=result.name,
        is_error=result.status != "ok",
        parts=result.parts,
    )


def _kept(cmd: RunPhase) -> RunPhase:
    """*cmd* as recorded: without its settings' ``extra_headers`` and ``extra_body``,
    which may hold keys (an ``Authorization`` header), never written to a store."""
    settings = cmd.settings
    if settings is None or (settings.extra_headers is None and settings.extra_body is None):
        return cmd
    kept = msgspec.structs.replace(settings, extra_headers=None, extra_body=None)
    return msgspec.structs.replace(cmd, settings=kept if kept.fields_set() else None)


# -- what a phase goes on from ---------------------------------------------------------


class Resume:
    """What a phase cut short had recorded: the phase goes on from it."""

    __slots__ = (
        "approvals",
        "begun",
        "calls",
        "ended",
        "going_on",
        "messages",
        "owner",
        "recorded",
        "restart",
        "timestamps",
    )

    def __init__(self, *, restart: bool, owner: _Durable | None = None) -> None:
        self.messages: list[ChatMessage] = []
        self.timestamps: list[float] = []
        self.calls: list[ToolResult] = []  # the phase's results so far (PhaseResult.tool_calls)
        self.begun: set[str] = set()
        self.ended: dict[str, ToolResult] = {}
        self.approvals: dict[str, tuple[bool, str]] = {}
        self.restart = restart
        self.going_on = False  # restored, and its last turn not yet taken up again
        self.owner = owner  # the durable agent whose phase it is
        self.recorded = True  # its PhaseBegun is in the store (not if it crashed first)

    def add(self, record: Record) -> None:
        """Take in one of the phase's records."""
        if type(record) is TurnsAdded:
            self.messages += record.messages
            self.timestamps += record.timestamps
        elif type(record) is ToolsDone:
            for result in record.results:
                self.messages.append(tool_message(result))
                self.timestamps.append(record.at)
                self.calls.append(result)
        elif type(record) is ToolBegun:
            self.begun.add(record.call_id)
        elif type(record) is ToolDone:
            self.ended[record.result.id] = record.result
        elif type(record) is ApprovalAnswered:
            self.approvals[record.call_id] = (record.approved, record.reason)

    def pending(self) -> tuple[ToolCallRequest, ...]:
        """The calls of the last turn that have no result in the history (the turn
        whose tools were running at the crash)."""
        messages = self.messages
        if not messages:
            return ()
        last = messages[-1]
        if last.role == "assistant" and last.tool_calls:
            return last.tool_calls
        return ()

    def replay(self, req: ToolCallRequest, idempotent: bool) -> ToolResult | None:
        """The result of the pending call *req* without running it, if it is not to
        be run: its recorded result, or, in flight at the crash and not idempotent,
        an interrupted one. None: run it (it never began, or it is idempotent)."""
        ended = self.ended.get(req.id)
        if ended is not None:
            return ended
        if req.id in self.begun and not idempotent:
            return ToolResult(
                id=req.id,
                name=req.name,
                arguments=req.arguments,
                status="failed",
                content=INTERRUPTED.format(name=req.name),
            )
        return None


class _Durable:
    """A durable agent: its state, its id across lives, its spec's registered name."""

    __slots__ = ("agent_id", "answers", "spec", "state")

    def __init__(self, state: _AgentState, agent_id: str, spec: str) -> None:
        self.state = state
        self.agent_id = agent_id
        self.spec = spec
        # The approvers' answers in the phase under way: (phase id, call id) -> answer.
        self.answers: dict[tuple[str, str], tuple[bool, str]] | None = None

    def approvals_of(self, phase_id: str) -> dict[str, tuple[bool, str]]:
        """The answers recorded in this life for the phase *phase_id* (and forgotten)."""
        answers = self.answers
        if not answers:
            return {}
        mine = {call: answer for (pid, call), answer in answers.items() if pid == phase_id}
        self.answers = None
        return mine

    def holds(self, rec: PhaseRecorder) -> bool:
        """Is *rec*'s phase this agent's phase under way (its actor not gone)?"""
        phase = self.state.phase
        if phase is None or phase.rec is not rec:
            return False
        ref = self.state.ref
        return ref is not None and ref.statistics().state != "exited"

    # (the agent's tool gate asks these, for its approvals)

    def _recorder(self) -> PhaseRecorder | None:
        """The recorder of the phase under way (the loop holds it as its
        ``PhaseRecording``: it is always one of ours)."""
        phase = self.state.phase
        return None if phase is None else cast("PhaseRecorder | None", phase.rec)

    def approval(self, call_id: str) -> tuple[bool, str] | None:
        """The answer recorded for *call_id* in the phase under way (resumed), if any."""
        rec = self._recorder()
        if rec is None or rec.resume is None:
            return None
        return rec.resume.approvals.get(call_id)

    def asked(self, req: ToolCallRequest) -> None:
        rec = self._recorder()
        if rec is not None:
            rec.put(ApprovalAsked(rec.id, req.id, req.name))

    def answered(self, req: ToolCallRequest, approved: bool, reason: str) -> None:
        rec = self._recorder()
        if rec is not None:
            if self.answers is None:
                self.answers = {}
            self.answers[rec.id, req.id] = (approved, reason)
            rec.put(ApprovalAnswered(rec.id, req.id, approved, reason))


class PhaseRecorder:
    """One durable phase's recording: where it stands, and what it goes on from."""

    __slots__ = ("begun", "calls_begun", "calls_ended", "ck", "durable", "id", "resume", "upto")

    def __init__(
        self, ck: Checkpoints, durable: _Durable, phase_id: str, resume: Resume | None
    ) -> None:
        self.ck = ck
        self.durable = durable
        self.id = phase_id
        self.resume = resume
        # Whether PhaseBegun is in the store (it is, for a phase that goes on,
        # unless its agent crashed before the phase began).
        self.begun = resume is not None and resume.recorded
        self.upto = 0  # the phase's history is recorded up to here (an index of it)
        # The calls recorded as begun (ToolBegun) and ended (ToolDone) in this life
        # (made on first use): what a restart of the agent goes on from.
        self.calls_begun: set[str] | None = None
        self.calls_ended: dict[str, ToolResult] | None = None

    def put(self, record: Record) -> None:
        self.ck.writer.put_nowait(_ENCODE(record))

    @property
    def sync_turns(self) -> bool:
        """Is each model call preceded by a sync (``durability="turn"``)?"""
        return self.ck.sync_turns

    async def synced(self) -> None:
        """Wait until what was recorded so far is durable."""
        await self.ck.synced()

    def totals(self) -> Totals:
        return self.ck.budget._totals(Totals)

    # -- the phase's records -----------------------------------------------------------

    def started(self, phase: Phase) -> None:
        """The phase began (its user turn is added, nothing is recorded of it yet).

        A phase that goes on with no turn recorded (cut short in its first model
        call) starts again from its user turn: its ``PhaseResumed`` is published
        here (``Phase._restore`` publishes that of a phase with turns).
        """
        self.upto = phase.base
        resume = self.resume
        if resume is not None and not resume.messages and phase.bus.active:
            phase.bus.publish(
                PhaseResumed(path=phase.path, phase_id=self.id, turns=0, restart=resume.restart)
            )
        if not self.begun:
            self.begun = True
            durable = self.durable
            self.put(
                PhaseBegun(
                    self.id,
                    phase.path,
                    durable.agent_id,
                    durable.spec,
                    _kept(phase.cmd),
                    time.time(),
                )
            )

    def turn(self, phase: Phase, totals: bool = True) -> None:
        """Record the phase's turns since the last record (a model's reply last)."""
        upto, base = self.upto, phase.base
        history = phase.history
        end = len(history)
        self.upto = end
        self.put(
            TurnsAdded(
                self.id,
                tuple(history[upto:end]),
                tuple(phase.timestamps[upto - base : end - base]),
                self.totals() if totals else None,
            )
        )

    def tools(self, phase: Phase, results: list[ToolResult], at: float) -> None:
        self.upto = len(phase.history)
        self.put(ToolsDone(self.id, tuple(results), at))

    def tool_done(self, result: ToolResult) -> None:
        """A call of a parallel batch ended (a lone call's result is in its ToolsDone)."""
        if self.calls_ended is None:
            self.calls_ended = {}
        self.calls_ended[result.id] = result
        self.put(ToolDone(self.id, result))

    def done(self, phase: Phase, result: PhaseResult[object], persisted: bool) -> None:
        upto, base = self.upto, phase.base
        output = result.output
        # (Its calls are in the phase's ToolsDone records: not written twice. A
        # typed output is not recorded: see Runtime.resumed_result.)
        kept = msgspec.structs.replace(
            result, tool_calls=(), output=output if isinstance(output, str) else None
        )
        tail: tuple[ChatMessage, ...] = ()
        stamps: tuple[float, ...] = ()
        if persisted:
            tail = tuple(phase.history[upto:])
            stamps = tuple(phase.timestamps[upto - base :])
        self.put(PhaseDone(self.id, kept, tail, stamps, self.totals()))  # type: ignore[arg-type]
        self.durable.answers = None
        self.ck.left(self)
        self.ck.ended(self.id, result)

    async def begin_tool(self, runner: ToolRunner) -> None:
        """Before a tool of the phase runs: a tool not declared idempotent has its
        start on disk first (at most once: a crash after this reports the call
        interrupted rather than making it again)."""
        if runner.tool.idempotent:
            return
        request = runner.request
        if self.calls_begun is None:
            self.calls_begun = set()
        self.calls_begun.add(request.id)
        self.put(ToolBegun(self.id, request.id, request.name))
        await self.ck.synced()

    def crashed(self, phase: Phase) -> None:
        """The phase's agent crashed: keep what it recorded, to go on from it."""
        self.ck.left(self)
        resume = Resume(restart=True, owner=self.durable)
        resume.recorded = self.begun
        base, upto = phase.base, self.upto
        if upto > base:
            resume.messages = phase.history[base:upto]
            resume.timestamps = phase.timestamps[: upto - base]
            recorded = sum(1 for m in resume.messages if m.role == "tool")
            resume.calls = phase.calls[:recorded]
        old = self.resume
        if old is not None:
            resume.begun, resume.ended, resume.approvals = old.begun, old.ended, old.approvals
        resume.begun |= self.calls_begun or set()
        resume.ended |= self.calls_ended or {}
        resume.approvals |= self.durable.approvals_of(self.id)
        self.ck.resumes[self.id] = resume


# -- the runtime's part --------------------------------------------------------------


class _SyncGroup:
    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: StoreError | None = None


class _Awaited:
    """The result of a phase resumed from the store, for ``resumed_result``."""

    __slots__ = ("error", "event", "result")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: PhaseResult[object] | None = None
        self.error: ActorError | None = None


class _Plan:
    """What the store says is to be resumed, worked out once when the runtime opens."""

    __slots__ = ("agents", "finished", "torn", "totals")

    def __init__(self) -> None:
        # agent_id -> (path, spec, its phases' records in order, by phase)
        self.agents: dict[str, _AgentLog] = {}
        self.finished: dict[str, PhaseResult[object]] = {}
        self.totals: Totals | None = None
        self.torn: tuple[Entry, ...] = ()


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
    records = decode_records(loaded.entries)
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


class Checkpoints:
    """A runtime's checkpoints: its writer, its registered specs, its durable agents,
    and the phases it resumed."""

    __slots__ = (
        "agents",
        "budget",
        "bus",
        "group",
        "live",
        "nursery",
        "outcomes",
        "plan",
        "resumed",
        "resumes",
        "specs",
        "store",
        "sync_turns",
        "writer",
    )

    def __init__(
        self,
        store: CheckpointStore,
        writer: CheckpointWriter,
        *,
        budget: Budget,
        bus: object,
        durability: Durability,
        specs: Mapping[str, SpecFactory],
    ) -> None:
        self.store = store
        self.writer = writer
        self.budget = budget
        self.bus = bus
        self.sync_turns = durability == "turn"
        self.specs: dict[str, SpecFactory] = {}
        for name, factory in specs.items():
            self.register(name, factory)
        self.agents: dict[str, _Durable] = {}  # by path: the live durable agents
        self.resumes: dict[str, Resume] = {}  # phase id -> what it goes on from
        self.live: dict[str, PhaseRecorder] = {}  # phase id -> its phase under way
        self.outcomes: dict[str, _Awaited] = {}  # the phases resumed from the store
        self.resumed: tuple[str, ...] = ()
        self.plan = _Plan()
        self.nursery: trio.Nursery | None = None  # the runtime's (set by resume)
        self.group: _SyncGroup | None = None  # the phases waiting for the next sync

    async def synced(self) -> None:
        """Return when every record put so far is on disk.

        The phases that ask while no sync of theirs has started join one group,
        and one task waits for the writer's ``synced()`` for all of them: with
        thousands of agents asking at once, the writer sees a few waiters, and
        each phase is woken once.
        """
        group = self.group
        if group is None:
            group = self.group = _SyncGroup()
            assert self.nursery is not None
            self.nursery.start_soon(self._sync, group)
        await group.done.wait()
        if group.error is not None:
            raise group.error

    async def _sync(self, group: _SyncGroup) -> None:
        # (From here on, a phase that asks joins the next group: its records may
        # come after the writer's target, taken as synced() is called.)
        self.group = None
        try:
            await self.writer.synced()
        except StoreError as exc:
            group.error = exc
        group.done.set()

    def register(self, name: object, factory: object) -> None:
        """Register *factory* (``() -> AgentSpec``) under the spec name *name*."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"a spec's registered name must be a non-empty str, got {name!r}")
        if not callable(factory) or isinstance(factory, AgentSpec):
            raise InvalidArgument(
                f"specs[{name!r}] must be a function that makes the AgentSpec (specs hold "
                f"code, so a resumed agent's spec is made again), got {factory!r}"
            )
        known = self.specs.get(name)
        if known is not None and known is not factory:
            raise InvalidArgument(f"another spec factory is already registered as {name!r}")
        self.specs[name] = factory

    # -- durable agents --------------------------------------------------------------

    def check_spec(self, spec: AgentSpec[object]) -> None:
        """Raise InvalidArgument unless *spec* can make a durable agent."""
        if spec.name not in self.specs:
            raise InvalidArgument(
                f"this runtime has a checkpoint store, and spec {spec.name!r} is not "
                f"registered: its agent could not be spawned again after a crash. Register "
                f"a function that makes it: open_runtime(specs={{{spec.name!r}: make_spec}}) "
                f"or rt.register_spec({spec.name!r}, make_spec)"
            )
        if spec.compaction is not None:
            raise InvalidArgument(
                f"spec {spec.name!r} has a compaction, which durable agents do not support "
                "yet (the store records each turn as it is added)"
            )

    def adopt(self, ref: AgentRef[object], agent_id: str | None = None) -> None:
        """Make the agent of *ref* durable (its spec checked by `check_spec`)."""
        state = ref._state
        durable = _Durable(state, agent_id or new_phase_id(), state.spec.name)
        assert state.ref is not None
        self.agents[state.ref.path] = durable
        if state.gate is not None:
            state.gate.journal = durable

    def recorder(self, phase: Phase) -> PhaseRecorder | None:
        """The recording of *phase*, if its agent is durable (else None)."""
        state = phase.st
        durable = self.agents.get(phase.path)
        if durable is None or durable.state is not state:
            return None
        phase_id = phase.cmd.phase_id
        if phase_id is None:
            phase_id = new_phase_id()
        elif phase.escalating and state.escalation is None:
            phase_id += "+escalated"  # (the second run of an escalating pair)
        resume = self.resumes.get(phase_id)
        if resume is not None and resume.owner is durable:
            del self.resumes[phase_id]
        elif self.in_use(phase_id):
            # Another phase's id (run() refuses one, but two run() asking at once
            # both pass): this phase is recorded under an id of its own, so that
            # the two never mix their records.
            _log.warning(
                "phase id %r is another phase's: recorded under a new id",
                phase_id,
                extra=log_extra(),
            )
            phase_id = new_phase_id()
            resume = None
        else:
            resume = None
        rec = PhaseRecorder(self, durable, phase_id, resume)
        self.live[phase_id] = rec
        return rec

    def left(self, rec: PhaseRecorder) -> None:
        """*rec*'s phase is no longer under way (it ended, or its agent crashed)."""
        if self.live.get(rec.id) is rec:
            del self.live[rec.id]

    def in_use(self, phase_id: str) -> bool:
        """Is *phase_id* the id of a phase under way, or of one waiting to go on?"""
        holder = self.live.get(phase_id)
        if holder is not None and holder.durable.holds(holder):
            return True
        resume = self.resumes.get(phase_id)
        if resume is None or resume.owner is None:
            return False
        ref = resume.owner.state.ref
        return ref is not None and ref.statistics().state != "exited"

    def check_free(self, phase_id: str) -> None:
        """Raise InvalidArgument if *phase_id* is in use (``run(phase_id=...)``)."""
        if self.in_use(phase_id):
            raise InvalidArgument(
                f"phase_id {phase_id!r} is the id of a phase under way, or resumed from the "
                "checkpoint store and not ended: a phase id names one phase at a time"
            )

    def ended(self, phase_id: str, result: PhaseResult[object]) -> None:
        waiting = self.outcomes.get(phase_id)
        if waiting is not None and not waiting.event.is_set():
            waiting.result = result
            waiting.event.set()

    def restarted(self, cmd: RunPhase) -> bool:
        """Did the phase of *cmd* crash with its agent, and may it go on?"""
        return cmd.phase_id is not None and cmd.phase_id in self.resumes

    async def rerun(self, ref: AgentRef[object], cmd: RunPhase, *, linked: bool) -> object:
        """Ask the (restarted) agent with *cmd* again, until a crash leaves nothing to
        go on from: its phase goes on from its last completed turn."""
        while True:
            try:
                return await ref.ref.ask(cmd, linked=linked)
            except ActorCrashed:
                if not self.restarted(cmd):
                    raise

    # -- resuming from the store -------------------------------------------------------

    def check_resumable(self) -> None:
        """Make the spec of each agent of the store's unfinished phases, with its
        registered factory (once, before anything runs).

        Raises:
            InvalidArgument: the store holds unfinished phases of a spec that is
                not registered (they could not be resumed), or a factory made no
                spec of its name that a durable agent can have.
            StoreCorrupt: an agent of an unfinished phase is under another one.
        """
        paths = {log.path for log in self.plan.agents.values() if _unfinished(log)}
        for log in self.plan.agents.values():
            if not _unfinished(log):
                continue
            parents = log.path.split("/")[:-1]
            if any("/".join(parents[: i + 1]) in paths for i in range(len(parents))):
                where = log.where
                raise StoreCorrupt(
                    f"checkpoint record at {where.source!r} offset {where.offset} is a "
                    f"PhaseBegun no runtime writes: agent {log.path!r} is under another agent",
                    source=where.source,
                    offset=where.offset,
                )
            factory = self.specs.get(log.spec)
            if factory is None:
                raise InvalidArgument(
                    f"the checkpoint store holds unfinished phases of agent {log.path!r}, of "
                    f"spec {log.spec!r}, which is not registered: pass "
                    f"open_runtime(specs={{{log.spec!r}: make_spec}}) to resume them"
                )
            spec = factory()
            if not isinstance(spec, AgentSpec):
                raise InvalidArgument(
                    f"the spec factory registered as {log.spec!r} returned "
                    f"{type(spec).__name__}, not an AgentSpec"
                )
            if spec.name != log.spec:
                raise InvalidArgument(
                    f"the spec factory registered as {log.spec!r} made a spec named "
                    f"{spec.name!r}: a durable agent's spec is registered under its own name"
                )
            self.check_spec(spec)
            log.made = spec

    async def resume(self, sup: SupervisorRef, services: Services, nursery: trio.Nursery) -> None:
        """Spawn the agents of the store's unfinished phases again, restore their
        contexts, and start their phases again, each from its last completed turn."""
        self.nursery = nursery
        planned = self.plan
        if planned.totals is not None:
            self.budget._restore(planned.totals.usage())
        resumed: list[str] = []
        for log in planned.agents.values():
            unfinished = _unfinished(log)
            if not unfinished:
                continue
            agent = await self._respawn(sup, services, log)
            state = agent._state
            for label, (messages, stamps) in _contexts(log).items():
                ctx = state.new_context(label)
                ctx.send_nowait(ContextAppend(tuple(messages), tuple(stamps)))
            for pid in unfinished:
                records = log.phases[pid]
                begun = records[0]
                assert type(begun) is PhaseBegun
                resume = Resume(restart=False, owner=self.agents[agent.path])
                for record in records[1:]:
                    resume.add(record)
                self.resumes[pid] = resume
                self.outcomes[pid] = _Awaited()
                resumed.append(pid)
                cmd = begun.command
                if cmd.phase_id != pid:
                    cmd = msgspec.structs.replace(cmd, phase_id=pid)
                nursery.start_soon(self._run_resumed, agent, cmd)
        self.resumed = tuple(resumed)
        for key in list(planned.finished):
            if key in self.outcomes:
                del planned.finished[key]
        if planned.torn:
            nursery.start_soon(self._torn, planned.torn)

    async def _respawn(
        self, sup: SupervisorRef, services: Services, log: _AgentLog
    ) -> AgentRef[object]:
        spec = log.made
        assert spec is not None  # (made by check_resumable)
        *parents, name = log.path.split("/")
        under = sup
        for part in parents:
            try:
                under = under.lookup_supervisor(part)
            except UnknownName:
                under = await under.spawn_supervisor(name=part)
        agent = spawn_agent(services, under, spec, name, None)
        self.adopt(agent, log.agent_id)
        return agent

    async def _run_resumed(self, agent: AgentRef[object], cmd: RunPhase) -> None:
        assert cmd.phase_id is not None
        waiting = self.outcomes[cmd.phase_id]
        stop_reason = ""
        try:
            result = await self.rerun(agent, cmd, linked=False)
        except ActorError as exc:
            waiting.error = exc
        else:
            assert isinstance(result, PhaseResult)
            waiting.result = result
            stop_reason = result.stop_reason
        waiting.event.set()
        bus = self.bus
        if bus.active:  # type: ignore[attr-defined]
            bus.publish(  # type: ignore[attr-defined]
                ResumedPhaseEnded(path=agent.path, phase_id=cmd.phase_id, stop_reason=stop_reason)
            )

    async def _torn(self, torn: tuple[Entry, ...]) -> None:
        # (At the body's first checkpoint: a subscriber made as it starts sees them.)
        await trio.lowlevel.checkpoint()
        bus = self.bus
        for entry in torn:
            _log.warning(
                "checkpoint store: a torn last record at %r offset %d was left out",
                entry.source,
                entry.offset,
                extra=log_extra(),
            )
            if bus.active:  # type: ignore[attr-defined]
                bus.publish(  # type: ignore[attr-defined]
                    CheckpointTorn(path="", source=entry.source, offset=entry.offset)
                )

    async def result(self, phase_id: object) -> PhaseResult[object]:
        """The result of the phase *phase_id*, resumed by this runtime or ended in the store."""
        if not isinstance(phase_id, str):
            raise InvalidArgument(f"phase_id must be a str, got {phase_id!r}")
        waiting = self.outcomes.get(phase_id)
        if waiting is None:
            recorded = self.plan.finished.get(phase_id)
            if recorded is None:
                raise UnknownName(
                    f"no phase {phase_id!r} was resumed by this runtime or ended in its store"
                )
            await trio.lowlevel.checkpoint()
            return recorded
        await waiting.event.wait()
        if waiting.error is not None:
            raise waiting.error
        assert waiting.result is not None
        return waiting.result
