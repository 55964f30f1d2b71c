"""``open_runtime()``: the root supervisor, the name registry and the event bus."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from .agents.modes import Mode
    from .agents.router import Router
    from .agents.tool import Tool
    from .config import Config

from .agents.budget import Budget, UsageTotals
from .agents.lanes import Lanes, ToolLanes
from .core.bus import EventBus, EventStream
from .core.ref import SupervisorRef, SupervisorStatistics
from .core.restart import Backoff, Strategy
from .core.supervisor import _RuntimeShared, _Supervisor
from .core.timers import Timers
from .errors import ConfigError, InvalidArgument

__all__ = ["Runtime", "open_runtime"]


class Runtime(SupervisorRef):
    """The root of a supervision tree, from :func:`open_runtime`.

    It is a :class:`SupervisorRef` (``spawn``, ``spawn_supervisor``,
    ``lookup``...) with the runtime-wide services on top: events and
    statistics.
    """

    __slots__ = ()

    def __init__(self, sup: _Supervisor) -> None:
        super().__init__(sup, None)

    @property
    def closed(self) -> bool:
        """True once the runtime has begun to stop; spawning then raises ``RuntimeClosed``."""
        return self._sup.closed or self._sup.stopping

    def events(self, *, capacity: int = 1000) -> EventStream:
        """Subscribe to the runtime's events.

        Use as ``async with rt.events() as stream: async for event in stream``.
        The subscription starts at once (before the ``async with``), holds at
        most *capacity* unread events, and never slows the actors: when it is
        full, events are dropped for it and an :class:`~agentrio.EventsLost`
        with their count takes their place.

        Raises:
            InvalidArgument: *capacity* is not an int >= 1.
        """
        return self._sup.bus.subscribe(capacity)

    @property
    def budget(self) -> Budget:
        """The runtime's root budget (limits and what has been spent)."""
        budget: Budget = self._sup.shared.budget
        return budget

    def usage(self) -> UsageTotals:
        """Tokens, requests, tool calls and cost spent by every agent of the runtime."""
        return self.budget.usage()

    async def stop(self) -> None:
        """Begin a graceful stop of everything and return at once.

        The ``open_runtime()`` block's end waits for it.
        """
        self._sup.begin_stop()
        await trio.lowlevel.checkpoint()

    def cancel(self) -> None:
        """Cancel everything in the runtime now."""
        self._sup.begin_stop()
        if self._sup.nursery is not None:
            self._sup.nursery.cancel_scope.cancel()

    def statistics(self) -> SupervisorStatistics:
        """A snapshot of the whole tree: live actors, mailboxes, restarts, dead letters."""
        sup = self._sup
        state = "exited" if sup.closed else "stopping" if sup.stopping else "running"
        return sup.statistics(state)


