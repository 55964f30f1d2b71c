"""Services: what the agents of one runtime draw on, handed down by the runtime.

The agent layer does not know where a tier's model, the runtime's modes or its
default router come from. The runtime (``agentrio.runtime``) makes one
`Services` for itself, with its root budget, its event bus,
its tool registry and tool lanes, its modes and router, and two callables over
its configuration; it passes that object to every agent it spawns. An agent
keeps it (``_AgentState.services``: one reference, shared by all the agents of
the runtime) and hands it on to what it spawns: subagents, helpers, the agents
of a map, background runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ...errors import InvalidArgument
from ...messages import TierFellBack
from ...providers.base import Model
from ..budgets.budget import Budget
from ..routing.modes import PRESETS, Mode
from ..routing.router import Router, RuleRouter
from ..routing.tiers import fallback_tier, next_configured
from ..tools.tool import Tool

if TYPE_CHECKING:
    from ...actors import EventBus
    from ...actors.actor import ActorRef
    from ..memory.memory import MemoryState
    from ..tools.lanes import ToolLanes
    from .seams import Checkpointing, Composer, Observer

__all__ = ["Configuration", "Services"]


class Configuration(Protocol):
    """What the agent layer reads of a runtime's configuration (an ``agentrio.Config`` has it).

    Attributes:
        tiers: tier name -> ``"instance:model"``.
        escalation: tiers in order, each escalating to the next.
        modes: the configuration's modes by name, over the presets.
        router: the default router of ``AgentRef.respond``.
    """

    @property
    def tiers(self) -> Mapping[str, str]: ...

    @property
    def escalation(self) -> Sequence[str]: ...

    @property
    def modes(self) -> Mapping[str, Mode]: ...

    @property
    def router(self) -> RuleRouter: ...


class Services:
    """The runtime-wide things the agents of one runtime use, made by the runtime.

    Attributes:
        budget: the runtime's root budget: an agent spawned without one draws
            from it, and a free-standing budget is carved out of it.
        bus: the runtime's event bus.
        tool_lanes: how the lanes' tool calls are limited and retried (None:
            nothing is).
        tools: the tools registered by name (see `register_tool`).
        otel: what records the phases, model calls and tool calls with
            OpenTelemetry (None: nothing does, and they pay one test for it).
        checkpoints: the runtime's checkpoints, when it has a store (None:
            nothing is recorded, and a phase pays one test for it).
        memories: the shared memories (``Memory(name=...)``) by name, each its
            actor and its items (None until one is used).
        composer: what ``AgentRef``'s composing methods call (respond,
            background runs, helpers, subagents, maps: ``composition/``).
        resolve: turns a tier name or an ``"instance:model"`` string into a
            model object, through the runtime's configuration (loaded on first
            use). Raises ``ConfigError`` for a name it does not know, or when
            there is no configuration.
    """

    __slots__ = (
        "_configuration",
        "_modes",
        "_router",
        "budget",
        "bus",
        "checkpoints",
        "composer",
        "memories",
        "otel",
        "resolve",
        "tool_lanes",
        "tools",
    )

    def __init__(
        self,
        *,
        budget: Budget,
        bus: EventBus,
        resolve: Callable[[str], Model],
        configuration: Callable[[], Configuration | None],
        composer: Composer,
        modes: Sequence[Mode] = (),
        router: Router | None = None,
        tool_lanes: ToolLanes | None = None,
    ) -> None:
        self.budget = budget
        self.bus = bus
        self.tool_lanes = tool_lanes
        self.composer = composer
        self.otel: Observer | None = None
        self.checkpoints: Checkpointing | None = None
        # The shared memories by name, each its actor and its items (#26:
        # loop/recall.py; None until the first is used).
        self.memories: dict[str, tuple[ActorRef, MemoryState]] | None = None
        self.tools: dict[str, Tool] = {}
        self.resolve = resolve
        # The runtime's configuration when it has one (given, or found as for
        # tiers), else None; raises ConfigError when the one found is wrong.
        self._configuration = configuration
        # The runtime's own modes; made a table by name on first use, with
        # the presets and the configuration's under them.
        self._modes: tuple[Mode, ...] | dict[str, Mode] = tuple(modes)
        self._router = router  # (None: the configuration's, found on first use)

    # -- tools -------------------------------------------------------------------------

    def register_tool(self, tool: object) -> None:
        """Register *tool* under its name.

        Raises:
            InvalidArgument: not a Tool, or a name already registered for another tool.
        """
        if not isinstance(tool, Tool):
            raise InvalidArgument(f"register_tool takes agentrio.Tool objects, got {tool!r}")
        known = self.tools.get(tool.name)
        if known is not None and known is not tool:
            raise InvalidArgument(f"another tool is already registered as {tool.name!r}")
        self.tools[tool.name] = tool

    def tool(self, tool: Tool | str) -> Tool:
        """*tool* itself, or the registered tool of that name.

        Raises:
            InvalidArgument: no tool is registered under that name.
        """
        if not isinstance(tool, str):
            return tool
        found = self.tools.get(tool)
        if found is None:
            raise InvalidArgument(
                f"no tool registered as {tool!r} (registered: {sorted(self.tools) or 'none'}); "
                "pass the Tool, or register it with rt.register_tool"
            )
        return found

    # -- models ------------------------------------------------------------------------

    def fast_model(self) -> Model | None:
        """The model of the configuration's ``fast`` tier, or None if there is none."""
        configuration = self._configuration()
        if configuration is None or "fast" not in configuration.tiers:
            return None
        return self.resolve("fast")

    def next_tier(self, tier: str) -> str | None:
        """The tier after *tier* in the configuration's ``escalation`` that has a
        model (None: none)."""
        configuration = self._configuration()
        if configuration is None:
            return None
        return next_configured(tier, configuration.tiers, configuration.escalation)

    def fallback(self, model: str) -> str | None:
        """The tier a call on tier *model* runs on, when *model* is declared without
        a model (``""``): the nearest below it in ``escalation`` that has one.
        None when there is nothing to fall back from (a model string, a
        configured tier, an unknown name: ``resolve`` says what it is not)."""
        if ":" in model:
            return None
        configuration = self._configuration()
        if configuration is None:
            return None
        return fallback_tier(model, configuration.tiers, configuration.escalation)

    def fell_back(self, path: str, tier: str, to: str) -> None:
        """Say that agent *path*'s call on *tier* runs on *to* (a ``TierFellBack``)."""
        if self.bus.active:
            self.bus.publish(TierFellBack(path=path, tier=tier, to=to))

    # -- modes and router --------------------------------------------------------------

    def modes(self) -> dict[str, Mode]:
        """The runtime's modes by name: its own, over the configuration's, over the presets.

        Raises:
            ConfigError: the runtime's agentrio.toml is wrong.
        """
        modes = self._modes
        if isinstance(modes, dict):  # made on first use
            return modes
        configuration = self._configuration()
        table = {**PRESETS, **(configuration.modes if configuration is not None else {})}
        table.update((m.name, m) for m in modes)
        self._modes = table
        return table

    def mode(self, mode: object, *, arg: str = "mode") -> Mode:
        """*mode* itself if a Mode, else the runtime's mode of that name.

        Raises:
            InvalidArgument: neither a Mode nor the name of one of the runtime's modes.
            ConfigError: the runtime's agentrio.toml is wrong.
        """
        if isinstance(mode, Mode):
            return mode
        if not isinstance(mode, str):
            raise InvalidArgument(f"{arg} must be a mode's name or an agentrio.Mode, got {mode!r}")
        modes = self.modes()
        found = modes.get(mode)
        if found is None:
            raise InvalidArgument(
                f"{arg} {mode!r} is not a mode of this runtime; its modes are {sorted(modes)}"
            )
        return found

    def router(self) -> Router:
        """The runtime's default router: its own, else the configuration's, else ``RuleRouter()``.

        Raises:
            ConfigError: the runtime's agentrio.toml is wrong.
        """
        router = self._router
        if router is None:
            configuration = self._configuration()
            router = configuration.router if configuration is not None else RuleRouter()
            self._router = router
        return router
