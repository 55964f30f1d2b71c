"""Serving an ASGI app on 127.0.0.1 for the A2A tests: uvicorn in a thread of its own.

The A2A SDK's server and client are asyncio; the tests that use them from
Trio (agentrio's client) reach a server running in another thread, with its
own event loop, over real HTTP.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("a2a")
pytest.importorskip("uvicorn")

import uvicorn


class Served:
    """An app served on a free port of 127.0.0.1, in a thread."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        host, port = self.sock.getsockname()
        self.url = f"http://{host}:{port}"
        # (A request still hanging at the end, a hostile peer's, is cancelled after 1 s.)
        config = uvicorn.Config(
            make(self.url), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:  # (uvicorn says when it listens: no other way to wait)
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()
        assert not self.thread.is_alive()


@pytest.fixture
def serve() -> Iterator[Callable[[Any], Served]]:
    """``serve(app)``: the app served until the test ends (then stopped, its thread joined)."""
    with contextlib.ExitStack() as stack:
        yield lambda app: stack.enter_context(Served(lambda url: app))


@pytest.fixture
def serve_made() -> Iterator[Callable[[Callable[[str], Any]], Served]]:
    """``serve_made(make)``: the app ``make(url)`` served at *url* until the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda make: stack.enter_context(Served(make))
