"""A swarm as an MCP server: agentrio agents as MCP tools, over stdio and streamable HTTP.

It needs the `mcp` extra (`pip install 'agentrio[mcp]'`; the HTTP transport
also wants an ASGI server, uvicorn); `import agentrio` imports neither this
module nor the SDK. Each [`AgentSpec`][agentrio.AgentSpec] given is one tool,
named as the spec, which takes a ``prompt``; each call of it is one phase of a
new agent spawned from the spec (stopped when the call ends), under the
runtime's budget, permissions and limits. The tool's result is the phase's
``final_text``, and its structured content the phase's ``stop_reason`` and
``output``; a phase that ends with ``"error"`` is a result with ``isError``.
While it runs, a client that asked for progress gets a progress notification
for each turn and tool call of the run's stream; a client that cancels the
call (MCP's ``notifications/cancelled``) or goes away cancels the phase.
agentrio [`Tool`][agentrio.Tool]s can be served too (``tools=``), each call a
phase of direct tool calls.

- [`serve_stdio`][agentrio.mcp_server.serve_stdio] serves over the process's
  stdin and stdout, in Trio, in the runtime's own task: the SDK is written on
  anyio, which runs on Trio, so no thread stands between it and the agents.
- [`streamable_http_app`][agentrio.mcp_server.streamable_http_app] is a
  Starlette app for an ASGI server (uvicorn, on asyncio), on a
  [`BlockingRuntime`][agentrio.types.BlockingRuntime]; its runs go through
  the host's a-methods.
- ``agentrio mcp-serve module:SPECS`` does either from the command line.

The how-to is [How to serve agents over MCP][how-to-serve-agents-over-mcp].
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, BinaryIO, cast

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from ._checks import check_int, check_seconds
from ._serving import BoundedBody, Runs, open_run, to_json
from ._text import scrub, scrub_json
from ._version import __version__
from .agents.loop.spec import AgentSpec
from .agents.tools.tool import Tool
from .errors import ActorStopped, AgentrioError, InvalidArgument, UsageError
from .messages import ModelReply, PhaseResult, ToolCallRequest, ToolEnded, ToolStarted, TurnEnded

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from .host import BlockingRuntime
    from .runtime import Runtime

__all__ = ["mcp_server", "serve_stdio", "streamable_http_app"]

# MCP's tool names (the 2025-11-25 spec's advice: 1 to 128 of these characters).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
DEFAULT_MAX_PROMPT_CHARS = 100_000
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_BODY_TIMEOUT = 30.0
# The longest message a stdio client may send (as agentrio.mcp's client takes).
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024


def _schema(spec: AgentSpec[Any]) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": f"The task for the agent {spec.name!r}."}
        },
        "required": ["prompt"],
        "additionalProperties": False,
    }


class _Entry:
    """One MCP tool: an agent (its spec; a call runs a phase of the prompt), or one
    of agentrio's tools (a spec of its own whose phase calls it directly)."""

    __slots__ = ("description", "schema", "spec", "tool")

    def __init__(self, spec: AgentSpec[Any], tool: Tool | None) -> None:
        self.spec = spec
        self.tool = tool
        if tool is None:
            self.description = _describe(spec)
            self.schema: dict[str, object] = _schema(spec)
        else:
            self.description = tool.description
            self.schema = dict(tool.schema.parameters)


