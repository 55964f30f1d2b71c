"""Every path to a tool goes through the caller's allowlist, policy, approval and hooks.

Each case gives a caller one way of not being allowed a tool (it is not in its
allowlist, a rule of its policy denies it, its policy's default denies it, its
approver refuses it, its approver does not answer in time, its
``pre_tool_use`` hook refuses it, the caller's phase is narrowed by
``tool_names``) and then tries one path to call it anyway: the caller's
model, ``direct_tool_calls``, a phase's ``tool_names``, an infrastructure
helper, a session helper, a subagent (model-driven and direct), an agent
tool, and a fan-out. The tool must never run, and the refusal must be what
the caller (or its model) sees. One more guard, the caller's
``post_tool_use`` hook, lets the tool run, and must rewrite what every path
sees of its result.

With a narrowed phase, the children (a session helper, a subagent, a
fan-out) are started from a tool of that phase; an agent tool's child is
started by the phase itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    Deny,
    PermissionPolicy,
    PhaseResult,
    ToolCallRequest,
    ToolResult,
    Usage,
    agent_tool,
    allow_rule,
    ask_rule,
    deny_rule,
)
from agentrio.errors import PermissionEscalation
from agentrio.events import ConfirmationRequired, PermissionDenied
from agentrio.testing import FunctionModel, Reply
from agentrio.types import ToolSchema

RAN: list[str] = []


@agentrio.tool
async def secret(what: str = "all") -> str:
    """The tool no one here may use."""
    RAN.append(what)
    return "the secret"


@agentrio.tool
async def public() -> str:
    """A tool anyone may use."""
    return "public"


def calls(name: str, **arguments: object) -> FunctionModel:
    """A model that calls *name* once, then reports what it saw."""

    def reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        seen = [m.content for m in messages if m.role == "tool"]
        if seen:
            return Reply(text=f"saw: {seen[-1]}", usage=Usage(5, 5))
        return Reply(tool_calls=(ToolCallRequest(name, arguments),), usage=Usage(5, 5))

    return FunctionModel(reply)


async def refuse(request: ConfirmationRequired) -> bool:
    return False


async def never_answer(request: ConfirmationRequired) -> bool:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def no_secret(call: ToolCallRequest) -> Deny | None:
    return Deny("the caller's hook refuses 'secret'") if call.name == "secret" else None


REDACTED = "redacted by the caller's hook"


async def redact_secret(call: ToolCallRequest, result: ToolResult) -> ToolResult | None:
    if call.name != "secret":
        return None
    return ToolResult(result.id, result.name, result.arguments, result.status, REDACTED)


# A tool of the caller's phase that starts a child from inside it (with a
# narrowed phase, the child must get the phase's allowlist): the job to run is
# set by the test, and what the child was told comes back as the tool's text.
INSIDE_JOB: list[Callable[[], Awaitable[str]]] = []


@agentrio.tool
async def inside() -> str:
    """Start a child from inside the caller's phase."""
    return await INSIDE_JOB.pop()()


# How the caller is kept from the tool, and what its refusal says. (The hook
# cases approve every ask: a session helper asks about what no rule settles,
# and the hook is what must refuse.)
RESTRICTIONS: dict[str, tuple[dict[str, object], str]] = {
    "allowlist": ({}, "tool 'secret' is not allowed here"),
    "policy": (
        {
            "permissions": PermissionPolicy(rules=[deny_rule("secret"), allow_rule("*")]),
            "approver": lambda request: True,
        },
        "tool 'secret' is denied by the permission policy",
    ),
    "policy_default": (
        {
            "permissions": PermissionPolicy(
                rules=[allow_rule("public"), allow_rule("delegate")], default="deny"
            ),
            "approver": lambda request: True,
        },
        "tool 'secret' is denied by the permission policy",
    ),
    "approval": (
        {"permissions": PermissionPolicy(rules=[ask_rule("secret")]), "approver": refuse},
        "the approver refused 'secret'",
    ),
    "approval_timeout": (
        {
            "permissions": PermissionPolicy(rules=[ask_rule("secret")]),
            "approver": never_answer,
            "approval_timeout": 5,
        },
        "the approver refused 'secret': no answer from the approver within 5 s",
    ),
    "pre_hook": (
        {"pre_tool_use": no_secret, "approver": lambda request: True},
        "the caller's hook refuses 'secret'",
    ),
    "phase_narrowing": ({"approver": lambda request: True}, "tool 'secret' is not allowed here"),
    # Not a refusal: the tool runs, and every path sees the caller's rewrite.
    "post_hook": ({"post_tool_use": redact_secret, "approver": lambda request: True}, REDACTED),
}
# The tools a narrowed phase of the caller keeps (everything but the secret).
NARROWED = ["public", "delegate", "inside"]
# The paths that start a child from inside a narrowed phase.
INSIDE_PATHS = ("session_helper", "subagent", "subagent_direct_tool_calls", "agent_map")

