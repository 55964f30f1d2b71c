"""One entry point for a user's request: route it, run it, offer to go on in the background.

``AgentRef.respond(request)`` asks the router (the runtime's, by default a
[`RuleRouter`][agentrio.RuleRouter]) for a mode and a tier, publishes a ``Routed``
event, runs the request in that mode on that tier, and escalates a stall once
to the next tier. An ``inline`` run that ends at its cap says so
(``Response.can_continue``); ``AgentRef.continue_in_background(response)``
then goes on in the same context in the ``background`` mode, as a
[`BackgroundRun`][agentrio.types.BackgroundRun] that can be awaited later and watched through
events.

A background phase is queued on the agent at once, and waited for by a small
actor (``<agent>.background-<n>``) spawned under the agent's supervisor,
which keeps the result for [`BackgroundRun.wait`][agentrio.types.BackgroundRun.wait] and stops. So
it is part of the supervision tree like everything else: a graceful stop lets the phase
finish within the supervisor's ``shutdown_timeout`` and then cancels it with
the agent; it is cancelled with the tree; it never outlives the runtime.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from ..._handles import create
from ...actors import PendingAsk
from ...actors.actor import Actor
from ...errors import ActorError, InvalidArgument, RuntimeClosed
from ...messages import PhaseResult, Routed, RunPhase
from ..loop.handles import BackgroundRun, Response
from ..routing.modes import Mode
from ..routing.router import choose_route

if TYPE_CHECKING:
    from ..loop.ref import AgentRef

__all__ = [
    "BACKGROUND_PROMPT",
    "check_runtime_routing",
    "continue_in_background",
    "respond",
    "start_background",
]

BACKGROUND_PROMPT = (
    "Continue working on my request from where you stopped, then give your final answer."
)

_numbers = itertools.count(1)


# -- the runtime's modes and router ------------------------------------------------------


def check_runtime_routing(modes: object, router: object) -> None:
    """``open_runtime``'s *modes* (a list of Mode, one per name) and *router*."""
    if isinstance(modes, (str, bytes)) or not isinstance(modes, Sequence):
        raise InvalidArgument(f"modes must be a list of agentrio.Mode, got {modes!r}")
    names = []
    for mode in modes:
        if not isinstance(mode, Mode):
            raise InvalidArgument(f"modes must be a list of agentrio.Mode, got {mode!r} in it")
        names.append(mode.name)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidArgument(f"modes has two modes named {dupes}")
    if router is not None and not callable(router):
        raise InvalidArgument(
            f"router must be a callable (request) -> agentrio.Route, or None, got {router!r}"
        )


# -- respond -----------------------------------------------------------------------------


# The stop reasons of a run cut short by a cap of its mode: it can go on in the background.
_CONTINUABLE = frozenset(("max_iterations", "timeout"))


async def respond(
    agent: AgentRef[object],
    request: object,
    *,
    router: object,
    context_label: object,
    escalate: object,
) -> Response:
    """The body of [`AgentRef.respond`][agentrio.AgentRef.respond]."""
    if not isinstance(request, str):
        raise InvalidArgument(f"request must be a str, got {request!r}")
    if router is not None and not callable(router):
        raise InvalidArgument(
            f"router must be a callable (request) -> agentrio.Route, or None, got {router!r}"
        )
    if not isinstance(escalate, bool):
        raise InvalidArgument(f"escalate must be a bool, got {escalate!r}")
    if context_label is not None and not isinstance(context_label, str):
        raise InvalidArgument(f"context_label must be a str or None, got {context_label!r}")
    services = agent._state.services
    route = await choose_route(services.router() if router is None else router, request)
    mode = services.mode(route.mode, arg="the route's mode")
    tier = route.tier
    lower = None
    if tier is not None:
        lower = services.fallback(tier)  # a tier without a model: the one below it
        services.resolve(tier)  # a ConfigError now, before the event
    bus = services.bus
    if bus.active:
        bus.publish(Routed(path=agent.path, mode=route.mode, tier=route.tier, reason=route.reason))
    if lower is not None:
        assert tier is not None
        services.fell_back(agent.path, tier, lower)
        tier = lower
    result = await agent.run(request, mode=mode, model=tier, context_label=context_label)
    escalated = False
    if escalate and tier is not None and result.stop_reason == "stalled":
        # Once, as escalate_on_stall does: the same request again, on the next
        # tier, in the same context (which holds the stalled attempt).
        stronger = services.next_tier(tier)
        if stronger is not None:
            tier, escalated = stronger, True
            result = await agent.run(request, mode=mode, model=tier, context_label=context_label)
    return Response(
        agent=agent.path,
        route=route,
        mode=mode,
        tier=tier,
        escalated=escalated,
        result=result,
        can_continue=result.stop_reason in _CONTINUABLE and mode.name != "background",
        context_label=context_label,
    )


