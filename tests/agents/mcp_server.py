"""A real MCP server for the tests of agentrio.mcp, written with the SDK's own server API.

Run as ``python mcp_server.py stdio`` (over its stdin and stdout) or
``python mcp_server.py http FD`` (streamable HTTP on the listening socket FD,
which the test made and bound to 127.0.0.1 and handed down: no free-port race).
Its tools cover what a client meets: text, numbers, an error, content that is
not text, a huge result, a call that never ends, a process that dies mid-call,
and what the process was given (an environment variable, a request header).
"""

from __future__ import annotations

import base64
import os
import socket
import sys

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    ContentBlock,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

server = MCPServer("agentrio-test", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Return the text as it came."""
    return text


@server.tool()
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(message: str) -> str:
    """Always fail, with this message."""
    raise ToolError(message)


@server.tool()
def media() -> list[ContentBlock]:
    """A text block beside content that is not text."""
    return [
        TextContent(text="here is a chart"),
        Image(data=b"\x89PNG\r\n\x1a\n" + bytes(100), format="png").to_image_content(),
        AudioContent(data=base64.b64encode(bytes(48)).decode(), mime_type="audio/wav"),
        EmbeddedResource(
            resource=BlobResourceContents(
                uri="file:///data.bin",
                mime_type="application/octet-stream",
                blob=base64.b64encode(bytes(range(256)) * 4).decode(),
            )
        ),
        EmbeddedResource(resource=TextResourceContents(uri="file:///notes.txt", text="a note")),
        ResourceLink(name="report", uri="file:///report.pdf", mime_type="application/pdf"),
    ]


@server.tool()
def big(size: int) -> str:
    """A text of *size* characters."""
    return "x" * size


@server.tool()
async def hang() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def die(code: int = 3) -> str:
    """End the server process at once, mid-call."""
    os._exit(code)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def getenv(name: str) -> str:
    """An environment variable of the server process ("" if unset)."""
    return os.environ.get(name, "")


@server.tool()
def cwd() -> str:
    """The server process's working folder."""
    return os.getcwd()


@server.tool()
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that carried this call ("" if none)."""
    return (ctx.headers or {}).get(name.lower(), "")


def _serve_http(fd: int) -> None:
    import uvicorn

    app = server.streamable_http_app()
    sock = socket.socket(fileno=fd)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        _serve_http(int(sys.argv[2]))
    else:
        server.run("stdio")