# A subagent, agent tool or fan-out child that would gladly call the tool: it
# lists it, its own rules allow everything, and its own approver says yes.
EAGER = AgentSpec(
    "eager",
    calls("secret"),
    tools=[secret],
    permissions=PermissionPolicy(rules=[allow_rule("*")]),
    approver=lambda request: True,
)
DELEGATE = agent_tool(EAGER, name="delegate")

PATHS = [
    "model",
    "direct_tool_calls",
    "phase_tool_names",
    "infrastructure_helper",
    "session_helper",
    "subagent",
    "subagent_direct_tool_calls",
    "agent_tool",
    "agent_map",
]


def caller_spec(restriction: str, model: FunctionModel) -> AgentSpec:
    kwargs, _ = RESTRICTIONS[restriction]
    tools = [public, DELEGATE, inside]
    if restriction != "allowlist":
        tools.append(secret)
    return AgentSpec("caller", model, tools=tools, **kwargs)  # type: ignore[arg-type]


def the_call(results: Sequence[ToolResult]) -> ToolResult:
    (call,) = [r for r in results if r.name in ("secret", "delegate")]
    return call


async def attempt(rt: agentrio.Runtime, path: str, restriction: str) -> str:
    """Try *path*; return what the caller (or its model) was told."""
    if restriction == "phase_narrowing":
        return await attempt_narrowed(rt, path)
    model = calls("delegate", task="go") if path == "agent_tool" else calls("secret")
    caller = await rt.spawn_agent(caller_spec(restriction, model))
    if path == "phase_tool_names":
        return the_call((await caller.run("go", tool_names=["public"])).tool_calls).content
    return await attempt_with(rt, caller, path)


async def attempt_narrowed(rt: agentrio.Runtime, path: str) -> str:
    """Try *path* during a phase of the caller narrowed to everything but the secret."""
    if path in INSIDE_PATHS:
        model = calls("inside")
    else:
        model = calls("delegate", task="go") if path == "agent_tool" else calls("secret")
    caller = await rt.spawn_agent(caller_spec("phase_narrowing", model))
    if path == "direct_tool_calls":
        result = await caller.run(
            "", tool_names=NARROWED, direct_tool_calls=[ToolCallRequest("secret")]
        )
        return the_call(result.tool_calls).content
    if path in INSIDE_PATHS:
        INSIDE_JOB.append(lambda: attempt_with(rt, caller, path))
        result = await caller.run("go", tool_names=NARROWED)
        (told,) = [r.content for r in result.tool_calls if r.name == "inside"]
        return told
    return the_call((await caller.run("go", tool_names=NARROWED)).tool_calls).content


async def attempt_with(rt: agentrio.Runtime, caller: agentrio.AgentRef, path: str) -> str:
    """Try *path* on behalf of *caller*; return what was told."""
    if path in ("model", "agent_tool"):
        return the_call((await caller.run("go")).tool_calls).content
    if path == "direct_tool_calls":
        result = await caller.run("", direct_tool_calls=[ToolCallRequest("secret")])
        return the_call(result.tool_calls).content
    if path == "infrastructure_helper":
        h = rt.helper(calls("secret"), tools=[public])
        return the_call((await h.execute("go")).tool_results).content
    if path == "session_helper":
        res = await caller.helper(calls("secret")).execute("go")
        return the_call(res.tool_results).content
    if path in ("subagent", "subagent_direct_tool_calls"):
        child = await caller.spawn_subagent(EAGER)
        if path == "subagent":
            result = await child.run("go")
        else:
            result = await child.run("", direct_tool_calls=[ToolCallRequest("secret")])
        return the_call(result.tool_calls).content
    assert path == "agent_map"
    (mapped,) = await caller.map(EAGER, ["go"])
    assert isinstance(mapped, PhaseResult)
    return the_call(mapped.tool_calls).content


