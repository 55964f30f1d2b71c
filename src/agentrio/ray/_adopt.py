"""A live host goes on with a lost host's phases: it adopts the lost host's store.

Each node host owns a checkpoint store of its own (``<path>/host-<i>``, or the
``PostgresStore`` named ``<cluster>/host-<i>``). When the cluster's watcher
finds a host lost, a live host opens that store with a second
``open_runtime(store=..., specs=...)`` in its own Trio nursery (`adopt`): the
runtime resumes the lost host's unfinished phases as any durable runtime
does (each from its last completed turn; a call of a tool not declared
idempotent that may have run is not run again), and restores the budget's
totals its checkpoints hold. The store's lock is the fence: the adopter waits
up to ``lock_timeout`` for the lost host's lock to go (the kernel, or the
PostgreSQL server, lets it go when the lost process dies), so that two hosts
never go on with the same phases.

The caller of each phase that was under way on the lost host then gets its
result from the adopter (`Adopted.result`): resumed, ended in the store
before the loss, or, for a phase the store never saw begin (nothing of it
ran, as a tool's start is on disk before it runs), run there from its start
(`Adopted.run`). The driver's part, `Survival`, decides all this: it watches
the hosts, and moves a lost host's calls to the adopter as the same calls,
so that each caller gets one answer.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
import trio

from ..agents.budgets.budget import Budget
from ..agents.budgets.lease import leased_budget, report_lost
from ..agents.budgets.usage import UsageTotals
from ..agents.loop.ref import AgentRef
from ..agents.loop.runs import new_phase_id
from ..agents.loop.spec import AgentSpec
from ..errors import HostLost, InvalidArgument, UnknownName
from ..messages import PhaseResult, RunPhase
from ..runtime import Runtime, open_runtime
from ..store.base import CheckpointStore
from ..store.files import DirectoryStore
from ..supervisors.restart import RestartIntensity
from . import _batch
from ._ledger import ray_ask
from ._watch import LOST_AFTER, PING_INTERVAL, HostDied, Watcher

__all__ = [
    "ADOPT_LOCK_TIMEOUT",
    "Adopted",
    "Adoptions",
    "Survival",
    "adopt",
    "answer_adopt",
    "host_store",
]

ADOPT_LOCK_TIMEOUT = 30.0
"""Seconds an adopter waits for a lost host's store lock to go."""

KILL_WAIT = 2.0
"""Seconds the driver waits for ``ray.kill`` of a lost host before it asks a live
host to adopt the lost one's store (which waits for the lock in any case)."""

SpecFactories = Mapping[str, Callable[[], AgentSpec[Any]]]


def host_store(
    store: str | os.PathLike[str], name: str, *, lock_timeout: float = 0.0
) -> CheckpointStore:
    """The store of the host called *name* (``"<cluster>/host-<i>"``), of the
    cluster's *store*.

    Args:
        store: a PostgreSQL connection string (``postgresql://...``): the
            ``PostgresStore`` of that database named *name*; or a folder's path:
            the ``DirectoryStore`` of its subfolder of *name*'s last part
            (``<path>/host-<i>``).
        name: the host's store name.
        lock_timeout: seconds to wait for the store's lock.

    Raises:
        InvalidArgument: *store* is neither.
    """
    if isinstance(store, str) and store.startswith(_POSTGRES):
        from ..store.postgres import PostgresStore

        return PostgresStore(store, name=name, lock_timeout=lock_timeout)
    if isinstance(store, (str, os.PathLike)):
        folder = os.path.join(os.fspath(store), name.rsplit("/", 1)[-1])
        return DirectoryStore(folder, lock_timeout=lock_timeout)
    raise InvalidArgument(
        f"a cluster's store is a PostgreSQL connection string or a folder's path, "
        f"got {type(store).__name__}"
    )


_POSTGRES = ("postgresql://", "postgres://")


