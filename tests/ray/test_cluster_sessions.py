"""Sessions and deferred decisions on a cluster (#27), on the real local Ray cluster:
a session continued by a later cluster on the same store, and a phase parked on a
host, listed and approved from the driver."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from cluster import LocalCluster

import agentrio
from agentrio import PermissionPolicy, ToolCallRequest, ask_rule
from agentrio.testing import FunctionModel, Reply

ray_module = pytest.importorskip("ray")
import agentrio.ray  # noqa: E402  (after the skip: it imports Ray)


def echo(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    return Reply(text="heard: " + " | ".join(m.content for m in messages if m.role == "user"))


def make_echo() -> agentrio.AgentSpec[str]:
    return agentrio.AgentSpec("echo", FunctionModel(echo))


@agentrio.tool
async def pay(invoice: str) -> str:
    """Pay an invoice."""
    return f"paid {invoice}"


async def later(request: agentrio.events.ConfirmationRequired) -> agentrio.Defer:
    return agentrio.Defer("the treasurer decides")


def clerk_model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    results = [m for m in messages if m.role == "tool"]
    if not results:
        return Reply(tool_calls=(ToolCallRequest("pay", {"invoice": "A-7"}, id="call_1"),))
    return Reply(text=f"the tool said: {results[-1].content}")


def make_clerk() -> agentrio.AgentSpec[str]:
    return agentrio.AgentSpec(
        "clerk",
        FunctionModel(clerk_model),
        tools=[pay],
        permissions=PermissionPolicy(rules=[ask_rule("pay")]),
        approver=later,
    )


SPECS = {"echo": make_echo, "clerk": make_clerk}


async def test_sessions_and_deferred_approvals_on_a_cluster(
    ray_cluster: LocalCluster, tmp_path: Path
) -> None:
    (tmp_path / "store").mkdir()
    store = str(tmp_path / "store")

    def cluster() -> object:
        return agentrio.ray.open_cluster(
            hosts=2, specs=SPECS, store=store, address=ray_cluster.address
        )

    async with cluster() as first:  # type: ignore[attr-defined]
        chat = await first.session("user-42", "echo")
        assert chat.path == "sessions/user-42"
        assert (await chat.run("my number is 42")).final_text == "heard: my number is 42"
        clerk = await first.spawn_agent(make_clerk(), name="clerk")
        parked = await clerk.run("Pay A-7", phase_id="p-1")
        assert parked.stop_reason == "deferred"
        [pending] = await first.pending_approvals()
        assert (pending.phase_id, pending.tool, pending.note) == (
            "p-1",
            "pay",
            "the treasurer decides",
        )
    async with cluster() as second:  # type: ignore[attr-defined]
        chat = await second.session("user-42", "echo")
        answer = await chat.run("what is my number?")
        assert answer.final_text == "heard: my number is 42 | what is my number?"
        [pending] = await second.pending_approvals()
        await second.approve(pending, "fine")
        result = await second.resumed_result("p-1")
        assert result.final_text == "the tool said: paid A-7"
        assert await second.pending_approvals() == []
