"""agentrio.mcp: an MCP server's tools as agentrio tools, its connection a supervised actor.

Every test talks to a real MCP server process written with the SDK's own server
API (tests/agents/mcp_server.py): over stdio (a subprocess started by the
connection) and over streamable HTTP on 127.0.0.1 (a subprocess serving a socket
this file made). The model is scripted; the server is not.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

import agentrio
import agentrio.agents.tools.mcp
import agentrio.mcp
from agentrio import (
    AgentSpec,
    ChatMessage,
    Limits,
    PermissionPolicy,
    ToolCallRequest,
    ToolResult,
    deny_rule,
)
from agentrio.agents.tools.mcp_wire import _BROKEN_HERE, _StdioDecoder, render
from agentrio.events import ActorFailed, ActorRestarted, Event, EventStream, PermissionDenied
from agentrio.mcp import MCPConnectError, MCPConnection, MCPTool, MCPToolError
from agentrio.testing import FunctionModel, Reply, ScriptedModel
from agentrio.types import ToolSchema

SERVER = str(Path(__file__).with_name("mcp_server.py"))
STDIO = [sys.executable, SERVER, "stdio"]
HOSTILE = [sys.executable, str(Path(__file__).with_name("mcp_hostile.py"))]
Recorder = Callable[[agentrio.Runtime], list[Event]]

SECRET_ENV = "env-value-hunter2"
SECRET_HEADER = "Bearer header-value-s3cret"


@contextlib.contextmanager
def http_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test server on streamable HTTP: its URL and its process.

    The socket is bound and listening before the process starts, so the URL
    works at once (a connection waits in the backlog) and no free port can be
    taken by someone else in between.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(sock.fileno())], pass_fds=[sock.fileno()]
    )
    sock.close()
    try:
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_server() as (url, _):
        yield url


@contextlib.asynccontextmanager
async def stdio(rt: agentrio.SupervisorRef, **kwargs: object) -> AsyncIterator[MCPConnection]:
    async with agentrio.mcp.connect(rt, "t", command=STDIO, **kwargs) as connection:  # type: ignore[arg-type]
        yield connection


def calls(*requests: tuple[str, dict[str, object]]) -> Reply:
    return Reply(
        tool_calls=[
            ToolCallRequest(name, args, id=f"c{i}") for i, (name, args) in enumerate(requests)
        ]
    )


async def run(
    rt: agentrio.Runtime,
    tools: Sequence[agentrio.Tool],
    *turns: Reply,
    **spec: object,
) -> tuple[agentrio.PhaseResult, ScriptedModel]:
    """One phase of an agent whose model makes *turns*, then says "done"."""
    model = ScriptedModel([*turns, Reply(text="done")])
    agent = await rt.spawn_agent(
        AgentSpec(name="a", model=model, tools=tools, **spec)  # type: ignore[arg-type]
    )
    result = await agent.run("go")
    await agent.stop()
    return result, model


def statuses(result: agentrio.PhaseResult) -> list[tuple[str, str]]:
    return [(r.status, r.content) for r in result.tool_calls]


async def next_event(events: EventStream, kind: type[Event], path: str) -> Event:
    with trio.fail_after(30):  # (a failing test, not a wait: the event comes in a second)
        async for event in events:
            if isinstance(event, kind) and event.path == path:
                return event
    raise AssertionError(f"the runtime closed before a {kind.__name__} of {path!r}")


# -- the tools ---------------------------------------------------------------------------


async def test_the_servers_tools_are_agentrio_tools_with_its_schemas() -> None:
    async with agentrio.open_runtime() as rt, stdio(rt) as server:
        names = [t.name for t in server.tools]
        assert names[:3] == ["t__echo", "t__add", "t__fail"]
        assert "t__header" in names
        add = server.tool("add")
        assert add is server.tool("t__add")
        assert isinstance(add, agentrio.Tool) and isinstance(add, MCPTool)
        assert (add.server, add.remote_name) == ("t", "add")
        # The server's JSON schema, as the server lists it, is what models are told.
        assert add.schema == ToolSchema(
            "t__add",
            "Add two integers.",
            {
                "type": "object",
                "properties": {
                    "a": {"title": "A", "type": "integer"},
                    "b": {"default": 0, "title": "B", "type": "integer"},
                },
                "required": ["a"],
                "title": "addArguments",
            },
        )
        assert server.connected and server.transport == "stdio"
        assert server.ref.path == "mcp.t"
        with pytest.raises(agentrio.InvalidArgument, match="has no tool 'nope'"):
            server.tool("nope")


async def test_prefix_and_include_choose_the_tools_and_their_names() -> None:
    async with (
        agentrio.open_runtime() as rt,
        stdio(rt, prefix="", include=["echo", "add"]) as server,
    ):
        assert [t.name for t in server.tools] == ["echo", "add"]
    async with agentrio.open_runtime() as rt:
        with pytest.raises(MCPConnectError, match="has no tool 'nope'"):
            async with stdio(rt, include=["echo", "nope"]):
                pass
        # The failed connect stopped its actor: the name is free again.
        assert rt.children() == []


async def test_a_call_result_reaches_the_model() -> None:
    seen: list[str] = []

    def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        results = [m.content for m in messages if m.role == "tool"]
        if not results:
            assert "t__add" in [t.name for t in tools]
            return calls(("t__add", {"a": 2, "b": 40}))
        seen.extend(results)
        return Reply(text=f"the sum is {results[0]}")

    async with agentrio.open_runtime() as rt, stdio(rt) as server:
        agent = await rt.spawn_agent(
            AgentSpec(name="a", model=FunctionModel(model), tools=server.tools)
        )
        result = await agent.run("add them")
    assert seen == ["42"]
    assert result.final_text == "the sum is 42"
    assert result.tool_calls == (
        ToolResult(id="c0", name="t__add", arguments={"a": 2, "b": 40}, status="ok", content="42"),
    )


async def test_an_error_result_is_a_failed_tool_result_the_model_sees() -> None:
    async with agentrio.open_runtime() as rt, stdio(rt) as server:
        result, model = await run(
            rt,
            server.tools,
            calls(("t__fail", {"message": "no such file"}), ("t__add", {"a": "x"})),
        )
    (fail, bad) = result.tool_calls
    assert fail.status == "failed"
    assert (
        fail.content
        == "tool 't__fail' raised MCPToolError: Error executing tool fail: no such file"
    )
    # Arguments are the server's to check: its refusal is a failed result too.
    assert bad.status == "failed" and "validation error" in bad.content
    assert result.stop_reason == "done"
    told = [m.content for m in model.calls[1] if m.role == "tool"]
    assert told == [fail.content, bad.content]


async def test_content_that_is_not_text_is_a_readable_note() -> None:
    async with agentrio.open_runtime() as rt, stdio(rt) as server:
        result, _ = await run(rt, server.tools, calls(("t__media", {})))
    assert statuses(result) == [
        (
            "ok",
            "here is a chart\n"
            "[image: image/png, 108 bytes, not shown]\n"
            "[audio: audio/wav, 48 bytes, not shown]\n"
            "[resource file:///data.bin: application/octet-stream, 1024 bytes, not shown]\n"
            "[resource file:///notes.txt (unknown type):]\na note\n"
            "[resource link file:///report.pdf: 'report', application/pdf]",
        )
    ]


async def test_a_huge_result_is_cut_with_a_note() -> None:
    async with agentrio.open_runtime() as rt, stdio(rt, max_result_chars=1000) as server:
        result, _ = await run(rt, server.tools, calls(("t__big", {"size": 300_000})))
    (status, content) = statuses(result)[0]
    assert status == "ok"
    assert content == "x" * 1000 + (
        "\n[cut: the result was 300,000 characters, the first 1,000 are shown]"
    )


def test_render_structured_content_and_empty_results() -> None:
    from mcp.types import CallToolResult

    assert render(CallToolResult(content=[], structured_content={"n": 1}), 100) == '{"n":1}'
    assert render(CallToolResult(content=[]), 100) == ""


def test_render_scrubs_a_lone_surrogate_in_text_and_structured_content() -> None:
    from mcp.types import CallToolResult, TextContent

    name = os.fsdecode(b"report-\xff.txt")
    text = CallToolResult(content=[TextContent(type="text", text=name)])
    assert render(text, 100) == "report-\ufffd.txt"
    structured = CallToolResult(content=[], structured_content={"files": [name]})
    assert render(structured, 100) == '{"files":["report-\ufffd.txt"]}'


# -- the gate: allowlist, permission policy, hooks, timeouts --------------------------------


async def test_the_allowlist_the_permission_policy_and_hooks_apply(
    record_events: Recorder,
) -> None:
    async def pre(call: ToolCallRequest) -> ToolCallRequest:
        if call.name == "t__echo":
            return ToolCallRequest(call.name, {"text": "rewritten"}, id=call.id)
        return call

    async def post(call: ToolCallRequest, result: ToolResult) -> ToolResult:
        return ToolResult(
            id=result.id,
            name=result.name,
            arguments=result.arguments,
            status=result.status,
            content=result.content.upper(),
        )

    async with agentrio.open_runtime() as rt, stdio(rt) as server:
        events = record_events(rt)
        tools = [server.tool("echo"), server.tool("getenv")]
        result, _ = await run(
            rt,
            tools,
            calls(
                ("t__add", {"a": 1}),  # not on the agent's allowlist
                ("t__getenv", {"name": "HOME"}),  # denied by its policy
                ("t__echo", {"text": "original"}),  # rewritten, then its result
            ),
            permissions=PermissionPolicy([deny_rule("t__getenv")]),
            pre_tool_use=pre,
            post_tool_use=post,
        )
        await trio.testing.wait_all_tasks_blocked()
    assert [r.status for r in result.tool_calls] == ["denied", "denied", "ok"]
    assert "t__add" in result.tool_calls[0].content
    assert "denied by the permission policy" in result.tool_calls[1].content
    assert result.tool_calls[2].content == "REWRITTEN"
    denied = [e for e in events if isinstance(e, PermissionDenied)]
    assert [e.tool for e in denied] == ["t__add", "t__getenv"]


async def test_a_call_past_its_tool_timeout_is_a_timeout_result() -> None:
    # Real time: the server is a real process, and the SDK's own timeouts (its
    # protocol probe) run on Trio's clock, so a jumping test clock would fire
    # them. The hang never answers: this is a deadline, not a sleep.
    async with agentrio.open_runtime() as rt, stdio(rt) as server:
        result, _ = await run(
            rt,
            server.tools,
            calls(("t__hang", {})),
            calls(("t__echo", {"text": "still here"})),
            limits=Limits(tool_timeout=0.5),
        )
    assert statuses(result) == [
        ("timeout", "tool 't__hang' timed out after 0.5 s"),
        ("ok", "still here"),
    ]


# -- supervision ----------------------------------------------------------------------------


async def test_the_server_dying_mid_call_fails_the_calls_and_the_connection_restarts(
    record_events: Recorder,
) -> None:
    async with agentrio.open_runtime() as rt, stdio(rt) as server:
        events = record_events(rt)
        before, _ = await run(rt, server.tools, calls(("t__pid", {})))
        first_pid = int(before.tool_calls[0].content)
        result, _ = await run(
            rt,
            server.tools,
            # Two calls in flight: one never answers, one ends the process.
            calls(("t__hang", {}), ("t__die", {})),
            # Made right away: it waits for the reconnection, then runs.
            calls(("t__pid", {})),
        )
        await trio.testing.wait_all_tasks_blocked()
        assert server.connected
        assert server.ref.statistics().restarts == 1
    lost = "the connection to the MCP server 't' was lost during the call"
    assert statuses(result)[:2] == [
        ("failed", f"tool 't__hang' raised MCPToolError: {lost}"),
        ("failed", f"tool 't__die' raised MCPToolError: {lost}"),
    ]
    assert result.stop_reason == "done"
    (status, content) = statuses(result)[2]
    assert status == "ok" and int(content) != first_pid  # a new server process
    failed = [e for e in events if isinstance(e, ActorFailed)]
    assert [(e.path, e.error_type) for e in failed] == [("mcp.t", "MCPConnectError")]
    assert "the server closed the connection" in failed[0].error
    restarted = [e for e in events if isinstance(e, ActorRestarted)]
    assert [e.path for e in restarted] == ["mcp.t"]


async def test_the_server_killed_from_outside_is_restarted_before_the_next_call() -> None:
    async with agentrio.open_runtime() as rt, stdio(rt) as server, rt.events() as events:
        (call,) = (await run(rt, server.tools, calls(("t__pid", {}))))[0].tool_calls
        os.kill(int(call.content), signal.SIGKILL)
        # No call in flight: the connection sees the process end by itself.
        restarted = await next_event(events, ActorRestarted, "mcp.t")
        assert restarted.restarts == 1
        result, _ = await run(rt, server.tools, calls(("t__add", {"a": 1, "b": 2})))
    assert statuses(result) == [("ok", "3")]


async def test_past_the_restart_intensity_the_server_is_down_and_calls_fail_at_once() -> None:
    async with agentrio.open_runtime() as rt:
        sup = await rt.spawn_supervisor(name="tools", max_restarts=1, restart="temporary")
        async with stdio(rt, under=sup) as server:
            assert server.ref.path == "tools/mcp.t"
            result, _ = await run(
                rt,
                server.tools,
                calls(("t__die", {"code": 3})),  # a crash, restarted
                calls(("t__die", {"code": 4})),  # a second: past max_restarts=1, sup fails
                # It waits for the connection until the actor has exited for good.
                calls(("t__echo", {"text": "hi"})),
            )
            assert server.ref.statistics().state == "exited"
            assert not server.connected
        assert rt.children() == []  # (the runtime itself carries on)
    assert [r.status for r in result.tool_calls] == ["failed", "failed", "failed"]
    assert result.tool_calls[2].content.startswith(
        "tool 't__echo' raised MCPToolError: the MCP server 't' is down: "
        "its connection actor has exited (last: the server closed the connection)"
    )
    assert result.stop_reason == "done"


async def test_under_the_runtime_itself_its_restart_intensity_is_the_runtimes() -> None:
    with pytest.RaisesGroup(agentrio.errors.RestartIntensityExceeded, flatten_subgroups=True):
        async with agentrio.open_runtime(max_restarts=0) as rt, stdio(rt) as server:
            await run(rt, server.tools, calls(("t__die", {})))
            await trio.sleep_forever()  # the runtime fails: this is cancelled


async def test_leaving_the_block_ends_the_server_and_its_actor() -> None:
    async with agentrio.open_runtime() as rt:
        async with stdio(rt) as server:
            (call,) = (await run(rt, server.tools, calls(("t__pid", {}))))[0].tool_calls
        assert server.ref.statistics().state == "exited"
        assert "closed" in repr(server)
        with pytest.raises(ProcessLookupError):  # the process has exited, and was reaped
            os.kill(int(call.content), 0)
        result, _ = await run(rt, server.tools, calls(("t__echo", {"text": "hi"})))
    assert statuses(result) == [
        ("failed", "tool 't__echo' raised MCPToolError: the MCP server 't' is closed")
    ]


async def test_the_server_process_gets_env_and_cwd(tmp_path: Path) -> None:
    async with (
        agentrio.open_runtime() as rt,
        stdio(rt, env={"API_KEY": SECRET_ENV}, cwd=tmp_path) as server,
    ):
        result, _ = await run(
            rt,
            server.tools,
            calls(("t__getenv", {"name": "API_KEY"}), ("t__cwd", {})),
        )
    assert statuses(result) == [("ok", SECRET_ENV), ("ok", str(tmp_path.resolve()))]


# -- streamable HTTP --------------------------------------------------------------------------


async def test_over_http_the_tools_work_and_the_headers_are_sent(http_url: str) -> None:
    async with (
        agentrio.open_runtime() as rt,
        agentrio.mcp.connect(
            rt, "web", url=http_url, headers={"Authorization": SECRET_HEADER}
        ) as server,
    ):
        assert server.transport == "http"
        assert server.tool("add").schema.parameters["required"] == ["a"]
        result, _ = await run(
            rt,
            server.tools,
            calls(
                ("web__add", {"a": 2, "b": 3}),
                ("web__header", {"name": "Authorization"}),
                ("web__fail", {"message": "nope"}),
                ("web__media", {}),
            ),
        )
        assert SECRET_HEADER not in repr(server)
        assert repr(server) == f"<MCPConnection 'web' (http {http_url!r}), 11 tools, connected>"
    (add, header, fail, media) = result.tool_calls
    assert (add.status, add.content) == ("ok", "5")
    assert (header.status, header.content) == ("ok", SECRET_HEADER)
    assert fail.status == "failed" and fail.content.endswith("nope")
    assert media.status == "ok" and media.content.startswith("here is a chart\n[image: ")


async def test_over_http_a_dead_server_fails_the_call_then_exhausts_the_restarts() -> None:
    with http_server() as (url, proc):
        async with agentrio.open_runtime() as rt:
            sup = await rt.spawn_supervisor(name="tools", max_restarts=2, restart="temporary")
            async with agentrio.mcp.connect(rt, "web", url=url, under=sup) as server:
                proc.kill()
                proc.wait()
                # The call finds the server gone; each reconnection is refused.
                result, _ = await run(
                    rt,
                    server.tools,
                    calls(("web__echo", {"text": "a"})),
                    calls(("web__echo", {"text": "b"})),
                )
                assert server.ref.statistics().state == "exited"
    (first, second) = result.tool_calls
    assert first.status == "failed" and "web" in first.content
    assert second.status == "failed"
    assert "the MCP server 'web' is down" in second.content
    assert "ConnectError" in second.content


# -- a server that breaks its stream (stdio) --------------------------------------------------

# How tests/agents/mcp_hostile.py breaks it (a tool of that name, or its first
# argument), and what the connection says of it.
BROKEN_STREAMS = [
    pytest.param("not_utf8", "the server wrote bytes that are not UTF-8", id="not-utf8"),
    pytest.param(
        "not_json", "the server wrote a line that is not a JSON-RPC message", id="not-json"
    ),
    pytest.param(
        "endless", "the server wrote a line longer than 16,777,216 characters", id="endless-line"
    ),
]
# A hang guard, not a timing assertion: each test ends in well under a second
# (an endless line: two, the SDK's grace for the server to exit), and without
# its fix waits for a timeout made far longer than this.
HANG_GUARD = 60


@pytest.mark.parametrize(("kind", "why"), BROKEN_STREAMS)
async def test_a_server_that_breaks_its_stream_at_connect_is_a_connect_error(
    kind: str, why: str
) -> None:
    async with agentrio.open_runtime() as rt:
        with trio.fail_after(HANG_GUARD), pytest.raises(MCPConnectError) as info:
            # (It goes on speaking MCP after the break: the break alone must end it.)
            async with agentrio.mcp.connect(
                rt, "h", command=[*HOSTILE, kind], connect_timeout=HANG_GUARD * 2
            ):
                pass
        assert str(info.value) == f"MCP server 'h' (stdio 'python'): {why}"
        assert rt.children() == []


@pytest.mark.parametrize(("kind", "why"), BROKEN_STREAMS)
async def test_a_server_that_breaks_its_stream_mid_call_fails_it_and_is_restarted(
    kind: str, why: str, record_events: Recorder
) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        sup = await rt.spawn_supervisor(name="tools", max_restarts=1, restart="temporary")
        async with agentrio.mcp.connect(rt, "h", command=HOSTILE, under=sup) as server:
            with trio.fail_after(HANG_GUARD):
                result, _ = await run(
                    rt,
                    server.tools,
                    calls(("h__pid", {})),
                    calls((f"h__{kind}", {})),
                    # Made right away: it waits for the reconnection, then runs.
                    calls(("h__pid", {})),
                    limits=Limits(tool_timeout=HANG_GUARD * 2),
                )
            assert server.connected
    (first, broken, second) = result.tool_calls
    assert (broken.status, broken.content) == (
        "failed",
        f"tool 'h__{kind}' raised MCPToolError: "
        "the connection to the MCP server 'h' was lost during the call",
    )
    assert first.status == second.status == "ok"
    assert first.content != second.content  # a new server process
    failed = [e for e in events if isinstance(e, ActorFailed)]
    assert [(e.path, e.error_type, e.error) for e in failed] == [
        ("tools/mcp.h", "MCPConnectError", f"MCP server 'h' (stdio 'python'): {why}")
    ]


@pytest.mark.parametrize(("kind", "why"), BROKEN_STREAMS)
async def test_a_stream_broken_between_calls_is_a_dead_connection(kind: str, why: str) -> None:
    async with agentrio.open_runtime() as rt, rt.events() as events:
        # No restart allowed: the connection, once dead, stays so.
        sup = await rt.spawn_supervisor(name="tools", max_restarts=0, restart="temporary")
        async with agentrio.mcp.connect(rt, "h", command=HOSTILE, under=sup) as server:
            with trio.fail_after(HANG_GUARD):
                # It answers, then breaks its stream with no call in flight.
                answer = await server.tool(kind).invoke({"then_answer": True})
                assert answer == "answered"
                failed = await next_event(events, ActorFailed, "tools/mcp.h")
                assert not server.connected
                with pytest.raises(MCPToolError) as info:
                    await server.tool("echo").invoke({})
            assert not server.connected
    assert isinstance(failed, ActorFailed) and failed.error.endswith(why)
    assert str(info.value) == (
        f"the MCP server 'h' is down: its connection actor has exited (last: {why})"
    )


def test_the_stdio_decoder_replaces_only_lone_surrogate_escapes() -> None:
    decoder = _StdioDecoder()
    lines = (
        b'{"a": "cut \\ud83d", "b": "pair \\ud83d\\ude00", "c": "not one \\\\ud800"}\n'
        b'{"d": "\\udcff"} and not JSON\n'
    )
    first, second, _ = decoder.decode(lines).split("\n")
    assert json.loads(first) == {"a": "cut \ufffd", "b": "pair \U0001f600", "c": "not one \\ud800"}
    assert second == '{"d": "\\udcff"} and not JSON'  # (left for the SDK to refuse)


async def test_a_lone_surrogate_escaped_by_a_stdio_server_is_replaced_not_fatal() -> None:
    # JSON's escape of a lone surrogate ("\ud83d": an emoji cut in half, as
    # JSON.stringify or json.dumps writes it) is valid JSON the SDK refuses: the
    # connection used to end, the call failing as lost. It is U+FFFD, as any
    # text from outside is.
    async with agentrio.open_runtime() as rt:
        sup = await rt.spawn_supervisor(name="tools", max_restarts=0, restart="temporary")
        async with agentrio.mcp.connect(rt, "h", command=HOSTILE, under=sup) as server:
            with trio.fail_after(HANG_GUARD):
                assert await server.tool("cut_emoji").invoke({}) == "smile \ufffd"
                assert server.connected
                assert await server.tool("echo").invoke({"a": 1}) == '{"a": 1}'


async def test_a_server_error_of_code_32000_fails_the_call_not_the_connection() -> None:
    # -32000 is the SDK's code for a closed connection, and JSON-RPC's first
    # server error code: a server's answer with it used to end a live connection.
    async with agentrio.open_runtime() as rt:
        sup = await rt.spawn_supervisor(name="tools", max_restarts=0, restart="temporary")
        async with agentrio.mcp.connect(rt, "h", command=HOSTILE, under=sup) as server:
            with trio.fail_after(HANG_GUARD):
                pid = await server.tool("pid").invoke({})
                with pytest.raises(MCPToolError) as info:
                    await server.tool("server_error").invoke({})
                assert server.connected
                assert await server.tool("pid").invoke({}) == pid  # the same process
    assert str(info.value) == "the MCP server 'h' refused the call: the tool is busy"


async def test_an_error_raised_as_the_connect_timeout_cancels_is_still_a_connect_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without agentrio's decoder, the SDK's own reader stalls on bytes that are
    # not UTF-8 and raises only once the connect timeout cancels the connecting,
    # grouped with that Cancelled: this used to escape as a crash, restarted for
    # ever, and connect() never returned.
    monkeypatch.setattr(agentrio.agents.tools.mcp, "_STDIO_ENCODING", "utf-8")
    async with agentrio.open_runtime() as rt:
        with (
            trio.fail_after(HANG_GUARD),
            pytest.raises(MCPConnectError, match="UnicodeDecodeError: 'utf-8' codec"),
        ):
            async with agentrio.mcp.connect(
                rt, "h", command=[*HOSTILE, "not_utf8"], connect_timeout=1
            ):
                pass
        assert rt.children() == []


def test_the_stdio_decoder_gives_whole_lines_and_marks_where_the_stream_broke() -> None:
    decoder = _StdioDecoder()
    assert decoder.decode(b'{"a": "\xc3') == ""  # (half a character, half a line: held)
    assert decoder.decode(b'\xa9"}\n{"b"') == '{"a": "\u00e9"}\n'
    assert decoder.decode(b': 1}\n{"c": 2}\n\xff{"d"}\n') == '{"b": 1}\n{"c": 2}\n' + _BROKEN_HERE
    assert decoder.decode(b'{"e": 3}\n') == ""  # nothing after the break
    decoder = _StdioDecoder()
    assert decoder.decode(b"{}\n" + b"x" * 1000) == "{}\n"
    assert decoder.decode(b"tail", final=True) == "x" * 1000 + "tail"


# -- connecting, and what is never shown ------------------------------------------------------


async def test_a_server_that_does_not_start_is_an_error_of_connect() -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(MCPConnectError, match="FileNotFoundError") as info:
            async with agentrio.mcp.connect(
                rt,
                "gone",
                command=["/nonexistent/server", "--token", "arg-secret"],
                env={"K": SECRET_ENV},
            ):
                pass
        assert "stdio 'server'" in str(info.value)
        assert "arg-secret" not in str(info.value) and SECRET_ENV not in str(info.value)
        with pytest.raises(
            MCPConnectError, match=r"the server closed the connection|Connection closed"
        ):
            async with agentrio.mcp.connect(rt, "quits", command=[sys.executable, "-c", "pass"]):
                pass
        assert rt.children() == []


async def test_a_server_that_never_answers_times_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    async with agentrio.open_runtime() as rt:
        with pytest.raises(MCPConnectError, match=r"no connection within 5\.0 s"):
            async with agentrio.mcp.connect(rt, "silent", command=silent, connect_timeout=5):
                pass


async def test_no_secret_in_a_repr_an_error_or_an_event(record_events: Recorder) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        async with agentrio.mcp.connect(
            rt, "t", command=[*STDIO, "--key", "arg-secret"], env={"API_KEY": SECRET_ENV}
        ) as server:
            shown = [repr(server), *(repr(t) for t in server.tools)]
            await run(rt, server.tools, calls(("t__die", {})), calls(("t__pid", {})))
        url = "http://user:pass-secret@127.0.0.1:9/mcp?token=query-secret"
        with pytest.raises(MCPConnectError) as info:
            async with agentrio.mcp.connect(
                rt, "web", url=url, headers={"Authorization": SECRET_HEADER}
            ):
                pass
        shown.append(str(info.value))
        await trio.testing.wait_all_tasks_blocked()
    assert "[redacted]" in str(info.value)
    shown += [repr(e) for e in events]
    for text in shown:
        for secret in ("arg-secret", SECRET_ENV, SECRET_HEADER, "pass-secret", "query-secret"):
            assert secret not in text, text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "a b", "command": ["x"]}, "name must match"),
        ({"name": "t"}, "give command= .* or url="),
        ({"name": "t", "command": ["x"], "url": "http://h/"}, "not both"),
        ({"name": "t", "command": "python server.py"}, "command must be a non-empty list"),
        ({"name": "t", "command": []}, "command must be a non-empty list"),
        ({"name": "t", "command": ["x"], "headers": {"a": "b"}}, "headers= is for an HTTP"),
        ({"name": "t", "url": "ftp://h/"}, "url must be an http"),
        ({"name": "t", "url": "http://h/", "env": {"a": "b"}}, "env= and cwd= are for"),
        ({"name": "t", "command": ["x"], "env": {"K": 1}}, "the entry 'K' does not"),
        ({"name": "t", "command": ["x"], "include": "echo"}, "include must be a list"),
        ({"name": "t", "command": ["x"], "connect_timeout": -1}, "connect_timeout"),
        ({"name": "t", "command": ["x"], "max_result_chars": 0}, "max_result_chars"),
    ],
)
async def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(agentrio.InvalidArgument, match=message):
            async with agentrio.mcp.connect(rt, **kwargs):  # type: ignore[arg-type]
                pass
        assert rt.children() == []


def test_import_agentrio_does_not_import_the_sdk() -> None:
    code = (
        "import sys, agentrio; "
        "print(sorted(m for m in ('mcp', 'agentrio.mcp', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_agentrio_mcp_is_the_public_home_of_its_names() -> None:
    for name in agentrio.mcp.__all__:
        value = getattr(agentrio.mcp, name)
        assert value.__module__ == "agentrio.mcp", name
        assert pickle.loads(pickle.dumps(value)) is value
    (line,) = traceback.format_exception_only(MCPConnectError("no server"))
    assert line == "agentrio.mcp.MCPConnectError: no server\n"
