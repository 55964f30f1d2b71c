"""An agentrio agent served as an A2A agent: the SDK's Starlette routes, on the asyncio host.

The `a2a-sdk` serves A2A's JSON-RPC on Starlette (asyncio); agentrio runs on
Trio. The bridge is the asyncio host (``open_runtime_sync``): the SDK calls
`_Executor.execute` in its event loop, which spawns agents and streams phases
with the `BlockingRuntime`'s ``a``-methods, each awaited without blocking the
loop, and cancelled with its caller.

Each A2A context is one agent (``ctx-<n>`` under a supervisor of the app's,
``a2a.<spec name>``), so the messages of one context are phases of one
conversation; at most *max_contexts* are kept, the least recently used idle
ones stopped first. Each message is one task and one phase: its text deltas
go out as appends to the task's ``answer`` artifact, and the final text
replaces it whole when the phase ends (so a task read later holds the answer in one
part). A task's cancel closes the phase's stream, which cancels the phase in
the runtime; the task then ends ``canceled``.

This module imports the SDK, so `agentrio.a2a` imports it only when its
server is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import msgspec
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf import json_format, struct_pb2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as ASGIMessage

from .._text import scrub
from ..agents.budgets.budget import Budget
from ..agents.loop.spec import AgentSpec
from ..agents.tools.tool import Tool
from ..errors import AgentrioError, DuplicateName
from ..events import RunDone, TextDelta
from ..host import BlockingAgent, BlockingRunStream, BlockingRuntime
from ..messages import PhaseResult
from ..supervisors.ref import SupervisorRef
from ._client import CARD_PATH, PROTOCOL_VERSION

__all__ = ["build_app", "build_card"]

_TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
# A phase that ended so has an answer: the task completed. "cancelled" and
# "stop_requested" cancel it; the rest (an error, the budget, the timeout, a
# refusal...) fail it.
_ANSWERED = frozenset({"done", "max_iterations", "stalled", "max_output_tokens"})
_CANCELLED = frozenset({"cancelled", "stop_requested"})
# How long a cancel waits for its phase to end before it lets the SDK cancel the task.
_CANCEL_WAIT = 30.0


def _skills_of(spec: AgentSpec[Any], description: str) -> list[AgentSkill]:
    skills = []
    for tool in spec.tools:
        name = tool.name if isinstance(tool, Tool) else str(tool)
        about = tool.description if isinstance(tool, Tool) else ""
        skills.append(AgentSkill(id=name, name=name, description=about or name, tags=["tool"]))
    if not skills:
        skills.append(
            AgentSkill(id=spec.name, name=spec.name, description=description, tags=["agent"])
        )
    return skills


def build_card(
    spec: AgentSpec[Any],
    *,
    url: str | None,
    description: str | None,
    skills: Sequence[AgentSkill] | None,
    version: str,
    streaming: bool,
) -> AgentCard:
    """The agent card of *spec*; its JSON-RPC interface at *url*, if given."""
    about = description if description is not None else f"The agentrio agent {spec.name!r}."
    card = AgentCard(
        name=spec.name,
        description=about,
        version=version,
        capabilities=AgentCapabilities(streaming=streaming, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=list(skills) if skills is not None else _skills_of(spec, about),
    )
    if url is not None:
        card.supported_interfaces.append(
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION)
        )
    return card


def _prompt(message: Message | None) -> str:
    """An A2A message as a user turn: its text, its data parts as JSON, a note for a file."""
    if message is None:
        return ""
    pieces = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            data = json_format.MessageToDict(part.data)
            pieces.append(msgspec.json.encode(data).decode())
        elif kind in ("raw", "url"):
            name = part.filename or "a file"
            pieces.append(f"[{name} ({part.media_type or 'unknown type'}): not shown]")
    return scrub("\n".join(pieces))


def _said(text: str) -> Message:
    return Message(message_id=uuid.uuid4().hex, parts=[Part(text=text)])


def _output_part(result: PhaseResult[Any]) -> Part | None:
    """A typed answer's value as a data part (None for a str, or a value JSON cannot hold)."""
    if result.output is None or isinstance(result.output, str):
        return None
    try:
        value = json_format.ParseDict(msgspec.to_builtins(result.output), struct_pb2.Value())
    except (TypeError, ValueError, json_format.ParseError):
        return None
    return Part(data=value)