def _entries(agents: Sequence[AgentSpec[Any]], tools: Sequence[Tool]) -> dict[str, _Entry]:
    if isinstance(agents, AgentSpec) or isinstance(tools, Tool):
        raise InvalidArgument("agents and tools are lists: give [spec], [tool]")
    found: dict[str, _Entry] = {}
    kinds = [(item, AgentSpec) for item in agents] + [(item, Tool) for item in tools]
    for item, kind in kinds:
        if not isinstance(item, kind):
            raise InvalidArgument(
                f"agents must hold AgentSpecs and tools Tools, got {type(item).__name__}"
            )
        if isinstance(item, AgentSpec):
            name, entry = item.name, _Entry(item, None)
        else:
            assert isinstance(item, Tool)
            spec = AgentSpec(item.name, _NO_MODEL, tools=[item])
            name, entry = item.name, _Entry(spec, item)
        if not _TOOL_NAME.fullmatch(name):
            raise InvalidArgument(
                f"{name!r} cannot be an MCP tool's name: 1 to 128 letters, digits, '_', '-' or '.'"
            )
        if name in found:
            raise InvalidArgument(f"two tools are named {name!r}: a tool's name is unique")
        found[name] = entry
    if not found:
        raise InvalidArgument("give at least one AgentSpec (agents) or Tool (tools)")
    return found


class _NoModel:
    """The model of a tool's agent, whose phases are direct tool calls: never called."""

    context_window = 1 << 20

    async def complete(
        self, messages: Sequence[object], tools: Sequence[object], *, max_output_tokens: int
    ) -> ModelReply:
        raise UsageError("a tool served over MCP runs no model")


_NO_MODEL = _NoModel()


class _Swarm:
    """The tools of one server: its agents and tools, and how a call of one runs."""

    def __init__(
        self,
        runs: Runs,
        agents: Sequence[AgentSpec[Any]],
        tools: Sequence[Tool],
        descriptions: Mapping[str, str],
        max_prompt_chars: int,
        timeout: float | None,
    ) -> None:
        self.runs = runs
        self.entries = _entries(agents, tools)
        self.max_prompt_chars = check_int("max_prompt_chars", max_prompt_chars, 1)
        check_seconds("timeout", timeout, optional=True)
        self.timeout = timeout
        self.listing = [
            types.Tool(
                name=name,
                description=descriptions.get(name) or entry.description,
                input_schema=entry.schema,
            )
            for name, entry in self.entries.items()
        ]

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.listing)

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        entry = self.entries.get(name)
        return None if entry is None else entry.schema

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        entry = self.entries.get(params.name)
        if entry is None:  # a protocol error: the client asked for what was not listed
            raise MCPError(types.INVALID_PARAMS, f"no tool named {scrub(params.name[:200])!r}")
        options: dict[str, Any] = {} if self.timeout is None else {"timeout": self.timeout}
        try:
            if entry.tool is None:
                prompt = self._prompt(params.arguments)
            else:
                prompt = ""
                call = ToolCallRequest(entry.tool.name, self._arguments(params.arguments))
                options["direct_tool_calls"] = [call]
        except InvalidArgument as exc:
            return _error_result("InvalidArgument", str(exc))
        try:
            result = await self._run(ctx, entry.spec, prompt, options)
        except AgentrioError as exc:  # (the runtime stopped, the agent crashed...)
            return _error_result(type(exc).__name__, scrub(str(exc))[:2000])
        return _result(result) if entry.tool is None else _tool_result(result)

    async def _run(
        self, ctx: Any, spec: AgentSpec[Any], prompt: str, options: dict[str, Any]
    ) -> PhaseResult[Any]:
        """The phase's result; each turn and tool call of its stream a progress notification."""
        progress = 0
        async with open_run(self.runs, spec, prompt, **options) as items:
            async for item in items:
                message = _progress_message(item)
                if message is not None:
                    progress += 1
                    await ctx.session.report_progress(progress, None, message)
                result = getattr(item, "result", None)
                if isinstance(result, PhaseResult):
                    return result
        # (Not reached: a run's stream ends with its RunDone, or raises.)
        raise ActorStopped("the run ended without a result", path=spec.name, reason="stopped")

    def _arguments(self, arguments: dict[str, Any] | None) -> dict[str, object]:
        if arguments is None:
            return {}
        if not isinstance(arguments, dict):
            raise InvalidArgument(
                f"the arguments must be an object, got {type(arguments).__name__}"
            )
        size = len(json.dumps(arguments, default=str))
        if size > self.max_prompt_chars:
            raise InvalidArgument(
                f"the arguments are over {self.max_prompt_chars} characters of JSON ({size})"
            )
        scrubbed = scrub_json(arguments)
        assert isinstance(scrubbed, dict)
        return scrubbed

    def _prompt(self, arguments: dict[str, Any] | None) -> str:
        if not isinstance(arguments, dict) or set(arguments) != {"prompt"}:
            # (The peer's keys, bounded: ten of them, 50 characters each.)
            keys = (
                [scrub(str(k)[:50]) for k in sorted(arguments)[:10]]
                if isinstance(arguments, dict)
                else type(arguments).__name__
            )
            raise InvalidArgument(f"the arguments must be {{'prompt': str}}, got keys {keys!r}")
        prompt = arguments["prompt"]
        if not isinstance(prompt, str):
            raise InvalidArgument(f"'prompt' must be a string, got {type(prompt).__name__}")
        if len(prompt) > self.max_prompt_chars:
            raise InvalidArgument(
                f"'prompt' is over {self.max_prompt_chars} characters ({len(prompt)})"
            )
        return scrub(prompt)


