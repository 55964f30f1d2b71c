"""A remote A2A agent as an agentrio tool: A2A 1.0's JSON-RPC over HTTP, on Trio.

The client speaks the protocol itself, with httpx (which runs on Trio through
anyio) and msgspec (`_wire`): no asyncio, and not the `a2a-sdk`, which this
side does not need. Each call is one HTTP exchange in the calling tool's own
task: ``SendStreamingMessage`` when the agent's card says it streams (the
task's id comes first, so a call cancelled midway can cancel the remote task),
``SendMessage`` otherwise. There is no connection to hold between calls, so
no actor: the call's deadline, cancellation and budget are its caller's, as
for any tool.

Whatever the peer sends is hostile: each body and stream is read within
`max_response_bytes` (and a stream's lines within 1 MiB), each read waits at
most `read_timeout`, the whole call at most `timeout`, and a reply that is not
A2A's JSON-RPC is an `A2AToolError` naming what was wrong. No message holds
the values of ``headers`` or the URL's credentials.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from typing import TypeVar

import httpx
import msgspec
import trio

from .._checks import check_int, check_seconds
from .._text import scrub
from ..agents.tools.tool import Tool, ToolArgumentsInvalid
from ..agents.tools.tool_call import hide_env
from ..errors import AgentrioError, InvalidArgument, ToolError
from ..providers.bounded import HttpxBody, LineSplitter, TooLarge, read_body, sse_data
from ..providers.guard import escapes_surrogate, loads
from ..providers.redact import hide_in_httpx_log, redact_url, url_secrets
from . import _wire

__all__ = ["A2ACard", "A2AConnectError", "A2ATool", "A2AToolError", "a2a_tool", "fetch_card"]

T = TypeVar("T")

CARD_PATH = "/.well-known/agent-card.json"
PROTOCOL_VERSION = "1.0"
_MAX_LINE_BYTES = 1024 * 1024
_MAX_ERROR_BYTES = 2000  # of an error body: what is shown of it
_CANCEL_TIMEOUT = 5.0  # to ask the remote to cancel a task its caller gave up on
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_ids = itertools.count(1)


class A2AToolError(ToolError):
    """A call to a remote A2A agent failed; inside a phase, a `failed` result.

    The agent could not be reached or did not answer within the call's
    limits (``timeout``, ``read_timeout``), it sent what is not A2A's
    JSON-RPC (garbage, a body past ``max_response_bytes``, a stream cut
    short), it refused the call (a JSON-RPC error, an HTTP error), or its
    task ended ``failed``, ``rejected`` or ``canceled``, or asks for input
    or authentication that a tool cannot give. The message says which, in
    the peer's words where it has some, with the values of ``headers`` and
    the URL's credentials taken out. A subclass of
    [`ToolError`][agentrio.errors.ToolError].
    """


class A2AConnectError(AgentrioError):
    """[`fetch_card`][agentrio.a2a.fetch_card] could not read a usable agent card.

    The agent could not be reached, did not answer within ``timeout``, or
    its card is not A2A's (not JSON, past ``max_bytes``, a field of the
    wrong type), or offers no JSON-RPC interface of A2A 1.0 on the card's
    own host. Its message has the values of ``headers`` and the URL's
    credentials taken out.
    """


class A2ASkill(msgspec.Struct, frozen=True):
    """A skill a remote agent's card lists: its id, name and description."""

    id: str
    name: str
    description: str


class A2ACard(msgspec.Struct, frozen=True):
    """What agentrio reads of a remote agent's card, from [`fetch_card`][agentrio.a2a.fetch_card].

    Attributes:
        name: the agent's name.
        description: what it says it does.
        endpoint: the URL of its JSON-RPC interface (A2A 1.0).
        streaming: it streams its tasks (``SendStreamingMessage``).
        skills: the skills it lists.
    """

    name: str
    description: str
    endpoint: str
    streaming: bool
    skills: tuple[A2ASkill, ...] = ()


