"""A hostile MCP server for the tests of agentrio.mcp: it speaks MCP on stdio, then breaks it.

Run as ``python mcp_hostile.py`` (it speaks MCP until a tool breaks the stream)
or ``python mcp_hostile.py BREAK`` (it breaks the stream before any answer).
Written by hand, with the standard library only, so that it can write what the
SDK's own server never would. The ways to break the stream, as tools:

- ``not_utf8``: a line of bytes that are not UTF-8;
- ``not_json``: a line that is not a JSON-RPC message;
- ``endless``: a line that never ends (written until the pipe is closed).

A call to one of them breaks the stream instead of answering; with
``then_answer: true`` it answers first, then breaks the stream with no call in
flight. ``echo`` and ``pid`` answer; ``cut_emoji`` answers a text that is a
JSON escape of a lone surrogate (what ``JSON.stringify`` writes for a string cut
in the middle of an emoji), and ``server_error`` a JSON-RPC error of code -32000
(JSON-RPC's first server error code, which the SDK also uses for a connection
that closed).
"""

from __future__ import annotations

import json
import os
import sys

BREAKS = ("not_utf8", "not_json", "endless")


def write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def send(message: dict[str, object]) -> None:
    write(json.dumps(message).encode() + b"\n")


def break_stream(kind: str) -> None:
    if kind == "not_utf8":
        write(b'\xff\xfe{"jsonrpc": "2.0", \x80\xc3(}\n')
    elif kind == "not_json":
        write(b"this is not JSON-RPC\n")
    else:
        chunk = b"x" * 65536
        while True:  # ends when the client closes the pipe (BrokenPipeError) or kills us
            write(chunk)


def tool(name: str) -> dict[str, object]:
    schema = {"type": "object", "properties": {"then_answer": {"type": "boolean"}}}
    return {"name": name, "description": f"{name}.", "inputSchema": schema}


def result(text: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def answer(request: dict[str, object]) -> None:
    method, ident = request.get("method"), request.get("id")
    params = request.get("params")
    params = params if isinstance(params, dict) else {}
    if ident is None:
        return  # a notification
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "result": {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        tools = [tool(name) for name in ("echo", "pid", "cut_emoji", "server_error", *BREAKS)]
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools}})
    elif method == "tools/call":
        name = params.get("name")
        arguments = params.get("arguments") or {}
        if name == "cut_emoji":
            # (json.dumps writes a lone surrogate as its escape, as JSON.stringify does)
            send({"jsonrpc": "2.0", "id": ident, "result": result("smile \ud83d")})
        elif name == "server_error":
            error = {"code": -32000, "message": "the tool is busy"}
            send({"jsonrpc": "2.0", "id": ident, "error": error})
        elif name in BREAKS:
            if arguments.get("then_answer"):
                send({"jsonrpc": "2.0", "id": ident, "result": result("answered")})
            break_stream(str(name))
        elif name == "pid":
            send({"jsonrpc": "2.0", "id": ident, "result": result(str(os.getpid()))})
        else:
            send({"jsonrpc": "2.0", "id": ident, "result": result(json.dumps(arguments))})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
    else:  # server/discover (the SDK's probe) among them: answered as an old server would
        error = {"code": -32601, "message": f"no method {method!r}"}
        send({"jsonrpc": "2.0", "id": ident, "error": error})


def main() -> None:
    if sys.argv[1:]:
        break_stream(sys.argv[1])
    for line in sys.stdin:
        answer(json.loads(line))
    # stdin closed: the client asks us to exit


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        os._exit(0)
