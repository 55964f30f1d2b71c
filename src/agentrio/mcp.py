"""Tools from MCP servers, with the official `mcp` SDK.

It needs the `mcp` extra (`pip install 'agentrio[mcp]'`), and `import agentrio`
imports neither it nor the SDK: import `agentrio.mcp` where you use it.
[`connect`][agentrio.mcp.connect] starts a stdio server (a command) or reaches
a streamable HTTP one (a URL), and gives its tools as
[`MCPTool`][agentrio.mcp.MCPTool] objects, ready for an
[`AgentSpec`][agentrio.AgentSpec]'s `tools`; each connection is held by a
supervised actor, restarted when the connection is lost. The how-to is
[How to give agents tools from MCP servers][how-to-give-agents-tools-from-mcp-servers].

Example:

    import agentrio
    import agentrio.mcp

    async with agentrio.open_runtime() as rt:
        async with agentrio.mcp.connect(rt, "files", command=["python", "server.py"]) as files:
            agent = await rt.spawn_agent(
                agentrio.AgentSpec(name="clerk", model=model, tools=files.tools)
            )
"""

from .agents.tools.mcp import MCPConnectError as MCPConnectError
from .agents.tools.mcp import MCPConnection as MCPConnection
from .agents.tools.mcp import MCPTool as MCPTool
from .agents.tools.mcp import MCPToolError as MCPToolError
from .agents.tools.mcp import connect as connect

__all__ = ["connect", "MCPConnection", "MCPTool", "MCPToolError", "MCPConnectError"]

# This is their public home: reprs, tracebacks and pickles name them here, as
# agentrio's other public names (their classes have no annotations of their
# own to be read in the wrong module).
for _value in (connect, MCPConnection, MCPTool, MCPToolError, MCPConnectError):
    _value.__module__ = __name__
del _value
