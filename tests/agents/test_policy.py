"""Permission policies (ordered deny -> allow -> ask rules, globs, argument predicates,
a configurable default), approvers (callables, actors, the terminal), the approval
timeout that only ever denies, and the pre/post tool-use hooks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    Approval,
    ChatMessage,
    Deny,
    InvalidArgument,
    Limits,
    PermissionPolicy,
    ToolCallRequest,
    ToolResult,
    Usage,
    allow_rule,
    ask_rule,
    deny_rule,
)
from agentrio.agents.tools.policy import ask_approver
from agentrio.events import ConfirmationReceived, ConfirmationRequired, PermissionDenied
from agentrio.testing import FunctionModel, Reply, ScriptedModel
from agentrio.types import Rule, ToolSchema

ROOT = Path(__file__).resolve().parents[2]
Recorder = Callable[[agentrio.Runtime], list[agentrio.events.Event]]


def make_tools() -> tuple[list[tuple[str, dict[str, object]]], list[agentrio.Tool]]:
    """Three tools that record their calls in one list."""
    ran: list[tuple[str, dict[str, object]]] = []

    @agentrio.tool
    async def read_file(path: str) -> str:
        """Read a file."""
        ran.append(("read_file", {"path": path}))
        return f"contents of {path}"

    @agentrio.tool
    async def write_file(path: str, text: str = "") -> str:
        """Write a file."""
        ran.append(("write_file", {"path": path, "text": text}))
        return f"wrote {path}"

    @agentrio.tool
    async def shell(cmd: str) -> str:
        """Run a command."""
        ran.append(("shell", {"cmd": cmd}))
        return "ran"

    return ran, [read_file, write_file, shell]


def one_call(name: str, **arguments: object) -> ScriptedModel:
    """A model that makes one tool call, then answers with what it saw."""

    def reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        seen = [m for m in messages if m.role == "tool"]
        if not seen:
            return Reply(tool_calls=(ToolCallRequest(name, arguments),), usage=Usage(5, 5))
        return Reply(text=f"saw: {seen[-1].content}", usage=Usage(5, 5))

    return FunctionModel(reply)  # type: ignore[return-value]


async def run_one(
    rt: agentrio.Runtime, name: str, arguments: dict[str, object], **spec: object
) -> tuple[ToolResult, str]:
    """One phase of an agent whose model calls *name*: the tool's result and the final text."""
    _, tools = make_tools()
    tools = spec.pop("tools", tools)  # type: ignore[assignment]
    agent = await rt.spawn_agent(
        AgentSpec("a", one_call(name, **arguments), tools=tools, **spec)  # type: ignore[arg-type]
    )
    result = await agent.run("go")
    await agent.stop()
    (call,) = result.tool_calls
    return call, result.final_text


# -- rules and policies -----------------------------------------------------------------


