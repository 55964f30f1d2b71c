"""AG-UI: an agent's runs streamed to a web front-end as AG-UI events, from a Starlette app.

It needs the `agui` extra (`pip install 'agentrio[agui]'`: ag-ui-protocol and
Starlette; serve the app with uvicorn); `import agentrio` imports neither
this module nor them. [`agui_app`][agentrio.agui.agui_app] is a Starlette
app, on the asyncio host (a [`BlockingRuntime`][agentrio.types.BlockingRuntime]
from [`open_runtime_sync`][agentrio.open_runtime_sync]), whose one endpoint
takes an AG-UI ``RunAgentInput`` (POST, JSON) and answers with the run as
server-sent AG-UI events, each made and encoded by ag-ui-protocol's own types:

| The run's stream | AG-UI events |
| --- | --- |
| its start | ``RUN_STARTED`` (the input's thread and run ids) |
| ``TextDelta`` | ``TEXT_MESSAGE_START`` (once per reply), ``TEXT_MESSAGE_CONTENT`` |
| the reply's end (``TurnEnded``, a tool call) | ``TEXT_MESSAGE_END`` |
| ``ToolStarted`` | ``TOOL_CALL_START`` |
| ``ToolEnded`` | ``TOOL_CALL_ARGS``, ``TOOL_CALL_END``, ``TOOL_CALL_RESULT`` (previews) |
| ``PartialOutput`` (a typed run) | ``STATE_SNAPSHOT``: ``{"output": the answer so far}`` |
| ``RunDone`` | ``RUN_FINISHED`` with ``result``; ``RUN_ERROR`` if it ended ``"error"`` |

Each AG-UI thread is a conversation with an agent of its own, spawned from
the spec on the thread's first run and kept for the next (at most
*max_threads*: the least recently used idle one is stopped to make room).
A run is one phase of it, on the input's last message, which must be the
user's. A client that goes away cancels the phase. The how-to is
[How to stream runs to a web front-end (AG-UI)][how-to-stream-runs-to-a-web-front-end-ag-ui].
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import anyio
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError

from ._checks import check_int, check_seconds
from ._serving import BoundedBody, refuse, to_json
from ._text import scrub
from .agents.loop.spec import AgentSpec
from .agents.loop.stream import PartialOutput, RunDone, RunItem
from .errors import ActorError, InvalidArgument
from .host import BlockingAgent, BlockingRuntime
from .messages import PhaseResult, TextDelta, ToolEnded, ToolStarted, TurnEnded

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["agui_app"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_MAX_THREADS = 1000
# The longest text taken from the input's messages (the last one, and the
# earlier ones given to a thread's new agent).
DEFAULT_MAX_PROMPT_CHARS = 100_000
# The longest thread or run id taken (they name agents and events).
_MAX_ID_CHARS = 200

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def agui_app(
    host: BlockingRuntime,
    spec: AgentSpec[Any],
    *,
    max_threads: int = DEFAULT_MAX_THREADS,
    timeout: float | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
) -> Starlette:
    """A Starlette app that runs *spec*'s agents for AG-UI clients: POST a RunAgentInput to ``/``.

    Serve it with uvicorn, or mount it in a FastAPI or Starlette app
    (``app.mount("/agent", agui_app(rt, spec))``). Its runs happen in *host*,
    whose lifetime is yours (open it in your app's lifespan). A bad request
    gets HTTP 400 (not a RunAgentInput, or its last message is not the
    user's), 413 (a body over *max_body_bytes*, a message over
    *max_prompt_chars*), 408 (a body slower than *body_timeout*) or 503 (all
    *max_threads* threads are running), each with a JSON body
    ``{"error": "InvalidArgument", "message": ...}``; a good one gets the
    run's events, ``text/event-stream``.

    Example:

        rt = agentrio.open_runtime_sync()
        app = agentrio.agui.agui_app(rt, agentrio.AgentSpec("assistant", "openai:gpt-5-mini"))
        uvicorn.run(app, host="127.0.0.1", port=8000)

    Args:
        host: the [`BlockingRuntime`][agentrio.types.BlockingRuntime] the runs happen in.
        spec: the agent's spec: each thread's agent is spawned from it.
        max_threads: the threads whose agents are kept, an int >= 1.
        timeout: each run's timeout in seconds (default: the spec's).
        max_body_bytes: the largest request body, an int >= 1.
        body_timeout: seconds a request's body may take to arrive.
        max_prompt_chars: the most characters of text taken from the
            input's messages, an int >= 1.

    Returns:
        The ``starlette.applications.Starlette`` app.

    Raises:
        InvalidArgument: a bad argument, named.
    """
    from starlette.applications import Starlette
    from starlette.routing import Route

    check_int("max_body_bytes", max_body_bytes, 1)
    check_seconds("body_timeout", body_timeout)
    endpoint = _Endpoint(host, spec, max_threads, timeout, max_prompt_chars)
    bounded = BoundedBody(endpoint, max_bytes=max_body_bytes, timeout=body_timeout)
    return Starlette(routes=[Route("/", bounded, methods=["POST"])])


class _Endpoint:
    """The ASGI endpoint: the body checked, then the run streamed as it goes."""

    def __init__(
        self,
        host: BlockingRuntime,
        spec: AgentSpec[Any],
        max_threads: int,
        timeout: float | None,
        max_prompt_chars: int,
    ) -> None:
        if not isinstance(host, BlockingRuntime):
            raise InvalidArgument(
                f"host must be a BlockingRuntime (open_runtime_sync()), got {type(host).__name__}"
            )
        if not isinstance(spec, AgentSpec):
            raise InvalidArgument(f"spec must be an AgentSpec, got {type(spec).__name__}")
        check_seconds("timeout", timeout, optional=True)
        self.threads = _Threads(host, spec, check_int("max_threads", max_threads, 1))
        self.options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        self.max_prompt_chars = check_int("max_prompt_chars", max_prompt_chars, 1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()  # (the whole body: BoundedBody read it, within bounds)
        if message["type"] != "http.request":
            return  # gone before its body arrived: nobody to answer
        body: bytes = message.get("body", b"")
        try:
            run_input = _parse(body)
            prompt = _prompt(run_input, self.max_prompt_chars)
        except _Refused as exc:
            await refuse(send, exc.status, str(exc))
            return
        thread = await self.threads.enter(run_input.thread_id)
        if thread is None:
            why = f"all {self.threads.capacity} threads are running: try again later"
            await refuse(send, 503, why)
            return
        try:
            if thread.new and prompt.earlier:
                prompt.text = f"{prompt.earlier}\n\n{prompt.text}"
            await _serve(thread, run_input, prompt.text, self.options, receive, send)
        finally:
            self.threads.leave(run_input.thread_id, thread)


class _Refused(Exception):
    """A request refused: its HTTP status, and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _parse(body: bytes) -> RunAgentInput:
    try:
        run_input = RunAgentInput.model_validate_json(body)
    except ValidationError as exc:
        # (The errors' places and messages, not the input they quote: that is the peer's.)
        first = exc.errors(include_input=False, include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        raise _Refused(
            400,
            f"not an AG-UI RunAgentInput: {where}: {first['msg']} ({exc.error_count()} error(s))",
        ) from None
    for what, value in (("threadId", run_input.thread_id), ("runId", run_input.run_id)):
        if not value or len(value) > _MAX_ID_CHARS:
            raise _Refused(400, f"{what} must be 1 to {_MAX_ID_CHARS} characters")
    return run_input


class _Prompt:
    """The run's user message, and the conversation before it as text."""

    def __init__(self, text: str, earlier: str) -> None:
        self.text = text
        self.earlier = earlier


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    texts = []
    parts: list[Any] = content if isinstance(content, list) else [content]
    for part in parts:
        kind = getattr(part, "type", None)
        if kind != "text":
            raise _Refused(400, f"only text is taken in a message, got a {kind!r} part")
        texts.append(part.text)
    return "\n".join(texts)


def _prompt(run_input: RunAgentInput, max_chars: int) -> _Prompt:
    messages = run_input.messages
    if not messages or not isinstance(messages[-1], UserMessage):
        raise _Refused(400, "the last of the input's messages must be the user's")
    text = scrub(_text_of(messages[-1].content))
    lines = []
    for message in messages[:-1]:
        said = _text_of(getattr(message, "content", None)) if message.role != "tool" else ""
        if said and message.role in ("user", "assistant"):
            lines.append(f"{message.role}: {scrub(said)}")
    earlier = "Earlier in this conversation:\n" + "\n".join(lines) if lines else ""
    if len(text) + len(earlier) > max_chars:
        raise _Refused(413, f"the input's messages hold over {max_chars} characters of text")
    return _Prompt(text, earlier)


# -- threads: an agent each ----------------------------------------------------------------


class _Thread:
    __slots__ = ("agent", "broken", "new", "runs")

    def __init__(self, agent: BlockingAgent[Any]) -> None:
        self.agent = agent
        self.new = True  # (until its first run has been given)
        self.runs = 0  # its runs under way
        self.broken = False  # its agent stopped or crashed: the thread starts again


class _Threads:
    """The threads' agents, the least recently used first; at most *capacity*.

    (asyncio: one event loop runs every method, so no lock is needed beyond
    the order of its awaits, which are each marked.)
    """

    def __init__(self, host: BlockingRuntime, spec: AgentSpec[Any], capacity: int) -> None:
        self.host = host
        self.spec = spec
        self.capacity = capacity
        self.threads: collections.OrderedDict[str, _Thread] = collections.OrderedDict()
        self.numbers = itertools.count(1)

    async def enter(self, thread_id: str) -> _Thread | None:
        """The thread's agent (spawned if it has none), its run counted; None: no room."""
        thread = self.threads.get(thread_id)
        if thread is not None:
            self.threads.move_to_end(thread_id)
            thread.new = False
            thread.runs += 1
            return thread
        if len(self.threads) >= self.capacity:
            idle = next((k for k, t in self.threads.items() if t.runs == 0), None)
            if idle is None:
                return None
            evicted = self.threads.pop(idle)
            with anyio.CancelScope(shield=True):  # (await: another request may come in)
                await evicted.agent.astop()
        name = f"{self.spec.name}-agui-{next(self.numbers)}"
        with anyio.CancelScope(shield=True):  # (a spawn cut short would leave an agent)
            agent = await self.host.aspawn_agent(self.spec, name=name)  # (await)
        thread = self.threads.setdefault(thread_id, _Thread(agent))
        if thread.agent is not agent:  # another request for it spawned one meanwhile
            with anyio.CancelScope(shield=True):
                await agent.astop()
            thread.new = False
        thread.runs += 1
        return thread

    def leave(self, thread_id: str, thread: _Thread) -> None:
        thread.runs -= 1
        if thread.broken and self.threads.get(thread_id) is thread:
            del self.threads[thread_id]  # (its next run gets a new agent)


# -- the run, as AG-UI events -------------------------------------------------------------


async def _serve(
    thread: _Thread,
    run_input: RunAgentInput,
    prompt: str,
    options: dict[str, Any],
    receive: Receive,
    send: Send,
) -> None:
    """Stream the run's events to the peer; its leaving (a disconnect) cancels the run."""
    encoder = EventEncoder()
    headers = [
        (b"content-type", encoder.get_content_type().encode()),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()  # the peer left: the run is cancelled

        group.start_soon(watch)
        try:
            async for event in _events(thread, run_input, prompt, options):
                chunk = encoder.encode(event).encode()
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # (the server's: the peer's socket is gone)
            pass
        group.cancel_scope.cancel()


async def _events(
    thread: _Thread, run_input: RunAgentInput, prompt: str, options: dict[str, Any]
) -> AsyncIterator[BaseEvent]:
    thread_id, run_id = run_input.thread_id, run_input.run_id
    yield RunStartedEvent(thread_id=thread_id, run_id=run_id)
    events = _Translation(run_id)
    try:
        stream = await thread.agent.astream(prompt, **options)
    except Exception as exc:  # (InvalidArgument, RuntimeClosed...: said, as the run's error)
        thread.broken = isinstance(exc, ActorError)
        yield _run_error(exc)
        return
    try:
        async for item in stream:
            for event in events.of(item):
                yield event
            if isinstance(item, RunDone):
                yield _finished(thread_id, run_id, item.result)
                return
    except Exception as exc:  # ActorStopped, ActorCrashed: after the items before them
        thread.broken = isinstance(exc, ActorError)
        for event in events.close_text():
            yield event
        yield _run_error(exc)
    finally:
        with anyio.CancelScope(shield=True):  # (the only close: a cancelled one would be lost)
            await stream.aclose()


def _run_error(exc: BaseException) -> RunErrorEvent:
    return RunErrorEvent(message=scrub(str(exc))[:2000], code=type(exc).__name__)


def _finished(thread_id: str, run_id: str, result: PhaseResult[Any]) -> BaseEvent:
    if result.stop_reason == "error":
        return RunErrorEvent(message=result.error[:2000], code=result.error_type)
    summary = {
        "stop_reason": result.stop_reason,
        "final_text": result.final_text,
        "output": to_json(result.output),
    }
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id, result=summary)


class _Translation:
    """A run's items as AG-UI events: which text message is open, which calls are."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.message_id: str | None = None  # the text message open, if one is
        self.messages = itertools.count(1)
        self.calls: dict[str, collections.deque[str]] = {}  # tool -> ids, for calls without one
        self.numbers = itertools.count(1)

    def of(self, item: RunItem[Any]) -> list[BaseEvent]:
        match item:
            case TextDelta(text=text):
                return self._text(text)
            case ToolStarted(tool=tool, call_id=call_id):
                call = self._call_id(tool, call_id, start=True)
                start = ToolCallStartEvent(tool_call_id=call, tool_call_name=tool)
                return [*self.close_text(), start]
            case ToolEnded():
                return self._tool_ended(item)
            case TurnEnded():
                return self.close_text()
            case PartialOutput(value=value):
                return [StateSnapshotEvent(snapshot={"output": value})]
        return self.close_text()  # (the RunDone: the run's end follows)

    def _text(self, text: str) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if self.message_id is None:
            self.message_id = f"{self.run_id}-message-{next(self.messages)}"
            events.append(TextMessageStartEvent(message_id=self.message_id, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self.message_id, delta=text))
        return events

    def close_text(self) -> list[BaseEvent]:
        if self.message_id is None:
            return []
        end = TextMessageEndEvent(message_id=self.message_id)
        self.message_id = None
        return [end]

    def _call_id(self, tool: str, call_id: str, *, start: bool) -> str:
        # (Prefixed by the run's id: a model's ids ("call_1") may repeat in a thread.)
        if call_id:
            return f"{self.run_id}-{call_id}"
        pending = self.calls.setdefault(tool, collections.deque())
        if start:
            made = f"{self.run_id}-call-{next(self.numbers)}"
            pending.append(made)
            return made
        return pending.popleft() if pending else f"{self.run_id}-call-{next(self.numbers)}"

    def _tool_ended(self, item: ToolEnded) -> list[BaseEvent]:
        call = self._call_id(item.tool, item.call_id, start=False)
        events: list[BaseEvent] = []
        if item.arguments_preview:
            events.append(ToolCallArgsEvent(tool_call_id=call, delta=item.arguments_preview))
        events.append(ToolCallEndEvent(tool_call_id=call))
        content = (
            item.output_preview if item.status == "ok" else f"[{item.status}] {item.output_preview}"
        )
        events.append(
            ToolCallResultEvent(message_id=f"{call}-result", tool_call_id=call, content=content)
        )
        return events
