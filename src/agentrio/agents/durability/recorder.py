"""A durable phase recorded (PhaseRecorder), and what a phase cut short goes on from (Resume)."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol, cast

import msgspec
import trio

from ...errors import (
    ActorError,
)
from ...messages import (
    ChatMessage,
    PhaseDeferred,
    PhaseResult,
    PhaseResumed,
    RunPhase,
    ToolCallRequest,
    ToolResult,
)

if TYPE_CHECKING:
    from ...store.writer import CheckpointWriter
    from ..budgets.budget import Budget
    from ..loop.phase import Phase
    from ..loop.state import _AgentState
    from ..tools.tool_call import ToolRunner
    from .parking import SyncGroup

from .records import (
    _ENCODE,
    INTERRUPTED,
    ApprovalAnswered,
    ApprovalAsked,
    ParkedCall,
    PhaseBegun,
    PhaseDone,
    PhaseParked,
    Record,
    ToolBegun,
    ToolDone,
    ToolsDone,
    Totals,
    TurnsAdded,
    tool_message,
)

__all__ = ["PhaseRecorder", "Resume"]


def _kept(cmd: RunPhase) -> RunPhase:
    """*cmd* as recorded: without its settings' ``extra_headers`` and ``extra_body``,
    which may hold keys (an ``Authorization`` header), never written to a store."""
    settings = cmd.settings
    if settings is None or (settings.extra_headers is None and settings.extra_body is None):
        return cmd
    kept = msgspec.structs.replace(settings, extra_headers=None, extra_body=None)
    return msgspec.structs.replace(cmd, settings=kept if kept.fields_set() else None)


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

    __slots__ = ("agent_id", "answers", "last", "phase_ids", "spec", "state")

    def __init__(self, state: _AgentState, agent_id: str, spec: str) -> None:
        self.state = state
        self.agent_id = agent_id
        self.spec = spec
        # A session's agent (#27, durability/sessions.py): the ids of the phases it
        # began in this life, and when it last began one; None for other agents.
        self.phase_ids: list[str] | None = None
        self.last = 0.0
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

    def defer(self, req: ToolCallRequest, kind: str, note: str) -> bool:
        """The approver deferred its decision on *req*: True if the phase will park."""
        rec = self._recorder()
        return rec is not None and rec.defer(req, kind, note)

    def answered(self, req: ToolCallRequest, approved: bool, reason: str) -> None:
        rec = self._recorder()
        if rec is not None:
            if self.answers is None:
                self.answers = {}
            self.answers[rec.id, req.id] = (approved, reason)
            rec.put(ApprovalAnswered(rec.id, req.id, approved, reason))


class Recording(Protocol):
    """What a phase's recorder asks of the runtime's checkpoints
    (``checkpoint.Checkpoints``), declared here so it imports none of them."""

    writer: CheckpointWriter
    budget: Budget
    group: SyncGroup | None  # the phases waiting for the next sync, if one is open
    sync_turns: bool
    resumes: dict[str, Resume]

    async def synced(self) -> None:
        """Wait until what was recorded so far is durable (a group commit)."""

    def sync_wait(self) -> Awaitable[object]:
        """`synced`'s wait, joined now: to await at once (no frame of ours on it)."""

    def left(self, rec: PhaseRecorder) -> None:
        """*rec*'s phase is no longer under way."""

    def ended(self, phase_id: str, result: PhaseResult[object]) -> None:
        """*phase_id* has ended with *result*."""

    def parked_here(self, rec: PhaseRecorder, phase: Phase, resume: Resume) -> None:
        """*rec*'s phase parked (``durability/deferred.py``): it goes on from *resume*."""