def test_rule_constructors() -> None:
    def pred(a: Mapping[str, object]) -> bool:
        return True

    assert deny_rule("x") == Rule("deny", "x")
    assert allow_rule("x", pred) == Rule("allow", "x", pred)
    assert ask_rule("x").action == "ask"


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"action": "maybe", "tool": "x"}, "Rule.action"),
        ({"action": "deny", "tool": ""}, "Rule.tool"),
        ({"action": "deny", "tool": 3}, "Rule.tool"),
        ({"action": "deny", "tool": "x", "when": "yes"}, "Rule.when"),
    ],
)
def test_bad_rules(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        Rule(**kwargs)  # type: ignore[arg-type]


def test_bad_policies() -> None:
    with pytest.raises(InvalidArgument, match="default"):
        PermissionPolicy(default="maybe")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="rules"):
        PermissionPolicy(rules=["deny *"])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="permissions"):
        AgentSpec("a", ScriptedModel([]), permissions="deny")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="approver"):
        AgentSpec("a", ScriptedModel([]), approver="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="pre_tool_use"):
        AgentSpec("a", ScriptedModel([]), pre_tool_use=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        AgentSpec("a", ScriptedModel([]), approval_timeout=-1)


def test_deny_then_allow_then_ask_whatever_the_order_of_the_rules() -> None:
    policy = PermissionPolicy(
        rules=[ask_rule("*"), allow_rule("read_*"), deny_rule("read_secret"), allow_rule("shell")],
        default="deny",
    )
    assert policy.decide("read_secret", {}) == "deny"  # deny beats an earlier allow
    assert policy.decide("read_file", {}) == "allow"  # allow beats an earlier ask
    assert policy.decide("write_file", {}) == "ask"
    assert policy.decide("shell", {}) == "allow"


def test_globs_match_whole_names_case_sensitively() -> None:
    policy = PermissionPolicy(rules=[allow_rule("read_*"), allow_rule("db.?et")], default="deny")
    assert policy.decide("read_file", {}) == "allow"
    assert policy.decide("read_", {}) == "allow"
    assert policy.decide("reader", {}) == "deny"
    assert policy.decide("READ_file", {}) == "deny"
    assert policy.decide("xread_file", {}) == "deny"
    assert policy.decide("db.get", {}) == "allow"
    assert policy.decide("db.gets", {}) == "deny"


def test_argument_predicates() -> None:
    def system_path(arguments: Mapping[str, object]) -> bool:
        return str(arguments.get("path", "")).startswith("/etc")

    policy = PermissionPolicy(
        rules=[deny_rule("write_file", when=system_path), allow_rule("write_file")], default="ask"
    )
    assert policy.decide("write_file", {"path": "/etc/passwd"}) == "deny"
    assert policy.decide("write_file", {"path": "notes.txt"}) == "allow"
    # a predicate that does not match leaves the call to the next rules / the default
    policy = PermissionPolicy(rules=[allow_rule("shell", when=lambda a: a.get("cmd") == "ls")])
    policy = PermissionPolicy(rules=policy.rules, default="deny")
    assert policy.decide("shell", {"cmd": "ls"}) == "allow"
    assert policy.decide("shell", {"cmd": "rm -rf /"}) == "deny"


@pytest.mark.parametrize("default", ["allow", "deny", "ask"])
def test_the_default_is_for_unmatched_calls(default: str) -> None:
    policy = PermissionPolicy(rules=[deny_rule("shell")], default=default)  # type: ignore[arg-type]
    assert policy.decide("anything", {}) == default
    assert policy.decide("shell", {}) == "deny"


def test_the_default_default_is_allow() -> None:
    assert PermissionPolicy().decide("x", {}) == "allow"


# -- approvers ----------------------------------------------------------------------------


class Approve(agentrio.Actor[ConfirmationRequired]):
    """An actor approver: approves reads, refuses the rest, and remembers what it saw."""

    seen: ClassVar[list[ConfirmationRequired]] = []

    async def handle(self, msg: ConfirmationRequired) -> Approval:
        Approve.seen.append(msg)
        ok = msg.tool_call.name.startswith("read")
        return Approval(ok, "" if ok else "reads only")


async def test_ask_approver_accepts_every_kind_of_answer() -> None:
    request = ConfirmationRequired(path="a", tool_call=ToolCallRequest("read_file"), agent="a")

    async def async_yes(r: ConfirmationRequired) -> bool:
        return True

    assert await ask_approver(async_yes, request) == Approval(True)
    assert await ask_approver(lambda r: False, request) == Approval(False)
    assert await ask_approver(lambda r: Approval(True, "fine"), request) == Approval(True, "fine")
    odd = await ask_approver(lambda r: "yes", request)  # type: ignore[arg-type,return-value]
    assert not odd.approved and "'yes'" in odd.reason
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Approve)
        assert (await ask_approver(ref, request)).approved


async def test_ask_publishes_confirmation_events_and_the_approver_decides(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    seen: ClassVar[list[ConfirmationRequired]] = []

    async def approver(request: ConfirmationRequired) -> Approval:
        seen.append(request)
        return Approval(request.tool_call.arguments.get("path") == "ok.txt", "not that file")

    policy = PermissionPolicy(rules=[ask_rule("write_file")])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        yes, text = await run_one(
            rt, "write_file", {"path": "ok.txt"}, permissions=policy, approver=approver
        )
        no, text_no = await run_one(
            rt, "write_file", {"path": "bad.txt"}, permissions=policy, approver=approver
        )
        await trio.testing.wait_all_tasks_blocked()
    assert yes.status == "ok" and text == "saw: wrote ok.txt"
    assert no.status == "denied"
    assert no.content == "the approver refused 'write_file': not that file"
    assert text_no == f"saw: {no.content}"  # the model sees the denial
    assert [r.tool_call.arguments["path"] for r in seen] == ["ok.txt", "bad.txt"]
    assert seen[0].agent == "a" and seen[0].tool_call.name == "write_file"
    required = [e for e in events if isinstance(e, ConfirmationRequired)]
    received = [e for e in events if isinstance(e, ConfirmationReceived)]
    assert [e.request_id for e in required] == [r.request_id for r in seen]
    assert [(e.request_id, e.approved) for e in received] == [
        (seen[0].request_id, True),
        (seen[1].request_id, False),
    ]
    denied = [e for e in events if isinstance(e, PermissionDenied)]
    assert [(e.tool, e.reason) for e in denied] == [("write_file", no.content)]


async def test_allowed_and_denied_calls_ask_no_one(autojump_clock: trio.testing.MockClock) -> None:
    asked: list[ConfirmationRequired] = []
    policy = PermissionPolicy(rules=[allow_rule("read_*"), deny_rule("shell")], default="ask")
    async with agentrio.open_runtime() as rt:
        ok, _ = await run_one(
            rt, "read_file", {"path": "x"}, permissions=policy, approver=asked.append
        )
        no, _ = await run_one(rt, "shell", {"cmd": "ls"}, permissions=policy, approver=asked.append)
    assert ok.status == "ok"
    assert no.status == "denied" and no.content == "tool 'shell' is denied by the permission policy"
    assert asked == []


async def test_an_actor_approver(autojump_clock: trio.testing.MockClock) -> None:
    Approve.seen = []
    policy = PermissionPolicy(default="ask")
    async with agentrio.open_runtime() as rt:
        approver = await rt.spawn(Approve, name="approver")
        ok, _ = await run_one(rt, "read_file", {"path": "x"}, permissions=policy, approver=approver)
        no, _ = await run_one(rt, "shell", {"cmd": "ls"}, permissions=policy, approver=approver)
    assert ok.status == "ok"
    assert no.status == "denied" and no.content.endswith(": reads only")
    assert [m.tool_call.name for m in Approve.seen] == ["read_file", "shell"]


@pytest.mark.parametrize(
    ("value", "type_name"), [("no", "a str"), (1, "an int"), (0, "an int"), (None, "a NoneType")]
)
def test_an_approval_is_a_bool(value: object, type_name: str) -> None:
    with pytest.raises(InvalidArgument, match=f"Approval.approved must be a bool.*{type_name}"):
        Approval(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=f"Approval.approved must be a bool.*{type_name}"):
        Approval(approved=value)  # type: ignore[arg-type]


def test_an_approval_reason_is_a_str() -> None:
    with pytest.raises(InvalidArgument, match=r"Approval.reason must be a str, got 404 \(an int\)"):
        Approval(False, 404)  # type: ignore[arg-type]
    assert Approval(False, "why").reason == "why"


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        ("no", "'no' (a str)"),
        ("yes", "'yes' (a str)"),
        (1, "1 (an int)"),
        (None, "None (a NoneType)"),
        (Deny("nope"), "Deny(reason='nope') (a Deny)"),
        ("x" * 10_000, "'" + "x" * 96 + "... (a str)"),  # the model sees at most 100
        (list(range(10**5)), str(list(range(36)))[:97] + "... (a list)"),
        (Unprintable(), "<Unprintable object> (an Unprintable)"),
    ],
)
async def test_an_approver_answering_anything_but_a_bool_or_approval_denies(
    autojump_clock: trio.testing.MockClock, answer: object, shown: str
) -> None:
    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        no, seen = await run_one(
            rt,
            "shell",
            {"cmd": "ls"},
            tools=tools,
            permissions=PermissionPolicy(default="ask"),
            approver=lambda request: answer,
        )
    assert no.status == "denied" and ran == []
    why = f"the approver answered {shown}, not True, False or an Approval"
    assert no.content == f"the approver refused 'shell': {why}"
    assert seen == f"saw: {no.content}"  # what the model was told


