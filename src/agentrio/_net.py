"""Plain TCP for Trio at about the cost of the system calls.

agentrio's HTTP client and the fake LLM server exchange a request and an
answer in four socket operations. Through ``trio.SocketStream`` each one also
enters a conflict detector and an exception-translating context manager;
measured on loopback, a request/answer round trip costs 32 us of CPU that
way, 17 us with the calls below. They keep Trio's rules: each is a
checkpoint (a cancellation point and a schedule point), and waits are
``trio.lowlevel.wait_readable`` / ``wait_writable``.

Only one task may use a `RawSocket` at a time (as for any Trio stream).
"""

from __future__ import annotations

import contextlib
import socket
import struct

import trio
from trio.lowlevel import (
    cancel_shielded_checkpoint,
    checkpoint_if_cancelled,
    notify_closing,
    wait_readable,
    wait_writable,
)

__all__ = ["RawSocket"]


class RawSocket:
    """A connected, non-blocking TCP socket, read and written from Trio.

    Errors are the system's: ``OSError`` (``ConnectionResetError``,
    ``BrokenPipeError``...); a socket closed locally raises
    ``trio.ClosedResourceError`` in a task waiting on it.
    """

    __slots__ = ("sock",)

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock

    @classmethod
    def from_stream(cls, stream: trio.SocketStream) -> RawSocket:
        """Take the socket out of *stream*, which is left closed."""
        trio_socket = stream.socket
        family, kind, proto = trio_socket.family, trio_socket.type, trio_socket.proto
        return cls(socket.socket(family, kind, proto, fileno=trio_socket.detach()))

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next bytes (at most *max_bytes*); b"" once the peer closed its side."""
        sock = self.sock
        await checkpoint_if_cancelled()
        try:
            data = sock.recv(max_bytes)
        except BlockingIOError:
            while True:
                await wait_readable(sock)  # (the checkpoint)
                try:
                    return sock.recv(max_bytes)
                except BlockingIOError:
                    pass
        await cancel_shielded_checkpoint()
        return data

    async def send_all(self, data: bytes) -> None:
        """Send all of *data*."""
        sock = self.sock
        await checkpoint_if_cancelled()
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent == len(data):
            await cancel_shielded_checkpoint()
            return
        view = memoryview(data)
        while sent < len(data):
            await wait_writable(sock)
            with contextlib.suppress(BlockingIOError):
                sent += sock.send(view[sent:])

    def is_readable(self) -> bool:
        """Whether a read would not wait: bytes have come, or the peer closed (or reset)."""
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True

    def close(self) -> None:
        """Close it now (a task waiting on it gets ``trio.ClosedResourceError``)."""
        if self.sock.fileno() >= 0:
            notify_closing(self.sock)
            self.sock.close()

    async def aclose(self) -> None:
        """Close it (a checkpoint, as Trio's ``aclose`` methods are)."""
        self.close()
        await trio.lowlevel.checkpoint()

    def reset(self) -> None:
        """Close it with a reset (RST), as a crashed peer or a dropped connection does."""
        if self.sock.fileno() >= 0:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close()