class Adopted:
    """A lost host's store, opened by a live host: its runtime and its phases."""

    __slots__ = ("_closed", "_refs", "_specs", "host", "rt", "stored")

    def __init__(self, host: str, rt: Runtime, specs: SpecFactories) -> None:
        self.host = host  # the lost host's name
        self.rt = rt
        # What the lost host's checkpoints say it spent (its last totals on disk,
        # restored into this runtime's budget as it opened).
        self.stored: UsageTotals = rt.usage()
        self._specs = specs
        self._refs: dict[str, AgentRef[Any]] = {}  # the agents spawned here again
        self._closed = trio.Event()

    @property
    def resumed(self) -> tuple[str, ...]:
        """The ids of the lost host's phases this runtime resumed."""
        return self.rt.resumed

    def usage(self) -> UsageTotals:
        """What the lost host's agents spent: its checkpoints' totals, and since."""
        return self.rt.usage()

    async def result(self, phase_id: str) -> PhaseResult[Any] | None:
        """The result of the lost host's phase *phase_id*: resumed here (waits for
        its end) or ended in its store before the loss; None if the store never
        saw it begin (nothing of it ran: run it again)."""
        try:
            return await self.rt.resumed_result(phase_id)
        except UnknownName:
            return None

    async def run(self, spec: str, agent: str, message: str, **options: Any) -> PhaseResult[Any]:
        """Run ``agent.run(message, **options)`` here: a phase the lost host's store
        never saw begin (nothing of it ran), or a later phase of one of its agents.

        The agent is the one the store resumed (asked with the ``RunPhase`` that
        ``run()`` sends, its ``max_iterations`` the spec's), or else spawned
        here again from spec *spec* (its context, not durable, is gone)."""
        ref = self._refs.get(agent)
        if ref is not None:
            result: PhaseResult[Any] = await ref.run(message, **options)
            return result
        factory = self._specs.get(spec)
        if factory is None:
            raise InvalidArgument(f"spec {spec!r} is not registered")
        try:
            resumed = self.rt.lookup(agent)
        except UnknownName:
            ref = self._refs[agent] = await self.rt.spawn_agent(factory(), name=agent)
            result = await ref.run(message, **options)
            return result
        made = factory()
        options = {"max_iterations": made.limits.max_iterations, **options}
        reply = await resumed.ask(_command(message, options))
        assert isinstance(reply, PhaseResult)
        return reply

    def close(self) -> None:
        """Let the runtime end (its phases are stopped, its store closed)."""
        self._closed.set()


async def adopt(
    store: CheckpointStore,
    *,
    host: str,
    specs: SpecFactories,
    config: Any = None,
    budget: Budget | None = None,
    task_status: trio.TaskStatus[Adopted],
) -> None:
    """Open the lost host *host*'s *store* and go on with its phases, until
    `Adopted.close` (``await nursery.start(adopt, store, host=..., specs=...)``).

    Args:
        store: the lost host's store (`host_store`, with a ``lock_timeout``).
        host: the lost host's name.
        specs: the cluster's spec factories.
        config: the cluster's configuration (for agents whose model is a tier).
        budget: the root budget of the adopted runtime (it restores the lost
            host's totals from the store; default: one with no limits).

    Raises:
        StoreLocked: the lost host's lock did not go within the store's
            ``lock_timeout``.
        StoreError, StoreCorrupt: the store cannot be read.
    """
    async with open_runtime(store=store, specs=specs, config=config, budget=budget) as rt:
        adopted = Adopted(host, rt, specs)
        task_status.started(adopted)
        await adopted._closed.wait()


