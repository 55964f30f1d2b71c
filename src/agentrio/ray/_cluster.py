"""``open_cluster()``: node hosts on a Ray cluster, reached from the caller's Trio.

The caller (the *driver*) is no Ray actor. It talks to each host through a
`_Link`: an `Outbox` whose batches go out with ``host.deliver.remote(...)``, and one
long-poll (``host.poll.remote(cursor, wait)``) outstanding at a time that brings back
the host's replies, stream items, usage and events. Calls are numbered; each waits in
the driver's `Pending` table for its answer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, Literal, Union

import attrs
import msgspec
import ray
import trio
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from .._checks import check_int
from .._handles import NoPublicConstructor, create
from ..actors.bus import EventBus, EventStream
from ..agents.budgets.budget import Budget
from ..agents.budgets.usage import UsageTotals
from ..agents.loop.spec import AgentSpec
from ..errors import (
    ActorError,
    ActorStopped,
    AgentrioError,
    DuplicateName,
    HostLost,
    InvalidArgument,
    RuntimeClosed,
    UnknownName,
)
from ..messages import OutputT, PhaseResult
from ..tracing.reader import event_types
from . import _batch, _sessions
from ._adopt import Survival  # (ray-survival: a lost host's phases move to a live host)
from ._batch import (
    Ask,
    Cancel,
    Credit,
    EventOut,
    Failed,
    Item,
    MapOutcome,
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
from ._host import DRIVER, HostOptions, HostStatus, NodeHost, await_ref, caller_deadline
from ._ledger import LeaseTerms, check_budget, start_ledger
from ._remote import RemoteRef, clusters

if TYPE_CHECKING:
    from ..agents.durability.deferred import PendingCall
    from ..agents.observation.otel import OpenTelemetry
    from ..config import Config

__all__ = ["Cluster", "ClusterAgent", "open_cluster"]

Placement = Literal["least-loaded"]
NAMESPACE = "agentrio"  # the Ray namespace of the hosts' names
START_TIMEOUT = 120.0  # seconds the placement group and the hosts may take to start
POLL_WAIT = 0.5  # seconds a long-poll waits on a quiet host before it returns empty
STOP_WAIT = 30.0  # seconds leaving the block waits for the hosts to stop
# AgentRef.run's options that are plain data, and so can cross to a host.
RUN_OPTIONS = frozenset(
    {
        "tool_names",
        "max_iterations",
        "continue_context",
        "context_label",
        "timeout",
        "mode",
        "model",
        "lane",
        "phase_id",
    }
)


class _Link:
    """The driver's end of one host: its handle, its outbox, its poll cursor."""

    def __init__(self, index: int, handle: Any, sender: str, options: HostOptions) -> None:
        self.index = index
        self.handle = handle
        self.agents = 0  # agents spawned there by this driver (least-loaded placement)
        self.usage = UsageTotals()  # the host's root budget's, as last reported
        self.calls: set[int] = set()  # this driver's calls waiting on it
        self.lost: str | None = None  # why the host is taken as gone (None: it is not)

        async def deliver(data: bytes) -> None:
            await await_ref(handle.deliver.remote(data))

        self.outbox = Outbox(
            sender,
            deliver,
            batch_messages=options.batch_messages,
            flush_seconds=options.flush_seconds,
            retry_on=(ray.exceptions.ActorUnavailableError,),
        )


