"""Tools: @tool, permission policies, MCP tools, running a call, lanes, typed outputs."""
