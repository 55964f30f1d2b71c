"""Tools from MCP servers: each server's tools as agentrio Tools, its connection a supervised actor.

`connect` starts an MCP server (stdio: a command) or reaches one
(streamable HTTP: a URL) with the official `mcp` SDK, lists its tools and
gives them back as [`Tool`][agentrio.Tool] objects carrying the server's
JSON schemas. They are tools like any other: put them in an AgentSpec's
``tools`` and they go through its allowlist, permission policy, hooks and
timeouts.

The connection is held by an actor (``mcp.<name>``) spawned under a
supervisor. When the connection is lost (the server process ended, the HTTP
server went away, a stdio server broke the protocol) the actor crashes and
its supervisor restarts it under its restart intensity; the restart connects
again. Calls in flight when the connection is lost fail as tool results;
calls made while it reconnects wait for it (within their tool timeout).

How it sits on Trio: the SDK is written on anyio, which runs on Trio (the
stdio transport's subprocess, the HTTP client and every task group). One task,
the actor's, holds each connection open (``async with mcp.Client(...)``,
whose task groups read what the server sends); each tool call sends its
request from its own task, which the SDK allows, and the SDK wakes every
call still waiting with "connection closed" on each way the connection ends.
The stdio transport is given an encoding of this module's (`_StdioDecoder`)
so that a stream the SDK cannot read (not UTF-8, a line without end) ends
the connection at once instead of stalling it.

This module imports the SDK, so it is imported only by ``agentrio.mcp``,
never by ``import agentrio``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import httpx2
import mcp
import trio
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CONNECTION_CLOSED,
    Implementation,
)

from ..._checks import check_int, check_seconds
from ..._version import __version__
from ...actors.actor import Actor, ActorRef
from ...errors import ActorError, ActorStopped, AgentrioError, InvalidArgument, ToolError
from ...messages import Message
from ...providers.base import ToolSchema
from ...providers.redact import redact_url, url_secrets
from ...supervisors.ref import SupervisorRef
from .tool import Tool, ToolArgumentsInvalid
from .tool_call import hide_env

if TYPE_CHECKING:
    pass

from .mcp_wire import _STDIO_ENCODING, _described, _stream_fault, _Watched, render

__all__ = ["connect", "MCPConnection", "MCPTool", "MCPToolError", "MCPConnectError"]

_SERVER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,31}$")
_NOT_IN_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")
# A server listing more pages or tools than this is refused: a listing that
# never ends must not hang (or fill) the connection.
_MAX_PAGES = 100
_MAX_TOOLS = 1000
# The HTTP client's timeouts, the SDK's own: a server may hold a response
# stream open, so reads wait long (a tool call's own timeout still applies).
_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
_CLIENT_INFO = Implementation(name="agentrio", version=__version__)
# What the SDK says when it fails a call because the connection ended.
_SDK_CLOSED = "Connection closed"


class MCPToolError(ToolError):
    """A call to an MCP server's tool failed; inside a phase, a `failed` result.

    The server's tool reported an error (`isError`: its text is the
    message), the server refused the call, or the connection was lost during
    the call or is down for good. Never retried by the lanes (a call may have
    had effects before the connection was lost). A subclass of
    [`ToolError`][agentrio.errors.ToolError].
    """


class MCPConnectError(AgentrioError):
    """[`connect`][agentrio.mcp.connect] could not connect, or the server's tools cannot be used.

    Raised by `connect` when the first connection fails (the program is not
    found or exits, the server refuses or breaks the protocol, or it does
    not answer within `connect_timeout`), or when *include* or the tools' names cannot be met.
    Also what a connection's actor crashes with when its connection is lost
    or a stdio server breaks the protocol (bytes that are not UTF-8, a line
    that is not a JSON-RPC message, a line longer than 16 Mi characters),
    in [`ActorFailed`][agentrio.events.ActorFailed] events and in
    [`RestartIntensityExceeded`][agentrio.errors.RestartIntensityExceeded]. The
    message says why, in the server's and the SDK's own words, with the
    values of ``env``, ``headers`` and the URL's credentials taken out.
    """


class _Run(Message, frozen=True, tag=True):
    """Sent by the connection actor to itself as it starts: hold a connection open."""


class _Wait(Message, frozen=True, tag=True):
    """Asked by a call waiting for a connection; answered between connections."""


async def _no_arguments() -> None:
    """A placeholder: an MCPTool is made as a Tool of no arguments, then given its schema."""


class _Link:
    """One server's connection, as it stands across the incarnations of its actor.

    The actor's `serve` holds a connection open and puts its client
    here while it is up; tool calls take it from here.
    """

    ref: ActorRef  # the actor's, set once it is spawned

    def __init__(
        self,
        name: str,
        *,
        command: tuple[str, ...] | None,
        env: dict[str, str],
        cwd: str | None,
        url: str | None,
        headers: dict[str, str],
        connect_timeout: float,
        max_result_chars: int,
    ) -> None:
        self.name = name
        self.command = command
        self.env = env
        self.cwd = cwd
        self.url = url
        self.headers = headers
        self.connect_timeout = connect_timeout
        self.max_result_chars = max_result_chars
        secrets = [*env.values(), *headers.values(), *(url_secrets(url) if url else ())]
        self.secrets = {str(i): s for i, s in enumerate(secrets)}
        self.client: mcp.Client | None = None
        self.tools: list[mcp.Tool] = []
        self.changed = trio.Event()  # set (and replaced) when the connection comes up or goes
        self.lost = trio.Event()  # set when the live connection has ended, or is to end
        self.scope: trio.CancelScope | None = None  # of the serving incarnation
        self.connected_once = False
        self.closing = False
        self.failure: str | None = None  # why the first connection failed
        self.last_error = ""  # why the last connection ended
        self.fault: str | None = None  # how the server broke the protocol on this connection

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def scrub(self, text: str) -> str:
        """*text* without the values of ``env``, ``headers`` and the URL's credentials."""
        return hide_env(text, self.secrets)

    def where(self) -> str:
        """What the server is, as shown: the program (not its arguments) or the redacted URL."""
        if self.command is not None:
            return f"stdio {os.path.basename(self.command[0])!r}"
        assert self.url is not None
        return f"http {redact_url(self.url)!r}"

    @contextlib.asynccontextmanager
    async def _transport(self, lost: trio.Event) -> AsyncIterator[tuple[Any, Any]]:
        ended = functools.partial(self._lose, lost)
        if self.command is not None:
            params = mcp.StdioServerParameters(
                command=self.command[0],
                args=list(self.command[1:]),
                env=self.env,
                cwd=self.cwd,
                encoding=_STDIO_ENCODING,
            )
            reporter = _stream_fault.set(functools.partial(self._note_fault, lost))
            try:
                async with mcp.stdio_client(params) as (read, write):
                    yield _Watched(read, ended), write
            finally:
                _stream_fault.reset(reporter)
        else:
            assert self.url is not None
            async with (
                httpx2.AsyncClient(headers=self.headers, timeout=_HTTP_TIMEOUT) as http,
                streamable_http_client(self.url, http_client=http) as (read, write),
            ):
                yield _Watched(read, ended), write

    async def _list_tools(self, client: mcp.Client) -> list[mcp.Tool]:
        tools: list[mcp.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            if len(tools) > _MAX_TOOLS:
                raise MCPConnectError(f"the server lists more than {_MAX_TOOLS} tools")
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise MCPConnectError(f"the server's tool list runs past {_MAX_PAGES} pages")

    async def serve(self) -> None:
        """Connect, and hold the connection open until it is lost or closed.

        Lost (after it had connected once): raises, so the actor crashes and
        its supervisor decides on a restart. The first connection failing is
        not a crash: it is recorded for `connect` to raise.
        """
        if self.closing:
            return
        lost = self.lost = trio.Event()
        self.fault = None
        connected = False
        error: BaseException | None = None
        # stdio: a line that is not a JSON-RPC message ends the connection (the
        # SDK would drop it, and a call whose answer it was would wait it out).
        on_message = functools.partial(self._on_message, lost) if self.command is not None else None
        scope = self.scope = trio.CancelScope(deadline=trio.current_time() + self.connect_timeout)
        try:
            # (Caught out here too: an error raised as this scope cancels comes
            # out of it, without the Cancelled it was grouped with.)
            with scope:
                try:
                    async with mcp.Client(
                        self._transport(lost),
                        client_info=_CLIENT_INFO,
                        cache=None,
                        message_handler=on_message,
                    ) as client:
                        tools = await self._list_tools(client)
                        scope.deadline = math.inf
                        connected = True
                        self._up(client, tools)
                        await lost.wait()
                finally:
                    self.scope = None
                    if connected:
                        self._down()
        except Exception as exc:
            error = exc
        if self.closing:
            return
        why = self.last_error = self._why_ended(error, scope.cancelled_caught and not connected)
        if not self.connected_once:
            self.failure = why
            self._fire()
            return
        raise MCPConnectError(f"MCP server {self.name!r} ({self.where()}): {why}")

    def _why_ended(self, error: BaseException | None, timed_out: bool) -> str:
        """Why the connection ended, or was never made, as the errors say it."""
        if self.fault is not None:
            return self.fault
        if error is not None:
            return self.scrub(_described(error))
        if timed_out:
            return f"no connection within {self.connect_timeout} s"
        return "the server closed the connection"

    def _up(self, client: mcp.Client, tools: list[mcp.Tool]) -> None:
        self.client = client
        self.tools = tools
        self.connected_once = True
        self._fire()

    def _down(self) -> None:
        self.client = None
        self._fire()

    def _lose(self, lost: trio.Event) -> None:
        """The connection of *lost* has ended: no call may use it from now on."""
        if lost is self.lost and not lost.is_set():
            lost.set()
            if self.client is not None:
                self._down()

    def _note_fault(self, lost: trio.Event, why: str) -> None:
        """How the stream of the connection of *lost* broke (it ends at the `_BROKEN_HERE` line)."""
        if lost is self.lost and self.fault is None:
            self.fault = why

    def _break(self, lost: trio.Event, why: str) -> None:
        """The server broke the protocol on the connection of *lost* (*why*): end it now."""
        if lost is not self.lost or lost.is_set():
            return
        self.fault = why
        if self.client is None and self.scope is not None:
            self.scope.cancel()  # not up yet: the connecting is abandoned
        else:
            self._lose(lost)

    async def _on_message(self, lost: trio.Event, message: object) -> None:
        """What the SDK hands on besides answers; a line it could not read is an Exception."""
        if isinstance(message, Exception):
            why = self.fault or "the server wrote a line that is not a JSON-RPC message"
            self._break(lost, why)

    def _fire(self) -> None:
        changed, self.changed = self.changed, trio.Event()
        changed.set()

    def close(self) -> None:
        """Begin closing: the live connection ends, a connection being made is abandoned."""
        self.closing = True
        self.lost.set()
        if self.scope is not None and self.client is None:
            self.scope.cancel()
        self._fire()

    async def _await_change(self) -> bool:
        """Wait until the connection comes up or goes; False if its actor has exited for good.

        The actor answers a `_Wait` between connections and, having
        exited, refuses it (the kernel fails what is left in a mailbox): so
        the wait ends either way without a timer.
        """
        changed = self.changed
        gone = False
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal gone
                try:
                    await self.ref.ask(_Wait())
                except ActorError:
                    gone = True
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            await changed.wait()
            nursery.cancel_scope.cancel()
        return not gone

    async def connected(self) -> mcp.Client | None:
        """The live client, waiting for a (re)connection; None if there will be none."""
        while self.client is None:
            if self.closing or self.failure is not None:
                return None
            if not await self._await_change():
                return self.client
        return self.client

    def down(self) -> str:
        """Why there is no connection to wait for, as a call's error says."""
        if self.closing:
            return f"the MCP server {self.name!r} is closed"
        return f"the MCP server {self.name!r} is down: its connection actor has exited" + (
            f" (last: {self.last_error})" if self.last_error else ""
        )

    async def call(self, tool: str, arguments: dict[str, object]) -> str:
        """Call the server's *tool*: the text the model sees, or `MCPToolError`."""
        client = self.client
        if client is None:
            client = await self.connected()
            if client is None:
                raise MCPToolError(self.down())
        lost = self.lost  # (of this connection: no checkpoint since it was taken)
        try:
            result = await client.call_tool(tool, arguments)
        except mcp.MCPError as exc:
            # -32000 is CONNECTION_CLOSED to the SDK, but JSON-RPC's first server
            # error code to servers, which answer with it: a loss only if the
            # connection did end, or the SDK said so (a write that failed).
            closed = lost.is_set() or exc.message == _SDK_CLOSED
            if exc.code != CONNECTION_CLOSED or not closed:
                raise MCPToolError(
                    f"the MCP server {self.name!r} refused the call: {self.scrub(exc.message)}"
                ) from None
            self._lose(lost)
            raise MCPToolError(
                f"the connection to the MCP server {self.name!r} was lost during the call"
            ) from None
        except Exception as exc:
            raise MCPToolError(
                f"the call to the MCP server {self.name!r} failed: {self.scrub(_described(exc))}"
            ) from None
        text = render(result, self.max_result_chars)
        if result.is_error:
            raise MCPToolError(text or "the tool reported an error and said nothing more")
        return text


class _Connection(Actor[Message]):
    """The actor holding one server's connection: it crashes when the connection is lost."""

    __slots__ = ("link",)

    def __init__(self, link: _Link) -> None:
        self.link = link

    async def on_start(self) -> None:
        with contextlib.suppress(ActorStopped):  # stopped before it began: nothing to do
            self.ref.send_nowait(_Run())

    async def handle(self, msg: Message) -> None:
        if type(msg) is _Run:
            await self.link.serve()


class MCPTool(Tool):
    """A tool of an MCP server, as an agentrio [`Tool`][agentrio.Tool].

    Its schema is the server's (`inputSchema`) and its description the
    server's. The server checks the arguments (a bad one comes back as a
    `failed` result, in the server's words); agentrio checks only that they
    are a JSON object. Calling it sends `tools/call` over the server's
    connection.

    The model sees the result's text blocks, joined with newlines, and a
    note (type, MIME type, size; never the bytes) for any other content,
    cut to `max_result_chars`. A result the server marks `isError`, a call
    it refuses, and a connection lost during the call are an
    [`MCPToolError`][agentrio.mcp.MCPToolError]: a `failed` result.

    It is ``idempotent`` when the server's annotations say so
    (``idempotentHint``).

    Attributes:
        server: the name the server was connected under.
        remote_name: the tool's name on the server (``name`` is agentrio's,
            ``<server>__<tool>`` by default).
    """

    __slots__ = ("_link", "remote_name", "server")

    def __init__(self, link: _Link, remote: mcp.Tool, name: str) -> None:
        description = remote.description or ""
        super().__init__(_no_arguments, name=name, description=description)
        self._link = link
        self.server = link.name
        self.remote_name = remote.name
        # The server's word that a call may be made twice (a resumed phase
        # makes one again that a crash cut short); absent means no.
        hints = getattr(remote, "annotations", None)
        self.idempotent = getattr(hints, "idempotentHint", None) is True
        self.fn = self._call
        self.schema = ToolSchema(name, description, dict(remote.input_schema))

    def __repr__(self) -> str:
        return f"<MCPTool {self.name!r} of {self.server!r}>"

    def validate(self, arguments: dict[str, object]) -> dict[str, object]:
        """*arguments* as they are, if they are a JSON object (the server checks the rest).

        Raises:
            ToolArgumentsInvalid: not a dict with str keys.
        """
        if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
            raise ToolArgumentsInvalid(
                f"invalid arguments for {self.name!r}: expected a JSON object, got {arguments!r}"
            )
        return arguments

    async def _call(self, **arguments: object) -> str:
        return await self._link.call(self.remote_name, arguments)

    def invoke(self, kwargs: dict[str, object]) -> Awaitable[object]:
        """Send the call to the server: an awaitable of the text the model sees."""
        return self._link.call(self.remote_name, kwargs)


class MCPConnection:
    """A connected MCP server, from [`connect`][agentrio.mcp.connect]: its tools and its actor.

    Attributes:
        name: the name it was connected under.
        tools: its tools, as [`MCPTool`][agentrio.mcp.MCPTool] objects, in
            the server's order.
        ref: the [`ActorRef`][agentrio.ActorRef] of the actor holding the
            connection (`mcp.<name>` under the supervisor it was spawned under).
    """

    __slots__ = ("_link", "name", "ref", "tools")

    def __init__(self, link: _Link, tools: tuple[MCPTool, ...]) -> None:
        self._link = link
        self.name = link.name
        self.ref = link.ref
        self.tools = tools

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """``"stdio"`` (a command) or ``"http"`` (streamable HTTP)."""
        return self._link.transport

    @property
    def connected(self) -> bool:
        """True while the connection is up (False while it reconnects, and once closed)."""
        return self._link.client is not None

    def tool(self, name: str) -> MCPTool:
        """The tool of that name: agentrio's (``files__read``) or the server's (``read``).

        Raises:
            InvalidArgument: no such tool.
        """
        for t in self.tools:
            if name in (t.name, t.remote_name):
                return t
        raise InvalidArgument(
            f"MCP server {self.name!r} has no tool {name!r} "
            f"(it has: {', '.join(t.remote_name for t in self.tools) or 'none'})"
        )

    async def aclose(self) -> None:
        """Close the connection (a stdio server is asked to exit) and stop its actor.

        Calls waiting for it then fail; closing twice does nothing more.
        """
        self._link.close()
        await self.ref.stop()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed" if self._link.closing else "down"
        return (
            f"<MCPConnection {self.name!r} ({self._link.where()}), "
            f"{len(self.tools)} tools, {state}>"
        )


def _check_strings(what: str, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"{what} must be a mapping of str to str, got a {type(value).__name__}"
        )
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            # The key is shown, never the value: values may be secrets.
            raise InvalidArgument(f"{what} must map str to str; the entry {key!r} does not")
    return dict(value)


def _tools(link: _Link, prefix: str, include: Sequence[str] | None) -> tuple[MCPTool, ...]:
    offered = {t.name: t for t in link.tools}
    if include is not None:
        missing = [n for n in include if n not in offered]
        if missing:
            raise MCPConnectError(
                f"MCP server {link.name!r} has no tool {', '.join(map(repr, missing))} "
                f"(it has: {', '.join(offered) or 'none'})"
            )
        chosen = [offered[n] for n in dict.fromkeys(include)]
    else:
        chosen = list(offered.values())
    tools: dict[str, MCPTool] = {}
    for remote in chosen:
        name = prefix + _NOT_IN_TOOL_NAME.sub("_", remote.name)
        if name in tools:
            raise MCPConnectError(
                f"MCP server {link.name!r}: tools {tools[name].remote_name!r} and "
                f"{remote.name!r} would both be named {name!r}; choose with include="
            )
        try:
            tools[name] = MCPTool(link, remote, name)
        except InvalidArgument as exc:
            raise MCPConnectError(
                f"MCP server {link.name!r}: its tool {remote.name!r} cannot be an agentrio "
                f"tool ({exc}); leave it out with include=, or change prefix="
            ) from None
    return tuple(tools.values())


@contextlib.asynccontextmanager
async def connect(
    rt: SupervisorRef,
    name: str,
    *,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    under: SupervisorRef | None = None,
    prefix: str | None = None,
    include: Sequence[str] | None = None,
    connect_timeout: float = 30.0,
    max_result_chars: int = 100_000,
) -> AsyncIterator[MCPConnection]:
    """Connect to an MCP server for the block: its tools, ready for an AgentSpec.

    Give *command* (a stdio server: the command starts it) or *url* (a
    streamable HTTP server). Leaving the block closes the connection (a
    stdio server is asked to exit, then ended) and stops its actor.

    Example:

        async with agentrio.open_runtime() as rt:
            async with agentrio.mcp.connect(
                rt, "files", command=["python", "files_server.py"]
            ) as files:
                spec = agentrio.AgentSpec(name="clerk", model=model, tools=files.tools)
                agent = await rt.spawn_agent(spec)
                print((await agent.run("List the notes")).final_text)

    The connection is held by an actor, ``mcp.<name>``, spawned under
    *under* (default: *rt*). When the connection is lost (or a stdio server
    breaks the protocol: it writes on its stdout what is not a JSON-RPC
    message in UTF-8, or a line longer than 16 Mi characters) the actor
    crashes and its supervisor restarts it (which connects again) under that
    supervisor's restart intensity; past it, the supervisor fails as it does
    for any actor (so pass a supervisor of your own, from
    ``rt.spawn_supervisor(...)``, to keep a crash-looping server from
    failing the runtime). A call in flight when the connection is lost
    fails as a tool result; a call made while it reconnects waits for it,
    within its tool timeout; once the actor has exited for good, calls fail
    at once. Leave the block before *under* stops: a connection still open
    when its supervisor stops holds that stop until the supervisor's
    `shutdown_timeout`, then is cancelled.

    Args:
        rt: the runtime (or any supervisor) to spawn the actor under.
        name: the server's name: letters, digits, ``_`` and ``-``, 32 at
            most, starting with a letter or ``_``.
        command: the program and its arguments (stdio).
        env: environment variables for the server process, over the few the
            SDK passes on (``HOME``, ``PATH``, ``USER``...): the process does
            not inherit the rest of ``os.environ``. Values are never shown.
        cwd: the server process's working folder.
        url: the server's streamable HTTP endpoint (``http://127.0.0.1:8000/mcp``).
        headers: HTTP headers for every request (``Authorization``...).
            Values are never shown.
        under: the supervisor of the connection's actor (default: *rt*).
        prefix: put before each tool's name (default ``"<name>__"``; ``""``
            for the server's names as they are). In a name, a character
            other than a letter, digit, ``_`` or ``-`` (what every provider
            takes) becomes ``_``.
        include: the server's tools to use, by the server's names (default:
            all it lists).
        connect_timeout: seconds to connect and list the tools, for the
            first connection and each reconnection.
        max_result_chars: a result longer than this is cut, with a note
            saying so.

    Raises:
        InvalidArgument: a bad argument, named in the message.
        MCPConnectError: the first connection failed (the server did not
            start, refused, broke the protocol, or did not answer within
            *connect_timeout*), or its tools cannot be used as asked
            (*include*, names).
    """
    if not isinstance(name, str) or not _SERVER_NAME.match(name):
        raise InvalidArgument(
            f"name must match {_SERVER_NAME.pattern} (letters, digits, _ and -), got {name!r}"
        )
    if (command is None) == (url is None):
        raise InvalidArgument("give command= (a stdio server) or url= (an HTTP server), not both")
    if command is not None:
        if isinstance(command, str) or not isinstance(command, Sequence) or not command:
            raise InvalidArgument(
                f"command must be a non-empty list of str (the program, then its arguments), "
                f"got a {type(command).__name__}"
            )
        if not all(isinstance(part, str) for part in command):
            raise InvalidArgument("command must be a list of str")
        if headers is not None:
            raise InvalidArgument("headers= is for an HTTP server (url=), not a command")
    elif url is not None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidArgument(
                f"url must be an http:// or https:// URL, got {redact_url(str(url))!r}"
            )
        if env is not None or cwd is not None:
            raise InvalidArgument("env= and cwd= are for a stdio server (command=), not a URL")
    if prefix is None:
        prefix = f"{name}__"
    elif not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str or None, got {prefix!r}")
    if include is not None and (
        isinstance(include, str)
        or not isinstance(include, Sequence)
        or not all(isinstance(n, str) for n in include)
    ):
        raise InvalidArgument(f"include must be a list of tool names or None, got {include!r}")
    check_seconds("connect_timeout", connect_timeout)
    check_int("max_result_chars", max_result_chars, 1)
    if under is None:
        under = rt
    if not isinstance(under, SupervisorRef):
        raise InvalidArgument(f"under must be a supervisor (or the runtime), got {under!r}")
    link = _Link(
        name,
        command=tuple(command) if command is not None else None,
        env=_check_strings("env", env),
        cwd=os.fspath(cwd) if cwd is not None else None,
        url=url,
        headers=_check_strings("headers", headers),
        connect_timeout=float(connect_timeout),
        max_result_chars=max_result_chars,
    )
    # The mailbox holds a _Run and the _Wait of each call waiting for a
    # connection; a bound there would only make the waits wait on each other.
    link.ref = await under.spawn(
        _Connection, link, name=f"mcp.{name}", mailbox=1 << 30, restart="transient"
    )
    try:
        if await link.connected() is None:
            raise MCPConnectError(
                f"MCP server {name!r} ({link.where()}): "
                f"{link.failure or 'its connection actor exited before it connected'}"
            )
        yield MCPConnection(link, _tools(link, prefix, include))
    finally:
        # (Cancelled here, the actor still stops, in its supervisor's nursery.)
        link.close()
        await link.ref.stop()
