"""Real endpoints are HTTPS, often behind a proxy: a Provider with its default client
trusts the certificate authorities of ``SSL_CERT_FILE`` and goes through the proxies
of ``HTTPS_PROXY`` / ``HTTP_PROXY`` unless ``NO_PROXY`` says otherwise, as httpx does.

Everything runs on 127.0.0.1: the fake server, a TLS front for it whose certificate
comes from a throwaway authority (trustme), and a proxy that notes what it is asked
for (a ``CONNECT`` tunnel, or a request in absolute form) and passes the bytes on.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
import trustme

from agentrio import ChatMessage, ModelReply, Provider, ProviderConfig, Usage
from agentrio.errors import ProviderUnavailable
from agentrio.testing import open_fake_llm

HI = [ChatMessage("user", "hi")]
OK = ModelReply(text="over TLS", usage=Usage(3, 2))
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or certificate settings but the test's own."""
    for name in (*PROXY_VARIABLES, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def _splice(a: trio.abc.Stream, b: trio.abc.Stream) -> None:
    """Copy bytes both ways until either side closes."""

    async def copy(source: trio.abc.Stream, sink: trio.abc.Stream) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(copy, a, b)
        nursery.start_soon(copy, b, a)


@asynccontextmanager
async def https_front(ca: trustme.CA, port: int) -> AsyncIterator[int]:
    """A TLS endpoint on 127.0.0.1 (certificate from *ca*) in front of plain *port*."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)

    async def handle(stream: trio.SSLStream[trio.SocketStream]) -> None:
        try:
            async with stream, await trio.open_tcp_stream("127.0.0.1", port) as upstream:
                await _splice(stream, upstream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # a client that refused the certificate

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            lambda task_status: trio.serve_ssl_over_tcp(
                handle, 0, context, host="127.0.0.1", https_compatible=True, task_status=task_status
            )
        )
        yield listeners[0].transport_listener.socket.getsockname()[1]
        nursery.cancel_scope.cancel()


class ProxyStub:
    """An HTTP proxy on 127.0.0.1 that notes each request line it gets and passes it on."""

    def __init__(self) -> None:
        self.asked: list[str] = []  # "CONNECT 127.0.0.1:1234", "POST http://..."

    async def handle(self, stream: trio.SocketStream) -> None:
        head = b""
        async with stream:
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                head += chunk
            line, _, rest = head.partition(b"\r\n")
            method, target, version = line.split(b" ")
            self.asked.append(f"{method.decode()} {target.decode()}")
            if method == b"CONNECT":
                host, _, port = target.decode().rpartition(":")
                upstream = await trio.open_tcp_stream(host, int(port))
                await stream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                start = head.partition(b"\r\n\r\n")[2]
            else:  # an absolute URL: the origin server wants its path
                url = httpx.URL(target.decode())
                assert url.port is not None
                upstream = await trio.open_tcp_stream(url.host, url.port)
                start = method + b" " + url.raw_path + b" " + version + b"\r\n" + rest
            async with upstream:
                if start:
                    await upstream.send_all(start)
                await _splice(stream, upstream)


@asynccontextmanager
async def proxy() -> AsyncIterator[tuple[ProxyStub, int]]:
    stub = ProxyStub()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, stub.handle, 0)
        yield stub, listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


def config(base_url: str) -> ProviderConfig:
    return ProviderConfig(name="p", kind="openai", base_url=base_url, max_retries=0)


async def test_https_with_the_authority_of_ssl_cert_file(
    ca: trustme.CA, ca_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)
    async with open_fake_llm([OK]) as server, https_front(ca, server.port) as port:
        async with Provider(config(f"https://127.0.0.1:{port}/v1")) as provider:
            assert await provider.complete("m", HI, [], max_output_tokens=5) == OK
        (seen,) = server.requests
    assert seen.api == "openai"


async def test_https_to_an_unknown_authority_is_a_typed_error(ca: trustme.CA) -> None:
    async with open_fake_llm([OK]) as server, https_front(ca, server.port) as port:
        async with Provider(config(f"https://127.0.0.1:{port}/v1")) as provider:
            with pytest.raises(ProviderUnavailable, match=r"(?i)certificate") as info:
                await provider.complete("m", HI, [], max_output_tokens=5)
        assert server.requests == []
    assert info.value.provider == "p"


async def test_https_through_the_proxy_of_https_proxy(
    ca: trustme.CA, ca_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)
    async with (
        open_fake_llm([OK]) as server,
        https_front(ca, server.port) as port,
        proxy() as (stub, proxy_port),
    ):
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy_port}")
        async with Provider(config(f"https://127.0.0.1:{port}/v1")) as provider:
            assert await provider.complete("m", HI, [], max_output_tokens=5) == OK
    # A tunnel: the proxy saw where to, never the request (nor its key).
    assert stub.asked == [f"CONNECT 127.0.0.1:{port}"]


async def test_http_through_the_proxy_of_http_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_fake_llm([OK]) as server, proxy() as (stub, proxy_port):
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
        async with Provider(config(server.base_url + "/v1")) as provider:
            assert await provider.complete("m", HI, [], max_output_tokens=5) == OK
    assert stub.asked == [f"POST {server.base_url}/v1/chat/completions"]


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*"])
async def test_no_proxy_goes_direct(
    ca: trustme.CA, ca_file: str, monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)
    async with (
        open_fake_llm([OK, OK]) as server,
        https_front(ca, server.port) as port,
        proxy() as (stub, proxy_port),
    ):
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy_port}")
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
        monkeypatch.setenv("NO_PROXY", no_proxy)
        for url in (f"https://127.0.0.1:{port}/v1", server.base_url + "/v1"):
            async with Provider(config(url)) as provider:
                assert await provider.complete("m", HI, [], max_output_tokens=5) == OK
    assert stub.asked == []
