"""The agent's lasting state (``_AgentState``): what outlives the incarnations of its
actor (its contexts, its usage, a pending stop request), shared by the phase, the
agent actor, its `AgentRef` and the rooms above; the phase under way, as the state
holds it (`PhaseUnderWay`)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Protocol

import trio

from ...actors import exit_reason
from ...actors.actor import ActorRef
from ...messages import Usage, WorkspaceWriteFailed
from ...providers.base import Model, context_window, model_pricing
from ...workspace import Workspace, agent_workspace
from ..budgets.budget import Budget
from ..budgets.usage import UsageTotals
from ..tools.tool_call import ToolGate
from .context import ContextActor
from .recall import Recollection
from .spec import AgentSpec, _spec_info, _takes_each, context_name
from .summary import Summariser

if TYPE_CHECKING:
    from ...supervisors.ref import SupervisorRef
    from .seams import PhaseRecording
    from .services import Services

__all__ = ["PhaseUnderWay"]

# What an agent asks of its model's ``complete`` (does it take these keywords?).
_ASKED_OF_MODELS = ("on_text", "meter", "lane")


class PhaseUnderWay(Protocol):
    """The phase under way, as the agent's state holds it: a `Phase`
    (agents/loop/phase.py), which the agent actor and the rooms above take it as."""

    allowed: frozenset[str]  # the tools its calls may use (and its children's)
    rec: PhaseRecording | None  # a durable phase's recording


class _AgentState:
    """An agent's state that outlives the incarnations of its actor."""

    __slots__ = (
        "attempts",
        "budget",
        "ceiling",
        "children",
        "compact_at",
        "contexts",
        "details",
        "escalation",
        "gate",
        "info",
        "input_tokens",
        "laned",
        "metered",
        "model",
        "output_tokens",
        "phase",
        "phases",
        "pricing",
        "primary",
        "recall",
        "ref",
        "requests",
        "services",
        "spec",
        "stop_reasons",
        "stop_requested",
        "streams",
        "summariser",
        "sup",
        "tool_calls",
        "usage_parent",
        "window",
        "workspace",
    )

    def __init__(
        self,
        spec: AgentSpec[object],
        services: Services,
        sup: SupervisorRef,
        budget: Budget,
        name: str,
        model: Model,
        escalation: Model | None,
        summariser: Summariser | None = None,
    ) -> None:
        self.spec = spec
        self.info = _spec_info(spec)
        self.summariser = summariser
        self.use_model(model)
        self.escalation = escalation
        self.gate: ToolGate | None = None
        # A session helper's spending is its parent agent's too.
        self.usage_parent: _AgentState | None = None
        # The runtime's services (one object for all its agents), and the
        # supervisor the agent (and what it spawns) lives under.
        self.services = services
        self.sup = sup
        self.budget = budget
        self.ref: ActorRef | None = None  # the agent actor's
        # The context actors: the primary one, and the named labels' (a dict
        # made on first use: most agents never name one, and one object
        # fewer on each of 10k agents is work saved for the cyclic GC).
        self.primary: ActorRef | None = None
        self.contexts: dict[str, ActorRef] | None = None
        # The phase under way (Phase.run sets it, Phase._ended clears it): an
        # interrupted one is found here when its message is delivered again,
        # and its allowlist, when narrower than the spec's, binds the children
        # it starts (compose.spawn_child).
        self.phase: PhaseUnderWay | None = None
        # The most its phases may use, when its parent started it during a
        # phase narrowed by tool_names (None: its spec's tools).
        self.ceiling: frozenset[str] | None = None
        # The agents it started (subagents, helpers), for request_stop (made
        # on first use; see compose.spawn_child).
        self.children: list[_AgentState] | None = None
        self.stop_requested = False
        self.phases = 0
        self.input_tokens = self.output_tokens = self.requests = self.tool_calls = 0
        self.attempts = 0
        # Cached input, cache writes, reasoning: made once a call reports one.
        self.details: list[int] | None = None
        self.stop_reasons: dict[str, int] | None = None  # kept only for a workspace
        # Its memory and context providers (#26; None: none, one test per model call).
        self.recall: Recollection | None = None
        if spec.memory is not None or spec.context_providers is not None:
            self.recall = Recollection(spec.memory, spec.context_providers)
        self.workspace: Workspace | None = None
        if spec.workspace is not None:
            self.workspace = agent_workspace(spec.workspace, spec.name, name)

    def use_model(self, model: Model) -> None:
        """Call *model* from now on (a resolved one, or the next tier's)."""
        self.model = model
        # The estimate past which a phase compacts the history (None: never).
        compaction = self.spec.compaction
        self.compact_at = (
            None
            if compaction is None
            else max(1, int(context_window(model) * compaction.threshold))
        )
        facts = self.info.model_facts
        if facts is not None and facts[0]() is model:
            self.window, self.streams, self.metered, self.laned, self.pricing = facts[1:]
            return
        self.window = max(1, int(context_window(model) * self.spec.limits.context_fill))
        self.streams, self.metered, self.laned = _takes_each(model, _ASKED_OF_MODELS)
        self.pricing = model_pricing(model)
        try:
            held = weakref.ref(model)
        except TypeError:  # a model without weak references is not cached
            return
        self.info.model_facts = (
            held,
            self.window,
            self.streams,
            self.metered,
            self.laned,
            self.pricing,
        )

    def context(self, label: str | None) -> ActorRef | None:
        """The live ContextActor of *label*, or None if there is none yet."""
        if label is None:
            ref = self.primary
        else:
            ref = self.contexts.get(label) if self.contexts is not None else None
        if ref is None or exit_reason(ref) is not None:
            return None
        return ref

    def new_context(self, label: str | None) -> ActorRef:
        """Spawn the ContextActor of *label*, linked to the agent (it stops after it)."""
        assert self.ref is not None
        # Owned by the agent: so it may be spawned while the supervisor stops
        # (the agent may be draining its queued phases, which the graceful
        # stop promises to run), and take the agent's reserved name, which no
        # other child can take (see SupervisorRef.spawn's owner).
        ref = self.sup.spawn_nowait(
            ContextActor, name=context_name(self.ref.name, label), mailbox=64, owner=self.ref
        )
        if label is None:
            self.primary = ref
        else:
            if self.contexts is None:
                self.contexts = {}
            self.contexts[label] = ref
        return ref

    def count(self, usage: Usage | None, requests: int = 1, attempts: int = 0) -> None:
        """Count a model call (None: it failed; *requests* 0: a failed attempt of
        one) and its HTTP *attempts* here and in the agents above."""
        state: _AgentState | None = self
        while state is not None:
            if usage is not None:
                state.input_tokens += usage.input_tokens
                state.output_tokens += usage.output_tokens
                if usage.cached_input_tokens or usage.cache_write_tokens or usage.reasoning_tokens:
                    state.count_details(usage)
            state.requests += requests
            state.attempts += attempts
            state = state.usage_parent

    def count_details(self, usage: Usage) -> None:
        """Add *usage*'s cached input, cache writes and reasoning here."""
        details = self.details
        if details is None:
            details = self.details = [0, 0, 0]
        details[0] += usage.cached_input_tokens
        details[1] += usage.cache_write_tokens
        details[2] += usage.reasoning_tokens

    def count_tool_call(self) -> None:
        """Count one model-driven tool call here and in the agents above."""
        state: _AgentState | None = self
        while state is not None:
            state.tool_calls += 1
            state = state.usage_parent

    def usage(self) -> UsageTotals:
        cached, written, reasoning = self.details or (0, 0, 0)
        return UsageTotals(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens,
            requests=self.requests,
            tool_calls=self.tool_calls,
            attempts=self.attempts,
            cached_input_tokens=cached,
            cache_write_tokens=written,
            reasoning_tokens=reasoning,
        )

    def phase_done(self, reason: str) -> Coroutine[object, None, None] | None:
        """Count a finished phase; with a workspace, the summary write to await."""
        self.phases += 1
        if self.workspace is None or self.usage_parent is not None:
            # (A session helper's spending is in its parent's summary.)
            return None
        return self._write_summary(reason)

    async def _write_summary(self, reason: str) -> None:
        assert self.workspace is not None
        if self.stop_reasons is None:
            self.stop_reasons = {}
        self.stop_reasons[reason] = self.stop_reasons.get(reason, 0) + 1
        assert self.ref is not None
        summary: dict[str, object] = {
            "agent": self.ref.path,
            "phases": self.phases,
            "stop_reasons": dict(self.stop_reasons),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "requests": self.requests,
            "tool_calls": self.tool_calls,
        }
        if self.details is not None:
            cached, written, reasoning = self.details
            summary |= {
                "cached_input_tokens": cached,
                "cache_write_tokens": written,
                "reasoning_tokens": reasoning,
                "cache_hit_ratio": cached / self.input_tokens if self.input_tokens else 0.0,
            }
        # The write runs shielded (the phase has ended): a deadline keeps a
        # write that hangs (a stuck network disk) from holding a cancelled
        # caller of run() for ever; its thread is then abandoned. The deadline
        # is in real time: a MockClock's autojump would end every write at once.
        seconds = self.sup.shutdown_timeout
        with trio.CancelScope() as scope:
            timer = threading.Timer(
                seconds, trio.lowlevel.current_trio_token().run_sync_soon, (scope.cancel,)
            )
            timer.start()
            try:
                await trio.to_thread.run_sync(
                    self.workspace.write_summary, summary, abandon_on_cancel=True
                )
            except Exception as exc:
                # The phase is over and its calls were spent: a summary that could
                # not be written (the disk full, a file where its folder should
                # be) is said, and the result stands.
                self._write_failed(type(exc).__name__, str(exc))
            finally:
                timer.cancel()
        if scope.cancelled_caught:
            self._write_failed(
                "TimeoutError",
                f"the write took longer than {seconds:g} s (the supervisor's "
                "shutdown_timeout); it was abandoned",
            )

    def _write_failed(self, error_type: str, error: str) -> None:
        """Publish a ``WorkspaceWriteFailed`` for the summary that was not written."""
        bus = self.services.bus
        if bus.active:
            assert self.workspace is not None and self.ref is not None
            file = str(self.workspace.root / "run_summary.json")
            bus.publish(
                WorkspaceWriteFailed(
                    path=self.ref.path, file=file, error_type=error_type, error=error
                )
            )