class Adoptions:
    """The lost hosts' stores a host has adopted, and the calls it answers for them.

    The driver, on a loss, asks a live host to `adopt` the lost host's store,
    naming the phases whose callers wait (``{phase_id: (agent, spec)}``), then
    sends it their ``Run`` frames again, the same calls: the host's ``_run``
    asks `serve` first, which answers a re-routed phase from the adopted
    runtime (its result, resumed or ended; or the phase run there from its
    start if the lost store never saw it begin).
    """

    def __init__(
        self,
        store: str,
        cluster_id: str,
        specs: SpecFactories,
        config: Any,
        nursery: trio.Nursery,
        *,
        ledger: Any = None,
        wait: Callable[[Any], Awaitable[Any]] | None = None,
        name: str = "",
    ) -> None:
        self._store = store
        # The cluster's budget ledger (None: no budget) and how this host's Trio
        # thread awaits its answers (the host's ``await_ref``); this host's name.
        self._ledger = ledger
        self._wait = wait
        self._name = name
        self._cluster_id = cluster_id
        self._specs = specs
        self._config = config
        self._nursery = nursery
        self._adopted: dict[int, Adopted] = {}
        self._rerouted: dict[str, tuple[Adopted, str, str]] = {}  # phase -> where, agent, spec
        self._moved: dict[str, tuple[Adopted, str]] = {}  # agent -> where, its spec

    async def adopt(
        self,
        lost: int,
        phases: Mapping[str, tuple[str, str]],
        agents: Mapping[str, str],
    ) -> Adopted:
        """Open the store of host *lost* in a runtime of this host, and answer for
        its *phases* (``{phase_id: (agent, spec)}``) and the later runs of its
        *agents* (``{agent: spec}``).

        Raises:
            StoreLocked: the lost host's lock did not go within `ADOPT_LOCK_TIMEOUT`.
        """
        adopted = self._adopted.get(lost)
        if adopted is None:
            name = f"host-{lost}"
            store = host_store(
                self._store, f"{self._cluster_id}/{name}", lock_timeout=ADOPT_LOCK_TIMEOUT
            )
            adopted = await self._nursery.start(self._adopt, store, name)
            self._adopted[lost] = adopted
        for phase_id, (agent, spec) in phases.items():
            self._rerouted[phase_id] = (adopted, agent, spec)
        for agent, spec in agents.items():
            self._moved[agent] = (adopted, spec)
        return adopted

    async def _adopt(
        self, store: CheckpointStore, name: str, task_status: trio.TaskStatus[Adopted]
    ) -> None:
        if self._ledger is None or self._wait is None:
            await adopt(
                store, host=name, specs=self._specs, config=self._config, task_status=task_status
            )
            return
        # With the cluster's ledger, the adopted runtime spends from a lease of its
        # own (this host's name and the lost host's), as the host's runtime does:
        # its root budget is a child of the leased one, so the lost host's totals
        # it restores from the store stay out of what the lease reports (the ledger
        # counts them as the lost host's); then the ledger hears what the lost
        # host's checkpoints say it spent, its evidence to take back the rest of
        # the lost host's lease.
        lease = leased_budget(ray_ask(self._ledger, self._wait), f"{self._name}/{name}")
        async with lease as holder, trio.open_nursery() as nursery:
            adopted = await nursery.start(
                functools.partial(
                    adopt,
                    store,
                    host=name,
                    specs=self._specs,
                    config=self._config,
                    budget=holder.budget.child(),
                )
            )
            with contextlib.suppress(Exception):  # (unsent: the lost lease stays spent)
                await report_lost(holder.budget, name, adopted.stored)
            task_status.started(adopted)

    async def serve(self, agent: str, message: str, options: Mapping[str, Any]) -> Any:
        """The result of a run on a lost host's agent: a re-routed phase (resumed,
        ended in the store, or run here from its start), or a later run of one
        of its agents; None if *agent* is not a lost host's."""
        phase_id = options.get("phase_id")
        found = self._rerouted.pop(phase_id, None) if isinstance(phase_id, str) else None
        if found is not None:
            adopted, agent, spec = found
            result = await adopted.result(phase_id)  # type: ignore[arg-type]
            if result is not None:
                return result
            return await adopted.run(spec, agent, message, **options)
        moved = self._moved.get(agent)
        if moved is None:
            return None
        adopted, spec = moved
        return await adopted.run(spec, agent, message, **options)

    def usage(self, own: UsageTotals) -> UsageTotals:
        """*own* (the host's runtime's) and every adopted runtime's, summed."""
        if not self._adopted:
            return own
        totals = [own, *(adopted.usage() for adopted in self._adopted.values())]
        return UsageTotals(
            **{
                field: sum(getattr(t, field) for t in totals)
                for field in UsageTotals.__struct_fields__
            }
        )