def _describe(spec: AgentSpec[Any]) -> str:
    if spec.instructions:
        first = spec.instructions.strip().split("\n\n", 1)[0]
        return first[:1000]
    return f"Run the agentrio agent {spec.name!r} on a prompt; its answer is the result."


def _progress_message(item: object) -> str | None:
    match item:
        case TurnEnded(iteration=iteration, tool_calls=calls):
            return f"turn {iteration} ended ({calls} tool call(s))"
        case ToolStarted(tool=tool):
            return f"tool {tool} started"
        case ToolEnded(tool=tool, status=status):
            return f"tool {tool} ended: {status}"
    return None


def _error_result(error_type: str, message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=f"{error_type}: {message}")],
        structured_content={"stop_reason": "error", "error_type": error_type, "error": message},
        is_error=True,
    )


def _tool_result(result: PhaseResult[Any]) -> types.CallToolResult:
    """A tool's call, as the phase of direct calls ran it (its one ToolResult)."""
    if result.stop_reason == "error" or not result.tool_calls:
        return _error_result(result.error_type or "ToolError", result.error or result.stop_reason)
    call = result.tool_calls[0]
    failed = call.status != "ok"
    return types.CallToolResult(
        content=[
            types.TextContent(text=f"{call.status}: {call.content}" if failed else call.content)
        ],
        structured_content={"status": call.status},
        is_error=failed,
    )


def _result(result: PhaseResult[Any]) -> types.CallToolResult:
    if result.stop_reason == "error":
        return _error_result(result.error_type, result.error)
    structured: dict[str, object] = {
        "stop_reason": result.stop_reason,
        "output": to_json(result.output),
    }
    return types.CallToolResult(
        content=[types.TextContent(text=result.final_text)], structured_content=structured
    )


