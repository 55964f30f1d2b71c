"""Tools from an MCP server: a notes server over stdio, its tools given to an agent.

Run it:  python examples/mcp_tools.py   (needs the mcp extra: pip install 'agentrio[mcp]')

This one file is both sides. Run with ``--serve`` it is the server: an MCP
server written with the SDK's own ``MCPServer``, speaking over its stdin and
stdout. Run without, it starts that server through ``agentrio.mcp.connect``,
gives the server's tools to an agent (its model is scripted, so no network
and no key), and shows what a user meets: a call, a call the permission
policy denies, the server crashing mid-call (a failed result, the connection's
actor restarted, a new server process) and a call that works again after it.
"""

from __future__ import annotations

import os
import sys

import trio

import agentrio
import agentrio.mcp
from agentrio import AgentSpec, PermissionPolicy, ToolCallRequest, deny_rule
from agentrio.testing import Reply, ScriptedModel


def serve() -> None:
    """The MCP server: notes kept in memory (so a new process starts with none)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("notes")
    notes: list[str] = []

    @server.tool()
    def add_note(text: str) -> str:
        """Add a note."""
        notes.append(text)
        return f"{len(notes)} note(s)"

    @server.tool()
    def list_notes() -> str:
        """The notes, one per line."""
        return "\n".join(notes) or "(no notes)"

    @server.tool()
    def delete_notes() -> str:
        """Delete every note."""
        notes.clear()
        return "deleted"

    @server.tool()
    def crash() -> str:
        """End the server process at once (to show a restart)."""
        os._exit(1)

    server.run("stdio")


def call(name: str, **arguments: object) -> Reply:
    return Reply(tool_calls=[ToolCallRequest(name, arguments)])


async def main() -> None:
    model = ScriptedModel(
        [
            call("notes__add_note", text="buy milk"),
            call("notes__delete_notes"),  # denied by the policy: never reaches the server
            call("notes__crash"),  # the server dies mid-call: a failed result
            call("notes__list_notes"),  # waits for the restarted connection
            Reply(text="Noted, and the notes server was restarted once."),
        ]
    )
    async with agentrio.open_runtime() as rt:
        # A supervisor of its own: a server that keeps crashing ends there,
        # not in the runtime (max_restarts within its period, 5 s).
        sup = await rt.spawn_supervisor(name="servers", max_restarts=3, restart="temporary")
        command = [sys.executable, os.path.abspath(__file__), "--serve"]
        async with agentrio.mcp.connect(rt, "notes", command=command, under=sup) as notes:
            print(f"connected: {notes!r}")
            for tool in notes.tools:
                print(f"  {tool.name}: {tool.description}")
            agent = await rt.spawn_agent(
                AgentSpec(
                    name="clerk",
                    model=model,
                    tools=notes.tools,
                    permissions=PermissionPolicy([deny_rule("notes__delete_*")]),
                )
            )
            result = await agent.run("Take a note, then tidy up.")
            for done in result.tool_calls:
                print(f"{done.name}: {done.status}: {done.content!r}")
            print(f"agent: {result.final_text}")
            count = {s: sum(c.status == s for c in result.tool_calls) for s in ("ok", "denied")}
            restarts = notes.ref.statistics().restarts
        print(
            f"mcp: {len(notes.tools)} tools, {count['ok']} ok, {count['denied']} denied, "
            f"{len(result.tool_calls) - sum(count.values())} failed, {restarts} restart"
        )


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        trio.run(main)
