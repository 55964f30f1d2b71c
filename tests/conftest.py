"""Shared fixtures: an event recorder, a task tracker (a Trio instrument), and no network.

Time is controlled per test by naming pytest-trio's ``autojump_clock``
fixture (a ``MockClock(autojump_threshold=0)``) in the test's arguments.

No test reaches the network other than loopback (STYLE.md, rule 12): for the whole
session, connecting a socket (``connect``, ``connect_ex``, ``sendto``,
``socket.create_connection``) to anything but 127.0.0.0/8, ::1, ``localhost`` or a
Unix socket, and looking up a host name other than ``localhost`` (``getaddrinfo``,
``gethostbyname``), raise :class:`NetworkBlocked`. Trio's sockets are the stdlib's
underneath (``trio.socket`` calls ``socket.getaddrinfo`` and the stdlib socket's
``connect``), so ``trio.open_tcp_stream`` and agentrio's HTTP client are held too.
Binding and listening are not network access and stay allowed (a numeric address is
looked up without the network). Child processes (the CLI run as a command) are not
held: they only talk to the loopback servers their tests start.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import trio
from _network import NetworkBlocked

import agentrio


@pytest.fixture
def record_events(
    nursery: trio.Nursery,
) -> Callable[[agentrio.Runtime], list[agentrio.events.Event]]:
    """Subscribe to a runtime's events; the returned list fills in the background.

    After ``await trio.testing.wait_all_tasks_blocked()`` it holds every event
    published so far. The collector ends when the runtime closes.
    """

    def start(rt: agentrio.Runtime, capacity: int = 100_000) -> list[agentrio.events.Event]:
        events: list[agentrio.events.Event] = []
        stream = rt.events(capacity=capacity)

        async def collect() -> None:
            async with stream:
                async for event in stream:
                    events.append(event)

        nursery.start_soon(collect)
        return events

    return start


class TaskTracker(trio.abc.Instrument):
    """Records every task spawned while installed, and which were still alive
    when a watched task exited."""

    def __init__(self) -> None:
        self.spawned: list[trio.lowlevel.Task] = []
        self.exited: set[trio.lowlevel.Task] = set()
        self.alive_at_exit: dict[trio.lowlevel.Task, list[trio.lowlevel.Task]] = {}

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned.append(task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.exited.add(task)
        # What of this task's subtree was still running when it ended?
        self.alive_at_exit[task] = [t for t in self.descendants(task) if t not in self.exited]

    def named(self, name: str) -> trio.lowlevel.Task:
        (task,) = [t for t in self.spawned if t.name == name]
        return task

    def descendants(self, root: trio.lowlevel.Task) -> list[trio.lowlevel.Task]:
        out = []
        for task in self.spawned:
            parent = task.parent_nursery.parent_task if task.parent_nursery else None
            while parent is not None:
                if parent is root:
                    out.append(task)
                    break
                nursery = parent.parent_nursery
                parent = nursery.parent_task if nursery is not None else None
        return out

    def alive(self, tasks: list[trio.lowlevel.Task]) -> list[trio.lowlevel.Task]:
        return [t for t in tasks if t not in self.exited]


@pytest.fixture
async def task_tracker() -> AsyncIterator[TaskTracker]:
    tracker = TaskTracker()
    trio.lowlevel.add_instrument(tracker)
    try:
        yield tracker
    finally:
        trio.lowlevel.remove_instrument(tracker)


# -- no network but loopback ---------------------------------------------------------------


# (NetworkBlocked lives in tests/_network.py: a test imports it from there.)


_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
_RULE = "tests reach only 127.0.0.1, ::1, localhost and Unix sockets (STYLE.md, rule 12)"


def _host(host: object) -> str | None:
    if isinstance(host, bytes):
        return host.decode("ascii", "replace")
    return host if isinstance(host, str) else None


def _is_loopback(host: object) -> bool:
    name = _host(host)
    if name is None:
        return False
    if name.lower() in _LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name.partition("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _is_numeric(host: object) -> bool:
    name = _host(host)
    try:
        ipaddress.ip_address((name or "").partition("%")[0])
    except ValueError:
        return False
    return True


def _check_peer(address: object) -> None:
    """Refuse to reach *address* unless it is a Unix socket or on loopback."""
    if isinstance(address, str | bytes):
        return  # a Unix socket's path (or abstract name)
    if isinstance(address, tuple) and address and _is_loopback(address[0]):
        return
    raise NetworkBlocked(f"connecting to {address!r} refused: {_RULE}")


def _check_lookup(host: object) -> None:
    """Refuse to look up a host name other than loopback (a lookup may ask DNS)."""
    if host is None or _host(host) == "" or _is_numeric(host) or _is_loopback(host):
        return
    raise NetworkBlocked(f"looking up {host!r} refused: {_RULE}")


@pytest.fixture(autouse=True, scope="session")
def _no_network() -> Iterator[None]:
    connect, connect_ex, sendto = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.socket.sendto,
    )
    getaddrinfo, create_connection = socket.getaddrinfo, socket.create_connection
    gethostbyname, gethostbyname_ex = socket.gethostbyname, socket.gethostbyname_ex

    def guarded_connect(self: socket.socket, address: Any) -> None:
        _check_peer(address)
        return connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        _check_peer(address)
        return connect_ex(self, address)

    def guarded_sendto(self: socket.socket, data: Any, *args: Any) -> int:
        _check_peer(args[-1])  # sendto(data, address) or sendto(data, flags, address)
        return sendto(self, data, *args)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        _check_lookup(host)
        return getaddrinfo(host, *args, **kwargs)

    def guarded_create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        _check_peer(address)
        return create_connection(address, *args, **kwargs)

    def guarded_gethostbyname(host: str) -> str:
        _check_lookup(host)
        return gethostbyname(host)

    def guarded_gethostbyname_ex(host: str) -> tuple[str, list[str], list[str]]:
        _check_lookup(host)
        return gethostbyname_ex(host)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", guarded_connect)
        patch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
        patch.setattr(socket.socket, "sendto", guarded_sendto)
        patch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
        patch.setattr(socket, "create_connection", guarded_create_connection)
        patch.setattr(socket, "gethostbyname", guarded_gethostbyname)
        patch.setattr(socket, "gethostbyname_ex", guarded_gethostbyname_ex)
        yield