class _Link:
    """One remote agent: where it is, how to reach it, and its limits."""

    def __init__(
        self,
        url: str,
        card: A2ACard | None,
        headers: dict[str, str],
        timeout: float,
        read_timeout: float,
        max_response_bytes: int,
        max_result_chars: int,
    ) -> None:
        self.url = url
        self.card = card
        self.headers = headers
        self.timeout = timeout
        self.read_timeout = read_timeout
        self.max_response_bytes = max_response_bytes
        self.max_result_chars = max_result_chars
        self.secrets = _secrets(url, headers)
        self._ssl: ssl.SSLContext | None = None  # made once, on the first call
        self.streaming: set[_Outcome] = set()  # the streamed calls in flight

    def where(self) -> str:
        return redact_url(self.url)

    def scrub(self, text: str) -> str:
        """A peer's text as it may be shown: no lone surrogate, none of our secrets."""
        return hide_env(scrub(text), self.secrets)

    def client(self) -> httpx.AsyncClient:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        timeout = httpx.Timeout(self.read_timeout, connect=min(self.read_timeout, 30.0))
        return httpx.AsyncClient(
            headers=self.headers, timeout=timeout, verify=self._ssl, follow_redirects=False
        )

    async def ask(self, message: str) -> str:
        """Send *message* to the remote agent; the text of its answer, or `A2AToolError`."""
        try:
            with trio.fail_after(self.timeout):
                card = await self._card()
                async with self.client() as http:
                    if card.streaming:
                        return await self._stream(http, card.endpoint, message)
                    return await self._send(http, card.endpoint, message)
        except trio.TooSlowError:
            raise A2AToolError(
                f"the A2A agent at {self.where()} did not answer within {self.timeout} s"
            ) from None

    async def _card(self) -> A2ACard:
        if self.card is None:
            try:
                self.card = await _fetch(self, self.read_timeout, self.max_response_bytes)
            except A2AConnectError as exc:
                raise A2AToolError(str(exc)) from None
        return self.card

    async def _send(self, http: httpx.AsyncClient, endpoint: str, message: str) -> str:
        params = {"message": _user_message(message)}
        body = await self._rpc(http, endpoint, "SendMessage", params, stream=False)
        event = self._result(body, _wire.Event)
        outcome = _Outcome()
        if not outcome.apply(event):
            raise A2AToolError(
                f"the A2A agent at {self.where()} answered before its task ended "
                f"(state {outcome.state or 'unknown'})"
            )
        return self._answer(outcome)

    async def _stream(self, http: httpx.AsyncClient, endpoint: str, message: str) -> str:
        params = {"message": _user_message(message)}
        outcome = _Outcome()
        self.streaming.add(outcome)
        try:
            async with self._open(http, endpoint, "SendStreamingMessage", params) as response:
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    body = await self._read(response)  # (an error, as one JSON-RPC reply)
                    finished = outcome.apply(self._result(body, _wire.Event))
                else:
                    finished = await self._read_events(response, outcome)
            if not finished:
                raise A2AToolError(
                    f"the A2A agent at {self.where()} ended its stream before its task ended"
                )
        except BaseException:
            if outcome.task_id and not outcome.finished:
                await self._cancel_remote(http, endpoint, outcome.task_id)
            raise
        finally:
            self.streaming.discard(outcome)
        return self._answer(outcome)

    async def _read_events(self, response: httpx.Response, outcome: _Outcome) -> bool:
        """Apply the stream's events to *outcome* until its task ends; False if it never does."""
        splitter = LineSplitter(_MAX_LINE_BYTES, self.max_response_bytes)
        pending: list[str] = []
        body = HttpxBody(response)
        with self._translated():
            while chunk := await body.receive():
                if self._apply(sse_data(splitter.split(chunk), pending), outcome):
                    await body.aclose()
                    return True
            # (An event the stream did not end with a blank line counts too.)
            return self._apply(sse_data([*splitter.close(), ""], pending), outcome)

    def _apply(self, events: list[str], outcome: _Outcome) -> bool:
        """Apply *events* (SSE ``data:`` values) to *outcome*; True once its task has ended."""
        for data in events:
            value = data[6:] if data.startswith("data: ") else data[5:]
            if outcome.apply(self._result(value.encode(), _wire.Event)):
                return True
        return False

    async def _cancel_remote(self, http: httpx.AsyncClient, endpoint: str, task_id: str) -> None:
        """Ask the agent to cancel *task_id*, which its caller gave up on: best effort, bounded."""
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + _CANCEL_TIMEOUT
            with contextlib.suppress(Exception):
                await self._rpc(http, endpoint, "CancelTask", {"id": task_id}, stream=False)

    def _answer(self, outcome: _Outcome) -> str:
        state = outcome.state.removeprefix("TASK_STATE_").lower().replace("_", "-")
        if outcome.state == "TASK_STATE_COMPLETED" or outcome.answered:
            return _cut(self.scrub(outcome.text()), self.max_result_chars)
        said = self.scrub(outcome.status_text or outcome.text())[:2000]
        if outcome.state in ("TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"):
            raise A2AToolError(
                f"the A2A agent at {self.where()} asks for {state.removesuffix('-required')}, "
                f"which a tool call cannot give" + (f": {said}" if said else "")
            )
        raise A2AToolError(
            f"the A2A agent's task ended {state}" + (f": {said}" if said else " (it said nothing)")
        )

    # -- HTTP and JSON-RPC -----------------------------------------------------------

    async def _rpc(
        self,
        http: httpx.AsyncClient,
        endpoint: str,
        method: str,
        params: Mapping[str, object],
        *,
        stream: bool,
    ) -> bytes:
        async with self._open(http, endpoint, method, params, stream=stream) as response:
            return await self._read(response)

    @contextlib.asynccontextmanager
    async def _open(
        self,
        http: httpx.AsyncClient,
        endpoint: str,
        method: str,
        params: Mapping[str, object],
        *,
        stream: bool = True,
    ) -> AsyncIterator[httpx.Response]:
        payload = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
        headers = {"A2A-Version": PROTOCOL_VERSION, "Content-Type": "application/json"}
        if stream:
            headers["Accept"] = "text/event-stream"
        request = http.build_request(
            "POST", endpoint, content=msgspec.json.encode(payload), headers=headers
        )
        with self._translated():
            response = await http.send(request, stream=True)
        try:
            if response.status_code != 200:
                await self._refused(response)
            yield response
        finally:
            await response.aclose()

    async def _refused(self, response: httpx.Response) -> None:
        with self._translated():
            body = await read_body(response, _MAX_ERROR_BYTES, cut=True)
        text = self.scrub(body.decode("utf-8", "replace")).strip()
        raise A2AToolError(
            f"the A2A agent at {self.where()} answered HTTP {response.status_code}"
            + (f": {text}" if text else "")
        )

    async def _read(self, response: httpx.Response) -> bytes:
        with self._translated():
            return await read_body(response, self.max_response_bytes)

    def _result(self, body: bytes, kind: type[T]) -> T:
        """The result of a JSON-RPC reply, or `A2AToolError` for an error or garbage."""
        with self._translated():
            envelope = _decode(body, _wire.Envelope[kind])  # type: ignore[valid-type]
        if envelope.error is not None:
            raise A2AToolError(
                f"the A2A agent at {self.where()} refused the call: "
                f"{self.scrub(envelope.error.message)[:2000]} "
                f"(JSON-RPC error {envelope.error.code})"
            )
        if envelope.jsonrpc != "2.0" or envelope.result is None:
            raise A2AToolError(
                f"the A2A agent at {self.where()} sent a reply that is not JSON-RPC 2.0"
            )
        result: T = envelope.result
        return result

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """The ways a peer's reply goes wrong, as `A2AToolError`s that say which."""
        where = self.where()
        try:
            yield
        except httpx.TimeoutException:
            raise A2AToolError(
                f"the A2A agent at {where} sent nothing for {self.read_timeout} s"
            ) from None
        except httpx.HTTPError as exc:
            raise A2AToolError(
                f"the A2A agent at {where} could not be reached: "
                f"{self.scrub(f'{type(exc).__name__}: {exc}')}"
            ) from None
        except TooLarge as exc:
            raise A2AToolError(f"the A2A agent at {where} sent too much: {exc}") from None
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise A2AToolError(
                f"the A2A agent at {where} sent a reply that is not A2A's JSON-RPC: "
                f"{self.scrub(str(exc))}"
            ) from None


