"""What AgentRef's composing methods return: Response, BackgroundRun, Helper, HelperResult.

The handles are the loop's (`AgentRef.respond`, ``start_background``,
``continue_in_background`` and ``helper`` return them, so their types are
here, beside `AgentRef`); ``composition/`` makes and fills them (the router's
run, the actor that waits for a background phase, a session helper).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from ..._handles import NoPublicConstructor
from ...actors import exit_reason, wait_exited
from ...errors import ActorError, ActorStopped, HelperTurnsExceeded, InvalidArgument
from ...messages import PhaseResult, StopReason, ToolCallRequest, ToolResult
from ..budgets.usage import UsageTotals
from ..routing.modes import Mode
from ..routing.router import Route

if TYPE_CHECKING:
    from ...actors.actor import ActorRef
    from .ref import AgentRef

__all__ = ["BackgroundRun", "Helper", "HelperResult", "Response"]


@attrs.frozen
class Response:
    """What [`AgentRef.respond`][agentrio.AgentRef.respond] produced.

    Attributes:
        agent: the path of the agent that ran it.
        route: the router's decision.
        mode: the mode it ran in.
        tier: the tier the result came from: the route's, or the next one
            after a stall (None: the agent's own model).
        escalated: the route's tier stalled and the request ran again on ``tier``.
        result: the phase's [`PhaseResult`][agentrio.PhaseResult].
        can_continue: the run ended at one of its caps (``"max_iterations"``
            or ``"timeout"``) in a mode other than ``background``:
            [`AgentRef.continue_in_background`][agentrio.AgentRef.continue_in_background] can go on
            with it.
        context_label: the conversation it ran in (None: the primary one).
    """

    agent: str
    route: Route
    mode: Mode
    tier: str | None
    escalated: bool
    result: PhaseResult[object]
    can_continue: bool
    context_label: str | None = None


class BackgroundRun(metaclass=NoPublicConstructor):
    """A phase running in the background, from
    [`AgentRef.continue_in_background`][agentrio.AgentRef.continue_in_background] or
    [`AgentRef.start_background`][agentrio.AgentRef.start_background].

    Await it later with [`wait`][agentrio.types.BackgroundRun.wait]; watch it through the runtime's
    events, which carry the agent's path (``PhaseStarted``, ``TurnStarted``,
    ``ToolStarted``... ``PhaseEnded``). It runs in the agent like any phase
    (after the phases queued before it), for a small actor under the
    agent's supervisor ([`path`][agentrio.types.BackgroundRun.path]), and ends with the runtime.
    No public constructor.
    """

    __slots__ = ("_agent", "_context_label", "_error", "_mode", "_result", "_runner")

    def __init__(
        self, agent: AgentRef[object], mode: Mode | None, context_label: str | None
    ) -> None:
        self._agent = agent
        self._mode = mode
        self._context_label = context_label
        self._runner: ActorRef | None = None  # the actor's, once spawned
        self._result: PhaseResult[object] | None = None
        self._error: ActorError | None = None

    @property
    def agent(self) -> AgentRef[object]:
        """The agent that runs it."""
        return self._agent

    @property
    def mode(self) -> Mode | None:
        """The mode it runs in (None: the spec's limits)."""
        return self._mode

    @property
    def context_label(self) -> str | None:
        """The conversation it continues (None: the primary one)."""
        return self._context_label

    @property
    def path(self) -> str:
        """The path of the actor that waits for the phase,
        ``"<agent's supervisor>/<agent>.background-<n>"`` (``ActorStarted`` and
        ``ActorExited`` events carry it)."""
        assert self._runner is not None
        return self._runner.path

    @property
    def done(self) -> bool:
        """True once it has ended (with a result or an error)."""
        assert self._runner is not None
        ended = self._result is not None or self._error is not None
        return ended or exit_reason(self._runner) is not None

    @property
    def result(self) -> PhaseResult[object] | None:
        """Its result, once it has one (None until then, or if it failed)."""
        return self._result

    def __repr__(self) -> str:
        state = "running" if not self.done else "done" if self._result else "failed"
        return f"<BackgroundRun {self.path!r} {state}>"

    async def wait(self) -> PhaseResult[object]:
        """Wait until the phase has ended; its result.

        Returns at once if it has ended; call it as often as you like.
        Cancelling the wait does not cancel the phase: it belongs to the
        runtime (``agent.request_stop()`` ends it early, with a result).

        Raises:
            ActorStopped: (reason ``"cancelled"``, ``path`` the agent's) the
                agent stopped or was cancelled before the phase ended, or the
                runtime (or the agent's supervisor) stopped and cancelled it.
            ActorCrashed: the agent crashed.
        """
        assert self._runner is not None
        if self._result is None:
            # The actor keeps the outcome before it exits; an actor cancelled
            # (with its supervisor) before it could has none.
            await wait_exited(self._runner)
        else:
            await trio.lowlevel.checkpoint()
        if self._result is not None:
            return self._result
        if self._error is not None:
            raise self._error
        agent = self._agent.path
        raise ActorStopped(
            f"the background phase of agent {agent!r} was cancelled before it ended "
            f"(its supervisor or the runtime stopped)",
            path=agent,
            reason="cancelled",
        )


@attrs.frozen
class HelperResult:
    """What one [`Helper.execute`][agentrio.Helper.execute] produced.

    Attributes:
        content: the model's final text.
        tool_calls: the tool calls it made, in order.
        tool_results: their results, in the same order.
        usage: what this execute spent (tokens, requests, tool calls).
        stop_reason: why its phase ended (``done`` unless a limit was hit).
    """

    content: str
    tool_calls: tuple[ToolCallRequest, ...]
    tool_results: tuple[ToolResult, ...]
    usage: UsageTotals
    stop_reason: StopReason = "done"


def _minus(after: UsageTotals, before: UsageTotals) -> UsageTotals:
    return UsageTotals(
        input_tokens=after.input_tokens - before.input_tokens,
        output_tokens=after.output_tokens - before.output_tokens,
        total_tokens=after.total_tokens - before.total_tokens,
        requests=after.requests - before.requests,
        tool_calls=after.tool_calls - before.tool_calls,
        attempts=after.attempts - before.attempts,
        cached_input_tokens=after.cached_input_tokens - before.cached_input_tokens,
        cache_write_tokens=after.cache_write_tokens - before.cache_write_tokens,
        reasoning_tokens=after.reasoning_tokens - before.reasoning_tokens,
    )


class Helper(metaclass=NoPublicConstructor):
    """An LLM called like a function, from [`Runtime.helper`][agentrio.Runtime.helper]
    (infrastructure) or [`AgentRef.helper`][agentrio.AgentRef.helper] (session).

    Behind it is an agent actor. No public constructor.
    """

    __slots__ = ("_agent", "_final_answer", "_lock", "_max_turns")

    def __init__(self, agent: AgentRef, max_turns: int, final_answer: bool) -> None:
        self._agent = agent
        # One execute at a time, so each one's usage is its own (the agent runs
        # phases one at a time anyway).
        self._lock = trio.Lock()
        self._max_turns = max_turns
        self._final_answer = final_answer

    @property
    def agent(self) -> AgentRef:
        """The agent actor behind the helper."""
        return self._agent

    def __repr__(self) -> str:
        return f"<Helper {self._agent.path!r}>"

    async def execute(self, prompt: str) -> HelperResult:
        """Run *prompt* to a final answer (up to ``max_turns`` model calls) in a fresh context.

        If the task awaiting ``execute()`` is cancelled, its phase ends with
        ``"cancelled"``, as for [`AgentRef.run`][agentrio.AgentRef.run], and the
        helper takes its next ``execute()`` as usual.

        Returns:
            A [`HelperResult`][agentrio.types.HelperResult].

        Raises:
            HelperTurnsExceeded: ``max_turns`` was reached without a final
                answer (unless the helper was made with ``final_answer=True``).
            InvalidArgument: *prompt* is not a str.
            ActorStopped: the helper (or its caller) has stopped.
            trio.Cancelled: the caller was cancelled (once the phase has ended).
        """
        if not isinstance(prompt, str):
            raise InvalidArgument(f"prompt must be a str, got {prompt!r}")
        async with self._lock:
            before = self._agent.usage()
            phase = await self._agent.run(
                prompt, max_iterations=self._max_turns, continue_context=False
            )
            spent = _minus(self._agent.usage(), before)
        result = HelperResult(
            content=phase.final_text,
            tool_calls=tuple(
                ToolCallRequest(r.name, r.arguments, id=r.id) for r in phase.tool_calls
            ),
            tool_results=phase.tool_calls,
            usage=spent,
            stop_reason=phase.stop_reason,
        )
        if phase.stop_reason == "max_iterations" and not self._final_answer:
            raise HelperTurnsExceeded(
                f"helper {self._agent.path!r} used its {self._max_turns} turns "
                "without a final answer",
                result=result,
            )
        return result

    async def stop(self) -> None:
        """Stop the helper's agent.

        It is also stopped with its caller: a session helper with its agent,
        an infrastructure helper with its supervisor.
        """
        await self._agent.stop()