def cases() -> list[tuple[str, str]]:
    out = []
    for path in PATHS:
        for restriction in RESTRICTIONS:
            if path in ("infrastructure_helper", "phase_tool_names") and restriction != "allowlist":
                # The whitelist / tool_names is the restriction itself; an
                # infrastructure helper is no agent's child: it runs its own
                # whitelist, with no rules, hooks or phase of an agent's.
                continue
            out.append((path, restriction))
    return out


@pytest.mark.parametrize(("path", "restriction"), cases(), ids=lambda v: v)
async def test_no_path_reaches_a_tool_the_caller_may_not_use(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    path: str,
    restriction: str,
) -> None:
    RAN.clear()
    INSIDE_JOB.clear()
    _, refusal = RESTRICTIONS[restriction]
    escalation = restriction == "allowlist" and path.startswith(("subagent", "agent_"))
    post = restriction == "post_hook"
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        if restriction == "allowlist" and path in ("subagent", "subagent_direct_tool_calls"):
            caller = await rt.spawn_agent(caller_spec(restriction, calls("secret")))
            with pytest.raises(PermissionEscalation, match="secret"):
                await caller.spawn_subagent(EAGER)
        elif restriction == "allowlist" and path == "agent_map":
            caller = await rt.spawn_agent(caller_spec(restriction, calls("secret")))
            with pytest.raises(PermissionEscalation, match="secret"):
                await caller.map(EAGER, ["go"])
        elif restriction == "allowlist" and path == "agent_tool":
            told = await attempt(rt, path, restriction)
            assert "PermissionEscalation" in told and "secret" in told
        elif path == "agent_tool":
            # The child was refused; its final text is what the caller's model sees.
            told = await attempt(rt, path, restriction)
            assert told.startswith(f"saw: {refusal}")
        else:
            told = await attempt(rt, path, restriction)
            assert told.startswith(refusal), told
        await trio.testing.wait_all_tasks_blocked()
    assert INSIDE_JOB == []  # (the job ran, inside the caller's phase)
    # The tool never ran (with the post hook it ran, once, and was rewritten).
    assert RAN == ["all"] if post else RAN == []
    # Every refusal is audited (an escalation is refused before any call is made).
    denied = [e for e in events if isinstance(e, PermissionDenied) and e.tool == "secret"]
    assert len(denied) == (0 if escalation or post else 1)


async def test_the_same_paths_do_reach_an_allowed_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The control: with a caller that may use the tool, every path runs it.
    RAN.clear()
    async with agentrio.open_runtime() as rt:
        for path in PATHS:
            model = calls("delegate", task="go") if path == "agent_tool" else calls("secret")
            spec = AgentSpec(
                "caller", model, tools=[public, secret, DELEGATE], approver=lambda r: True
            )
            caller = await rt.spawn_agent(spec, name=f"caller-{path}")
            if path == "model":
                await caller.run("go")
            elif path == "direct_tool_calls":
                await caller.run("", direct_tool_calls=[ToolCallRequest("secret", {"what": path})])
            elif path == "phase_tool_names":
                await caller.run("go", tool_names=["secret"])
            elif path == "infrastructure_helper":
                await rt.helper(calls("secret"), tools=[secret]).execute("go")
            elif path == "session_helper":
                await caller.helper(calls("secret")).execute("go")
            elif path == "subagent":
                await (await caller.spawn_subagent(EAGER)).run("go")
            elif path == "subagent_direct_tool_calls":
                child = await caller.spawn_subagent(EAGER)
                await child.run("", direct_tool_calls=[ToolCallRequest("secret", {"what": path})])
            elif path == "agent_tool":
                await caller.run("go")
            else:
                await caller.map(EAGER, ["go"])
    assert len(RAN) == len(PATHS)


async def test_a_narrowed_phase_that_keeps_the_tool_lets_its_children_reach_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The control of the narrowed cases: a child gets the phase's tools, not none.
    RAN.clear()
    INSIDE_JOB.clear()
    async with agentrio.open_runtime() as rt:
        for path in ("agent_tool", *INSIDE_PATHS):
            model = calls("delegate", task="go") if path == "agent_tool" else calls("inside")
            spec = AgentSpec(
                "caller", model, tools=[public, secret, DELEGATE, inside], approver=lambda r: True
            )
            caller = await rt.spawn_agent(spec, name=f"caller-{path}")
            if path != "agent_tool":
                INSIDE_JOB.append(lambda c=caller, p=path: attempt_with(rt, c, p))  # type: ignore[misc]
            await caller.run("go", tool_names=[*NARROWED, "secret"])
    assert INSIDE_JOB == []
    assert len(RAN) == 1 + len(INSIDE_PATHS)