class Cluster(metaclass=NoPublicConstructor):
    """The hosts of an ``agentrio.ray`` cluster, from [`open_cluster`][agentrio.ray.open_cluster].

    It offers what a [`Runtime`][agentrio.Runtime] offers an application:
    `spawn_agent`, `map`, `events`, `usage`, `statistics`, with the agents
    placed on hosts; and `spawn`, `ref` and `ping` for actors and hosts. No
    public constructor.

    Attributes:
        id: the cluster's id (eight hex digits), in its hosts' Ray names
            (``agentrio-<id>-host-<i>``) and in its `RemoteRef`s.
    """

    def __init__(
        self,
        cluster_id: str,
        links: list[_Link],
        specs: Mapping[str, Callable[[], AgentSpec[Any]]],
        placement: Placement,
    ) -> None:
        self.id = cluster_id
        self._links = links
        self._specs = specs
        self._placement = placement
        self._pending = Pending()
        self._names: dict[str, int] = {}  # agent name -> host index
        self._bus = EventBus()
        self._watching = False
        self._closed = False
        self._survival: Survival = None  # type: ignore[assignment]  # (set by open_cluster)

    def __repr__(self) -> str:
        return f"<Cluster {self.id} hosts={len(self._links)}>"

    @property
    def hosts(self) -> int:
        """How many hosts the cluster has."""
        return len(self._links)

    # -- agents --------------------------------------------------------------------

    async def spawn_agent(
        self, spec: AgentSpec[OutputT], *, name: str | None = None, host: int | None = None
    ) -> ClusterAgent[OutputT]:
        """Start an agent from *spec* on a host: the least loaded, or *host*.

        Only the spec's name crosses to the host, which makes the spec with the
        factory registered as that name (``open_cluster(specs=...)``): specs hold
        code (tools, hooks, models), which travels once, with the factories.

        Args:
            spec: an [`AgentSpec`][agentrio.AgentSpec] whose ``name`` is registered.
            name: the agent's name (default ``spec.name``), unique in the cluster.
            host: the host's index, to pin it there (default: the host holding
                the fewest agents this cluster spawned).

        Returns:
            A [`ClusterAgent`][agentrio.ray.ClusterAgent].

        Raises:
            InvalidArgument: *spec* is not an AgentSpec, its name is not in
                *specs*, or *host* is no host's index.
            DuplicateName: an agent of the cluster has that name.
            RuntimeClosed: the cluster's block has ended.
            HostLost: the host is gone.
        """
        self._check_open()
        if not isinstance(spec, AgentSpec):
            raise InvalidArgument(f"spec must be an agentrio.AgentSpec, got {spec!r}")
        if spec.name not in self._specs:
            raise InvalidArgument(
                f"spec {spec.name!r} is not registered: open_cluster(specs={{{spec.name!r}: "
                "a function that makes it}) (the hosts make their spec with it)"
            )
        name = spec.name if name is None else name
        if name in self._names:
            raise DuplicateName(f"an agent of this cluster is named {name!r}")
        link = self._place(host)
        self._names[name] = link.index
        link.agents += 1
        self._survival.spawned(name, spec.name)
        try:
            path = await self._control(link, link.handle.spawn.remote(spec.name, name))
        except BaseException:
            del self._names[name]
            link.agents -= 1
            raise
        return create(ClusterAgent, self, link, spec, name, path)

    def _place(self, host: int | None) -> _Link:
        if host is None:  # (ray-survival: never on a lost host)
            live: list[_Link] = self._survival.live(self._links)
            return min(live, key=lambda link: (link.agents, link.index))
        if not isinstance(host, int) or isinstance(host, bool) or not 0 <= host < self.hosts:
            raise InvalidArgument(f"host must be an int from 0 to {self.hosts - 1}, got {host!r}")
        return self._links[host]

    async def map(
        self, spec: AgentSpec[OutputT], inputs: Sequence[str], *, concurrency: int = 10
    ) -> list[PhaseResult[OutputT] | ActorError]:
        """``Runtime.map`` across the hosts: one phase per input on a fresh agent.

        The inputs are split in contiguous runs, one per host, and so is
        *concurrency*; each host maps its run. A cancelled caller cancels every
        host's map (their phases end ``"cancelled"``), as in-process.

        Returns:
            The results in input order; an input whose agent failed has its
            ``ActorError`` in its place.

        Raises:
            InvalidArgument: as ``spawn_agent``; *inputs* is not a list of str,
                *concurrency* is not an int >= 1.
            HostLost: a host is gone.
        """
        self._check_open()
        if not isinstance(spec, AgentSpec) or spec.name not in self._specs:
            raise InvalidArgument(f"spec must be an AgentSpec registered by name, got {spec!r}")
        if isinstance(inputs, str) or not all(isinstance(i, str) for i in inputs):
            raise InvalidArgument("inputs must be a list of str")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise InvalidArgument(f"concurrency must be an int >= 1, got {concurrency!r}")
        inputs = list(inputs)
        shares = _shares(len(inputs), min(self.hosts, concurrency, max(1, len(inputs))))
        width = _shares(concurrency, len(shares))
        results: list[PhaseResult[OutputT] | ActorError] = []
        chunks: list[list[PhaseResult[Any] | ActorError]] = [[] for _ in shares]

        async def one(i: int, start: int, count: int) -> None:
            frame_inputs = inputs[start : start + count]
            chunks[i] = await self._map_on(self._links[i], spec, frame_inputs, width[i])

        with _ungrouped():
            async with trio.open_nursery() as nursery:
                start = 0
                for i, count in enumerate(shares):
                    if count:
                        nursery.start_soon(one, i, start, count)
                    start += count
        for chunk in chunks:
            results.extend(chunk)
        return results

    async def _map_on(
        self, link: _Link, spec: AgentSpec[Any], inputs: list[str], concurrency: int
    ) -> list[PhaseResult[Any] | ActorError]:
        def frame(call: int) -> MapRun:
            return MapRun(call, DRIVER, spec.name, inputs, concurrency, carrier=_carrier())

        reply = await self._call(link, frame)
        outcomes = msgspec.msgpack.decode(reply.body, type=list[MapOutcome])
        decoder = _result_decoder(spec)
        out: list[PhaseResult[Any] | ActorError] = []
        for outcome in outcomes:
            if outcome.error is not None:
                error = _batch.rebuild(outcome.error, link.index)
                assert isinstance(error, ActorError)
                out.append(error)
            else:
                assert outcome.result is not None
                out.append(decoder.decode(outcome.result))
        return out

    # -- actors ----------------------------------------------------------------------------

    async def spawn(
        self, actor_class: type[Any], *args: object, name: str, host: int | None = None
    ) -> RemoteRef:
        """Start ``actor_class(*args)`` under the root of a host's runtime (the least
        loaded, or *host*), as ``Runtime.spawn``; a `RemoteRef` to it.

        The class and the arguments travel to the host pickled (by Ray).

        Raises:
            InvalidArgument: a bad argument (the message says which).
            DuplicateName: *name* is taken on that host.
            HostLost: the host is gone.
        """
        self._check_open()
        link = self._place(host)
        path = await self._control(link, link.handle.spawn_actor.remote(actor_class, args, name))
        return RemoteRef(self.id, link.index, path)

    def ref(self, host: int, path: str) -> RemoteRef:
        """A `RemoteRef` to the actor at *path* of the host *host*."""
        self._place(host)
        if not isinstance(path, str) or not path:
            raise InvalidArgument(f"path must be a non-empty str, got {path!r}")
        return RemoteRef(self.id, host, path)

    async def ask(self, host: int, path: str, message: object, timeout: float | None) -> Any:
        """Ask the actor at *path* of the host *host* (what ``RemoteRef.ask`` does
        in the driver)."""
        self._check_open()
        link = self._place(host)
        kind, body = _batch.message_to_wire(message)

        def frame(call: int) -> Ask:
            return Ask(call, DRIVER, path, kind, body, timeout)

        with caller_deadline(timeout, path):
            reply = await self._call(link, frame)
        return _batch.message_from_wire(reply.kind, reply.body)

    async def tell(self, host: int, path: str, message: object) -> None:
        """Send to the actor at *path* of the host *host*, no reply."""
        self._check_open()
        kind, body = _batch.message_to_wire(message)
        await self._place(host).outbox.send(Tell(path, kind, body))

    # -- events, usage, statistics --------------------------------------------------------

    def events(self, *, capacity: int = 1000) -> EventStream:
        """Subscribe to the events of every host, as one stream.

        As ``Runtime.events``: bounded (an ``EventsLost`` in place of what did
        not fit), never slowing the agents. The hosts start sending their events
        with the first subscriber (or the cluster's ``trace``): what they
        published before is not in it.
        """
        stream = self._bus.subscribe(capacity)
        self._watch()
        return stream

    def _watch(self) -> None:
        if not self._watching:
            self._watching = True
            for link in self._links:
                link.outbox.put(WatchEvents(True))

    def usage(self) -> UsageTotals:
        """What every host's agents have spent, summed: as last reported by the hosts
        (each reports with every answer it sends, so a run's usage is in it once
        its ``run()`` has returned)."""
        return _sum_usage(link.usage for link in self._links)

    def statistics(self) -> ClusterStatistics:
        """The cluster's hosts, agents, calls in flight and batching counters."""
        return ClusterStatistics(
            hosts=self.hosts,
            agents=len(self._names),
            calls=len(self._pending),
            batches=sum(link.outbox.batches for link in self._links),
            messages=sum(link.outbox.messages for link in self._links),
            retries=sum(link.outbox.retries for link in self._links),
        )

    async def ping(self, host: int) -> HostStatus:
        """Ping the host *host*: its status once its Trio loop has answered.

        Raises:
            HostLost: it is gone.
        """
        link = self._place(host)
        status: HostStatus = await self._control(link, link.handle.ping.remote())
        return status

    # -- calls -----------------------------------------------------------------------------

    # -- sessions and deferred decisions (#27: _sessions.py) -------------------------

    async def session(self, session_id: str, spec: str | AgentSpec[Any]) -> ClusterAgent[Any]:
        """The agent of the session *session_id*, as ``Runtime.session`` gives it, on
        the host the id hashes to (the same host, and store, in a later cluster of
        as many hosts). See [Sessions][sessions]."""
        link, made, path = await _sessions.session(self, session_id, spec)
        return create(ClusterAgent, self, link, made, path, path)

    async def pending_approvals(self) -> list[PendingCall]:
        """Every host's ``Runtime.pending_approvals``, oldest first."""
        return await _sessions.pending(self, "approval")

    async def pending_results(self) -> list[PendingCall]:
        """Every host's ``Runtime.pending_results``, oldest first."""
        return await _sessions.pending(self, "result")

    async def approve(self, call: PendingCall, message: str = "") -> None:
        """``Runtime.approve`` on the host that holds *call*'s phase."""
        await _sessions.decide(self, call, True, message, "ok")

    async def deny(self, call: PendingCall, message: str = "") -> None:
        """``Runtime.deny`` on the host that holds *call*'s phase."""
        await _sessions.decide(self, call, False, message, "ok")

    async def give_result(self, call: PendingCall, result: str, *, status: str = "ok") -> None:
        """``Runtime.give_result`` on the host that holds *call*'s phase."""
        await _sessions.decide(self, call, None, result, status)

    async def resumed_result(self, phase_id: str) -> PhaseResult[Any]:
        """``Runtime.resumed_result`` on the host that holds the phase *phase_id*
        (a phase that parked there, then went on after a decision)."""
        return await _sessions.resumed_result(self, phase_id)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeClosed("the cluster's block has ended")

    async def _control(self, link: _Link, ref: Any) -> Any:
        """The value of a control call's *ref*, its errors rebuilt."""
        try:
            return await await_ref(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, AgentrioError):
                raise cause from None
            raise HostLost(f"host {link.index} failed: {exc}", path="", host=link.index) from exc
        except ray.exceptions.RayError as exc:
            raise HostLost(
                f"host {link.index} is gone: {type(exc).__name__}", path="", host=link.index
            ) from exc

    async def _call(
        self, link: _Link, frame: Callable[[int], Any], *, stream: bool = False
    ) -> Reply:
        """Send the frame *frame(call)* to *link*'s host; its reply. A cancelled
        caller sends a ``Cancel`` and waits (shielded, up to `STOP_WAIT`) for the
        host to say the call has ended, then is cancelled."""
        if link.lost is not None:
            raise HostLost(link.lost, path="", host=link.index)
        call = self._pending.open(stream=stream)
        link.calls.add(call)
        try:
            made = frame(call)
            self._survival.sent(call, link.index, made)
            await link.outbox.send(made)
            return await self._reply(link, call)
        finally:
            link.calls.discard(call)
            self._survival.done(call)
            self._pending.close(call)

    async def _reply(self, link: _Link, call: int) -> Reply:
        try:
            reply = await self._pending.wait(call)
        except trio.Cancelled:
            link = self._links[self._survival.where(call, link.index)]  # (moved: its new host)
            with trio.move_on_after(STOP_WAIT) as scope:
                scope.shield = True
                link.outbox.put(Cancel(call, DRIVER))
                await self._pending.wait_done(call)
            raise
        except _batch.CallCancelled:
            # (The host cancelled it without our asking: it is stopping.)
            raise HostLost(
                f"host {link.index} stopped while the call ran", path="", host=link.index
            ) from None
        assert isinstance(reply, Reply)
        return reply

    # -- frames in -------------------------------------------------------------------------

    def _frame(self, link: _Link, frame: Any) -> None:
        if isinstance(frame, Reply):
            self._pending.resolve(frame.call, frame)
        elif isinstance(frame, Failed):
            self._pending.fail(frame.call, _batch.rebuild(frame, link.index))
        elif isinstance(frame, Item):
            self._pending.item(frame.call, frame.body)
        elif isinstance(frame, UsageReport):
            link.usage = msgspec.msgpack.decode(frame.body, type=UsageTotals)
        elif isinstance(frame, EventOut) and self._bus.active:
            self._bus.publish(_event_decoder().decode(frame.body))

    async def _poll(self, link: _Link, task_status: trio.TaskStatus[None]) -> None:
        """Bring back *link*'s host's frames, one long-poll at a time, until cancelled."""
        cursor = 0
        task_status.started()
        while True:
            try:
                data = await await_ref(link.handle.poll.remote(cursor, POLL_WAIT))
            except ray.exceptions.ActorUnavailableError:
                await trio.sleep(0.1)
                continue
            except ray.exceptions.RayError as exc:
                self._lost(link, exc)
                return
            try:
                envelopes = _batch.decode_batch(data)
            except InvalidArgument as exc:  # (no host of ours answers that)
                self._lost(link, exc)
                return
            for envelope in envelopes:
                if envelope.seq > cursor:
                    cursor = envelope.seq
                    # (A frame that does not decode, an event of a newer agentrio on
                    # that host, is left out.)
                    with contextlib.suppress(msgspec.DecodeError, InvalidArgument):
                        self._frame(link, envelope.frame)

    async def _send(self, link: _Link, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        try:
            await link.outbox.run()
        except ray.exceptions.RayError as exc:
            self._lost(link, exc)

    def _lost(self, link: _Link, exc: BaseException) -> None:
        """*link*'s host is gone: every call waiting on it fails with ``HostLost``."""
        why = f"host {link.index} is gone: {type(exc).__name__}"
        if self._survival.lost(link.index, why):
            return  # (the watcher takes it: its phases move, or fail, once)
        self._pending.fail_all(lambda: HostLost(why, path="", host=link.index), set(link.calls))
        link.lost = why  # (and every later call, at once)


class ClusterStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a cluster (``Cluster.statistics()``).

    Attributes:
        hosts: its hosts.
        agents: the agents spawned with ``spawn_agent``.
        calls: the driver's calls waiting for an answer.
        batches: batches the driver sent to the hosts.
        messages: the messages in them.
        retries: batches sent again (Ray could not say they arrived).
    """

    hosts: int
    agents: int
    calls: int
    batches: int
    messages: int
    retries: int


class ClusterAgent(Generic[OutputT], metaclass=NoPublicConstructor):
    """An agent on a host of a cluster (from ``Cluster.spawn_agent``): ``run`` and
    ``stream`` as an ``AgentRef``'s. No public constructor.

    Attributes:
        name: its name (unique in the cluster).
        path: its path on its host.
        host: the index of its host.
        spec: the spec it was spawned from (as the caller has it).
    """

    def __init__(
        self, cluster: Cluster, link: _Link, spec: AgentSpec[OutputT], name: str, path: str
    ) -> None:
        self._cluster = cluster
        self._spawned_on = link.index
        self.spec = spec
        self.name = name
        self.path = path

    @property
    def host(self) -> int:
        """The index of its host (another one's after its host was lost)."""
        return self._cluster._survival.host_of(self.name, self._spawned_on)

    @property
    def _link(self) -> _Link:
        return self._cluster._links[self.host]

    def __repr__(self) -> str:
        return f"<ClusterAgent {self.name!r} on host {self.host}>"

    async def run(self, user_message: str, **options: Any) -> PhaseResult[OutputT]:
        """Run one phase on the agent's host, as ``AgentRef.run`` does.

        The keyword arguments are ``AgentRef.run``'s that are plain data
        (``timeout``, ``max_iterations``, ``context_label``, ``phase_id``,
        ``mode`` and ``model`` by name...). If the caller is cancelled, the
        remote phase is cancelled (it ends ``"cancelled"``) and this raises
        ``trio.Cancelled`` once it has ended, as in-process.

        Raises:
            InvalidArgument: as ``AgentRef.run``; an option that is not plain data.
            ActorStopped, ActorCrashed: as ``AgentRef.run``.
            HostLost: the host is gone.
        """
        self._cluster._check_open()
        frame = self._frame(user_message, options, stream=False)
        reply = await self._cluster._call(self._link, frame)
        decoded: PhaseResult[OutputT] = _result_decoder(self.spec).decode(reply.body)
        return decoded

    def stream(
        self, user_message: str, *, max_buffer_size: int = 64, **options: Any
    ) -> ClusterRunStream[OutputT]:
        """Run one phase as ``run()`` does, and stream its items, as ``AgentRef.stream``:
        ``async with agent.stream(...) as stream: async for item in stream``; the
        last item is a ``RunDone`` with the result. Leaving the block early cancels
        the remote run, and waits for it to end.

        As in-process, the stream loses nothing and has backpressure: the host
        sends at most *max_buffer_size* items ahead of the caller's reading (it
        is told, in credits, what was read), and past them the run waits before
        its next model call.

        Raises:
            InvalidArgument: as ``run()``; *max_buffer_size* is not an int >= 1.
        """
        self._cluster._check_open()
        check_int("max_buffer_size", max_buffer_size, 1)
        frame = self._frame(user_message, options, stream=True, window=max_buffer_size)
        return create(ClusterRunStream, self, frame, max_buffer_size)

    async def stop(self) -> None:
        """Stop the agent gracefully, as ``AgentRef.stop``: its queued phases run,
        then it stops; returns once it has exited on its host. Its name is free
        again, and its host counts one agent less for placement.

        Raises:
            HostLost: its host is gone.
        """
        await self._stop(cancel=False)

    async def cancel(self) -> None:
        """Cancel the agent now, as ``AgentRef.cancel``: a running phase is
        abandoned and its ``run()`` raises ``ActorStopped``; returns once it has
        exited on its host.

        Raises:
            HostLost: its host is gone.
        """
        await self._stop(cancel=True)

    async def _stop(self, *, cancel: bool) -> None:
        cluster, link = self._cluster, self._link
        if cluster._names.get(self.name) != link.index:
            return  # (stopped already)

        def frame(call: int) -> StopAgent:
            return StopAgent(call, DRIVER, self.name, cancel)

        with contextlib.suppress(ActorStopped, UnknownName):  # (it had stopped already)
            await cluster._call(link, frame)
        del cluster._names[self.name]
        link.agents -= 1

    def _frame(
        self, user_message: str, options: dict[str, Any], *, stream: bool, window: int = 64
    ) -> Callable[[int], Run]:
        if not isinstance(user_message, str):
            raise InvalidArgument(
                f"user_message must be a str on a cluster, got {type(user_message).__name__}"
            )
        unknown = sorted(set(options) - RUN_OPTIONS)
        if unknown:
            raise InvalidArgument(
                f"run options on a cluster are {sorted(RUN_OPTIONS)}, got {unknown}"
            )
        try:
            msgspec.msgpack.encode(options)
        except (TypeError, msgspec.EncodeError) as exc:
            raise InvalidArgument(f"run options must be plain data: {exc}") from exc
        options = self._cluster._survival.options(options)  # (a phase id, with a store)
        carrier = _carrier()

        def frame(call: int) -> Run:
            return Run(call, DRIVER, self.name, user_message, options, stream, carrier, window)

        return frame


class ClusterRunStream(Generic[OutputT], metaclass=NoPublicConstructor):
    """The items of a run on a cluster's host, as they come (from ``ClusterAgent.stream``).

    The items are the events of ``AgentRef.stream`` (``TextDelta``,
    ``ToolStarted``, ``ToolEnded``, ``TurnEnded``) and last a ``RunDone``.
    """

    def __init__(
        self, agent: ClusterAgent[OutputT], frame: Callable[[int], Run], window: int
    ) -> None:
        self._agent = agent
        self._make = frame
        self._window = window
        self._read = 0  # items read and not yet credited back
        self._items: trio.MemoryReceiveChannel[bytes] | None = None
        self._result: PhaseResult[OutputT] | None = None
        self._call = 0
        self._done = False

    async def __aenter__(self) -> ClusterRunStream[OutputT]:
        cluster, link = self._agent._cluster, self._agent._link
        if link.lost is not None:
            raise HostLost(link.lost, path=self._agent.path, host=link.index)
        self._call = cluster._pending.open(stream=True)
        link.calls.add(self._call)
        self._items = cluster._pending.items(self._call)
        frame = self._make(self._call)
        cluster._survival.sent(self._call, link.index, frame)
        await link.outbox.send(frame)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        cluster, link = self._agent._cluster, self._agent._link
        try:
            if self._result is None:
                with trio.move_on_after(STOP_WAIT) as scope:
                    scope.shield = True
                    link.outbox.put(Cancel(self._call, DRIVER))
                    await cluster._pending.wait_done(self._call)
        finally:
            link.calls.discard(self._call)
            cluster._survival.done(self._call)
            cluster._pending.close(self._call)

    def __aiter__(self) -> ClusterRunStream[OutputT]:
        return self

    async def __anext__(self) -> Any:
        if self._done:
            raise StopAsyncIteration
        assert self._items is not None
        try:
            body = await self._items.receive()
        except trio.EndOfChannel:
            self._done = True
            return _RunDone(path=self._agent.path, result=await self.result())
        self._read += 1
        if self._read * 2 >= self._window:  # (credits back in halves of the window)
            self._agent._link.outbox.put(Credit(self._call, DRIVER, self._read))
            self._read = 0
        return _event_decoder().decode(body)

    async def result(self) -> PhaseResult[OutputT]:
        """The run's result (reads the rest of the stream first, and drops it)."""
        while not self._done and self._result is None:
            await self.__anext__()
        if self._result is None:
            cluster = self._agent._cluster
            reply = await cluster._reply(self._agent._link, self._call)
            self._result = _result_decoder(self._agent.spec).decode(reply.body)
        return self._result


# --- open_cluster -------------------------------------------------------------------


@asynccontextmanager
async def open_cluster(
    *,
    hosts: int = 2,
    specs: Mapping[str, Callable[[], AgentSpec[Any]]] | None = None,
    store: str | os.PathLike[str] | None = None,
    budget: Budget | None = None,
    lease: LeaseTerms | None = None,
    config: Config | str | os.PathLike[str] | None = None,
    address: str | None = None,
    placement: Placement = "least-loaded",
    trace: str | os.PathLike[str] | None = None,
    otel: Callable[[], OpenTelemetry] | None = None,
    shutdown_timeout: float = 5.0,
    flush_seconds: float = _batch.FLUSH_SECONDS,
    batch_messages: int = _batch.BATCH_MESSAGES,
    max_restarts: int = 3,
    period: float = 5.0,
) -> AsyncIterator[Cluster]:
    """Open a cluster: *hosts* node hosts on Ray, each running a full agentrio runtime.

    The hosts are Ray actors placed with one placement group (one CPU per
    host, ``SPREAD`` across nodes), detached and named
    ``agentrio-<cluster id>-host-<i>`` (namespace ``agentrio``). Leaving the
    block stops every host (as a runtime stops: gracefully, within
    *shutdown_timeout*), kills their actors and removes the placement group.

    Example:

        async with agentrio.ray.open_cluster(hosts=2, specs={"w": make_w}) as cluster:
            agent = await cluster.spawn_agent(make_w())
            print((await agent.run("hello")).final_text)

    Args:
        hosts: how many node hosts, an int >= 1.
        specs: spec factories by name (the hosts call them to make the specs,
            as durable resume does).
        store: for durable agents: a folder (host *i* owns ``<store>/host-<i>``,
            a ``DirectoryStore``: on several machines, a shared file system), or a
            PostgreSQL connection string (``postgresql://...``: host *i* owns the
            ``PostgresStore`` named ``<cluster id>/host-<i>``). A lost host's store
            is adopted by a live host (see "A lost host").
        budget: the cluster's budget: one ledger leases its limits to the
            hosts (see "One budget" in the how-to); None: each host's runtime
            has a budget with no limits of its own.
        lease: how the budget is leased (lease size, low-water mark, ttl).
        config: the hosts' configuration (a ``Config`` or an agentrio.toml path).
        address: the Ray cluster's address (default: Ray's own choice: the
            ``RAY_ADDRESS`` cluster, or a local one it starts). Ignored if Ray
            is initialised already in this process.
        placement: ``"least-loaded"``: an agent goes to the host holding the
            fewest (unless pinned with ``spawn_agent(host=...)``).
        trace: a file to write every host's events to, one JSON line each.
        otel: a function, called on each host, that makes its
            [`OpenTelemetry`][agentrio.otel.OpenTelemetry]; a run's spans nest
            under its caller's span, across hosts.
        shutdown_timeout: each host runtime's (see ``open_runtime``).
        max_restarts: lost hosts allowed within *period* seconds (the cluster's
            restart intensity: one more raises ``RestartIntensityExceeded``
            out of the block); see "A lost host".
        period: the restart-intensity window, in seconds.
        flush_seconds: the longest a message waits for its batch.
        batch_messages: a batch this full is sent at once.

    Raises:
        InvalidArgument: a bad argument, named in the message.
        HostLost: the hosts could not be started (the cluster lacks the CPUs,
            or a host failed to open its runtime).
    """
    check_budget(budget, lease)  # (ray-ledger: before Ray is started)
    options = _options(hosts, specs, store, config, otel, shutdown_timeout, placement)
    options = HostOptions(
        specs=options.specs,
        store=options.store,
        config=options.config,
        otel=options.otel,
        shutdown_timeout=options.shutdown_timeout,
        flush_seconds=flush_seconds,
        batch_messages=batch_messages,
    )
    started_ray = await _init_ray(address)
    cluster_id = uuid.uuid4().hex[:8]
    group = placement_group(
        [{"CPU": 1}] * hosts, strategy="SPREAD", name=f"agentrio-{cluster_id}", lifetime="detached"
    )
    handles: list[Any] = []
    ledger: Any = None
    try:
        if budget is not None:  # (ray-ledger) one budget for the cluster
            name = f"agentrio-{cluster_id}-ledger"
            ledger = start_ledger(name, budget, lease, namespace=NAMESPACE)
            options = attrs.evolve(options, ledger=ledger)
        with trio.fail_after(START_TIMEOUT):
            await await_ref(group.ready())
        handles = [_start_host(cluster_id, i, group, options) for i in range(hosts)]
        sender = f"{DRIVER}/{cluster_id}/{uuid.uuid4().hex[:8]}"
        links = [_Link(i, h, sender, options) for i, h in enumerate(handles)]
        cluster = create(Cluster, cluster_id, links, options.specs, placement)
        cluster._survival = Survival(
            cluster, options.store, max_restarts=max_restarts, period=period, await_ref=await_ref
        )
        with trio.fail_after(START_TIMEOUT):
            for link in links:
                await cluster._control(link, link.handle.connect.remote(handles))
        clusters[cluster_id] = cluster
        async with trio.open_nursery() as nursery:
            writer = await _trace(trace, cluster, nursery)
            for link in links:
                await nursery.start(cluster._poll, link)
                await nursery.start(cluster._send, link)
            await nursery.start(cluster._survival.run)  # (ray-survival: the ping watcher)
            try:
                yield cluster
            finally:
                cluster._closed = True
                cluster._survival.close()
                with trio.CancelScope(shield=True):
                    await _stop_hosts(links)
                nursery.cancel_scope.cancel()
                cluster._bus.close()
        if writer is not None and writer.error is not None:
            raise writer.error
    except trio.TooSlowError:
        if cluster_id in clusters:  # (the block's own: the hosts had started)
            raise
        raise HostLost(
            f"the {hosts} hosts did not start within {START_TIMEOUT:g} s "
            "(does the Ray cluster have a CPU free for each?)",
            path="",
            host=-1,
        ) from None
    except BaseExceptionGroup as raised:  # (the block's own exception: as itself)
        raise _lone(raised) from None
    finally:
        clusters.pop(cluster_id, None)
        for handle in handles:
            with contextlib.suppress(ray.exceptions.RayError, ValueError):
                ray.kill(handle, no_restart=True)
        if ledger is not None:  # (ray-ledger; after the hosts: they ended their leases)
            with contextlib.suppress(ray.exceptions.RayError, ValueError):
                ray.kill(ledger, no_restart=True)
        with contextlib.suppress(ray.exceptions.RayError, ValueError):
            remove_placement_group(group)
        if started_ray:
            ray.shutdown()


def _options(
    hosts: object,
    specs: object,
    store: object,
    config: object,
    otel: object,
    shutdown_timeout: object,
    placement: object,
) -> HostOptions:
    if not isinstance(hosts, int) or isinstance(hosts, bool) or hosts < 1:
        raise InvalidArgument(f"hosts must be an int >= 1, got {hosts!r}")
    if specs is None:
        specs = {}
    if not isinstance(specs, Mapping) or not all(
        isinstance(k, str) and callable(v) for k, v in specs.items()
    ):
        raise InvalidArgument(f"specs must map names to functions that make specs, got {specs!r}")
    if store is not None and not isinstance(store, (str, os.PathLike)):
        raise InvalidArgument(
            f"store must be a folder's path, a PostgreSQL connection string or None, got {store!r}"
        )
    if otel is not None and not callable(otel):
        raise InvalidArgument(f"otel must be a function that makes an OpenTelemetry, got {otel!r}")
    if placement != "least-loaded":
        raise InvalidArgument(f'placement must be "least-loaded", got {placement!r}')
    if not isinstance(shutdown_timeout, (int, float)) or not shutdown_timeout > 0:
        raise InvalidArgument(f"shutdown_timeout must be a number > 0, got {shutdown_timeout!r}")
    return HostOptions(
        specs=dict(specs),
        store=None if store is None else os.fspath(store),
        config=config,
        otel=otel,
        shutdown_timeout=float(shutdown_timeout),
    )


async def _init_ray(address: str | None) -> bool:
    """Connect this process to Ray (unless it is); True if this call did."""
    if ray.is_initialized():
        return False

    def init() -> None:
        ray.init(
            address=address,
            namespace=NAMESPACE,
            logging_level=logging.WARNING,
            log_to_driver=False,
            include_dashboard=False if address is None else None,
        )

    await trio.to_thread.run_sync(init)
    return True


def _start_host(cluster_id: str, index: int, group: Any, options: HostOptions) -> Any:
    strategy = PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=index
    )
    return NodeHost.options(
        name=f"agentrio-{cluster_id}-host-{index}",
        namespace=NAMESPACE,
        lifetime="detached",
        num_cpus=1,
        scheduling_strategy=strategy,
    ).remote(cluster_id, index, options)


async def _stop_hosts(links: list[_Link]) -> None:
    """Stop every host's runtime (in parallel), up to `STOP_WAIT`."""
    with trio.move_on_after(STOP_WAIT):
        async with trio.open_nursery() as nursery:
            for link in links:
                nursery.start_soon(_stop_host, link)


async def _stop_host(link: _Link) -> None:
    with contextlib.suppress(ray.exceptions.RayError):  # (gone: killed all the same)
        await await_ref(link.handle.stop.remote())


async def _trace(
    trace: str | os.PathLike[str] | None, cluster: Cluster, nursery: trio.Nursery
) -> Any:
    """The trace writer of the cluster's events, running (None: no *trace*)."""
    if trace is None:
        return None
    from ..tracing.writer import TraceWriter

    writer = TraceWriter(trace)
    await writer.open()
    await nursery.start(writer.run, cluster._bus)
    cluster._watch()
    return writer


@contextlib.contextmanager
def _ungrouped() -> Iterator[None]:
    """A nursery's exception group that holds one exception raised as that one,
    as ``open_runtime``'s block and ``Runtime.map`` raise theirs (``except
    HostLost`` catches it); a group of more stays a group."""
    try:
        yield
    except BaseExceptionGroup as group:
        raise _lone(group) from None


def _lone(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception *group* holds (at any depth), or *group* if it holds more."""
    leaves = _leaves(group)
    return leaves[0] if len(leaves) == 1 else group


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


def _carrier() -> dict[str, str]:
    """The caller's OpenTelemetry context, to cross hosts (empty without OpenTelemetry)."""
    if "opentelemetry" not in sys.modules:
        return {}
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def _shares(total: int, parts: int) -> list[int]:
    """*total* split in *parts* near-equal ints (the first ones larger)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _sum_usage(totals: Any) -> UsageTotals:
    summed: dict[str, Any] = {}
    for usage in totals:
        for field in msgspec.structs.fields(UsageTotals):
            summed[field.name] = summed.get(field.name, 0) + getattr(usage, field.name)
    return UsageTotals(**summed)


_results: dict[Any, msgspec.msgpack.Decoder[Any]] = {}


def _result_decoder(spec: AgentSpec[Any]) -> msgspec.msgpack.Decoder[Any]:
    """A decoder of *spec*'s phase results (its typed output, if msgspec knows the type)."""
    output = str if spec.output_type is None else spec.output_type  # (None: the text)
    decoder = _results.get(output)
    if decoder is None:
        try:
            decoder = msgspec.msgpack.Decoder(PhaseResult[output])  # type: ignore[valid-type]
        except (TypeError, msgspec.ValidationError):
            decoder = msgspec.msgpack.Decoder(PhaseResult[Any])
        _results[output] = decoder
    return decoder


_events: msgspec.msgpack.Decoder[Any] | None = None


def _event_decoder() -> msgspec.msgpack.Decoder[Any]:
    global _events
    if _events is None:
        _events = msgspec.msgpack.Decoder(Union[event_types()])  # noqa: UP007
    return _events


def _RunDone(path: str, result: PhaseResult[Any]) -> Any:
    from ..agents.loop.stream import RunDone

    return RunDone(path=path, result=result)
