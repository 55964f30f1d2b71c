"""A2A, both ways: an agentrio agent served as an A2A agent, and a remote A2A agent as a tool.

- [`a2a_app`][agentrio.a2a.a2a_app] serves an agent of a
  [`BlockingRuntime`][agentrio.types.BlockingRuntime] (the asyncio host) as
  an A2A agent: an ASGI app (Starlette) with its agent card and A2A's
  JSON-RPC endpoint, run by uvicorn or mounted in a FastAPI app. It needs the
  `a2a` extra (``pip install 'agentrio[a2a]'``: the official `a2a-sdk`),
  imported only when an app or a card is made.
- [`a2a_tool`][agentrio.a2a.a2a_tool] makes a remote A2A agent a
  [`Tool`][agentrio.Tool]: A2A's JSON-RPC over httpx, on Trio, needing no
  extra.

`import agentrio` imports neither; import `agentrio.a2a` where you use it.
The how-to is [How to speak A2A][how-to-speak-a2a].

Example:

    app = agentrio.a2a.a2a_app(rt, spec)  # rt: from agentrio.open_runtime_sync()
    uvicorn.run(app, host="127.0.0.1", port=8000)

    # elsewhere, in an agent's spec:
    tools = [agentrio.a2a.a2a_tool("http://127.0.0.1:8000", name="researcher")]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._checks import check_int, check_seconds
from ..agents.budgets.budget import Budget
from ..agents.loop.spec import AgentSpec
from ..errors import InvalidArgument
from ..host import BlockingRuntime
from ._client import A2ACard as A2ACard
from ._client import A2AConnectError as A2AConnectError
from ._client import A2ASkill as A2ASkill
from ._client import A2ATool as A2ATool
from ._client import A2AToolError as A2AToolError
from ._client import a2a_tool as a2a_tool
from ._client import fetch_card as fetch_card

if TYPE_CHECKING:
    from a2a.types import AgentCard, AgentSkill
    from starlette.applications import Starlette

__all__ = [
    "a2a_app",
    "agent_card",
    "a2a_tool",
    "fetch_card",
    "A2ATool",
    "A2ACard",
    "A2ASkill",
    "A2AToolError",
    "A2AConnectError",
]


def agent_card(
    spec: AgentSpec[Any],
    *,
    url: str | None = None,
    description: str | None = None,
    skills: Sequence[AgentSkill] | None = None,
    version: str = "1.0.0",
    streaming: bool = True,
) -> AgentCard:
    """The A2A agent card of *spec*, as [`a2a_app`][agentrio.a2a.a2a_app] serves it.

    Its name is the spec's; its skills are *skills*, or one per tool of the
    spec (its name and description; a spec without tools gets one skill,
    itself). Nothing of the spec's instructions is shown.

    Args:
        spec: the agent's spec.
        url: the URL of its JSON-RPC endpoint (the card's one interface:
            JSON-RPC, A2A 1.0); None for none.
        description: what the card says the agent does (default: a line
            naming it).
        skills: the card's skills, as the SDK's ``a2a.types.AgentSkill``
            (default: from the spec's tools).
        version: the agent's version, as the card shows it.
        streaming: the card says it streams (``SendStreamingMessage``).

    Returns:
        The SDK's ``a2a.types.AgentCard``.

    Raises:
        InvalidArgument: a bad argument.
    """
    _check_spec(spec)
    from ._server import build_card

    return build_card(
        spec,
        url=url,
        description=description,
        skills=skills,
        version=version,
        streaming=streaming,
    )


def a2a_app(
    rt: BlockingRuntime,
    spec: AgentSpec[Any],
    *,
    url: str | None = None,
    description: str | None = None,
    skills: Sequence[AgentSkill] | None = None,
    version: str = "1.0.0",
    streaming: bool = True,
    rpc_path: str = "/",
    budget: Budget | None = None,
    timeout: float | None = None,
    max_contexts: int = 1000,
    max_tasks: int = 10_000,
    max_request_bytes: int = 4 * 1024 * 1024,
) -> Starlette:
    """Serve *spec* as an A2A agent: an ASGI app with its card and A2A's JSON-RPC endpoint.

    The app (Starlette) serves the agent card at
    ``/.well-known/agent-card.json`` and A2A 1.0's JSON-RPC at *rpc_path*
    (``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``ListTasks``,
    ``CancelTask``, ``SubscribeToTask``), with the SDK's request handler. Run
    it with uvicorn, or mount it in a FastAPI app; it runs in asyncio, and
    its agents in *rt*'s thread.

    Each A2A context is an agent spawned from *spec* under a supervisor
    ``a2a.<spec name>`` of *rt*'s (on the first message), so a context's
    messages are phases of one conversation. Each message is a task and a
    phase: the phase's text deltas stream as appends to the task's
    ``answer`` artifact, which its final text then replaces whole (with a
    data part for a typed output); the task ends ``completed``, ``failed``
    (an error, the budget, the timeout: the status message says which) or
    ``canceled``. A task's cancel cancels its phase. The phases run under the
    spec's permission policy, hooks and limits, and draw from *budget* (or
    the runtime's).

    Example:

        with agentrio.open_runtime_sync() as rt:
            uvicorn.run(agentrio.a2a.a2a_app(rt, spec), host="127.0.0.1", port=8000)

    Args:
        rt: the runtime, from [`open_runtime_sync`][agentrio.open_runtime_sync].
        spec: the agent's spec.
        url: the public URL of the JSON-RPC endpoint, as the card shows it
            (default: the URL the card was asked at, with *rpc_path*).
        description: what the card says the agent does.
        skills: the card's skills (default: one per tool of the spec).
        version: the agent's version, as the card shows it.
        streaming: offer ``SendStreamingMessage`` (the card says so).
        rpc_path: the JSON-RPC endpoint's path in the app.
        budget: the budget every phase draws from (default: the runtime's).
        timeout: seconds each phase may take (``AgentRef.run``'s ``timeout``).
        max_contexts: the agents kept; past it, the least recently used
            idle ones are stopped (a context coming back starts afresh).
        max_tasks: the tasks kept (for ``GetTask``); past it, the oldest
            ended ones are forgotten.
        max_request_bytes: a request body past this gets HTTP 413.

    Returns:
        The ASGI app (``starlette.applications.Starlette``).

    Raises:
        InvalidArgument: a bad argument, named in the message.
        ModuleNotFoundError: the `a2a` extra is not installed.
    """
    if not isinstance(rt, BlockingRuntime):
        raise InvalidArgument(
            f"rt must be a BlockingRuntime (from agentrio.open_runtime_sync()), got {rt!r}"
        )
    _check_spec(spec)
    if not isinstance(rpc_path, str) or not rpc_path.startswith("/"):
        raise InvalidArgument(f"rpc_path must be a path starting with '/', got {rpc_path!r}")
    if budget is not None and not isinstance(budget, Budget):
        raise InvalidArgument(f"budget must be a Budget or None, got {budget!r}")
    check_seconds("timeout", timeout, optional=True)
    check_int("max_contexts", max_contexts, 1)
    check_int("max_tasks", max_tasks, 1)
    check_int("max_request_bytes", max_request_bytes, 1)
    from ._server import build_app

    return build_app(
        rt,
        spec,
        url=url,
        description=description,
        skills=skills,
        version=version,
        streaming=streaming,
        rpc_path=rpc_path,
        budget=budget,
        timeout=timeout,
        max_contexts=max_contexts,
        max_tasks=max_tasks,
        max_request_bytes=max_request_bytes,
    )


def _check_spec(spec: object) -> None:
    if not isinstance(spec, AgentSpec):
        raise InvalidArgument(f"spec must be an AgentSpec, got {spec!r}")


# This is their public home: reprs, tracebacks and pickles name them here.
for _value in (
    a2a_app,
    agent_card,
    a2a_tool,
    fetch_card,
    A2ATool,
    A2ACard,
    A2ASkill,
    A2AToolError,
    A2AConnectError,
):
    _value.__module__ = __name__
del _value
