"""The node host: a threaded Ray actor running a full agentrio runtime on its own Trio thread.

Ray's async actors are asyncio-only, so a host is a *threaded* actor (sync methods,
a few pool threads) whose constructor starts one thread running ``trio.run`` with an
``open_runtime(...)``. Its Ray methods are thin:

- ``deliver(batch)`` (data) only hands the bytes to the Trio thread
  (``TrioToken.run_sync_soon``, thread-safe) and returns;
- ``poll(cursor, wait)`` (its own group) is the driver's long-poll: it waits, in
  that Ray thread, on a condition the Trio thread signals, for frames bound for
  the driver, and returns those after *cursor* (what the driver has not
  acknowledged: a retried poll gets them again);
- ``ping``, ``spawn``, ``connect``, ``stop`` (the *control* group, which data
  never starves) wait for the Trio thread to do the work.

From the Trio thread, calls out go with ``handle.method.remote(...)``, and their
results come back through `await_ref`: the ref's ``concurrent.futures.Future`` calls
back (in Ray's thread) ``run_sync_soon``, which wakes the waiting task. No
``ray.get`` on the Trio thread, and no OS thread held per pending call.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import msgspec
import ray
import trio

from ..agents.budgets.budget import Budget
from ..agents.durability.deferred import PendingCall
from ..errors import ActorError, AskTimeout, HostLost, InvalidArgument, UnknownName
from ..messages import Event, PhaseResult
from ..runtime import Runtime, open_runtime
from . import _batch
from ._adopt import Adoptions, answer_adopt, host_store  # (ray-survival: a lost host)
from ._batch import (
    Ask,
    Cancel,
    Credit,
    Dedupe,
    Envelope,
    EventOut,
    Failed,
    Frame,
    Item,
    MapRun,
    Outbox,
    Pending,
    Reply,
    Run,
    StopAgent,
    Tell,
    UsageReport,
    WatchEvents,
)
from ._ledger import run_leased

if TYPE_CHECKING:
    from ..agents.loop.ref import AgentRef
    from ..agents.loop.spec import AgentSpec
    from ..agents.observation.otel import OpenTelemetry

__all__ = [
    "HostOptions",
    "HostStatus",
    "NodeHost",
    "await_ref",
    "caller_deadline",
    "current_host",
]

DRIVER = "driver"  # the endpoint name of the cluster's caller
START_TIMEOUT = 60.0  # seconds a host's runtime may take to open
STOP_TIMEOUT = 30.0  # seconds `stop` waits for the Trio thread to end
POLL_MOST = 4096  # frames one poll returns at most
MAX_CREDIT = 4096  # items one Credit frame may grant
DRIVER_EVENTS_MOST = 50_000  # frames queued for the driver past which events are dropped


async def await_ref(ref: ray.ObjectRef[Any]) -> Any:
    """The value of *ref*, awaited from Trio without blocking it or holding a thread.

    Ray completes the ref's ``concurrent.futures.Future`` in one of its own
    threads; its callback hands the wake-up to this Trio run with
    ``run_sync_soon``. Cancelling the wait leaves the Ray task running (Ray
    cannot cancel an actor call): the callers cancel by a message of their own.

    Raises:
        whatever ``ray.get(ref)`` would raise (``RayActorError``...).
    """
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    future = ref.future()

    def wake(_: object) -> None:
        # (A run that is over has nobody waiting.)
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(done.set)

    future.add_done_callback(wake)
    await done.wait()
    return future.result()


@attrs.frozen
class HostOptions:
    """What every host of a cluster opens its runtime with (pickled to the host by Ray)."""

    specs: Mapping[str, Callable[[], AgentSpec[Any]]]
    # A folder (host i owns <store>/host-<i>) or a PostgreSQL DSN (its password: not
    # in the repr).
    store: str | None = attrs.field(default=None, repr=False)
    config: Any = None  # a Config, or the path of an agentrio.toml
    otel: Callable[[], OpenTelemetry] | None = None  # made on the host
    shutdown_timeout: float = 5.0
    flush_seconds: float = _batch.FLUSH_SECONDS
    batch_messages: int = _batch.BATCH_MESSAGES
    ledger: Any = None  # (ray-ledger) the cluster's budget ledger: its actor's handle


class HostStatus(msgspec.Struct, frozen=True):
    """What ``ping`` answers: the host's index, process, node, load and loop lag.

    Attributes:
        index: the host's index in its cluster.
        pid: its process id.
        node_id: its Ray node's id.
        agents: the agents it holds.
        calls: the calls (runs, asks) it is serving.
        lag: seconds the Trio loop took to answer the ping.
        batches: batches it sent to other hosts.
        messages: the messages in them.
        duplicates: messages it received again, and did not apply again.
    """

    index: int
    pid: int
    node_id: str
    agents: int
    calls: int
    lag: float
    batches: int = 0
    messages: int = 0
    duplicates: int = 0


_current: _Host | None = None  # the host of this Ray worker process (one per process)


def current_host() -> _Host | None:
    """The host running in this process, if any (for ``RemoteRef``)."""
    return _current


class _Host:
    """The body of a node host (made a Ray actor by `NodeHost`)."""

    def __init__(self, cluster_id: str, index: int, options: HostOptions) -> None:
        global _current
        self.cluster_id = cluster_id
        self.index = index
        self.name = f"host-{index}"
        self.sender = f"{self.name}/{uuid.uuid4().hex[:12]}"
        self._options = options
        self._peers: list[Any] = []  # the hosts' Ray handles, by index
        self._driver = threading.Condition()
        self._driver_frames: list[Envelope] = []
        self._driver_seq = 0
        self.events_dropped = 0  # events not queued for the driver (it fell behind)
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(
            target=self._thread_main, name=f"agentrio {self.name}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise HostLost(f"{self.name}: its runtime did not open", path="", host=index)
        if self._failure is not None:
            raise self._failure
        _current = self

    # -- the Trio thread --------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            # (ray-ledger: the runtime's root budget leased from the cluster's ledger)
            trio.run(run_leased, self._options.ledger, self.name, self._main, await_ref)
        except BaseException as exc:  # (a failure to open is raised by __init__)
            self._failure = exc
        finally:
            self._ready.set()
            with self._driver:
                self._driver.notify_all()

    def _runtime_options(self) -> dict[str, Any]:
        options = self._options
        kwargs: dict[str, Any] = {
            "config": options.config,
            "shutdown_timeout": options.shutdown_timeout,
        }
        if options.store is not None:  # (ray-survival: a folder, or a PostgreSQL database)
            kwargs["store"] = host_store(options.store, f"{self.cluster_id}/{self.name}")
            kwargs["specs"] = dict(options.specs)
        if options.otel is not None:
            kwargs["otel"] = options.otel()
        return kwargs

    async def _main(self, budget: Budget | None = None) -> None:
        options = self._runtime_options()
        async with open_runtime(**options, budget=budget) as rt, trio.open_nursery() as nursery:
            self._rt: Runtime = rt
            self._nursery = nursery
            self._agents: dict[str, AgentRef[Any]] = {}
            self._calls: dict[tuple[str, int], trio.CancelScope] = {}
            self._credits: dict[tuple[str, int], trio.Semaphore] = {}
            self._outboxes: dict[str, Outbox] = {}
            self._pending = Pending()
            self._pending_to: dict[int, str] = {}  # call -> the endpoint it waits on
            self._dedupe = Dedupe()
            self._watching = False
            self._adoptions: Adoptions | None = None  # (made by the first `adopt`)
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _in_trio(self, fn: Callable[..., object], *args: object) -> None:
        """Run *fn(*args)* soon on the Trio thread (from any thread)."""
        if self._token is None:
            raise HostLost(f"{self.name} has stopped", path="", host=self.index)
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            raise HostLost(f"{self.name} has stopped", path="", host=self.index) from None

    def _on_trio(self, afn: Callable[..., Any], *args: object) -> Any:
        """Run *afn(*args)* on the Trio thread and wait for it (control methods)."""
        if self._token is None:
            raise HostLost(f"{self.name} has stopped", path="", host=self.index)
        try:
            return trio.from_thread.run(afn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            raise HostLost(f"{self.name} has stopped", path="", host=self.index) from None

    # -- Ray methods -------------------------------------------------------------------

    @ray.method(concurrency_group="control")
    def ping(self) -> HostStatus:
        """The host's status, once its Trio loop has answered."""
        began = time.monotonic()
        answered = threading.Event()
        self._in_trio(answered.set)
        if not answered.wait(STOP_TIMEOUT):
            raise HostLost(f"{self.name}: its Trio loop does not answer", path="", host=self.index)
        return HostStatus(
            index=self.index,
            pid=os.getpid(),
            node_id=ray.get_runtime_context().get_node_id(),
            agents=len(self._agents),
            calls=len(self._calls),
            lag=time.monotonic() - began,
            batches=sum(o.batches for o in list(self._outboxes.values())),
            messages=sum(o.messages for o in list(self._outboxes.values())),
            duplicates=self._dedupe.duplicates,
        )

    @ray.method(concurrency_group="control")
    def connect(self, peers: list[Any]) -> None:
        """Learn every host's Ray handle (by index), to deliver batches to them."""
        self._peers = list(peers)

    @ray.method(concurrency_group="control")
    def spawn(self, spec_name: str, agent_name: str) -> str:
        """Spawn an agent from the spec registered as *spec_name*; its path."""
        path: str = self._on_trio(self._spawn, spec_name, agent_name)
        return path

    @ray.method(concurrency_group="control")
    def spawn_actor(self, actor_class: type, args: tuple[Any, ...], name: str) -> str:
        """Spawn an actor ``actor_class(*args)`` under the root, named *name*; its path."""
        path: str = self._on_trio(self._spawn_actor, actor_class, args, name)
        return path

    @ray.method(concurrency_group="control")
    def adopt(
        self,
        lost: int,
        phases: dict[str, tuple[str, str]],
        agents: dict[str, str],
        call: int,
    ) -> None:
        """Open the store of the lost host *lost* and go on with its phases; the
        callers of *phases* (``{phase_id: (agent, spec)}``) are answered from it
        (ray-survival: see ``_adopt.Adoptions``). Returns at once (the lock wait
        may be long: no Ray thread waits for it); the driver's call *call* gets
        the resumed phases' ids, or the error, by its poll."""
        self._in_trio(
            self._nursery.start_soon,
            answer_adopt,
            self,
            DRIVER,
            lost,
            phases,
            agents,
            call,
            await_ref,
        )

    def deliver(self, batch: bytes) -> None:
        """Take a batch of envelopes (handled on the Trio thread, soon)."""
        self._in_trio(self._inbound, batch)

    @ray.method(concurrency_group="poll")
    def poll(self, cursor: int, wait: float) -> bytes:
        """The frames for the driver after *cursor*, waiting up to *wait* s for one."""
        with self._driver:
            frames = self._driver_frames
            drop = 0
            while drop < len(frames) and frames[drop].seq <= cursor:
                drop += 1
            del frames[:drop]
            if not frames:
                if not self._thread.is_alive():  # (its runtime has ended: nothing comes)
                    raise HostLost(f"{self.name}: its runtime has ended", path="", host=self.index)
                self._driver.wait(wait)
            return _batch.encode_batch(frames[:POLL_MOST])

    @ray.method(concurrency_group="control")
    def stop(self) -> None:
        """Stop the runtime (its agents stop as a runtime's do) and end the thread."""
        if self._token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._stop.set)
        self._thread.join(STOP_TIMEOUT)

    # -- sessions and deferred decisions (#27: ray/_sessions.py) ---------------------

    @ray.method(concurrency_group="control")
    def session(self, session_id: str, spec_name: str) -> str:
        """The path of the agent of the session *session_id* (``Runtime.session``)."""
        path: str = self._on_trio(self._session, session_id, spec_name)
        return path

    @ray.method(concurrency_group="control")
    def pending(self, kind: str) -> list[PendingCall]:
        """The calls of this host's parked phases that wait for a decision of *kind*."""
        if kind == "approval":
            return list(self._on_trio(self._sync_call, self._rt.pending_approvals))
        return list(self._on_trio(self._sync_call, self._rt.pending_results))

    @ray.method(concurrency_group="control")
    def decide(self, call: PendingCall, approved: bool | None, text: str, status: str) -> None:
        """Approve, deny, or give the result of, *call* (``Runtime.approve``...)."""
        self._on_trio(self._decide, call, approved, text, status)

    @ray.method(concurrency_group="control")
    def resumed_result(self, phase_id: str) -> PhaseResult[Any]:
        """``Runtime.resumed_result`` (waits, holding a control thread, until it ends)."""
        result: PhaseResult[Any] = self._on_trio(self._rt.resumed_result, phase_id)
        return result

    async def _session(self, session_id: str, spec_name: str) -> str:
        agent = await self._rt.session(session_id, spec_name)
        self._agents[agent.path] = agent  # (its cluster name is its path: sessions/<id>)
        return agent.path

    async def _sync_call(self, fn: Callable[[], Any]) -> Any:
        return fn()

    async def _decide(
        self, call: PendingCall, approved: bool | None, text: str, status: str
    ) -> None:
        if approved is True:
            await self._rt.approve(call, text)
        elif approved is False:
            await self._rt.deny(call, text)
        else:
            await self._rt.give_result(call, text, status=status)

    # -- control, on the Trio thread -----------------------------------------------------

    async def _spawn(self, spec_name: str, agent_name: str) -> str:
        factory = self._options.specs.get(spec_name)
        if factory is None:
            raise InvalidArgument(f"no spec registered as {spec_name!r} in this cluster")
        spec = factory()
        agent = await self._rt.spawn_agent(spec, name=agent_name)
        self._agents[agent.name] = agent
        return agent.path

    async def _spawn_actor(self, actor_class: type, args: tuple[Any, ...], name: str) -> str:
        ref = await self._rt.spawn(actor_class, *args, name=name)
        return ref.path

    # -- frames in -----------------------------------------------------------------------

    def _inbound(self, batch: bytes) -> None:
        try:
            envelopes = _batch.decode_batch(batch)
        except InvalidArgument:
            return  # (a batch no host of ours made: nothing in it can be answered)
        for envelope in envelopes:
            if self._dedupe.fresh(envelope.sender, envelope.seq):
                self._frame(envelope.frame)

    def _frame(self, frame: Frame) -> None:
        # (The hot ones first: a host's asks and their replies.)
        if isinstance(frame, Ask):
            if frame.reply_to == DRIVER:  # (the driver may cancel it)
                self._start_call(frame.reply_to, frame.call, self._ask, frame)
            else:  # (a host's ask is never cancelled: no scope to keep, the hot path)
                self._nursery.start_soon(self._serve_ask, frame)
        elif isinstance(frame, Reply):
            self._pending.resolve(frame.call, frame)
        elif isinstance(frame, Run):
            self._start_call(frame.reply_to, frame.call, self._run, frame)
        elif isinstance(frame, MapRun):
            self._start_call(frame.reply_to, frame.call, self._map, frame)
        elif isinstance(frame, StopAgent):
            self._start_call(frame.reply_to, frame.call, self._stop_agent, frame)
        elif isinstance(frame, Cancel):
            scope = self._calls.get((frame.reply_to, frame.call))
            if scope is not None:
                scope.cancel()
        elif isinstance(frame, Credit):
            self._credit(frame)
        elif isinstance(frame, Tell):
            self._tell(frame)
        elif isinstance(frame, Failed):
            self._pending.fail(frame.call, _batch.rebuild(frame, self.index))
        elif isinstance(frame, WatchEvents) and frame.on and not self._watching:
            self._watching = True
            self._nursery.start_soon(self._forward_events)

    def _credit(self, frame: Credit) -> None:
        credits = self._credits.get((frame.reply_to, frame.call))
        if credits is not None:
            for _ in range(min(frame.items, MAX_CREDIT)):
                credits.release()

    def _start_call(self, reply_to: str, call: int, serve: Any, frame: Frame) -> None:
        scope = trio.CancelScope()
        self._calls[(reply_to, call)] = scope
        self._nursery.start_soon(self._serve, reply_to, call, scope, serve, frame)

    async def _serve(
        self, reply_to: str, call: int, scope: trio.CancelScope, serve: Any, frame: Frame
    ) -> None:
        answer: Frame | None = None
        try:
            with scope:
                answer = await serve(call, frame)
        except Exception as exc:
            answer = _batch.failed(call, exc)
        finally:
            del self._calls[(reply_to, call)]
        if answer is None:  # (cancelled: by the caller's Cancel, or the host's stop)
            answer = Failed(call, "Cancelled", "the call was cancelled")
        self.send(reply_to, answer)

    async def _run(self, call: int, frame: Run) -> Frame | None:
        if self._adoptions is not None:  # (a phase of a lost host, moved here)
            moved = await self._adoptions.serve(frame.agent, frame.message, frame.options)
            if moved is not None:
                return Reply(call, "", _batch.encode_value(moved))
        agent = self._agent(frame.agent)
        with _otel_context(frame.carrier):
            if not frame.stream:
                result = await agent.run(frame.message, **frame.options)
                return Reply(call, "", _batch.encode_value(result))
            # The caller's credits bound what crosses ahead of its reading: past
            # them this loop waits, the local stream fills, and the run waits.
            credits = self._credits[(frame.reply_to, call)] = trio.Semaphore(frame.window)
            try:
                options = dict(frame.options, max_buffer_size=frame.window)
                async with agent.stream(frame.message, **options) as stream:
                    async for item in stream:
                        if isinstance(item, Event):
                            await credits.acquire()
                            self.send(frame.reply_to, Item(call, _batch.encode_value(item)))
                    result = await stream.result()
            finally:
                del self._credits[(frame.reply_to, call)]
            return Reply(call, "", _batch.encode_value(result))

    async def _map(self, call: int, frame: MapRun) -> Frame:
        factory = self._options.specs.get(frame.spec)
        if factory is None:
            raise InvalidArgument(f"no spec registered as {frame.spec!r} in this cluster")
        with _otel_context(frame.carrier):
            results = await self._rt.map(factory(), frame.inputs, concurrency=frame.concurrency)
        out = [
            _batch.MapOutcome(error=_batch.failed(0, r))
            if isinstance(r, ActorError)
            else _batch.MapOutcome(result=_batch.encode_value(r))
            for r in results
        ]
        return Reply(call, "", _batch.encode_value(out))

    async def _stop_agent(self, call: int, frame: StopAgent) -> Frame:
        agent = self._agent(frame.agent)
        if frame.cancel:
            agent.cancel()
        await agent.stop()  # (after a cancel: waits until it has exited)
        del self._agents[frame.agent]
        return Reply(call, "", _batch.encode_value(None))

    async def _serve_ask(self, frame: Ask) -> None:
        try:
            answer = await self._ask(frame.call, frame)
        except Exception as exc:
            answer = _batch.failed(frame.call, exc)
        self.send(frame.reply_to, answer)

    async def _ask(self, call: int, frame: Ask) -> Frame:
        message = _batch.message_from_wire(frame.kind, frame.body)
        target = self._rt.lookup(frame.path)
        reply = await target.ask(message, timeout=frame.timeout)
        kind, body = _batch.message_to_wire(reply)
        return Reply(call, kind, body)

    def _tell(self, frame: Tell) -> None:
        try:
            message = _batch.message_from_wire(frame.kind, frame.body)
            self._rt.lookup(frame.path).send_nowait(message)
        except (InvalidArgument, UnknownName, ActorError):
            pass  # (a tell is fire-and-forget: the in-process send's dead letter)

    def _agent(self, name: str) -> AgentRef[Any]:
        agent = self._agents.get(name)
        if agent is None:
            raise UnknownName(f"no agent {name!r} on {self.name}")
        return agent

    async def _forward_events(self) -> None:
        async with self._rt.events(capacity=10_000) as stream:
            async for event in stream:
                self.send(DRIVER, EventOut(_batch.encode_value(event)))

    # -- frames out -----------------------------------------------------------------------

    def send(self, to: str, frame: Frame) -> None:
        """Queue *frame* for the endpoint *to* (``"driver"`` or ``"host-<i>"``)."""
        if to == DRIVER:
            self._to_driver(frame)
        else:
            self._outbox(to).put(frame)

    def _to_driver(self, frame: Frame) -> None:
        if isinstance(frame, (Reply, Failed)):  # (the usage the answer's caller sees)
            usage = self._rt.usage()
            if self._adoptions is not None:  # (and the adopted stores' runtimes')
                usage = self._adoptions.usage(usage)
            self._queue_for_driver(UsageReport(_batch.encode_value(usage)))
        self._queue_for_driver(frame)

    def _queue_for_driver(self, frame: Frame) -> None:
        with self._driver:
            if isinstance(frame, EventOut) and len(self._driver_frames) >= DRIVER_EVENTS_MOST:
                self.events_dropped += 1
                return
            self._driver_seq += 1
            self._driver_frames.append(Envelope(self.sender, self._driver_seq, frame))  # type: ignore[arg-type]
            self._driver.notify_all()

    def _outbox(self, to: str) -> Outbox:
        outbox = self._outboxes.get(to)
        if outbox is None:
            index = int(to.removeprefix("host-"))
            handle = self._peers[index]

            async def deliver(data: bytes) -> None:
                await await_ref(handle.deliver.remote(data))

            outbox = self._outboxes[to] = Outbox(
                self.sender,
                deliver,
                batch_messages=self._options.batch_messages,
                flush_seconds=self._options.flush_seconds,
                retry_on=(ray.exceptions.ActorUnavailableError,),
            )
            self._nursery.start_soon(self._run_outbox, to, outbox)
        return outbox

    async def _run_outbox(self, to: str, outbox: Outbox) -> None:
        try:
            await outbox.run()
        except Exception:  # (Ray says the host is gone: what waits on it fails)
            self._outboxes.pop(to, None)
            lost = {call for call, where in self._pending_to.items() if where == to}
            host = int(to.removeprefix("host-"))
            self._pending.fail_all(
                lambda: HostLost(f"{to} cannot be reached", path="", host=host), lost
            )

    async def ask(self, to: str, path: str, message: object, timeout: float | None) -> Any:
        """Ask the actor at *path* of the host *to* (from this host's Trio thread)."""
        kind, body = _batch.message_to_wire(message)
        call = self._pending.open()
        self._pending_to[call] = to
        try:
            ask = Ask(call, self.name, path, kind, body, timeout)
            outbox = self._outbox(to)
            if timeout is None and outbox.has_room:  # (the hot path: no extra checkpoint)
                outbox.put(ask)
                reply = await self._pending.wait(call)
            else:
                with caller_deadline(timeout, path):
                    await outbox.send(ask)
                    reply = await self._pending.wait(call)
        finally:
            self._pending.close(call)
            del self._pending_to[call]
        return _batch.message_from_wire(reply.kind, reply.body)

    def tell(self, to: str, path: str, message: object) -> None:
        """Send to the actor at *path* of the host *to*, no reply."""
        kind, body = _batch.message_to_wire(message)
        if to == self.name:
            self._tell(Tell(path, kind, body))
        else:
            self._outbox(to).put(Tell(path, kind, body))

    async def local_ask(self, path: str, message: Any, timeout: float | None) -> Any:
        """Ask the actor at *path* of this host (no batch: an in-process ask)."""
        return await self._rt.lookup(path).ask(message, timeout=timeout)