class _Running:
    """A task's phase, for its cancel: its stream, once open."""

    __slots__ = ("cancelled", "done", "stream")

    def __init__(self) -> None:
        self.stream: BlockingRunStream[Any] | None = None
        self.cancelled = False
        self.done = asyncio.Event()


class _Contexts:
    """The agents of the A2A contexts, least recently used first."""

    def __init__(
        self, rt: BlockingRuntime, spec: AgentSpec[Any], budget: Budget | None, limit: int
    ) -> None:
        self.rt = rt
        self.spec = spec
        self.budget = budget
        self.limit = limit
        self.agents: OrderedDict[str, BlockingAgent[Any]] = OrderedDict()
        self.busy: dict[str, int] = {}
        self.team: SupervisorRef | None = None
        self.lock = asyncio.Lock()
        self.ids = itertools.count(1)

    async def acquire(self, context_id: str) -> BlockingAgent[Any]:
        """The agent of *context_id* (spawned if new), held until `release`."""
        async with self.lock:
            if self.team is None:
                self.team = await self._spawn_team()
            agent = self.agents.get(context_id)
            if agent is None:
                agent = await self.rt.aspawn_agent(
                    self.spec, under=self.team, name=f"ctx-{next(self.ids)}", budget=self.budget
                )
                self.agents[context_id] = agent
            self.agents.move_to_end(context_id)
            self.busy[context_id] = self.busy.get(context_id, 0) + 1
            await self._evict()
            return agent

    def release(self, context_id: str) -> None:
        left = self.busy.pop(context_id, 1) - 1
        if left:
            self.busy[context_id] = left

    async def _spawn_team(self) -> SupervisorRef:
        spawn = self.rt.runtime.spawn_supervisor
        for n in itertools.count(1):
            name = f"a2a.{self.spec.name}" + (f".{n}" if n > 1 else "")
            try:
                team: SupervisorRef = await self.rt.acall(functools.partial(spawn, name=name))
            except DuplicateName:
                continue
            return team
        raise AssertionError("unreachable")

    async def _evict(self) -> None:
        for context_id in list(self.agents):
            if len(self.agents) <= self.limit:
                return
            if not self.busy.get(context_id):
                await self.agents.pop(context_id).astop()


class _Executor(AgentExecutor):
    """The SDK's AgentExecutor for one spec: each task a phase of its context's agent."""

    def __init__(self, contexts: _Contexts, timeout: float | None) -> None:
        self.contexts = contexts
        self.timeout = timeout
        self.running: dict[str, _Running] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            submitted = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(
                Task(id=task_id, context_id=context_id, status=submitted, history=history)
            )
        prompt = _prompt(context.message)
        if not prompt.strip():
            await updater.reject(_said("the message holds no text for the agent"))
            return
        running = self.running[task_id] = _Running()
        try:
            await updater.start_work()
            agent = await self.contexts.acquire(context_id)
            try:
                result, artifact_id = await self._run(agent, prompt, updater, running)
            finally:
                self.contexts.release(context_id)
            await _finish(updater, result, artifact_id)
        except AgentrioError as exc:  # the runtime stopped, the agent crashed...
            await updater.failed(_said(f"{type(exc).__name__}: {exc}"))
        finally:
            self.running.pop(task_id, None)
            running.done.set()

    async def _run(
        self, agent: BlockingAgent[Any], prompt: str, updater: TaskUpdater, running: _Running
    ) -> tuple[PhaseResult[Any] | None, str]:
        """Run the phase, its deltas relayed; its result (None: cut short) and artifact id."""
        artifact_id = uuid.uuid4().hex
        async with await agent.astream(prompt, timeout=self.timeout) as stream:
            running.stream = stream
            if running.cancelled:  # (a cancel came before the stream)
                await stream.aclose()
            return await _relay(stream, updater, artifact_id), artifact_id

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task's phase, and wait for it to end (it then ends the task ``canceled``)."""
        running = self.running.get(context.task_id or "")
        if running is None:
            return  # not running here: the SDK ends the task itself
        running.cancelled = True
        if running.stream is not None:
            await running.stream.aclose()  # cancels the run, and waits for its end
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CANCEL_WAIT):
                await running.done.wait()


