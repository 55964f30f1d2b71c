"""agentrio.mcp_server: the MCP SDK's own client calling agentrio agents, over both transports.

The server is ``agentrio mcp-serve swarm_specs:SPECS`` (tests/swarm_specs.py) in a
real subprocess: over stdio (serve_stdio, in Trio in the runtime's thread) and over
streamable HTTP on 127.0.0.1 (streamable_http_app, on the asyncio host). What its
runtime did is read back from its trace file.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp
import pytest
import trio
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import agentrio
import agentrio.mcp_server
from agentrio.testing import FunctionModel, Reply

TESTS = Path(__file__).resolve().parent
SERVE = [sys.executable, "-m", "agentrio", "mcp-serve", "swarm_specs:SPECS"]


def phases(trace: Path) -> list[tuple[str, str]]:
    """(path, stop reason) of each PhaseEnded in the trace, in order."""
    found = []
    for line in trace.read_text().splitlines():
        event = json.loads(line)["e"]
        if event["type"] == "PhaseEnded":
            found.append((event["path"], event["stop_reason"]))
    return found


@contextlib.asynccontextmanager
async def stdio_client(trace: Path, target: str = "swarm_specs:SPECS") -> AsyncIterator[mcp.Client]:
    args = [*SERVE[1:-1], target, "--trace", str(trace)]
    params = mcp.StdioServerParameters(command=SERVE[0], args=args, cwd=str(TESTS))
    async with mcp.Client(mcp.stdio_client(params)) as client:
        yield client


@contextlib.contextmanager
def http_server(trace: Path) -> Iterator[str]:
    """``agentrio mcp-serve --port 0`` as a process; the URL it prints."""
    proc = subprocess.Popen(
        [*SERVE, "--port", "0", "--trace", str(trace), "--body-timeout", "1"],
        cwd=TESTS,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("agentrio mcp-serve: http://127.0.0.1:"), line
        yield line.split(": ", 1)[1].strip()
    finally:
        proc.terminate()
        code = proc.wait(30)
        proc.stderr.close()  # type: ignore[union-attr]
    # SIGTERM stops it gracefully (its runtime stopped, its trace whole), not by
    # the signal uvicorn raises again once it has shut down (-15).
    assert code == 0


@contextlib.asynccontextmanager
async def http_client(url: str) -> AsyncIterator[mcp.Client]:
    async with mcp.Client(streamable_http_client(url)) as client:
        yield client


async def calls_and_cancel(client: mcp.Client) -> list[Any]:
    """What each transport's test checks: list, call with progress, errors, a cancel."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(tools) == ["shout", "critic", "down", "hang"]
    assert tools["shout"].description == "Shout the prompt back."
    assert tools["shout"].input_schema["required"] == ["prompt"]
    reported: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, message))

    shout = await client.call_tool("shout", {"prompt": "hello"}, progress_callback=on_progress)
    assert not shout.is_error
    assert [block.text for block in shout.content] == ["HELLO!"]  # type: ignore[union-attr]
    assert shout.structured_content == {"stop_reason": "done", "output": "HELLO!"}
    assert reported == [
        (1, "turn 1 ended (1 tool call(s))"),
        (2, "tool upper started"),
        (3, "tool upper ended: ok"),
        (4, "turn 2 ended (0 tool call(s))"),
    ]
    critic = await client.call_tool("critic", {"prompt": "Alien"})
    assert critic.structured_content == {
        "stop_reason": "done",
        "output": {"title": "Alien", "year": 1979},
    }
    down = await client.call_tool("down", {"prompt": "x"})
    assert down.is_error
    assert down.structured_content["error_type"] == "ProviderUnavailable"  # type: ignore[index]
    with trio.move_on_after(1) as waited:  # the client gives up: MCP's cancelled notification
        await client.call_tool("hang", {"prompt": "x"})
    assert waited.cancelled_caught
    again = await client.call_tool("shout", {"prompt": "again"})  # the server goes on
    return [again]