class _Outcome:
    """What a task's events have said so far: its id, state, artifacts and messages."""

    __slots__ = ("answer", "artifacts", "state", "status_text", "task_id")

    def __init__(self) -> None:
        self.task_id = ""
        self.state = ""
        self.status_text = ""
        self.artifacts: dict[str, list[str]] = {}  # artifact id -> its text, in pieces
        self.answer: str | None = None  # a Message in place of a task

    @property
    def finished(self) -> bool:
        return self.answered or self.state in _wire.TERMINAL

    @property
    def answered(self) -> bool:
        return self.answer is not None

    def apply(self, event: _wire.Event) -> bool:
        """Take in one event; True once the task has ended (or the agent answered)."""
        if event.message is not None:
            self.answer = _text(event.message.parts)
        elif event.task is not None:
            self.task_id = event.task.id or self.task_id
            self.artifacts = {a.artifact_id: [_text(a.parts)] for a in event.task.artifacts}
            self._status(event.task.status)
        elif event.status_update is not None:
            self.task_id = event.status_update.task_id or self.task_id
            self._status(event.status_update.status)
        elif event.artifact_update is not None:
            update = event.artifact_update
            self.task_id = update.task_id or self.task_id
            pieces = self.artifacts.setdefault(update.artifact.artifact_id, [])
            if not update.append:
                pieces.clear()
            pieces.append(_text(update.artifact.parts))
        return self.finished

    def _status(self, status: _wire.Status) -> None:
        self.state = status.state or self.state
        if status.message is not None:
            self.status_text = _text(status.message.parts)

    def text(self) -> str:
        if self.answer is not None:
            return self.answer
        if self.artifacts:
            return "\n".join("".join(pieces) for pieces in self.artifacts.values())
        return self.status_text


