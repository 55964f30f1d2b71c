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

import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Literal

import msgspec
import trio

from ..._checks import short_repr
from ..._log import log_extra
from ...errors import (
    ActorCrashed,
    ActorError,
    InvalidArgument,
    SpecVersionMismatch,
    StoreCorrupt,
    StoreError,
    UnknownName,
)
from ...messages import (
    ChatMessage,
    CheckpointTorn,
    ContextAppend,
    PhaseResult,
    ResumedPhaseEnded,
    RunPhase,
)
from ...store.base import ArchivingStore, Entry, Loaded
from ...store.retention import Retention
from ..loop.ref import AgentRef
from ..loop.runs import new_phase_id
from ..loop.spawning import spawn_agent
from ..loop.spec import AgentSpec

if TYPE_CHECKING:
    from ...store.base import CheckpointStore
    from ...store.writer import CheckpointWriter
    from ...supervisors.ref import SupervisorRef
    from ..budgets.budget import Budget
    from ..loop.phase import Phase
    from ..loop.services import Services

from .compaction import compact
from .deferred import ParkedPhase, parked_from_store, parked_here
from .parking import SyncGroup, new_group
from .reader import StoreReader
from .recorder import PhaseRecorder, Resume, _Awaited, _Durable
from .records import _ENCODE, MemoryKept, PhaseBegun
from .resume import _AgentLog, _contexts, _Plan, _unfinished, plan

__all__ = ["Checkpoints", "Durability", "SpecFactory"]

Durability = Literal["batch", "turn"]
"""When a phase's records are on disk: ``"batch"`` (the writer syncs each batch it
writes; the agents never wait for it) or ``"turn"`` (each turn's records are
synced before the phase's next model call)."""

SpecFactory = Callable[[], AgentSpec[object]]

_PRUNE_AT = 1024  # durable agents known before the exited ones are first looked for


_log = logging.getLogger("agentrio.agents.durability.checkpoint")


# -- the records -------------------------------------------------------------------------


# -- what a phase goes on from ---------------------------------------------------------


# -- the runtime's part --------------------------------------------------------------


