"""``agentrio.mcp``: tools from MCP servers (needs the ``mcp`` extra: ``agentrio[mcp]``).

Not imported by ``import agentrio``: import it (``import agentrio.mcp``)
where MCP servers are used. See docs/howto/mcp.md.

Example::

    import agentrio
    import agentrio.mcp

    async with agentrio.open_runtime() as rt:
        async with agentrio.mcp.connect(rt, "files", command=["python", "server.py"]) as files:
            spec = agentrio.AgentSpec(name="clerk", model=model, tools=files.tools)
"""

from .agents.mcp import MCPConnectError as MCPConnectError
from .agents.mcp import MCPConnection as MCPConnection
from .agents.mcp import MCPTool as MCPTool
from .agents.mcp import MCPToolError as MCPToolError
from .agents.mcp import connect as connect

__all__ = ["MCPConnectError", "MCPConnection", "MCPTool", "MCPToolError", "connect"]