def mcp_server(
    runtime: Runtime | BlockingRuntime,
    agents: Sequence[AgentSpec[Any]] = (),
    *,
    tools: Sequence[Tool] = (),
    name: str = "agentrio",
    instructions: str | None = None,
    descriptions: Mapping[str, str] | None = None,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
    timeout: float | None = None,
) -> Server[Any]:
    """The MCP server (the SDK's low-level ``Server``) whose tools are *agents*.

    For a transport of your own; `serve_stdio` and `streamable_http_app` use it.

    Args:
        runtime: where the calls run: a [`Runtime`][agentrio.Runtime], for a
            server run in Trio (in the runtime's thread), or a
            [`BlockingRuntime`][agentrio.types.BlockingRuntime], for one run
            in asyncio.
        agents: the specs, one tool each, named as the spec (1 to 128
            letters, digits, ``_``, ``-``, ``.``; unique), taking a ``prompt``.
        tools: agentrio [`Tool`][agentrio.Tool]s served as they are: named
            as the tool, with its schema; a call is a phase of direct tool
            calls (no model) of an agent of its own, so the call is
            validated, timed out and reported as any tool call is. Its
            result's text is the tool's content (``"<status>: <content>"``
            and ``isError`` unless ``"ok"``), its structured content
            ``{"status": ...}``. (A runtime's registered tools are those
            given to ``register_tool``: pass them here.)
        name: the server's name, in its initialization.
        instructions: the server's instructions to the client, if any.
        descriptions: a tool's description by its name (default: the first
            paragraph of the spec's ``instructions``).
        max_prompt_chars: the longest ``prompt`` taken (for a tool, the
            longest arguments, as JSON); a longer one is an ``isError``
            result naming ``InvalidArgument``.
        timeout: each phase's timeout in seconds (default: the spec's).

    Returns:
        The SDK's ``mcp.server.lowlevel.Server``.

    Raises:
        InvalidArgument: neither *agents* nor *tools* holds anything; one
            holds what is no spec (no Tool), a name that is no MCP tool's, or
            one twice; a bad *max_prompt_chars* or *timeout*; a *runtime*
            that is neither.
    """
    swarm = _Swarm(
        Runs(runtime, "mcp"), agents, tools, descriptions or {}, max_prompt_chars, timeout
    )
    return Server(
        name,
        version=__version__,
        instructions=instructions,
        get_tool_input_schema=swarm.input_schema,
        on_list_tools=swarm.list_tools,
        on_call_tool=swarm.call_tool,
    )