async def test_stdio_list_call_progress_error_and_cancel(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    async with stdio_client(trace) as client:
        (again,) = await calls_and_cancel(client)
        assert again.content[0].text == "AGAIN!"  # type: ignore[union-attr]
    assert phases(trace) == [
        ("shout-mcp-1", "done"),
        ("critic-mcp-2", "done"),
        ("down-mcp-3", "error"),
        ("hang-mcp-4", "cancelled"),  # the client's cancel cancelled the phase
        ("shout-mcp-5", "done"),
    ]


# The SDK's HTTP client, its call cancelled, leaves its response's async generators
# to the garbage collector (httpx2's and httpcore2's: the client's, not agentrio's).
@pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning")
@pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning")
async def test_http_list_call_progress_error_and_cancel(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    with http_server(trace) as url:
        async with http_client(url) as client:
            (again,) = await calls_and_cancel(client)
            assert again.content[0].text == "AGAIN!"  # type: ignore[union-attr]
    # (Sorted: over HTTP the cancel reaches the runtime's thread through the host, and
    # the next call's phase may end before the cancelled one has.)
    assert sorted(phases(trace)) == [
        ("critic-mcp-2", "done"),
        ("down-mcp-3", "error"),
        ("hang-mcp-4", "cancelled"),
        ("shout-mcp-1", "done"),
        ("shout-mcp-5", "done"),
    ]


async def test_bad_calls_get_typed_errors_and_the_server_goes_on(tmp_path: Path) -> None:
    async with stdio_client(tmp_path / "trace.jsonl") as client:
        bad = [
            ({"prompt": 3}, "'prompt' must be a string, got int"),
            ({}, "the arguments must be {'prompt': str}"),
            ({"prompt": "x", "more": 1}, "the arguments must be {'prompt': str}"),
            ({"prompt": "x" * 200_000}, "'prompt' is over 100000 characters (200000)"),
        ]
        for arguments, why in bad:
            result = await client.call_tool("shout", arguments)
            assert result.is_error
            assert result.content[0].text.startswith("InvalidArgument: ")  # type: ignore[union-attr]
            assert why in result.content[0].text  # type: ignore[union-attr]
        with pytest.raises(MCPError, match="no tool named 'nobody'"):
            await client.call_tool("nobody", {"prompt": "x"})
        ok = await client.call_tool("shout", {"prompt": "still"})
        assert ok.content[0].text == "STILL!"  # type: ignore[union-attr]


async def test_tools_served_as_they_are_beside_an_agent(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    async with stdio_client(trace, "swarm_specs:MIXED") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert list(tools) == ["shout", "upper", "broken"]
        assert tools["upper"].description == "The text in capitals."
        assert tools["upper"].input_schema["properties"] == {"text": {"type": "string"}}
        upper = await client.call_tool("upper", {"text": "quiet"})
        assert not upper.is_error and upper.structured_content == {"status": "ok"}
        assert upper.content[0].text == "QUIET"  # type: ignore[union-attr]
        missing = await client.call_tool("upper", {})
        assert missing.is_error
        assert missing.content[0].text.startswith("failed: ")  # type: ignore[union-attr]
        broken = await client.call_tool("broken", {"reason": "on purpose"})
        assert broken.is_error and broken.structured_content == {"status": "failed"}
        assert "broken: on purpose" in broken.content[0].text  # type: ignore[union-attr]
        huge = await client.call_tool("upper", {"text": "x" * 200_000})
        assert huge.is_error
        assert "the arguments are over 100000 characters" in huge.content[0].text  # type: ignore[union-attr]
    # Each call a phase of direct tool calls, of an agent of its own.
    assert phases(trace) == [
        ("upper-mcp-1", "done"),
        ("upper-mcp-2", "done"),
        ("broken-mcp-3", "done"),
    ]


def test_http_garbage_huge_and_hanging_peers_get_errors_in_bounded_time(tmp_path: Path) -> None:
    with http_server(tmp_path / "trace.jsonl") as url:
        headers = {"accept": "application/json, text/event-stream"}
        garbage = httpx.post(url, content=b"\xff{not json", headers=headers, timeout=30)
        assert 400 <= garbage.status_code < 500
        huge = httpx.post(url, content=b"[" * (5 * 1024 * 1024), headers=headers, timeout=30)
        assert huge.status_code == 413
        assert huge.json()["error"] == "InvalidArgument"
        host, port = url.removeprefix("http://").split("/")[0].split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n{"
            )
            sock.settimeout(60)
            head = sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 408"), head


def test_the_cli_refuses_what_is_no_spec() -> None:
    for target, why in [
        ("swarm_specs", "expected MODULE:NAME"),
        ("swarm_specs:NOTHING", "cannot load"),
        ("swarm_specs:Movie", "is not an AgentSpec or a Tool"),
    ]:
        done = subprocess.run(
            [*SERVE[:-1], target], cwd=TESTS, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert why in done.stderr


async def test_bad_arguments() -> None:
    spec = agentrio.AgentSpec("a", "x:y")
    async with agentrio.open_runtime() as rt:
        for agents, tools, why in [
            ([], [], "at least one AgentSpec"),
            ([spec, spec], [], "two tools are named 'a'"),
            ([spec], [agentrio.Tool(lambda: "", name="a")], "two tools are named 'a'"),
            ([agentrio.AgentSpec("a b", "x:y")], [], "'a b' cannot be an MCP tool's name"),
            ([agentrio.AgentSpec("a\n", "x:y")], [], "cannot be an MCP tool's name"),
            (spec, [], "agents and tools are lists"),
            (["a"], [], "must hold AgentSpecs and tools Tools"),
            ([], [spec], "must hold AgentSpecs and tools Tools"),
        ]:
            with pytest.raises(agentrio.InvalidArgument, match=why):
                agentrio.mcp_server.mcp_server(rt, agents, tools=tools)  # type: ignore[arg-type]
        with pytest.raises(agentrio.InvalidArgument, match="max_prompt_chars"):
            agentrio.mcp_server.mcp_server(rt, [spec], max_prompt_chars=0)
        with pytest.raises(agentrio.InvalidArgument, match="expected a Runtime"):
            agentrio.mcp_server.mcp_server(object(), [spec])  # type: ignore[arg-type]
        with pytest.raises(agentrio.InvalidArgument, match="max_line_bytes"):
            await agentrio.mcp_server.serve_stdio(rt, [spec], max_line_bytes=0)


def test_import_agentrio_does_not_import_the_server() -> None:
    code = (
        "import sys, agentrio, agentrio.cli; "
        "print(sorted(m for m in ('mcp', 'agentrio.mcp_server', 'starlette') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert out.stdout.strip() == "[]"


def _high_water_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_stdio_garbage_and_an_endless_line_are_passed_over_in_bounded_memory() -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    proc = subprocess.Popen(
        SERVE, cwd=TESTS, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        before = _high_water_kib(proc.pid)
        proc.stdin.write(b"garbage, not JSON\n\xff\xfe\x00\n")
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 2, "method": "ping", "x": "')
        for _ in range(64):  # a line of 64 MiB: 4 times the server's limit
            proc.stdin.write(b"x" * (1 << 20))
        proc.stdin.write(b'"}\n{"jsonrpc": "2.0", "id": 3, "method": "ping"}\n')
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer == {"jsonrpc": "2.0", "id": 3, "result": {}}  # the line after: read
        grown_mib = (_high_water_kib(proc.pid) - before) / 1024
        assert grown_mib < 40, f"the server grew by {grown_mib:.0f} MiB"
    finally:
        proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()


async def test_in_process_an_agent_stopped_mid_call_is_an_error_result() -> None:
    async with agentrio.open_runtime() as rt:

        async def quits(messages: object, tools: object) -> Reply:
            rt.lookup("quits-mcp-1").cancel()  # (as a crash or a stop from elsewhere would)
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        spec = agentrio.AgentSpec("quits", FunctionModel(quits))
        async with mcp.Client(agentrio.mcp_server.mcp_server(rt, [spec])) as client:
            result = await client.call_tool("quits", {"prompt": "x"})
    assert result.is_error
    assert result.structured_content["error_type"] == "ActorStopped"  # type: ignore[index]
