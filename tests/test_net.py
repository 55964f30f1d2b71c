"""RawSocket: plain TCP from Trio, on a loopback pair of sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.testing

from agentrio._net import RawSocket


@contextmanager
def tcp_pair() -> Iterator[tuple[RawSocket, RawSocket]]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    a, b = RawSocket(client), RawSocket(server)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


async def test_bytes_go_both_ways_and_end_with_the_peer() -> None:
    with tcp_pair() as (a, b):
        await a.send_all(b"ping")
        assert await b.receive() == b"ping"
        await b.send_all(b"pong")
        assert await a.receive() == b"pong"
        a.close()
        assert await b.receive() == b""


async def test_send_all_waits_for_room() -> None:
    data = bytes(range(256)) * (16 * 1024)  # 4 MiB: more than the socket buffers hold
    received = bytearray()
    with tcp_pair() as (a, b):

        async def read() -> None:
            while len(received) < len(data):
                received.extend(await b.receive(4096))
                await trio.sleep(0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await a.send_all(data)
    assert received == data


async def test_is_readable() -> None:
    with tcp_pair() as (a, b):
        assert not b.is_readable()
        await a.send_all(b"x")
        await trio.testing.wait_all_tasks_blocked()
        assert b.is_readable()
        assert await b.receive() == b"x"
        assert not b.is_readable()
        a.close()
        assert b.is_readable()  # the end of the stream is readable too


async def test_reset() -> None:
    with tcp_pair() as (a, b):
        a.reset()
        with pytest.raises(ConnectionResetError):
            await b.receive()


async def test_each_call_is_a_checkpoint() -> None:
    with tcp_pair() as (a, b):
        await a.send_all(b"x")
        with trio.CancelScope() as scope:
            scope.cancel()
            await b.receive()  # data is there, but the cancellation comes first
        assert scope.cancelled_caught
        with trio.CancelScope() as scope:
            scope.cancel()
            await b.send_all(b"y")
        assert scope.cancelled_caught
        assert await b.receive() == b"x"


async def test_a_receive_waiting_is_cancelled(autojump_clock: trio.testing.MockClock) -> None:
    with tcp_pair() as (_, b):
        with trio.move_on_after(5) as scope:
            await b.receive()
        assert scope.cancelled_caught and trio.current_time() == 5


async def test_close_is_idempotent_and_aclose_a_checkpoint() -> None:
    with tcp_pair() as (a, _):
        a.close()
        a.close()
        await a.aclose()
        a.reset()