@asynccontextmanager
async def open_runtime(
    *,
    strategy: Strategy = "one_for_one",
    max_restarts: int = 3,
    period: float = 5.0,
    backoff: Backoff | None = None,
    shutdown_timeout: float = 5.0,
    budget: Budget | None = None,
    config: Config | str | os.PathLike[str] | None = None,
    tools: Sequence[Tool] = (),
    lanes: Lanes | None = None,
    modes: Sequence[Mode] = (),
    router: Router | None = None,
) -> AsyncIterator[Runtime]:
    """Open a runtime: the root supervisor of everything spawned in the block.

    Leaving the block stops everything gracefully (every actor drains its
    mailbox and runs ``on_stop``, last spawned first); whatever still runs
    *shutdown_timeout* seconds after the stop began is cancelled. Leaving it
    with an exception cancels everything. Nothing
    outlives the block. If the root supervisor exceeds its restart intensity,
    the block is cancelled and an exception group holding a
    :class:`~agentrio.RestartIntensityExceeded` (naming the actor and its
    error) is raised.

    Example::

        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Echo, name="echo")
            print(await ref.ask(Ping(text="hi"), timeout=1.0))

    Args:
        strategy: the root's strategy, ``"one_for_one"`` or ``"one_for_all"``.
        max_restarts: restarts the root allows within *period* seconds.
        period: the restart-intensity window, in seconds.
        backoff: delay root-level restarts (see :class:`~agentrio.Backoff`).
        shutdown_timeout: one deadline, in seconds, for the whole graceful
            stop (not one per child); then what still runs is cancelled.
        budget: the root :class:`~agentrio.Budget` every agent draws from
            (default: no limits, usage still counted).
        config: for agents whose model is a tier or an ``"instance:model"``
            string: a :class:`~agentrio.Config`, or the path of an
            agentrio.toml (default: found as :func:`~agentrio.load_config`
            does, when first needed). The providers it makes are closed
            when the block ends.
        tools: tools to register by name (see ``Runtime.register_tool``).
        lanes: how the lanes' tool calls are limited and retried (see
            :class:`~agentrio.Lanes`); default: the ``[lanes]`` of *config*
            when it is given, else of the agentrio.toml found as
            :func:`~agentrio.find_config` finds one (read when the runtime
            opens; a file that cannot be read or is wrong is an error only
            where a tier or mode first needs it), else ``Lanes()``, which
            limits and retries nothing.
        modes: :class:`~agentrio.Mode` objects, each the runtime's mode of
            its name (``run(mode="inline")``, ``respond()``), over the
            presets and the configuration's ``[modes.NAME]`` tables.
        router: the default router of ``AgentRef.respond``: any callable
            ``(request) -> Route`` (or async); default: the configuration's
            ``[router]`` (a :class:`~agentrio.RuleRouter`).

    Raises:
        InvalidArgument: a bad argument, named in the message.
    """
    from .agents.respond import check_runtime_routing

    check_runtime_routing(modes, router)
    if budget is None:
        budget = Budget()
    elif not isinstance(budget, Budget):
        raise InvalidArgument(f"budget must be an agentrio.Budget or None, got {budget!r}")
    if lanes is not None and not isinstance(lanes, Lanes):
        raise InvalidArgument(f"lanes must be an agentrio.Lanes or None, got {lanes!r}")
    bus = EventBus()
    root = _Supervisor(
        "",
        bus=bus,
        counters=_RuntimeShared(budget, config),
        strategy=strategy,
        max_restarts=max_restarts,
        period=period,
        backoff=backoff,
        shutdown_timeout=shutdown_timeout,
    )
    root.shared.timers = Timers(root)
    root.shared.modes = tuple(modes)
    root.shared.router = router
    rt = Runtime._create(root)
    root.ref = rt
    rt.register_tool(*tools)
    if config is not None:
        models = root.shared.models()  # a bad config is an error here, not at first use
        if lanes is None:
            lanes = models.config.lanes
    elif lanes is None:
        lanes = _found_lanes(root)
    if lanes is not None and lanes.active:
        root.shared.tool_lanes = ToolLanes(lanes)
    async with trio.open_nursery() as nursery:
        await nursery.start(_run_root, root, name="agentrio root supervisor")
        try:
            yield rt
        except BaseException:
            rt.cancel()
            raise
        else:
            root.begin_stop()


def _found_lanes(root: _Supervisor) -> Lanes | None:
    """The ``[lanes]`` of an agentrio.toml found as :func:`~agentrio.find_config` finds
    one (read now: the lanes are set up when the runtime opens), or None.

    No file found, nothing is read. A file that cannot be used is not an
    error here but where the runtime first needs it (a tier, a mode), as
    before: its lanes are then the defaults.
    """
    from .config import find_config

    if find_config() is None:
        return None
    try:
        return root.shared.models().config.lanes
    except ConfigError:
        return None


async def _run_root(root: _Supervisor, task_status: trio.TaskStatus[None]) -> None:
    task_status.started()
    try:
        await root.serve()
    finally:
        root.finalize_all("stopped")
        root.bus.close()
        with trio.CancelScope(shield=True):
            await root.shared.aclose()
