"""The paths planning and delegation open to a tool go through the caller's guards.

As tests/test_composition_paths.py does for the other paths: a caller kept from
the tool ``secret`` one way (its policy, its approver, its ``pre_tool_use``
hook, a run narrowed by ``tool_names``, its allowlist), and three paths of #26
to call it anyway: a request handed to a delegate, a planned run's own step
(in its worker), and a step the plan gives a delegate. The tool must never
run, and the refusal must be what the run's result shows; the caller's
``post_tool_use`` hook lets it run and rewrites what every path sees.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    Delegate,
    Delegation,
    Deny,
    PermissionPolicy,
    Planning,
    ToolCallRequest,
    ToolResult,
    allow_rule,
    ask_rule,
    deny_rule,
)
from agentrio.errors import PermissionEscalation
from agentrio.testing import FunctionModel, Reply
from agentrio.types import ToolSchema

RAN: list[str] = []
REDACTED = "redacted by the caller's hook"


@agentrio.tool
async def secret() -> str:
    """The tool no one here may use."""
    RAN.append("secret")
    return "the secret"


@agentrio.tool
async def public() -> str:
    """A tool anyone may use."""
    return "public"


def model(agent: str | None) -> FunctionModel:
    """Plans one task (given to *agent*) when called without tools; else calls the
    secret once, then says what it saw."""

    def reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        seen = [m.content for m in messages if m.role == "tool"]
        if seen:
            return Reply(text=f"saw: {seen[-1]}")
        if messages[-1].content.startswith("Request:") and not tools:  # the planner
            return Reply(text=json.dumps({"tasks": [{"description": "go", "agent": agent}]}))
        if messages[-1].content.startswith("go\n"):  # the final answer: no tools needed
            return Reply(text="final")
        return Reply(tool_calls=(ToolCallRequest("secret"),))

    return FunctionModel(reply)


async def refuse(request: object) -> bool:
    return False


async def no_secret(call: ToolCallRequest) -> Deny | None:
    return Deny("the caller's hook refuses 'secret'") if call.name == "secret" else None


async def redact(call: ToolCallRequest, result: ToolResult) -> ToolResult | None:
    if call.name != "secret":
        return None
    return ToolResult(result.id, result.name, result.arguments, result.status, REDACTED)


RESTRICTIONS: dict[str, tuple[dict[str, object], str]] = {
    "policy": (
        {"permissions": PermissionPolicy(rules=[deny_rule("secret"), allow_rule("*")])},
        "tool 'secret' is denied by the permission policy",
    ),
    "approval": (
        {"permissions": PermissionPolicy(rules=[ask_rule("secret")]), "approver": refuse},
        "the approver refused 'secret'",
    ),
    "pre_hook": ({"pre_tool_use": no_secret}, "the caller's hook refuses 'secret'"),
    "tool_names": ({}, "tool 'secret' is not allowed here"),
    "post_hook": ({"post_tool_use": redact}, REDACTED),
}
PATHS = ("delegated_request", "own_step", "delegated_step")

# A delegate that would gladly call the tool: its own rules allow all, its approver says yes.
EAGER = AgentSpec(
    "eager",
    model(None),
    tools=[secret],
    permissions=PermissionPolicy(rules=[allow_rule("*")]),
    approver=lambda request: True,
)


def caller_spec(path: str, guards: dict[str, object], tools: list[agentrio.Tool]) -> AgentSpec:
    eager = Delegate(EAGER, "Does anything.", keywords=["go"])
    if path == "delegated_request":
        return AgentSpec(
            "caller", model(None), tools=tools, delegation=Delegation([eager]), **guards
        )  # type: ignore[arg-type]
    return AgentSpec(
        "caller",
        model("eager" if path == "delegated_step" else None),
        tools=tools,
        planning=Planning(mode="on"),
        delegation=Delegation([eager], rule=None),
        **guards,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("restriction", RESTRICTIONS)
@pytest.mark.parametrize("path", PATHS)
async def test_no_path_of_planning_or_delegation_reaches_a_guarded_tool(
    autojump_clock: trio.testing.MockClock, path: str, restriction: str
) -> None:
    RAN.clear()
    guards, refusal = RESTRICTIONS[restriction]
    async with agentrio.open_runtime() as rt:
        caller = await rt.spawn_agent(caller_spec(path, guards, [public, secret]))
        names = ["public"] if restriction == "tool_names" else None
        result = await caller.run("go", tool_names=names)
        await trio.testing.wait_all_tasks_blocked()
    (call,) = [c for c in result.tool_calls if c.name == "secret"]
    assert call.content == refusal
    assert (["secret"] if restriction == "post_hook" else []) == RAN


@pytest.mark.parametrize("path", PATHS)
async def test_the_allowlist_holds_on_every_path(
    autojump_clock: trio.testing.MockClock, path: str
) -> None:
    RAN.clear()
    if path != "own_step":  # a delegate with a tool the caller lacks: refused at once
        with pytest.raises(PermissionEscalation, match="secret"):
            caller_spec(path, {}, [public])
        return
    spec = AgentSpec("caller", model(None), tools=[public], planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(spec)).run("go")
    (call,) = [c for c in result.tool_calls if c.name == "secret"]
    assert call.content == "tool 'secret' is not allowed here"
    assert RAN == []


@pytest.mark.parametrize("path", PATHS)
async def test_an_allowed_tool_is_reached_on_every_path(
    autojump_clock: trio.testing.MockClock, path: str
) -> None:
    # The control: with no guard, each path runs the tool.
    RAN.clear()
    async with agentrio.open_runtime() as rt:
        caller = await rt.spawn_agent(caller_spec(path, {}, [public, secret]))
        result = await caller.run("go")
    assert [c.content for c in result.tool_calls if c.name == "secret"] == ["the secret"]
    assert RAN == ["secret"]
