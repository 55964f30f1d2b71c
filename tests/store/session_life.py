"""One life of a runtime on a store, run as a process of its own by
tests/store/test_sessions_processes.py (sessions and deferred decisions, #27).

    python session_life.py KIND WHERE ACTION [ARG]

With AGENTRIO_TEST_ARCHIVE=1 in the environment, the runtime is opened with
``retention=Retention()``: the finished phases go to the store's archive when
it closes (and opens).

KIND is ``directory``, ``sqlite`` or ``postgres`` (WHERE: a folder, a database
file, or ``DSN|NAME``). ACTION:

- ``say TEXT``: run TEXT in session ``user-42``; print the answer (the model
  answers with every user turn its conversation holds); ``say-as ID:TEXT``, in
  session ID;
- ``delete ID``: delete the session ID, print how many phases it had, and the
  sessions left;
- ``defer``: run phase ``p-1`` of ``clerk``, whose approver defers; print its
  stop reason and the pending approvals;
- ``approve``: approve the pending call, print the phase's result and what
  the tool did.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import trio

import agentrio
from agentrio import AgentSpec, PermissionPolicy, ToolCallRequest, ask_rule
from agentrio.store import (
    CheckpointStore,
    DirectoryStore,
    PostgresStore,
    Retention,
    SQLiteStore,
)
from agentrio.testing import FunctionModel, Reply

EFFECTS: list[str] = []


def echo(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    said = [m.content for m in messages if m.role == "user"]
    return Reply(text="heard: " + " | ".join(said))


def make_echo() -> AgentSpec[str]:
    return AgentSpec("echo", FunctionModel(echo), instructions="Repeat.")


@agentrio.tool
async def pay(invoice: str) -> str:
    """Pay an invoice."""
    EFFECTS.append(f"paid {invoice}")
    return f"paid {invoice}"


async def later(request: agentrio.events.ConfirmationRequired) -> agentrio.Defer:
    return agentrio.Defer("the treasurer decides")


def clerk_model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    results = [m for m in messages if m.role == "tool"]
    if not results:
        return Reply(tool_calls=(ToolCallRequest("pay", {"invoice": "A-7"}, id="call_1"),))
    return Reply(text=f"the tool said: {results[-1].content}")


def make_clerk() -> AgentSpec[str]:
    return AgentSpec(
        "clerk",
        FunctionModel(clerk_model),
        tools=[pay],
        permissions=PermissionPolicy(rules=[ask_rule("pay")]),
        approver=later,
    )


def store_of(kind: str, where: str) -> CheckpointStore:
    if kind == "directory":
        return DirectoryStore(where, lock_timeout=30)
    if kind == "sqlite":
        return SQLiteStore(where, lock_timeout=30)
    dsn, name = where.rsplit("|", 1)
    return PostgresStore(dsn, name=name, lock_timeout=30)


async def main(kind: str, where: str, action: str, arg: str) -> None:
    specs = {"echo": make_echo, "clerk": make_clerk}
    retention = Retention() if os.environ.get("AGENTRIO_TEST_ARCHIVE") == "1" else None
    store = store_of(kind, where)
    async with agentrio.open_runtime(store=store, specs=specs, retention=retention) as rt:
        out: dict[str, object] = {}
        if action == "say":
            agent = await rt.session("user-42", "echo")
            out["text"] = (await agent.run(arg)).final_text
        elif action == "say-as":
            sid, text = arg.split(":", 1)
            out["text"] = (await (await rt.session(sid, "echo")).run(text)).final_text
        elif action == "delete":
            out["deleted"] = await rt.delete_session(arg)
            out["sessions"] = sorted(await rt.sessions())
        elif action == "defer":
            clerk = await rt.spawn_agent(make_clerk())
            out["stop_reason"] = (await clerk.run("Pay A-7", phase_id="p-1")).stop_reason
            out["pending"] = [(p.phase_id, p.tool, p.note) for p in rt.pending_approvals()]
        elif action == "approve":
            [pending] = rt.pending_approvals()
            await rt.approve(pending, "approved later")
            result = await rt.resumed_result(pending.phase_id)
            out["text"] = result.final_text
            out["effects"] = EFFECTS
        print(json.dumps(out))


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:4], sys.argv[4] if len(sys.argv) > 4 else "")