# -- background runs ---------------------------------------------------------------------


class _Background(Actor[RunPhase]):
    """Waits for the agent's answer to one queued phase, keeps it, stops."""

    __slots__ = ("pending", "run")

    def __init__(self, run: BackgroundRun, pending: PendingAsk) -> None:
        self.run = run
        self.pending = pending

    async def handle(self, msg: RunPhase) -> None:
        run = self.run
        try:
            # Take over the ask that start_background queued: it is linked, as
            # run()'s, so if this actor is cancelled (its supervisor, the
            # runtime) while the phase runs, the phase is cut short with it.
            result = await self.pending.reply()
            assert isinstance(result, PhaseResult)
            run._result = result
        except ActorError as exc:
            run._error = exc
        await self.ref.stop()  # its one phase is done


async def start_background(
    agent: AgentRef[object], cmd: RunPhase, mode: Mode | None
) -> BackgroundRun:
    """Queue *cmd* on *agent* and spawn the actor that waits for it."""
    await trio.lowlevel.checkpoint_if_cancelled()
    sup = agent._state.sup
    if sup.closed:  # before the phase is queued
        where = repr(sup.path) if sup.path else "the runtime"
        raise RuntimeClosed(f"cannot start a background run: {where} has stopped")
    run = create(BackgroundRun, agent, mode, cmd.context_label)
    # Queued now, so the phase takes its place among the agent's phases in
    # the order the caller asked; the actor awaits its reply.
    pending = await agent.ref.ask_later(cmd, linked=True)
    name = f"{agent.name}.background-{next(_numbers)}"
    try:
        runner = sup.spawn_nowait(
            _Background, run, pending, name=name, mailbox=1, restart="temporary"
        )
    except BaseException:
        pending.withdraw()  # (its supervisor stopped meanwhile: the phase is not run)
        raise
    run._runner = runner
    runner.send_nowait(cmd)
    return run


def check_response(agent: AgentRef[object], response: object) -> Response:
    """*response*, if *agent* can go on with it in the background."""
    if not isinstance(response, Response):
        raise InvalidArgument(
            f"response must be the agentrio.types.Response of respond(), got {response!r}"
        )
    if response.agent != agent.path:
        raise InvalidArgument(
            f"response is agent {response.agent!r}'s, not {agent.path!r}'s: "
            "continue it on the agent that ran it"
        )
    if not response.can_continue:
        raise InvalidArgument(
            f"response cannot be continued: its run ended with "
            f"{response.result.stop_reason!r} in mode {response.mode.name!r} (only a run that "
            "hit a cap, max_iterations or timeout, outside the background mode can)"
        )
    return response


async def continue_in_background(
    agent: AgentRef[object], response: object, message: object
) -> BackgroundRun:
    """The body of [`AgentRef.continue_in_background`][agentrio.AgentRef.continue_in_background]."""
    checked = check_response(agent, response)
    if message is not None and not isinstance(message, str):
        raise InvalidArgument(f"message must be a str or None, got {message!r}")
    return await agent.start_background(
        BACKGROUND_PROMPT if message is None else message,
        mode="background",
        model=checked.tier,
        context_label=checked.context_label,
    )
