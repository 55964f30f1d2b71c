"""Deferred decisions (#27): a durable phase parks until a decision, or a result, is given.

An approver (or a tool) answers [`Defer`][agentrio.Defer]; the phase records
the turn's ended calls and a ``PhaseParked`` record (synced), and ends
``"deferred"``: it holds no task and no budget reservation. What it goes on
from is the store's (a `Resume`, kept here too while this runtime lives).

`Runtime.pending_approvals` and `pending_results` list the calls that wait;
`approve`, `deny` and `give_result` record a decision (an ``ApprovalAnswered``
or a ``ToolDone``, synced) and, once every call of the phase is decided, start
the phase again from the store's records, as a phase resumed after a crash: a
runtime's task asks its agent (spawned again from its registered spec if it is
not live), and `Runtime.resumed_result` gives its result. A runtime opened on
the store later (another process) finds the parked phases when it opens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal, Protocol

import attrs
import msgspec

from ..._handles import create
from ..._text import scrub
from ...errors import InvalidArgument, UnknownName
from ...messages import ChatMessage, RunPhase, ToolResult
from ..loop.ref import AgentRef
from ..loop.spawning import spawn_agent
from ..loop.spec import AgentSpec
from .recorder import Resume, _Awaited
from .records import (
    _ENCODE,
    ApprovalAnswered,
    ParkedCall,
    PhaseBegun,
    PhaseParked,
    ToolDone,
    waiting,
)
from .resume import _contexts

if TYPE_CHECKING:
    import trio

    from ...store.base import CheckpointStore
    from ...store.writer import CheckpointWriter
    from ...supervisors.ref import SupervisorRef
    from ..loop.phase import Phase
    from ..loop.services import Services
    from .recorder import PhaseRecorder, _Durable
    from .resume import _AgentLog, _Plan


class Checkpoints(Protocol):
    """What sessions and deferred decisions use of the runtime's checkpoints
    (``checkpoint.Checkpoints``), declared here so they import none of it."""

    agents: dict[str, _Durable]
    parked: dict[str, ParkedPhase]
    outcomes: dict[str, _Awaited]
    resumes: dict[str, Resume]
    sessions: dict[str, AgentRef[object]]
    specs: dict[str, Callable[[], AgentSpec[object]]]
    nursery: trio.Nursery | None
    sup: SupervisorRef | None
    services: Services | None
    plan: _Plan
    store: CheckpointStore
    writer: CheckpointWriter

    async def synced(self) -> None: ...
    def adopt(self, ref: AgentRef[object], agent_id: str | None = None) -> None: ...
    def check_spec(self, spec: AgentSpec[object]) -> None: ...
    async def _run_resumed(self, agent: AgentRef[object], cmd: RunPhase) -> None: ...


__all__ = ["ParkedPhase", "PendingCall", "decide", "parked_from_store", "pending", "waiting"]

# The longest message or result a decision may give (it goes to the model).
MAX_DECISION_CHARS = 100_000


@attrs.frozen
class PendingCall:
    """A tool call of a parked phase that waits: for a decision
    (``kind="approval"``: [`Runtime.approve`][agentrio.Runtime.approve] or
    [`deny`][agentrio.Runtime.deny]) or for its result (``kind="result"``: a tool
    that returned [`Defer`][agentrio.Defer]; [`give_result`][agentrio.Runtime.give_result]).

    Listed by [`Runtime.pending_approvals`][agentrio.Runtime.pending_approvals]
    and [`pending_results`][agentrio.Runtime.pending_results]; pass it (or the
    same ``phase_id`` and ``call_id``, in another process) to decide.

    Attributes:
        phase_id: the parked phase's id (``resumed_result(phase_id)`` gives its
            result once it has gone on and ended).
        call_id: the call's id.
        agent: the path of the phase's agent.
        tool: the tool's name.
        arguments: the call's arguments (a copy).
        kind: ``"approval"`` or ``"result"``.
        note: the ``Defer``'s note.
        since: when the phase parked (``time.time()``).
    """

    phase_id: str
    call_id: str
    agent: str
    tool: str
    arguments: Mapping[str, object]
    kind: Literal["approval", "result"]
    note: str = ""
    since: float = 0.0


class ParkedPhase:
    """A parked phase: what it goes on from, and the calls it still waits for."""

    __slots__ = ("agent_id", "cmd", "log", "path", "resume", "since", "spec", "waiting")

    def __init__(
        self,
        *,
        path: str,
        agent_id: str,
        spec: str,
        cmd: RunPhase,
        resume: Resume,
        waiting: dict[str, ParkedCall],
        since: float,
        log: _AgentLog | None = None,
    ) -> None:
        self.path = path
        self.agent_id = agent_id
        self.spec = spec
        self.cmd = cmd
        self.resume = resume
        self.waiting = waiting  # call id -> the call, until it is decided
        self.since = since
        self.log = log  # its agent's records (parked in an earlier life), for its contexts


def parked_here(ck: Checkpoints, rec: PhaseRecorder, phase: Phase, resume: Resume) -> None:
    """*rec*'s phase parked in this runtime: remember what it goes on from."""
    assert rec.parked is not None
    cmd = phase.cmd
    if cmd.phase_id != rec.id:
        cmd = msgspec.structs.replace(cmd, phase_id=rec.id)
    durable = rec.durable
    ck.parked[rec.id] = ParkedPhase(
        path=phase.path,
        agent_id=durable.agent_id,
        spec=durable.spec,
        cmd=cmd,
        resume=resume,
        waiting={p.call.id: p for p in rec.parked},
        since=_now(),
    )
    if rec.id not in ck.outcomes:
        ck.outcomes[rec.id] = _Awaited()