def _decode(body: bytes, kind: type[T]) -> T:
    """*body* as JSON of *kind*; a lone surrogate's escape in a string is U+FFFD.

    msgspec refuses such an escape (valid JSON all the same: a string cut in the
    middle of a pair), so a body holding one is read by the stdlib, scrubbed, then
    converted.

    Raises:
        msgspec.DecodeError: not JSON, or not of *kind* (a ValidationError).
        UnicodeDecodeError: not UTF-8.
    """
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.DecodeError:
        if not escapes_surrogate(body):
            raise
    try:
        value = loads(body)
    except (ValueError, RecursionError) as exc:
        raise msgspec.DecodeError(str(exc)) from None
    return msgspec.convert(value, kind)


def _text(parts: tuple[_wire.Part, ...]) -> str:
    """Parts as the model reads them: text as it is, data as JSON, files as a note."""
    out: list[str] = []
    for part in parts:
        if part.text is not None:
            out.append(part.text)
        elif part.data is not None:
            out.append(msgspec.json.encode(part.data).decode())
        elif part.raw is not None or part.url is not None:
            name = part.filename or "a file"
            out.append(f"[{name} ({part.media_type or 'unknown type'}): not shown]")
    return "".join(out)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[cut: the answer is {len(text)} characters, {limit} are shown]"


def _user_message(text: str) -> dict[str, object]:
    return {
        "messageId": f"agentrio-{next(_ids)}",
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }


def _secrets(url: str, headers: Mapping[str, str]) -> dict[str, str]:
    found = [*headers.values(), *url_secrets(url)]
    return {str(i): value for i, value in enumerate(found)}


def _check_url(what: str, url: object) -> str:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        shown = redact_url(url) if isinstance(url, str) else type(url).__name__
        raise InvalidArgument(f"{what} must be an http:// or https:// URL, got {shown!r}")
    return url