async def answer_adopt(
    host: Any,
    reply_to: str,
    lost: int,
    phases: dict[str, tuple[str, str]],
    agents: dict[str, str],
    call: int,
    wait: Callable[[Any], Awaitable[Any]] | None = None,
) -> None:
    """On *host*'s Trio thread: adopt the store of the lost host *lost* (its
    `Adoptions`, made on first use), and answer the driver's call *call* with
    what the lost host's checkpoints say it spent, or with the error. *wait*
    awaits a Ray result from Trio (the host's ``await_ref``: how an adopted
    runtime's lease asks the cluster's ledger)."""
    try:
        if host._adoptions is None:
            options = host._options
            if options.store is None:
                raise InvalidArgument("this cluster has no store: a lost host cannot be adopted")
            host._adoptions = Adoptions(
                options.store,
                host.cluster_id,
                options.specs,
                options.config,
                host._nursery,
                ledger=options.ledger,
                wait=wait,
                name=host.name,
            )
        adopted = await host._adoptions.adopt(lost, phases, agents)
        # (With the cluster's ledger, the adopted runtime has a lease of its own,
        # and the ledger has heard what the lost host's checkpoints say it spent:
        # see Adoptions._adopt.)
    except Exception as exc:
        host.send(reply_to, _batch.failed(call, exc))
    else:
        host.send(reply_to, _batch.Reply(call, "", _batch.encode_value(adopted.stored)))


def _command(message: str, options: Mapping[str, Any]) -> RunPhase:
    """The ``RunPhase`` of ``run(message, **options)``, for the plain-data options a
    cluster's run carries (a ``mode`` by name is not resolved here: refused)."""
    if options.get("mode") is not None:
        raise InvalidArgument("a run with a mode, on an agent resumed from a lost host")
    fields = {k: v for k, v in options.items() if k in RunPhase.__struct_fields__}
    if isinstance(fields.get("tool_names"), list):
        fields["tool_names"] = tuple(fields["tool_names"])
    return RunPhase(message, **fields)


# -- the driver's part -----------------------------------------------------------------