class PhaseRecorder:
    """One durable phase's recording: where it stands, and what it goes on from."""

    __slots__ = (
        "begun",
        "calls_begun",
        "calls_ended",
        "ck",
        "durable",
        "id",
        "parked",
        "resume",
        "upto",
    )

    def __init__(
        self, ck: Recording, durable: _Durable, phase_id: str, resume: Resume | None
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
        self.calls_begun: tuple[str, ...] | None = None
        self.calls_ended: dict[str, ToolResult] | None = None
        # The calls of the turn under way whose decision or result was deferred.
        self.parked: list[ParkedCall] | None = None

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
            session = None
            if durable.phase_ids is not None:  # a session's (durability/sessions.py)
                durable.phase_ids.append(self.id)
                durable.last = time.time()
                session = durable.agent_id[8:]  # (its id is "session:<session id>")
            self.put(
                PhaseBegun(
                    self.id,
                    phase.path,
                    durable.agent_id,
                    durable.spec,
                    _kept(phase.cmd),
                    time.time(),
                    session,
                    durable.state.spec.version,
                )
            )

    def turn(self, phase: Phase, totals: bool = True) -> None:
        """Record the phase's turns since the last record (a model's reply last)."""
        upto, base = self.upto, phase.base
        history = phase.history
        end = len(history)
        self.upto = end
        self.ck.writer.put_nowait(
            _ENCODE(
                TurnsAdded(
                    self.id,
                    tuple(history[upto:end]),
                    tuple(phase.timestamps[upto - base : end - base]),
                    self.ck.budget._totals(Totals) if totals else None,
                )
            )
        )

    def tools(self, phase: Phase, results: list[ToolResult], at: float) -> None:
        self.upto = len(phase.history)
        self.ck.writer.put_nowait(_ENCODE(ToolsDone(self.id, tuple(results), at)))

    def tool_done(self, result: ToolResult) -> None:
        """A call of a parallel batch ended (a lone call's result is in its ToolsDone)."""
        parked = self.parked
        if parked is not None and any(p.call.id == result.id for p in parked):
            return  # (its decision, or result, is deferred: a stand-in, never recorded)
        if self.calls_ended is None:
            self.calls_ended = {}
        self.calls_ended[result.id] = result
        self.put(ToolDone(self.id, result))

    def done(self, phase: Phase, result: PhaseResult[object], persisted: bool) -> None:
        if self.parked is not None:  # (parked: its PhaseParked is written; not ended)
            self.durable.answers = None
            self.ck.left(self)
            return
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
        self.put(PhaseDone(self.id, kept, tail, stamps, self.totals(), time.time()))  # type: ignore[arg-type]
        self.durable.answers = None
        self.ck.left(self)
        self.ck.ended(self.id, result)

    def begin_tool(self, runner: ToolRunner) -> Awaitable[object] | None:
        """Before a tool of the phase runs: a tool not declared idempotent has its
        start on disk first (at most once: a crash after this reports the call
        interrupted rather than making it again). The wait for the sync, to await
        at once (None: an idempotent tool's call waits for nothing)."""
        if runner.tool.idempotent:
            return None
        request = runner.request
        # (a tuple: the collector stops tracking a tuple of str, not a set)
        begun = self.calls_begun
        self.calls_begun = (request.id,) if begun is None else (*begun, request.id)
        ck = self.ck
        ck.writer.put_nowait(_ENCODE(ToolBegun(self.id, request.id, request.name)))
        group = ck.group  # (the group of the next sync, if one is open: joined at once)
        return ck.sync_wait() if group is None else group.join()

    # -- a deferred decision (#27: durability/deferred.py) --------------------------

    def defer(self, req: ToolCallRequest, kind: str, note: str) -> bool:
        """The decision on *req* (``"approval"``), or its result (``"result"``), is
        deferred: the phase parks once its turn's calls have ended."""
        if self.parked is None:
            self.parked = []
        self.parked.append(ParkedCall(req, "approval" if kind == "approval" else "result", note))
        return True

    async def park(self, phase: Phase) -> None:
        """Record the turn's ended calls and the deferred ones, sync, and raise
        ``Parked``: the phase ends ``"deferred"``, holding no task and no budget."""
        from ..loop.seams import Parked

        parked = self.parked
        assert parked is not None
        waiting = {p.call.id for p in parked}
        ended = self.calls_ended or {}
        for item in phase.batch or ():
            result = item if isinstance(item, ToolResult) else item.result
            if result is not None and result.id not in waiting and result.id not in ended:
                self.tool_done(result)
        phase.batch = None
        self.put(PhaseParked(self.id, tuple(parked), time.time()))
        self.ck.parked_here(self, phase, self.snapshot(phase, restart=False))
        await self.ck.synced()
        if phase.bus.active:
            phase.bus.publish(PhaseDeferred(path=phase.path, phase_id=self.id, waiting=len(parked)))
        raise Parked

    def crashed(self, phase: Phase) -> None:
        """The phase's agent crashed: keep what it recorded, to go on from it."""
        self.ck.left(self)
        self.ck.resumes[self.id] = self.snapshot(phase, restart=True)

    def snapshot(self, phase: Phase, *, restart: bool) -> Resume:
        """What the phase goes on from: its recorded turns, calls begun, ended, approved."""
        resume = Resume(restart=restart, owner=self.durable)
        resume.recorded = self.begun
        base, upto = phase.base, self.upto
        if upto > base:
            resume.messages = phase.history[base:upto]
            resume.timestamps = list(phase.timestamps[: upto - base])
            recorded = sum(1 for m in resume.messages if m.role == "tool")
            resume.calls = phase.calls[:recorded]
        old = self.resume
        if old is not None:
            resume.begun, resume.ended, resume.approvals = old.begun, old.ended, old.approvals
        resume.begun |= set(self.calls_begun or ())
        resume.ended |= self.calls_ended or {}
        resume.approvals |= self.durable.approvals_of(self.id)
        return resume


class _Awaited:
    """The result of a phase resumed from the store, for ``resumed_result``."""

    __slots__ = ("error", "event", "result")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: PhaseResult[object] | None = None
        self.error: ActorError | None = None