def parked_from_store(ck: Checkpoints, log: _AgentLog, phase_id: str) -> bool:
    """Take the phase *phase_id* of *log* as parked if it waits (True), when the
    runtime opens."""
    run = log.phases[phase_id]
    calls = waiting(run)
    if not calls:
        return False
    begun = run[0]
    assert type(begun) is PhaseBegun
    resume = Resume(restart=False)
    since = 0.0
    for record in run[1:]:
        resume.add(record)
        if type(record) is PhaseParked:
            since = record.at
    cmd = begun.command
    if cmd.phase_id != phase_id:
        cmd = msgspec.structs.replace(cmd, phase_id=phase_id)
    ck.parked[phase_id] = ParkedPhase(
        path=log.path,
        agent_id=log.agent_id,
        spec=log.spec,
        cmd=cmd,
        resume=resume,
        waiting=calls,
        since=since,
        log=log,
    )
    ck.outcomes[phase_id] = _Awaited()
    return True


def pending(ck: Checkpoints, kind: str) -> list[PendingCall]:
    """The calls that wait for a decision of *kind*, oldest first."""
    out: list[PendingCall] = []
    for pid, parked in ck.parked.items():
        for call_id, p in parked.waiting.items():
            if p.kind == kind:
                out.append(
                    PendingCall(
                        pid,
                        call_id,
                        parked.path,
                        p.call.name,
                        dict(p.call.arguments),
                        "approval" if kind == "approval" else "result",
                        p.note,
                        parked.since,
                    )
                )
    out.sort(key=lambda c: c.since)
    return out


def _text(what: str, value: object) -> str:
    if not isinstance(value, str) or len(value) > MAX_DECISION_CHARS:
        raise InvalidArgument(
            f"{what} must be a str of at most {MAX_DECISION_CHARS:,} characters, "
            f"got a {type(value).__name__}"
            + (f" of {len(value):,}" if isinstance(value, str) else "")
        )
    return value if value.isascii() else scrub(value)


def _find(ck: Checkpoints, call: object, kind: str) -> tuple[ParkedPhase, ParkedCall]:
    if not isinstance(call, PendingCall):
        raise InvalidArgument(
            f"the call to decide must be a PendingCall (from pending_approvals() or "
            f"pending_results()), got {type(call).__name__}"
        )
    parked = ck.parked.get(call.phase_id)
    waits = None if parked is None else parked.waiting.get(call.call_id)
    if parked is None or waits is None:
        raise UnknownName(
            f"call {call.call_id!r} of phase {call.phase_id!r} does not wait for a decision "
            "(it was decided already, or its phase never parked in this store)"
        )
    if waits.kind != kind:
        want = "approve() or deny()" if waits.kind == "approval" else "give_result()"
        raise InvalidArgument(
            f"call {call.call_id!r} of phase {call.phase_id!r} waits for "
            f"{'a decision' if waits.kind == 'approval' else 'its result'}: use {want}"
        )
    return parked, waits