class Checkpoints:
    """A runtime's checkpoints: its writer, its registered specs, its durable agents,
    and the phases it resumed."""

    __slots__ = (
        "agents",
        "budget",
        "bus",
        "group",
        "id_prefix",
        "ids",
        "live",
        "nursery",
        "outcomes",
        "parked",
        "plan",
        "prune_at",
        "resumed",
        "resumes",
        "retention",
        "services",
        "sessions",
        "specs",
        "store",
        "sup",
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
        retention: Retention | None = None,
    ) -> None:
        self.store = store
        self.writer = writer
        self.retention = retention
        self.sup: SupervisorRef | None = None  # (set by resume: where forks are spawned)
        self.services: Services | None = None
        self.budget = budget
        self.bus = bus
        self.sync_turns = durability == "turn"
        self.specs: dict[str, SpecFactory] = {}
        for name, factory in specs.items():
            self.register(name, factory)
        self.agents: dict[str, _Durable] = {}  # by path: the live durable agents
        self.prune_at = _PRUNE_AT  # (forget the exited ones when there are this many)
        # Ids of this runtime's durable agents and unnamed phases: a random prefix
        # (96 bits, once) and a count; not a read of the system's random source
        # for each agent and each phase.
        self.id_prefix = new_phase_id() + "."
        self.ids = itertools.count()
        self.resumes: dict[str, Resume] = {}  # phase id -> what it goes on from
        self.live: dict[str, PhaseRecorder] = {}  # phase id -> its phase under way
        self.outcomes: dict[str, _Awaited] = {}  # the phases resumed from the store
        self.resumed: tuple[str, ...] = ()
        self.plan = _Plan()
        self.nursery: trio.Nursery | None = None  # the runtime's (set by resume)
        self.group: SyncGroup | None = None  # the phases waiting for the next sync
        # Sessions and deferred decisions (#27: sessions.py, deferred.py): the parked
        # phases by id, and the live session agents by session id.
        self.parked: dict[str, ParkedPhase] = {}
        self.sessions: dict[str, AgentRef[object]] = {}

    async def open(self) -> None:
        """Read the store's live area (once, as the runtime opens), check that its
        unfinished phases can be resumed, and, with a retention, compact it (an
        archiving store's: what it no longer needs moved to the archive)."""
        loaded = await self.store.load()
        self.plan = plan(loaded)
        self.check_resumable()
        if self.retention is not None and isinstance(self.store, ArchivingStore):
            await compact(self.store, loaded, self.plan, retention=self.retention)
            self.writer.before_close = self._closing
        self.plan.records = []  # (not kept for the runtime's life)

    async def _closing(self) -> None:
        """As the runtime closes (its records written): compact, with its retention."""
        store = self.store
        assert isinstance(store, ArchivingStore)
        await compact(store, await store.load(), retention=self.retention)

    async def synced(self) -> None:
        """Return when every record put so far is on disk.

        The phases that ask while no sync of theirs has started join one group,
        and one task waits for the writer's ``synced()`` for all of them: with
        thousands of agents asking at once, the writer sees a few waiters, and
        each phase is woken once.
        """
        await self.sync_wait()

    def sync_wait(self) -> Awaitable[object]:
        """`synced`'s wait, the calling task joined to the next sync now: to await
        at once (a phase before its tool awaits it with no frame of ours between)."""
        group = self.group
        if group is None:
            group = self.group = new_group()
            assert self.nursery is not None
            self.nursery.start_soon(self._sync, group)
        return group.join()

    async def _sync(self, group: SyncGroup) -> None:
        # (From here on, a phase that asks joins the next group: its records may
        # come after the writer's target, taken as synced() is called.)
        self.group = None
        try:
            await self.writer.synced()
        except StoreError as exc:
            group.wake(exc)
            return
        except BaseException:
            # (Cancelled with the runtime: its phases are too, but none may take
            # this for a sync and run a tool.)
            group.wake(StoreError("the checkpoint store's sync was cancelled"))
            raise
        group.wake()

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

    def new_id(self) -> str:
        """An id no other agent or phase has (this runtime's prefix, and a count)."""
        return f"{self.id_prefix}{next(self.ids)}"

    def adopt(self, ref: AgentRef[object], agent_id: str | None = None) -> None:
        """Make the agent of *ref* durable (its spec checked by `check_spec`)."""
        state = ref._state
        durable = _Durable(state, agent_id or self.new_id(), state.spec.name)
        assert state.ref is not None
        agents = self.agents
        agents[state.ref.path] = durable
        if state.gate is not None:
            state.gate.journal = durable
        if len(agents) >= self.prune_at:
            self._prune()

    def _prune(self) -> None:
        """Forget the durable agents that have exited (each held its agent's state:
        a runtime spawning agent after agent kept them all), once their number has
        doubled since the last time: amortized, one check per spawn."""
        agents = self.agents
        for path, durable in list(agents.items()):
            ref = durable.state.ref
            if ref is None or ref.statistics().state == "exited":
                del agents[path]
                gate = durable.state.gate
                if gate is not None and gate.journal is durable:
                    gate.journal = None  # (no cycle left for the collector)
        self.prune_at = max(_PRUNE_AT, 2 * len(agents))

    def recorder(self, phase: Phase) -> PhaseRecorder | None:
        """The recording of *phase*, if its agent is durable (else None)."""
        state = phase.st
        durable = self.agents.get(phase.path)
        if durable is None or durable.state is not state:
            return None
        phase_id = phase.cmd.phase_id
        if phase_id is None:
            phase_id = self.new_id()
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
        if phase_id in self.parked:
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

    def parked_here(self, rec: PhaseRecorder, phase: Phase, resume: Resume) -> None:
        parked_here(self, rec, phase, resume)

    def ended(self, phase_id: str, result: PhaseResult[object]) -> None:
        waiting = self.outcomes.get(phase_id)
        if waiting is not None and not waiting.event.is_set():
            waiting.result = result
            waiting.event.set()

    def restarted(self, cmd: RunPhase) -> bool:
        """Did the phase of *cmd* crash with its agent, and may it go on?"""
        return cmd.phase_id is not None and cmd.phase_id in self.resumes

    # -- memories (#26) ---------------------------------------------------------------

    def memory_records(self, name: str) -> list[bytes]:
        """The records the store held for the memory *name* when the runtime opened
        (given once: the memory made from them keeps what comes after)."""
        return self.plan.memories.pop(name, [])

    def keep_memory(self, name: str, data: bytes) -> None:
        """Hand one record of the memory *name* to the writer (never waits).

        Raises:
            StoreError: the writer is closed, or stopped by a store error.
        """
        self.writer.put_nowait(_ENCODE(MemoryKept(name, data)))

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
            self._check_versions(log, spec)
            log.made = spec

    def _check_versions(self, log: _AgentLog, spec: AgentSpec[object]) -> None:
        """Raise SpecVersionMismatch for an unfinished phase of *log* begun under
        another version of *spec*, unless *spec* migrates it."""
        if spec.migrate is not None:
            return
        for pid in _unfinished(log):
            begun = log.phases[pid][0]
            assert type(begun) is PhaseBegun
            if begun.version != spec.version:
                raise SpecVersionMismatch(
                    f"the checkpoint store holds phase {pid!r} of agent {log.path!r}, begun "
                    f"under version {begun.version!r} of spec {log.spec!r}; its factory now "
                    f"makes version {spec.version!r}, with no migrate= to carry the phase "
                    "over: give the spec a migrate function, register the old factory until "
                    "its phases end, or delete them (StoreReader.delete_phases)",
                    spec=log.spec,
                    phase_id=pid,
                    recorded=begun.version,
                    current=spec.version,
                )

    async def resume(self, sup: SupervisorRef, services: Services, nursery: trio.Nursery) -> None:
        """Spawn the agents of the store's unfinished phases again, restore their
        contexts, and start their phases again, each from its last completed turn."""
        self.nursery = nursery
        self.sup, self.services = sup, services
        planned = self.plan
        if planned.totals is not None:
            self.budget._restore(planned.totals.usage())
        resumed: list[str] = []
        for log in planned.agents.values():
            for pid in log.phases:  # (#27: a parked phase waits for a decision)
                parked_from_store(self, log, pid)
            if _unfinished(log):
                resumed += await self._start(log)
        self.resumed = tuple(resumed)
        for key in list(planned.finished):
            if key in self.outcomes:
                del planned.finished[key]
        if planned.torn:
            nursery.start_soon(self._torn, planned.torn)

    async def _start(self, log: _AgentLog) -> list[str]:
        """Spawn the agent of *log* again, restore its contexts, and start its
        unfinished phases, each from its last completed turn; their ids."""
        assert self.sup is not None and self.services is not None and self.nursery is not None
        spec = log.made
        assert spec is not None
        agent = await self._respawn(self.sup, self.services, log)
        state = agent._state
        last = log.runs[-1][0] if log.runs else None
        # (the contexts as the agent's last phase left them: of its version)
        version = last.version if type(last) is PhaseBegun else spec.version
        for label, (messages, stamps) in _contexts(log).items():
            messages, stamps = _migrated(spec, log, messages, stamps, version)
            ctx = state.new_context(label)
            ctx.send_nowait(ContextAppend(tuple(messages), tuple(stamps)))
        started = []
        for pid in _unfinished(log):
            if pid in self.parked:
                continue  # (#27: it waits for a decision: deferred.py)
            records = log.phases[pid]
            begun = records[0]
            assert type(begun) is PhaseBegun
            resume = Resume(restart=False, owner=self.agents[agent.path])
            for record in records[1:]:
                resume.add(record)
            if begun.version != spec.version and spec.migrate is not None:
                resume.messages, resume.timestamps = _migrated(
                    spec, log, resume.messages, resume.timestamps, begun.version
                )
            self.resumes[pid] = resume
            self.outcomes[pid] = _Awaited()
            started.append(pid)
            cmd = begun.command
            if cmd.phase_id != pid:
                cmd = msgspec.structs.replace(cmd, phase_id=pid)
            self.nursery.start_soon(self._run_resumed, agent, cmd)
        return started

    def reader(self) -> StoreReader:
        """A reader of the store whose ``fork`` starts the new phase in this runtime."""
        reader = StoreReader(self.store)
        reader._fork = self.fork
        reader._synced = self.synced  # (it reads what this runtime has recorded so far)
        reader._owned = False
        return reader

    async def fork(self, data: list[bytes]) -> None:
        """Record the forked phase *data* (a ``PhaseBegun`` and its turns, encoded),
        and start it at once, as a phase resumed from the store."""
        forked = plan(Loaded([Entry("<fork>", i, d) for i, d in enumerate(data)]))
        saved, self.plan = self.plan, forked
        try:
            self.check_resumable()  # (its spec made by its factory, and checked)
        finally:
            self.plan = saved
        (log,) = forked.agents.values()
        if log.path in self.agents:
            raise InvalidArgument(f"the fork's agent path {log.path!r} is a live agent's")
        for record in data:
            self.writer.put_nowait(record)
        await self.synced()
        self.resumed += tuple(await self._start(log))

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
            if result.stop_reason == "deferred":
                return  # (parked again: it ends when it goes on after the next decision)
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
                recorded = await self._archived_result(phase_id)
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

    async def _archived_result(self, phase_id: str) -> PhaseResult[object] | None:
        """The result of *phase_id* if it ended and was archived (read on demand)."""
        store = self.store
        if not isinstance(store, ArchivingStore):
            return None
        entries = (await store.read_archived([phase_id])).get(phase_id)
        if not entries:
            return None
        archived = plan(Loaded(entries))
        return archived.finished.get(phase_id)


def _migrated(
    spec: AgentSpec[object],
    log: _AgentLog,
    messages: list[ChatMessage],
    stamps: list[float],
    version: str | None = None,
) -> tuple[list[ChatMessage], list[float]]:
    """*messages* carried over to *spec*'s version by its ``migrate`` (as they are if
    it has none, or they are of its version); their times kept where they last."""
    migrate = spec.migrate
    if migrate is None or version == spec.version:
        return messages, stamps
    given = migrate(version, tuple(messages))  # (what it raises comes out as it is)
    out: list[object] = list(given) if isinstance(given, (list, tuple)) else [given]
    if not all(isinstance(m, ChatMessage) for m in out):
        raise InvalidArgument(
            f"the migrate function of spec {log.spec!r} must return a list of ChatMessages,"
            f" got {short_repr(given)}"
        )
    now = time.time()
    kept = [m for m in out if isinstance(m, ChatMessage)]  # (all of them: checked above)
    return kept, [stamps[i] if i < len(stamps) else now for i in range(len(kept))]
