"""No test reaches the network but loopback (the session fixture of tests/conftest.py)."""

from __future__ import annotations

import contextlib
import pathlib
import socket
from collections.abc import Iterator

import pytest
import trio
import trio.testing
from _network import NetworkBlocked

# 10.255.255.1 is routed nowhere: unguarded, a connect there hangs or fails slowly.
FAR = ("10.255.255.1", 9)
REFUSED = "tests reach only 127.0.0.1, ::1, localhost and Unix sockets"


@contextlib.contextmanager
def listener(family: socket.AddressFamily = socket.AF_INET) -> Iterator[socket.socket]:
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        sock.listen()
        yield sock


def test_connecting_beyond_loopback_fails_at_once() -> None:
    with socket.socket() as sock:
        sock.setblocking(False)  # unguarded, this connect would return at once too
        with pytest.raises(NetworkBlocked, match=rf"connecting to .*10\.255\.255\.1.*{REFUSED}"):
            sock.connect(FAR)
        with pytest.raises(NetworkBlocked):
            sock.connect_ex(FAR)
    with pytest.raises(NetworkBlocked):
        socket.create_connection(FAR, timeout=0)
    with socket.socket(type=socket.SOCK_DGRAM) as udp, pytest.raises(NetworkBlocked):
        udp.sendto(b"x", FAR)


def test_looking_up_a_host_name_fails_at_once() -> None:
    with pytest.raises(NetworkBlocked, match=rf"looking up 'example\.com' refused: {REFUSED}"):
        socket.getaddrinfo("example.com", 80)
    with pytest.raises(NetworkBlocked):
        socket.gethostbyname("example.com")


async def test_trio_sockets_are_held_too(autojump_clock: trio.testing.MockClock) -> None:
    # (The clock ends at once a wait that an unguarded connect would make.)
    with trio.fail_after(60):
        with pytest.raises(NetworkBlocked):
            await trio.socket.getaddrinfo("example.com", 80)
        with trio.socket.socket() as sock, pytest.raises(NetworkBlocked):
            await sock.connect(FAR)
        with pytest.RaisesGroup(NetworkBlocked, flatten_subgroups=True, allow_unwrapped=True):
            await trio.open_tcp_stream(*FAR)


async def test_loopback_and_unix_sockets_still_work(tmp_path: pathlib.Path) -> None:
    with listener() as server:
        port = server.getsockname()[1]
        socket.create_connection(("127.0.0.1", port)).close()
        socket.create_connection(("localhost", port)).close()
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.aclose()
        stream = await trio.open_tcp_stream("localhost", port)
        await stream.aclose()
    assert socket.getaddrinfo(None, 0, flags=socket.AI_PASSIVE)
    if socket.has_ipv6:
        with contextlib.suppress(OSError), listener(socket.AF_INET6) as server6:
            socket.create_connection(("::1", server6.getsockname()[1])).close()
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as unix_server:
        unix_server.bind(path)
        unix_server.listen()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