async def _relay(
    stream: BlockingRunStream[Any], updater: TaskUpdater, artifact_id: str
) -> PhaseResult[Any] | None:
    """The run's text deltas as appends to the answer artifact; its result (None: cut short)."""
    result: PhaseResult[Any] | None = None
    sent = False
    async for item in stream:
        if isinstance(item, TextDelta) and item.text:
            await updater.add_artifact(
                [Part(text=item.text)], artifact_id=artifact_id, name="answer", append=sent
            )
            sent = True
        elif isinstance(item, RunDone):
            result = item.result
    return result


async def _finish(updater: TaskUpdater, result: PhaseResult[Any] | None, artifact_id: str) -> None:
    if result is None or result.stop_reason in _CANCELLED:
        await updater.cancel()
    elif result.stop_reason in _ANSWERED:
        parts = [Part(text=result.final_text)]
        data = _output_part(result)
        if data is not None:
            parts.append(data)
        await updater.add_artifact(
            parts, artifact_id=artifact_id, name="answer", append=False, last_chunk=True
        )
        await updater.complete()
    else:
        why = f"the phase ended {result.stop_reason}"
        await updater.failed(_said(f"{why}: {result.error}" if result.error else why))


class _TaskStore(InMemoryTaskStore):
    """The SDK's in-memory store, holding at most *limit* tasks (the oldest ended ones go)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.order: OrderedDict[str, tuple[bool, ServerCallContext]] = OrderedDict()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await super().save(task, context)
        self.order[task.id] = (task.status.state in _TERMINAL, context)
        for task_id, (ended, owner) in list(self.order.items()):
            if len(self.order) <= self.limit:
                break
            if ended:
                del self.order[task_id]
                await self.delete(task_id, owner)


class _BodyLimit:
    """ASGI middleware: a request body past *limit* bytes gets a 413, read no further.

    The body is read here, within the limit, before the app sees it (the SDK reads
    a body whole, with no limit, and answers a failed read as a JSON-RPC error).
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        body = await self._body(receive) if length.isdigit() and int(length) <= self.limit else None
        if body is None:
            text = f"the request body is larger than {self.limit} bytes (or of no valid length)"
            await JSONResponse({"error": text}, status_code=413)(scope, receive, send)
            return
        replayed = False

        async def replay() -> ASGIMessage:
            nonlocal replayed
            if replayed:  # (after the body: what the server says next, a disconnect)
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _body(self, receive: Receive) -> bytes | None:
        """The whole body, or None past the limit (or if the client went away)."""
        pieces: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            piece = message.get("body", b"")
            size += len(piece)
            if size > self.limit:
                return None
            pieces.append(piece)
            if not message.get("more_body", False):
                return b"".join(pieces)


def build_app(
    rt: BlockingRuntime,
    spec: AgentSpec[Any],
    *,
    url: str | None,
    description: str | None,
    skills: Sequence[AgentSkill] | None,
    version: str,
    streaming: bool,
    rpc_path: str,
    budget: Budget | None,
    timeout: float | None,
    max_contexts: int,
    max_tasks: int,
    max_request_bytes: int,
) -> Starlette:
    """The Starlette app: the card at CARD_PATH, the JSON-RPC endpoint at *rpc_path*."""
    # (The handler's copy needs an interface: with no url, the path stands for it.)
    card = build_card(
        spec,
        url=url if url is not None else rpc_path,
        description=description,
        skills=skills,
        version=version,
        streaming=streaming,
    )
    executor = _Executor(_Contexts(rt, spec, budget, max_contexts), timeout)
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=_TaskStore(max_tasks), agent_card=card
    )

    async def card_endpoint(request: Request) -> Response:
        served = card
        if url is None:  # the endpoint is where this request came: the app's own URL
            served = AgentCard()
            served.CopyFrom(card)
            here = str(request.url.replace(query=None, fragment=None)).removesuffix(CARD_PATH)
            served.supported_interfaces[0].url = here + rpc_path
        return JSONResponse(agent_card_to_dict(served))

    routes = [
        Route(CARD_PATH, card_endpoint, methods=["GET"]),
        *create_jsonrpc_routes(handler, rpc_path),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_BodyLimit, limit=max_request_bytes)])