async def test_an_approver_making_a_bad_approval_denies(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        no, _ = await run_one(
            rt,
            "shell",
            {"cmd": "ls"},
            tools=tools,
            permissions=PermissionPolicy(default="ask"),
            approver=lambda request: Approval("no"),  # type: ignore[arg-type]
        )
    assert no.status == "denied" and ran == []
    assert no.content.startswith("the permission check failed: InvalidArgument: Approval.approved")


async def test_ask_without_an_approver_is_a_denial(autojump_clock: trio.testing.MockClock) -> None:
    async with agentrio.open_runtime() as rt:
        no, _ = await run_one(
            rt, "shell", {"cmd": "ls"}, permissions=PermissionPolicy(default="ask")
        )
    assert no.status == "denied"
    assert "needs approval" in no.content and "no approver" in no.content


async def test_a_failing_approver_is_a_denial(autojump_clock: trio.testing.MockClock) -> None:
    def broken(request: ConfirmationRequired) -> bool:
        raise RuntimeError("approver is down")

    async with agentrio.open_runtime() as rt:
        no, _ = await run_one(
            rt, "shell", {"cmd": "ls"}, permissions=PermissionPolicy(default="ask"), approver=broken
        )
    assert no.status == "denied"
    assert no.content == "the permission check failed: RuntimeError: approver is down"


async def test_the_approval_timeout_denies_and_the_model_sees_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    asked_at: list[float] = []

    async def silent(request: ConfirmationRequired) -> bool:
        asked_at.append(trio.current_time())
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        t0 = trio.current_time()
        no, text = await run_one(
            rt,
            "write_file",
            {"path": "x"},
            tools=tools,
            permissions=PermissionPolicy(default="ask"),
            approver=silent,
            approval_timeout=30,
        )
    assert no.status == "denied"
    assert (
        no.content == "the approver refused 'write_file': no answer from the approver within 30 s"
    )
    assert text == f"saw: {no.content}"
    assert trio.current_time() - t0 == pytest.approx(30)
    assert len(asked_at) == 1 and ran == []


async def test_no_timer_ever_approves(autojump_clock: trio.testing.MockClock) -> None:
    # No approval_timeout: the call waits for the approver as long as the phase
    # may; the phase's own deadline ends it, and the tool never runs.
    async def silent(request: ConfirmationRequired) -> bool:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(
            AgentSpec(
                "a",
                one_call("shell", cmd="ls"),
                tools=tools,
                permissions=PermissionPolicy(default="ask"),
                approver=silent,
                limits=Limits(timeout=3600, tool_timeout=10_000),
            )
        )
        t0 = trio.current_time()
        result = await agent.run("go")
    assert result.stop_reason == "timeout"
    assert trio.current_time() - t0 == pytest.approx(3600)
    assert [c.status for c in result.tool_calls] == ["timeout"]
    assert ran == []


async def test_an_approver_answering_late_is_ignored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def late(request: ConfirmationRequired) -> bool:
        await trio.sleep(10)
        return True

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        no, _ = await run_one(
            rt,
            "shell",
            {"cmd": "ls"},
            tools=tools,
            permissions=PermissionPolicy(default="ask"),
            approver=late,
            approval_timeout=5,
        )
        ok, _ = await run_one(
            rt,
            "shell",
            {"cmd": "ls"},
            tools=tools,
            permissions=PermissionPolicy(default="ask"),
            approver=late,
            approval_timeout=15,
        )
    assert no.status == "denied" and ok.status == "ok"
    assert ran == [("shell", {"cmd": "ls"})]


# -- hooks -------------------------------------------------------------------------------


async def test_pre_tool_use_may_deny(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    async def pre(call: ToolCallRequest) -> Deny | None:
        return Deny("no shells today") if call.name == "shell" else None

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        no, text = await run_one(rt, "shell", {"cmd": "ls"}, tools=tools, pre_tool_use=pre)
        ok, _ = await run_one(rt, "read_file", {"path": "a"}, tools=tools, pre_tool_use=pre)
        await trio.testing.wait_all_tasks_blocked()
    assert no.status == "denied" and no.content == "no shells today"
    assert text == "saw: no shells today"
    assert ok.status == "ok"
    assert ran == [("read_file", {"path": "a"})]
    assert [e.reason for e in events if isinstance(e, PermissionDenied)] == ["no shells today"]


async def test_pre_tool_use_may_rewrite_the_arguments(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def sandbox(call: ToolCallRequest) -> ToolCallRequest:
        path = str(call.arguments["path"])
        return ToolCallRequest(call.name, {**call.arguments, "path": "/sandbox/" + path}, call.id)

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        ok, text = await run_one(
            rt, "write_file", {"path": "a.txt"}, tools=tools, pre_tool_use=sandbox
        )
    assert ran == [("write_file", {"path": "/sandbox/a.txt", "text": ""})]
    assert ok.status == "ok" and ok.content == "wrote /sandbox/a.txt"
    assert text == "saw: wrote /sandbox/a.txt"


async def test_pre_tool_use_cannot_change_the_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def swap(call: ToolCallRequest) -> ToolCallRequest:
        return ToolCallRequest("shell", {"cmd": "rm -rf /"}, call.id)

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        no, _ = await run_one(rt, "read_file", {"path": "a"}, tools=tools, pre_tool_use=swap)
    assert ran == []
    assert no.status == "denied" and "not its tool" in no.content


async def test_arguments_rewritten_by_pre_tool_use_are_judged_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def to_etc(call: ToolCallRequest) -> ToolCallRequest:
        return ToolCallRequest(call.name, {**call.arguments, "path": "/etc/passwd"}, call.id)

    asked: list[dict[str, object]] = []

    async def approver(request: ConfirmationRequired) -> bool:
        asked.append(dict(request.tool_call.arguments))
        return False

    policy = PermissionPolicy(
        [deny_rule("write_file", when=lambda a: str(a.get("path", "")).startswith("/etc"))]
    )
    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        no, _ = await run_one(
            rt,
            "write_file",
            {"path": "a.txt"},
            tools=tools,
            pre_tool_use=to_etc,
            permissions=policy,
        )
        # allowed as asked, but the rewrite lands on an "ask" rule: the approver is asked
        ask_policy = PermissionPolicy(
            [ask_rule("read_file", when=lambda a: a.get("path") == "/etc/passwd")]
        )
        asked_no, _ = await run_one(
            rt,
            "read_file",
            {"path": "a"},
            tools=tools,
            pre_tool_use=to_etc,
            permissions=ask_policy,
            approver=approver,
        )
    assert ran == []
    assert no.status == "denied" and "rewritten" in no.content
    assert asked_no.status == "denied"
    assert asked == [{"path": "/etc/passwd"}]


async def test_pre_tool_use_runs_after_approval(autojump_clock: trio.testing.MockClock) -> None:
    order: list[str] = []

    async def approver(request: ConfirmationRequired) -> bool:
        order.append("approver")
        return True

    async def pre(call: ToolCallRequest) -> None:
        order.append("pre")

    async with agentrio.open_runtime() as rt:
        ok, _ = await run_one(
            rt,
            "shell",
            {"cmd": "ls"},
            permissions=PermissionPolicy(default="ask"),
            approver=approver,
            pre_tool_use=pre,
        )
    assert ok.status == "ok"
    assert order == ["approver", "pre"]


async def test_a_failing_pre_hook_is_a_denial(autojump_clock: trio.testing.MockClock) -> None:
    async def pre(call: ToolCallRequest) -> None:
        raise ValueError("hook bug")

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        no, _ = await run_one(rt, "shell", {"cmd": "ls"}, tools=tools, pre_tool_use=pre)
    assert no.status == "denied" and "ValueError: hook bug" in no.content
    assert ran == []


async def test_post_tool_use_may_rewrite_the_result(autojump_clock: trio.testing.MockClock) -> None:
    async def redact(call: ToolCallRequest, result: ToolResult) -> ToolResult | None:
        if call.name != "read_file":
            return None
        return ToolResult(
            id=result.id,
            name=result.name,
            arguments=result.arguments,
            status=result.status,
            content=result.content.replace("secret", "[redacted]"),
        )

    async with agentrio.open_runtime() as rt:
        red, text = await run_one(rt, "read_file", {"path": "secret"}, post_tool_use=redact)
        same, _ = await run_one(rt, "write_file", {"path": "secret"}, post_tool_use=redact)
    assert red.content == "contents of [redacted]"
    assert text == "saw: contents of [redacted]"
    assert same.content == "wrote secret"


async def test_a_failing_post_hook_is_a_failed_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def post(call: ToolCallRequest, result: ToolResult) -> None:
        raise KeyError("oops")

    async with agentrio.open_runtime() as rt:
        bad, _ = await run_one(rt, "read_file", {"path": "a"}, post_tool_use=post)
    assert bad.status == "failed" and "post_tool_use hook raised KeyError" in bad.content


async def test_hooks_and_policy_apply_to_direct_tool_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def pre(call: ToolCallRequest) -> ToolCallRequest:
        return ToolCallRequest(call.name, {"path": "rewritten"}, call.id)

    async def post(call: ToolCallRequest, result: ToolResult) -> ToolResult:
        return ToolResult(result.id, result.name, result.arguments, result.status, "post")

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(
            AgentSpec(
                "a",
                ScriptedModel([]),
                tools=tools,
                permissions=PermissionPolicy(rules=[deny_rule("shell")]),
                pre_tool_use=pre,
                post_tool_use=post,
            )
        )
        result = await agent.run(
            "",
            direct_tool_calls=[
                ToolCallRequest("read_file", {"path": "a"}),
                ToolCallRequest("shell", {"cmd": "ls"}),
            ],
        )
    assert [(c.status, c.content) for c in result.tool_calls] == [
        ("ok", "post"),
        ("denied", "tool 'shell' is denied by the permission policy"),
    ]
    assert ran == [("read_file", {"path": "rewritten"})]


# -- the terminal approver ---------------------------------------------------------------

PROGRAM = textwrap.dedent(
    """
    import trio
    import agentrio
    from agentrio.testing import Reply, ScriptedModel

    ran = []

    @agentrio.tool
    async def write_file(path: str) -> str:
        "Write a file."
        ran.append(path)
        return "written"

    async def main() -> None:
        model = ScriptedModel([
            Reply(tool_calls=[agentrio.ToolCallRequest("write_file", {"path": "notes.txt"})]),
            Reply(text="done"),
        ])
        spec = agentrio.AgentSpec(
            "writer",
            model,
            tools=[write_file],
            permissions=agentrio.PermissionPolicy(rules=[agentrio.ask_rule("write_file")]),
            approver=agentrio.terminal_approver,
        )
        async with agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(spec)
            result = await agent.run("write the notes")
        (call,) = result.tool_calls
        print(f"status={call.status} ran={ran} content={call.content}")

    trio.run(main)
    """
)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("y\n", "status=ok ran=['notes.txt'] content=written"),
        ("YES\n", "status=ok ran=['notes.txt'] content=written"),
        ("n\n", "status=denied ran=[] content=the approver refused 'write_file': refused at"),
        ("\n", "status=denied ran=[] content=the approver refused 'write_file': "),
        ("", "status=denied ran=[] content=the approver refused 'write_file': "),
    ],
    ids=["y", "yes", "n", "enter", "eof"],
)
def test_terminal_approver(tmp_path: Path, answer: str, expected: str) -> None:
    program = tmp_path / "approve.py"
    program.write_text(PROGRAM, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(program)],
        input=answer,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(expected), result.stdout
    prompt = "agent 'writer' wants to call write_file({'path': 'notes.txt'}). Allow? [y/N]"
    assert prompt in result.stderr
