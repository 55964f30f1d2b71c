"""Helpers: an infrastructure helper and a session helper, side by side.

An *infrastructure* helper (``rt.helper``) is given an explicit tool
whitelist: here only ``read_file``. When its model asks for ``delete_file``
too, that call is a ``denied`` result the model sees, and no one is asked.

A *session* helper (``agent.helper()``) works for an agent and inherits its
tools, its permission rules, its approver and its budget. The agent here
allows ``read_file`` and asks about everything else; its approver, a plain
async function, allows deleting files under ``tmp/`` only. The helper's
spending shows in the agent's usage.

The model is the fake LLM server over real HTTP (OpenAI wire format); its
handler plays a model that reads a file and deletes two.

Run it with ``python examples/helpers.py``.
"""

from __future__ import annotations

import trio

import agentrio
from agentrio import ModelReply, ToolCallRequest, Usage
from agentrio.testing import FakeRequest, open_fake_llm

FILES = {"notes.txt": "buy milk", "tmp/cache.bin": "...", "src/main.py": "print('hi')"}
ANSWERS: list[bool] = []  # what the approver said, in order


@agentrio.tool
async def read_file(path: str) -> str:
    """Read a file."""
    await trio.sleep(0)
    return FILES.get(path, "no such file")


@agentrio.tool
async def delete_file(path: str) -> str:
    """Delete a file."""
    await trio.sleep(0)
    FILES.pop(path, None)
    return f"deleted {path}"


def model(request: FakeRequest) -> ModelReply:
    """Read notes.txt and delete two files in one turn; then report what happened."""
    usage = Usage(input_tokens=20 * len(request.messages), output_tokens=10)
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        calls = (
            ToolCallRequest("read_file", {"path": "notes.txt"}),
            ToolCallRequest("delete_file", {"path": "tmp/cache.bin"}),
            ToolCallRequest("delete_file", {"path": "src/main.py"}),
        )
        return ModelReply(tool_calls=calls, usage=usage)
    return ModelReply(text=" | ".join(m.content for m in results), usage=usage)


async def approver(request: agentrio.events.ConfirmationRequired) -> agentrio.Approval:
    """A programmatic approver: deleting is fine under tmp/, and nowhere else."""
    path = str(request.tool_call.arguments.get("path", ""))
    ok = path.startswith("tmp/")
    ANSWERS.append(ok)
    print(f"  approver: {request.tool_call.name}({path}) -> {'yes' if ok else 'no'}")
    return agentrio.Approval(ok, "" if ok else "only files under tmp/ may be deleted")


def show(title: str, res: agentrio.types.HelperResult) -> None:
    print(f"{title}: {res.stop_reason}, {res.usage.requests} model calls")
    for call in res.tool_results:
        path = call.arguments.get("path")
        print(f"  {call.name}({path}): {call.status}: {call.content}")


async def run_helpers() -> None:
    """Run both helpers on the same task and print what each was allowed to do."""
    async with open_fake_llm(model) as server:
        config = agentrio.ProviderConfig(
            name="fake", kind="openai", base_url=server.base_url + "/v1"
        )
        async with agentrio.Provider(config) as provider, agentrio.open_runtime() as rt:
            llm = provider.model("fake-model")

            infra = rt.helper(llm, tools=[read_file])
            first = await infra.execute("Tidy up the workspace.")
            show("infrastructure helper", first)

            lead = await rt.spawn_agent(
                agentrio.AgentSpec(
                    "lead",
                    llm,
                    tools=[read_file, delete_file],
                    permissions=agentrio.PermissionPolicy(
                        rules=[agentrio.allow_rule("read_file")], default="ask"
                    ),
                    approver=approver,
                )
            )
            session = lead.helper()
            second = await session.execute("Tidy up the workspace.")
            show("session helper", second)
            print(f"lead's usage includes its helper's: {lead.usage().requests} model calls")

    denied = [c.name for c in first.tool_results if c.status == "denied"]
    print(
        f"whitelist denied: {len(denied)}, approvals asked: {len(ANSWERS)}, "
        f"approved: {sum(ANSWERS)}, files left: {sorted(FILES)}"
    )


def main() -> int:
    """Run the example; return the process exit code."""
    trio.run(run_helpers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