def _check_headers(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"headers must be a mapping of str to str, got {value!r}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            # The key is shown, never the value: values may be secrets.
            raise InvalidArgument(f"headers must map str to str; the entry {key!r} does not")
    return dict(value)


def _card_url(url: str) -> str:
    return url if url.endswith(".json") else url.rstrip("/") + CARD_PATH


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def _read_card(link: _Link, body: bytes, where: httpx.URL) -> A2ACard:
    try:
        card = _decode(body, _wire.Card)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise A2AConnectError(
            f"the agent card at {link.where()} is not A2A's: {link.scrub(str(exc))}"
        ) from None
    endpoint = None
    for interface in card.supported_interfaces:
        if (
            interface.url
            and interface.protocol_binding.upper() == "JSONRPC"
            and interface.protocol_version.split(".")[0] == PROTOCOL_VERSION.split(".")[0]
        ):
            endpoint = where.join(interface.url)
            break
    if endpoint is None or not _same_origin(endpoint, where) or endpoint.scheme != where.scheme:
        why = "on its own host" if endpoint is not None else ""
        raise A2AConnectError(
            f"the agent card at {link.where()} offers no JSON-RPC interface of A2A "
            f"{PROTOCOL_VERSION} {why}".rstrip()
        )
    skills = tuple(
        A2ASkill(link.scrub(s.id), link.scrub(s.name), link.scrub(s.description))
        for s in card.skills
    )
    return A2ACard(
        link.scrub(card.name),
        link.scrub(card.description),
        str(endpoint),
        card.capabilities.streaming,
        skills,
    )


async def _fetch(link: _Link, timeout: float, max_bytes: int) -> A2ACard:
    where = httpx.URL(_card_url(link.url))
    try:
        with trio.fail_after(timeout):
            async with link.client() as http:
                request = http.build_request("GET", where, headers={"A2A-Version": "1.0"})
                with link._translated():
                    response = await http.send(request, stream=True)
                try:
                    if response.status_code != 200:
                        await link._refused(response)
                    body = await link._read(response)
                finally:
                    await response.aclose()
    except trio.TooSlowError:
        raise A2AConnectError(
            f"the agent card at {link.where()} did not come within {timeout} s"
        ) from None
    except A2AToolError as exc:
        raise A2AConnectError(str(exc).replace("A2A agent", "agent card", 1)) from None
    return _read_card(link, body, where)


async def fetch_card(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    max_bytes: int = 1024 * 1024,
) -> A2ACard:
    """Read a remote agent's card: its name, description, skills and JSON-RPC endpoint.

    Example:

        card = await agentrio.a2a.fetch_card("http://127.0.0.1:8000")
        spec = agentrio.AgentSpec("boss", model, tools=[agentrio.a2a.a2a_tool(card=card)])

    Args:
        url: the agent's URL (its card is at ``<url>/.well-known/agent-card.json``),
            or the card's own URL (ending in ``.json``).
        headers: HTTP headers for the request (``Authorization``...). Values
            are never shown.
        timeout: seconds for the whole request.
        max_bytes: the largest card read.

    Returns:
        The [`A2ACard`][agentrio.a2a.A2ACard].

    Raises:
        InvalidArgument: a bad argument, named in the message.
        A2AConnectError: the card could not be read, or is not one agentrio can use.
    """
    _check_url("url", url)
    check_seconds("timeout", timeout)
    check_int("max_bytes", max_bytes, 1)
    link = _Link(url, None, _check_headers(headers), timeout, timeout, max_bytes, 1)
    hide_in_httpx_log(url_secrets(url))
    return await _fetch(link, float(timeout), max_bytes)


class A2ATool(Tool):
    """A remote A2A agent as an agentrio [`Tool`][agentrio.Tool], from
    [`a2a_tool`][agentrio.a2a.a2a_tool].

    The model calls it with one argument, ``message``: the request for the
    remote agent, which knows nothing of the calling agent's conversation
    (each call is a new A2A task, in a context of its own). The result is
    the text of the task's artifacts (data parts as JSON, files as a note),
    cut to ``max_result_chars``; a task that does not complete is an
    [`A2AToolError`][agentrio.a2a.A2AToolError], a `failed` result.

    Attributes:
        url: the agent's URL, its credentials shown as ``[redacted]``.
        card: its card, once read (``None`` until the first call, unless
            given).
    """

    __slots__ = ("_link",)

    def __init__(self, link: _Link, name: str, description: str, idempotent: bool) -> None:
        super().__init__(_message_only, name=name, description=description, idempotent=idempotent)
        self._link = link
        self.fn = link.ask

    @property
    def url(self) -> str:
        """The agent's URL, with its credentials shown as ``[redacted]``."""
        return self._link.where()

    @property
    def card(self) -> A2ACard | None:
        """The agent's card, once read."""
        return self._link.card

    def __repr__(self) -> str:
        return f"<A2ATool {self.name!r} at {self._link.where()!r}>"

    def validate(self, arguments: dict[str, object]) -> dict[str, object]:
        """*arguments* checked: one ``message``, a str.

        Raises:
            ToolArgumentsInvalid: anything else.
        """
        kwargs = super().validate(arguments)
        if not isinstance(kwargs.get("message"), str):
            raise ToolArgumentsInvalid(f"invalid arguments for {self.name!r}: expected a message")
        return kwargs

    def invoke(self, kwargs: dict[str, object]) -> Awaitable[object]:
        """Send the message to the remote agent: an awaitable of the text the model sees."""
        message = kwargs["message"]
        assert isinstance(message, str)
        return self._link.ask(message)


async def _message_only(message: str) -> str:
    """The schema of an A2ATool's one argument.

    Args:
        message: the request for the remote agent, complete in itself: it
            does not see this conversation.
    """
    return message


def _tool_name(name: str | None, card: A2ACard | None) -> str:
    if name is not None:
        return name
    if card is None:
        raise InvalidArgument("a2a_tool() needs name= or card= (from fetch_card) to name the tool")
    cleaned = _NOT_IN_NAME.sub("_", card.name)[:64]
    if not cleaned or not (cleaned[0].isalpha() or cleaned[0] == "_"):
        cleaned = ("agent_" + cleaned)[:64]
    return cleaned


def _description(description: str | None, card: A2ACard | None, where: str) -> str:
    if description is not None:
        return description
    if card is None:
        return f"Ask the agent at {where} (over A2A)."
    skills = "; ".join(
        f"{s.name}: {s.description}" if s.description else s.name for s in card.skills
    )
    text = card.description or f"The agent {card.name!r}, over A2A."
    return f"{text} Skills: {skills}." if skills else text


def a2a_tool(
    url: str | None = None,
    *,
    card: A2ACard | None = None,
    name: str | None = None,
    description: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    read_timeout: float = 60.0,
    max_response_bytes: int = 16 * 1024 * 1024,
    max_result_chars: int = 100_000,
    idempotent: bool = False,
) -> A2ATool:
    """A remote A2A agent as a tool: the model sends it a message, it answers with text.

    Give the agent's *url* (its card is read on the first call) or its
    *card* (from [`fetch_card`][agentrio.a2a.fetch_card], which also names
    and describes the tool). Each call sends one message as a new task
    (``SendStreamingMessage`` if the card says the agent streams, else
    ``SendMessage``) and returns the text of what the task made. The call
    runs in the calling agent's tool call: its tool timeout, its phase's
    deadline and its cancellation end the call (and a streamed task the
    call gave up on is cancelled on the remote side, ``CancelTask``), and it
    counts against the caller's budget as any tool call does.

    Example:

        card = await agentrio.a2a.fetch_card("http://127.0.0.1:8000")
        researcher = agentrio.a2a.a2a_tool(card=card)
        spec = agentrio.AgentSpec("boss", model, tools=[researcher])

    Args:
        url: the agent's URL (where its card is: ``<url>/.well-known/agent-card.json``).
        card: its card, from ``fetch_card`` (then *url* may be left out).
        name: the tool's name (default: the card's name, made a valid tool name).
        description: what the model is told (default: the card's
            description and skills).
        headers: HTTP headers for every request (``Authorization``...).
            Values are never shown.
        timeout: seconds for a whole call (the card's reading included).
        read_timeout: seconds the agent may stay silent: to start its
            answer, and between two pieces of it.
        max_response_bytes: the most a reply (or a task's whole stream) may hold.
        max_result_chars: an answer longer than this is cut, with a note saying so.
        idempotent: a call may be made twice (see [`Tool`][agentrio.Tool]).

    Returns:
        The [`A2ATool`][agentrio.a2a.A2ATool].

    Raises:
        InvalidArgument: a bad argument, named in the message.
    """
    if card is not None and not isinstance(card, A2ACard):
        raise InvalidArgument(f"card must be an A2ACard (from fetch_card), got {card!r}")
    if url is None:
        if card is None:
            raise InvalidArgument("a2a_tool() needs url= or card=")
        url = card.endpoint
    _check_url("url", url)
    check_seconds("timeout", timeout)
    check_seconds("read_timeout", read_timeout)
    check_int("max_response_bytes", max_response_bytes, 1)
    check_int("max_result_chars", max_result_chars, 1)
    if description is not None and not isinstance(description, str):
        raise InvalidArgument(f"description must be a str or None, got {description!r}")
    link = _Link(
        url,
        card,
        _check_headers(headers),
        float(timeout),
        float(read_timeout),
        max_response_bytes,
        max_result_chars,
    )
    hide_in_httpx_log(url_secrets(url))
    tool_name = _tool_name(name, card)
    return A2ATool(link, tool_name, _description(description, card, link.where()), idempotent)
