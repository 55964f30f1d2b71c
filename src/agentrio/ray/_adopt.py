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
ran, as a tool's start is on disk before it runs), run again there
(`Adopted.run_again`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import trio

from ..agents.agent import AgentSpec
from ..agents.budget import Budget, UsageTotals
from ..errors import InvalidArgument, UnknownName
from ..messages import PhaseResult, RunPhase
from ..runtime import Runtime, open_runtime
from ..store.base import CheckpointStore
from ..store.files import DirectoryStore

__all__ = ["ADOPT_LOCK_TIMEOUT", "Adopted", "adopt", "host_store"]

ADOPT_LOCK_TIMEOUT = 30.0
"""Seconds an adopter waits for a lost host's store lock to go."""

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

    __slots__ = ("_closed", "host", "rt")

    def __init__(self, host: str, rt: Runtime) -> None:
        self.host = host  # the lost host's name
        self.rt = rt
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

    async def run_again(self, spec: str, agent: str, cmd: RunPhase) -> PhaseResult[Any]:
        """Run the phase of *cmd* (its ``phase_id`` set) on agent *agent* (spec
        *spec*) here, from its start: the lost host's store never saw it begin.
        The agent is spawned again unless the store resumed it (its context,
        not durable, is gone)."""
        try:
            ref = self.rt.lookup(agent)
        except UnknownName:
            checkpoints = self.rt._services.checkpoints
            assert checkpoints is not None
            factory = checkpoints.specs.get(spec)
            if factory is None:
                raise InvalidArgument(f"spec {spec!r} is not registered") from None
            ref = (await self.rt.spawn_agent(factory(), name=agent)).ref
        result = await ref.ask(cmd)
        assert isinstance(result, PhaseResult)
        return result

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
        adopted = Adopted(host, rt)
        task_status.started(adopted)
        await adopted._closed.wait()