ASK_GRACE = 5.0  # seconds a caller waits past an ask's timeout for the host's answer


@contextlib.contextmanager
def caller_deadline(timeout: float | None, path: str) -> Iterator[None]:
    """The caller's own bound on a remote ask: its *timeout* (measured on the
    target's host) and `ASK_GRACE` more for the answer to cross; past it,
    ``AskTimeout`` (the host may be gone, or too slow to answer)."""
    if timeout is None:
        yield
        return
    with trio.move_on_after(timeout + ASK_GRACE) as scope:
        yield
    if scope.cancelled_caught:
        raise AskTimeout(f"no reply from {path!r} within {timeout:g} s", path=path)


class _otel_context:
    """Make the OpenTelemetry context in *carrier* current (nothing for an empty one)."""

    def __init__(self, carrier: dict[str, str]) -> None:
        self._carrier = carrier
        self._token: object = None

    def __enter__(self) -> None:
        if self._carrier:
            from opentelemetry import context, propagate

            self._token = context.attach(propagate.extract(self._carrier))

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            from opentelemetry import context

            context.detach(self._token)  # type: ignore[arg-type]


NodeHost: Any = ray.remote(  # type: ignore[call-overload]
    max_concurrency=8,
    max_restarts=0,
    concurrency_groups={"control": 4, "poll": 2},
)(_Host)
"""The Ray actor class of a node host (`_Host` is its body)."""