async def serve_stdio(
    runtime: Runtime,
    agents: Sequence[AgentSpec[Any]] = (),
    *,
    tools: Sequence[Tool] = (),
    name: str = "agentrio",
    instructions: str | None = None,
    descriptions: Mapping[str, str] | None = None,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
    timeout: float | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> None:
    """Serve *agents* as MCP tools over this process's stdin and stdout, until stdin ends.

    Runs in Trio, in the runtime's own thread (the SDK's anyio code runs on
    Trio): each call is a phase of a new agent of *runtime*, and a cancelled
    call cancels it. While it serves, the process's stdout is the protocol's
    (the SDK points file descriptor 1 at stderr meanwhile, so a stray
    ``print`` does not break it). Cancel the task that awaits it to stop
    serving.

    Example:

        async with agentrio.open_runtime() as rt:
            await agentrio.mcp_server.serve_stdio(rt, [researcher, writer])

    Args:
        runtime: the [`Runtime`][agentrio.Runtime] the calls run in.
        agents: the specs served, one tool each (see `mcp_server`).
        tools: agentrio tools served as they are (see `mcp_server`).
        name: the server's name.
        instructions: the server's instructions to the client.
        descriptions: a tool's description by its name.
        max_prompt_chars: the longest ``prompt`` taken.
        timeout: each phase's timeout in seconds (default: the spec's).
        max_line_bytes: the longest message (one line) read from stdin; a
            longer one is dropped, unread, and the server goes on.

    Raises:
        InvalidArgument: as `mcp_server` raises it; a bad *max_line_bytes*.
    """
    check_int("max_line_bytes", max_line_bytes, 1)
    server = mcp_server(
        runtime,
        agents,
        tools=tools,
        name=name,
        instructions=instructions,
        descriptions=descriptions,
        max_prompt_chars=max_prompt_chars,
        timeout=timeout,
    )
    with _wire_stdin() as wire:
        # (The SDK's reader calls only readline: duck-typed as a text file.)
        stdin = anyio.wrap_file(cast("IO[str]", _BoundedLines(wire, max_line_bytes)))
        async with stdio_server(stdin=stdin) as (read, write):
            await server.run(read, write, server.create_initialization_options())


@contextlib.contextmanager
def _wire_stdin() -> Iterator[BinaryIO]:
    """The protocol's stdin, from a private copy of fd 0, while fd 0 reads /dev/null.

    As the SDK does for the stdin it opens itself (one given to it is not
    diverted): a tool or child process that reads stdin gets nothing, rather
    than the client's messages.
    """
    wire = os.dup(0)
    saved = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        with open(wire, "rb", buffering=1 << 16) as raw:  # (closes wire)
            yield raw
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(null)


class _BoundedLines:
    """stdin's lines for the SDK's reader (its ``readline``), each at most *limit* bytes.

    A longer line is read to its end and dropped, and the SDK is given a line
    that is no JSON-RPC message in its place (which it passes over, as any
    garbage): a peer's endless line costs *limit* bytes of memory, not its
    length. Bytes that are not UTF-8 become U+FFFD, as in the SDK's own reader.
    """

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self.raw = raw
        self.limit = limit

    def readline(self) -> str:
        line = self.raw.readline(self.limit + 1)
        if len(line) > self.limit and not line.endswith(b"\n"):
            while True:  # (the rest of the line, dropped a piece at a time)
                rest = self.raw.readline(1 << 16)
                if not rest or rest.endswith(b"\n"):
                    break
            return "a line over the server's limit\n"
        return line.decode("utf-8", "replace")


def streamable_http_app(
    host: BlockingRuntime,
    agents: Sequence[AgentSpec[Any]] = (),
    *,
    tools: Sequence[Tool] = (),
    name: str = "agentrio",
    path: str = "/mcp",
    instructions: str | None = None,
    descriptions: Mapping[str, str] | None = None,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
    timeout: float | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    stateless: bool = False,
) -> Starlette:
    """A Starlette app serving *agents* as MCP tools over streamable HTTP, at *path*.

    Serve it with an ASGI server on asyncio (uvicorn); its calls run in
    *host*, a [`BlockingRuntime`][agentrio.types.BlockingRuntime] (from
    [`open_runtime_sync`][agentrio.open_runtime_sync]). Its lifespan runs
    the SDK's session manager: serve it with the lifespan on (uvicorn's
    default). The SDK's DNS-rebinding protection allows 127.0.0.1 and
    localhost only; behind another name, mount the SDK's own
    ``mcp_server(...).streamable_http_app(transport_security=...)``.

    Example:

        rt = agentrio.open_runtime_sync()
        app = agentrio.mcp_server.streamable_http_app(rt, [researcher, writer])
        uvicorn.run(app, host="127.0.0.1", port=8000)

    Args:
        host: the runtime the calls run in.
        agents: the specs served, one tool each (see `mcp_server`).
        tools: agentrio tools served as they are (see `mcp_server`).
        name: the server's name.
        path: where the endpoint is.
        instructions: the server's instructions to the client.
        descriptions: a tool's description by its name.
        max_prompt_chars: the longest ``prompt`` taken.
        timeout: each phase's timeout in seconds (default: the spec's).
        max_body_bytes: the largest request body; a larger one gets HTTP 413.
        body_timeout: seconds a request's body may take to arrive; a slower
            one gets HTTP 408.
        stateless: no session kept between requests (the SDK's
            ``stateless_http``).

    Returns:
        The ``starlette.applications.Starlette`` app.

    Raises:
        InvalidArgument: as `mcp_server` raises it; a bad *max_body_bytes* or
            *body_timeout*.
    """
    check_int("max_body_bytes", max_body_bytes, 1)
    check_seconds("body_timeout", body_timeout)
    server = mcp_server(
        host,
        agents,
        tools=tools,
        name=name,
        instructions=instructions,
        descriptions=descriptions,
        max_prompt_chars=max_prompt_chars,
        timeout=timeout,
    )
    app = server.streamable_http_app(
        streamable_http_path=path,
        stateless_http=stateless,
        max_request_body_size=max_body_bytes,
    )
    app.add_middleware(BoundedBody, max_bytes=max_body_bytes, timeout=body_timeout)
    return app