async def decide(
    ck: Checkpoints,
    call: object,
    *,
    approved: bool | None = None,
    message: object = "",
    result: object = None,
    status: object = "ok",
) -> None:
    """Record a decision on *call* (an approval if *approved* is not None, else a
    result); the phase goes on once every call it waits for is decided."""
    kind = "approval" if approved is not None else "result"
    parked, waits = _find(ck, call, kind)
    req = waits.call
    record: ApprovalAnswered | ToolDone
    if approved is not None:
        reason = _text("message", message)
        parked.resume.approvals[req.id] = (approved, reason)
        record = ApprovalAnswered(parked.cmd.phase_id or "", req.id, approved, reason)
    else:
        if status not in ("ok", "failed"):
            raise InvalidArgument(f"status must be 'ok' or 'failed', got {status!r}")
        content = _text("result", result)
        given = ToolResult(
            id=req.id,
            name=req.name,
            arguments=req.arguments,
            status="ok" if status == "ok" else "failed",
            content=content,
        )
        parked.resume.ended[req.id] = given
        record = ToolDone(parked.cmd.phase_id or "", given)
    del parked.waiting[req.id]
    ck.writer.put_nowait(_ENCODE(record))
    await ck.synced()
    if not parked.waiting:
        phase_id = parked.cmd.phase_id
        assert phase_id is not None
        if ck.parked.get(phase_id) is parked:
            del ck.parked[phase_id]
            await _go_on(ck, parked)


async def _go_on(ck: Checkpoints, parked: ParkedPhase) -> None:
    """Start the parked phase again (every call it waited for is decided)."""
    agent = _live(ck, parked)
    if agent is None:
        agent = await _spawn_again(ck, parked)
    durable = ck.agents[agent.path]
    resume = parked.resume
    resume.owner = durable
    phase_id = parked.cmd.phase_id
    assert phase_id is not None and ck.nursery is not None
    ck.resumes[phase_id] = resume
    if phase_id not in ck.outcomes:
        ck.outcomes[phase_id] = _Awaited()
    ck.nursery.start_soon(ck._run_resumed, agent, parked.cmd)


def _live(ck: Checkpoints, parked: ParkedPhase) -> AgentRef[object] | None:
    durable = ck.agents.get(parked.path)
    if durable is None or durable.agent_id != parked.agent_id:
        return None
    ref = durable.state.ref
    if ref is None or ref.statistics().state == "exited":
        return None
    return create(AgentRef, durable.state)


async def _spawn_again(ck: Checkpoints, parked: ParkedPhase) -> AgentRef[object]:
    """The parked phase's agent, spawned again from its registered spec, with its
    contexts as the store left them (when it parked in an earlier life)."""
    spec = made_spec(ck, parked.spec)
    assert ck.sup is not None and ck.services is not None
    *parents, name = parked.path.split("/")
    under = ck.sup
    for part in parents:
        try:
            under = under.lookup_supervisor(part)
        except UnknownName:
            under = await under.spawn_supervisor(name=part)
    agent = spawn_agent(ck.services, under, spec, name, None)
    ck.adopt(agent, parked.agent_id)
    if parked.log is not None:
        state = agent._state
        for label, (messages, stamps) in _contexts(parked.log).items():
            restore_context(state, label, messages, stamps)
    return agent


def restore_context(
    state: object, label: str | None, messages: list[ChatMessage], stamps: list[float]
) -> None:
    """Give an agent (its ``_AgentState``) back the history of its context *label*."""
    from ...messages import ContextAppend

    ctx = state.new_context(label)  # type: ignore[attr-defined]
    ctx.send_nowait(ContextAppend(tuple(messages), tuple(stamps)))


def made_spec(ck: Checkpoints, name: str) -> AgentSpec[object]:
    """The spec registered as *name*, made by its factory and checked.

    Raises:
        InvalidArgument: no factory is registered as *name*, or it made no spec
            of that name that a durable agent can have.
    """
    factory = ck.specs.get(name)
    if factory is None:
        raise InvalidArgument(
            f"spec {name!r} is not registered: pass open_runtime(specs={{{name!r}: make_spec}})"
        )
    spec = factory()
    if not isinstance(spec, AgentSpec) or spec.name != name:
        raise InvalidArgument(
            f"the spec factory registered as {name!r} made "
            f"{spec.name if isinstance(spec, AgentSpec) else type(spec).__name__!r}, not a "
            f"spec named {name!r}"
        )
    ck.check_spec(spec)
    return spec


def _now() -> float:
    return time.time()