class Survival:
    """The driver's part in surviving a lost host (one per cluster).

    It runs the `Watcher` over the hosts (Ray's ``ping`` method of each host,
    Ray's ``ActorDiedError`` read as `HostDied`), and hears of the losses the
    cluster's links find themselves (`lost`). On a loss, under the restart
    intensity: the lost host is killed (a host only slow must not go on with
    phases another host adopts), the lost host's calls that are not phases
    (a ``map``, an ``ask``) fail with ``HostLost``; its phases are moved: a
    live host (the one with the fewest agents) adopts the lost host's store,
    and their ``Run`` frames are sent to it again, the same calls, so that
    each caller gets its result once. Without a store, or with no live host
    left, they fail with ``HostLost``, once.
    """

    def __init__(
        self,
        cluster: Any,
        store: str | None,
        *,
        max_restarts: int,
        period: float,
        await_ref: Callable[[Any], Awaitable[Any]],
        interval: float = PING_INTERVAL,
        timeout: float = LOST_AFTER,
    ) -> None:
        self._cluster = cluster
        self._await_ref = await_ref  # (_host's: a Ray result awaited from Trio)
        self._store = store
        self.watcher = Watcher(
            self._ping,
            self._on_lost,
            intensity=RestartIntensity(max_restarts, period),
            interval=interval,
            timeout=timeout,
        )
        self._frames: dict[int, Any] = {}  # call -> its Run frame (a phase that may move)
        self._where: dict[int, int] = {}  # call -> the host it is on now
        self._specs: dict[str, str] = {}  # agent -> its spec's name
        self._lost: set[int] = set()
        self._adopting: set[int] = set()  # lost hosts whose store is being adopted
        self._last_error: dict[int, HostLost] = {}
        self.lost_at: dict[int, float] = {}  # host -> when it was found lost (trio time)
        self.lost_why: dict[int, str] = {}  # host -> why
        # host -> what its checkpoints say it spent, read by its adopter (the
        # ledger's evidence for the lost host's lease: see "One budget").
        self.stored: dict[int, UsageTotals] = {}

    async def run(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Watch every host until `close` (in the cluster's nursery)."""
        await self.watcher.run(range(len(self._cluster._links)), task_status=task_status)

    def close(self) -> None:
        """The cluster is closing: its hosts stop on purpose, no loss is looked for."""
        self.watcher.close()

    # -- what the cluster tells it -------------------------------------------------------

    def options(self, options: dict[str, Any]) -> dict[str, Any]:
        """A run's *options*, with a phase id of its own if the cluster has a store
        and the caller gave none (a moved phase is found by its id)."""
        if self._store is None or options.get("phase_id") is not None:
            return options
        return {**options, "phase_id": new_phase_id()}

    def spawned(self, agent: str, spec: str) -> None:
        self._specs[agent] = spec

    def sent(self, call: int, host: int, frame: Any) -> None:
        """The call *call* went to *host* (a ``Run`` frame is one that may move).
        To a host lost already: it waits for the adoption of its store (and
        moves with the others), or fails with ``HostLost`` at once."""
        self._where[call] = host
        if type(frame).__name__ == "Run":
            self._frames[call] = frame
        error = self._last_error.get(host)
        if error is None:
            return
        phase = call in self._frames
        if phase and host in self._adopting:
            return  # (it moves with the lost host's other phases)
        self._cluster._pending.fail(call, _lost_error(error, frame.agent if phase else ""))

    def live(self, links: list[Any]) -> list[Any]:
        """The links of *links* whose host is not lost (where agents are placed)."""
        return [link for link in links if link.index not in self._lost] or links

    def done(self, call: int) -> None:
        self._frames.pop(call, None)
        self._where.pop(call, None)
        for link in self._cluster._links:
            link.calls.discard(call)

    def where(self, call: int, host: int) -> int:
        """The host the call *call* (sent to *host*) is on now."""
        return self._where.get(call, host)

    def host_of(self, agent: str, host: int) -> int:
        """The host of the agent *agent* (spawned on *host*) now."""
        moved: int = self._cluster._names.get(agent, host)
        return moved

    def lost(self, host: int, why: str) -> bool:
        """A link to *host* failed for good (Ray says its actor died); False if the
        host is not watched (the watcher is not running, or it is lost already)."""
        if host in self._lost:
            return True  # (lost already: its calls are moved, or failed, once)
        return self.watcher.lose(host, why)

    # -- the watcher's ping and what follows a loss -------------------------------------

    async def _ping(self, host: int) -> None:
        import ray

        try:
            await self._await_ref(self._cluster._links[host].handle.ping.remote())
        except ray.exceptions.ActorDiedError as exc:
            raise HostDied(type(exc).__name__) from None

    async def _on_lost(self, host: int, error: HostLost) -> None:
        cluster = self._cluster
        if cluster._closed:
            return
        self.lost_at[host] = trio.current_time()
        self.lost_why[host] = str(error)
        self._lost.add(host)
        link = cluster._links[host]
        # The fence: a host only slow must not go on with phases another host
        # adopts (its store's lock, which the adopter waits for, goes with it).
        # (ray.kill may block while Ray reaches the host: in a thread, and not
        # waited for past KILL_WAIT: the adopter waits for the lock anyway.)
        with trio.move_on_after(KILL_WAIT):
            await trio.to_thread.run_sync(_kill, link.handle, abandon_on_cancel=True)
        adopter = self._adopter()
        if self._store is None or adopter is None:
            self._fail(host, error)
            return
        self._adopting.add(host)
        self._last_error[host] = error
        self._fail(host, error, phases=False)  # (a map, an ask: not durable)
        moved = {
            name: self._specs.get(name, "") for name, on in cluster._names.items() if on == host
        }
        try:
            await self._adopt(adopter, host, self._phases_on(host), moved)
        except Exception as exc:  # (no live host could adopt its store: the phases fail)
            error = HostLost(f"{error}; its store could not be adopted: {exc}", path="", host=host)
            self._adopting.discard(host)
            self._last_error[host] = error
            self._fail(host, error)
            return
        self._move(host, adopter)
        self._adopting.discard(host)

    def _calls_on(self, host: int) -> set[int]:
        link = self._cluster._links[host]
        calls = set(link.calls) | {call for call, on in self._where.items() if on == host}
        link.calls.difference_update(calls)
        return calls

    def _phases_on(self, host: int) -> dict[str, tuple[str, str]]:
        """The phases waiting on *host*: ``{phase_id: (agent, spec)}``."""
        frames = [
            self._frames[c] for c, on in self._where.items() if on == host and c in self._frames
        ]
        return {f.options["phase_id"]: (f.agent, self._specs.get(f.agent, "")) for f in frames}

    def _fail(self, host: int, error: HostLost, *, phases: bool = True) -> None:
        """Fail the calls waiting on *host* with *error*, once (but its phases,
        unless *phases*)."""
        self._last_error[host] = error
        for call in self._calls_on(host):
            frame = self._frames.get(call)
            if frame is None:
                self._cluster._pending.fail(call, _lost_error(error, ""))
            elif phases:
                self._cluster._pending.fail(call, _lost_error(error, frame.agent))

    async def _adopt(
        self,
        adopter: Any,
        host: int,
        phases: dict[str, tuple[str, str]],
        agents: dict[str, str],
    ) -> None:
        """Have *adopter* adopt the store of *host*; return once it has (the answer
        comes by the adopter's poll, as a call's: a lost adopter fails it)."""
        cluster = self._cluster
        call = cluster._pending.open()
        adopter.calls.add(call)
        self._where[call] = adopter.index
        try:
            await cluster._control(adopter, adopter.handle.adopt.remote(host, phases, agents, call))
            reply = await cluster._pending.wait(call)
            self.stored[host] = msgspec.msgpack.decode(reply.body, type=UsageTotals)
        finally:
            self.done(call)
            cluster._pending.close(call)

    def _adopter(self) -> Any:
        live = [link for link in self._cluster._links if link.index not in self._lost]
        return min(live, key=lambda link: (link.agents, link.index)) if live else None

    def _move(self, host: int, adopter: Any) -> None:
        """The lost host's agents and phases (those sent to it while its store was
        being adopted too) are the adopter's now."""
        cluster = self._cluster
        for name, index in list(cluster._names.items()):
            if index == host:
                cluster._names[name] = adopter.index
                adopter.agents += 1
        cluster._links[host].usage = UsageTotals()  # (the adopter reports it, from its store)
        calls = {c for c, on in self._where.items() if on == host and c in self._frames}
        for call in calls:
            frame = self._frames[call]
            self._where[call] = adopter.index
            adopter.calls.add(call)
            adopter.outbox.put(frame)


def _lost_error(error: HostLost, agent: str) -> HostLost:
    return HostLost(str(error), path=agent, host=error.host)


def _kill(handle: Any) -> None:
    import ray

    if not ray.is_initialized():  # (ray.kill would start a local Ray of its own)
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # (gone already)
        return
