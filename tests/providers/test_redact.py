"""Secrets stay secret: URL credentials, a key put in api_key_env, a key echoed in a stream.

Each test puts a secret where a user or a server could, and looks for it in
every text agentrio shows: messages, reprs, tracebacks, events and logs.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import socket
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    ConfigError,
    ModelSettings,
    Provider,
    ProviderConfig,
    ProviderError,
)
from agentrio.config import parse_config
from agentrio.errors import AuthError, BadResponse, ProviderUnavailable
from agentrio.events import PhaseError
from agentrio.providers.provider import Kind
from agentrio.providers.redact import redact_url, settings_secrets, url_secrets
from agentrio.store import MemoryStore
from agentrio.testing import Reply, open_fake_llm

KEY = "sk-agentrio-STREAMED-9c4e1b77"
PASSWORD = "pw-SECRET-5d3a"
QUERY_KEY = "qk-SECRET-81f0"
HI = [ChatMessage("user", "hi")]


def texts(exc: BaseException) -> str:
    """str, repr and the formatted traceback of *exc* and everything it chains to."""
    out = ["".join(traceback.format_exception(exc))]
    stack: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out += [str(e), repr(e), repr(e.args)]
        stack += [e.__cause__, e.__context__]
    return "\n".join(out)


# -- URLs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("http://user:pw@h:8/v1", "http://[redacted]@h:8/v1"),
        ("http://KEY@h/v1", "http://[redacted]@h/v1"),
        (
            "https://h/v1?key=abc&api-version=1&bare",
            "https://h/v1?key=[redacted]&api-version=[redacted]&[redacted]",
        ),
        ("https://h/v1?", "https://h/v1?"),
        ("https://h/v1#token", "https://h/v1#[redacted]"),
        ("http://u:p@[::1", "http://[redacted]@[::1"),  # unparsable: still cleaned
        ("127.0.0.1:8080", "127.0.0.1:8080"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_url_secrets_are_what_redact_url_hides() -> None:
    url = f"http://user:{PASSWORD}@h/v1?key={QUERY_KEY}&v=1&token=a%2Fb%2Fcdef"
    found = url_secrets(url)
    assert {f"user:{PASSWORD}", PASSWORD, QUERY_KEY, "a%2Fb%2Fcdef", "a/b/cdef"} == set(found)
    assert found == sorted(found, key=len, reverse=True)  # the longest is replaced first


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again at once: nothing listens there


async def test_url_credentials_appear_in_no_repr_or_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    url = f"http://user:{PASSWORD}@127.0.0.1:{_free_port()}/v1?key={QUERY_KEY}"
    config = ProviderConfig(name="p", kind="openai", base_url=url, max_retries=1)
    async with Provider(config) as provider:
        with pytest.raises(ProviderUnavailable, match="ConnectError") as info:
            await provider.complete("m", HI, [], max_output_tokens=8)
        shown = [texts(info.value), repr(provider), repr(provider.model("m")), repr(config)]
    assert "127.0.0.1" in str(info.value) and "key=[redacted]" in str(info.value)
    assert "[redacted]@127.0.0.1" in repr(provider) and "[redacted]@127.0.0.1" in repr(config)
    for secret in (PASSWORD, QUERY_KEY):
        assert not [text for text in shown if secret in text]


@pytest.mark.parametrize("own_client", [False, True])
async def test_url_credentials_are_kept_out_of_the_request_log(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, own_client: bool
) -> None:
    # Logged by agentrio.http for the provider's own connections, by httpx for one's own client.
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "agentrio"):
        caplog.set_level(logging.DEBUG, logger=name)
    async with open_fake_llm([Reply(text="hello")]) as server, httpx.AsyncClient() as client:
        host = server.base_url.removeprefix("http://")
        url = f"http://user:{PASSWORD}@{host}/v1?key={QUERY_KEY}"
        config = ProviderConfig(name="p", kind="openai", base_url=url)
        async with Provider(config, client=client if own_client else None) as provider:
            assert (await provider.complete("m", HI, [], max_output_tokens=8)).text == "hello"
    logger = "httpx" if own_client else "agentrio.http"
    (line,) = [r.getMessage() for r in caplog.records if r.name == logger]
    assert "HTTP Request: POST" in line and "key=[redacted]" in line and "200 OK" in line
    logged = caplog.text + "".join(repr(r.args) + r.getMessage() for r in caplog.records)
    assert PASSWORD not in logged and QUERY_KEY not in logged


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (f"ftp://user:{PASSWORD}@h/", "must start with http:// or https://"),
        (f"http://user:{PASSWORD}@[::1", "not a valid URL"),
        (f"http://[::1/v1?key={PASSWORD}", "not a valid URL"),
        ("http://", "has no host"),
        # httpx reads these as ports; no connection could be made to one.
        (f"http://user:{PASSWORD}@127.0.0.1:99999/v1", "has a port outside 1-65535"),
        (f"http://h:-1/v1?key={PASSWORD}", "has a port outside 1-65535"),
        ("http://127.0.0.1:0/v1", "has a port outside 1-65535"),
    ],
)
def test_a_bad_base_url_is_a_config_error_that_shows_no_secret(url: str, why: str) -> None:
    with pytest.raises(ConfigError, match="base_url") as info:
        ProviderConfig(name="p", kind="openai", base_url=url)
    assert why in str(info.value)
    assert PASSWORD not in texts(info.value)


# -- a key in api_key_env ------------------------------------------------------------------


@pytest.mark.parametrize("value", [KEY, "sk ant key", "9abcdef", "A=B"])
def test_a_key_in_api_key_env_is_refused_without_being_echoed(value: str) -> None:
    with pytest.raises(ConfigError, match="api_key_env must name an environment variable") as info:
        ProviderConfig(name="p", kind="openai", base_url="http://h", api_key_env=value)
    assert value not in texts(info.value)
    with pytest.raises(ConfigError, match="must name an environment variable") as info:
        parse_config(
            {"providers": {"p": {"kind": "openai", "base_url": "http://h", "api_key_env": value}}},
            path="agentrio.toml",
        )
    assert "providers.p" in str(info.value) and value not in texts(info.value)


async def test_a_key_that_looks_like_a_name_is_not_echoed_either(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Letters and digits only, as many keys are: a valid name, so refused only
    # when unset, and not shown because it is not written as variables are.
    key_like = "gskSECRET8f2a91cd0e"
    monkeypatch.delenv(key_like, raising=False)
    config = ProviderConfig(name="p", kind="openai", base_url="http://h", api_key_env=key_like)
    assert key_like not in repr(config)
    with pytest.raises(ConfigError, match="named by api_key_env is not set") as info:
        Provider(config)
    assert key_like not in texts(info.value)
    # Set (to a wrong key): the 401 names no variable either.
    monkeypatch.setenv(key_like, "wrong")
    async with open_fake_llm([], api_key="right") as server:
        config = ProviderConfig(
            name="p",
            kind="openai",
            base_url=server.base_url + "/v1",
            api_key_env=key_like,
            max_retries=0,
        )
        async with Provider(config) as provider:
            with pytest.raises(AuthError, match="check the variable named by api_key_env") as auth:
                await provider.complete("m", HI, [], max_output_tokens=8)
    assert key_like not in texts(auth.value)


def test_a_variable_named_as_usual_is_shown() -> None:
    config = ProviderConfig(
        name="p", kind="openai", base_url="http://h", api_key_env="OPENAI_API_KEY"
    )
    assert "api_key_env='OPENAI_API_KEY'" in repr(config)
    with pytest.raises(ConfigError, match="'AGENTRIO_SURELY_UNSET_2' \\(api_key_env\\) is not set"):
        Provider(
            ProviderConfig(
                name="p", kind="openai", base_url="http://h", api_key_env="AGENTRIO_SURELY_UNSET_2"
            )
        )


# -- a key echoed in a stream ------------------------------------------------------------------

ECHOED: dict[Kind, tuple[str, bytes]] = {
    # An error event quoting the request, and a chunk that is not JSON.
    "anthropic": (
        "the stream reported an error",
        b"event: error\ndata: "
        + json.dumps(
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": f"bad key {KEY}"},
            }
        ).encode()
        + b"\n\n",
    ),
    "openai": ("not JSON", f"data: <html>denied for {KEY}</html>\n\n".encode()),
    "ollama": (
        "the stream reported an error",
        json.dumps({"error": f"key {KEY} refused"}).encode() + b"\n",
    ),
}


def _echoing(kind: Kind, **options: object) -> Provider:
    body = ECHOED[kind][1]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    config = ProviderConfig(
        name="p",
        kind=kind,
        base_url="http://127.0.0.1:9/v1",
        stream=True,
        max_retries=0,
        **options,  # type: ignore[arg-type]
    )
    return Provider(config, client=client, api_key=KEY)


@pytest.mark.parametrize("kind", ECHOED)
async def test_a_key_echoed_in_a_stream_is_redacted(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    kind: Kind,
) -> None:
    provider = _echoing(kind)
    with pytest.raises(BadResponse, match=ECHOED[kind][0]) as info:
        await provider.complete("m", HI, [], max_output_tokens=8)
    assert "[redacted]" in str(info.value) and KEY not in texts(info.value)
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        result = await (await rt.spawn_agent(AgentSpec("a", provider.model("m")))).run("hi")
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "error"
    (error,) = [e for e in events if isinstance(e, PhaseError)]
    assert error.error_type == "BadResponse" and "[redacted]" in error.error
    assert KEY not in repr(events)


async def test_a_key_straddling_the_quoted_part_of_a_chunk_is_not_shown_in_part(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        # The parser quotes the first 1000 characters: the key is cut there.
        return httpx.Response(200, content=b"data: " + b"x" * 990 + KEY.encode() + b"\n\n")

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    config = ProviderConfig(
        name="p", kind="openai", base_url="http://127.0.0.1:9/v1", stream=True, max_retries=0
    )
    with pytest.raises(ProviderError) as info:
        await Provider(config, client=client, api_key=KEY).complete(
            "m", HI, [], max_output_tokens=8
        )
    assert KEY[:6] not in texts(info.value)


# -- a run's settings echoed by a server ---------------------------------------------------

RUN_HEADER_KEY = "rk-RUN-HEADER-3f9a2c61"
RUN_BODY_KEY = "bk-RUN-BODY-77e0d1b5"
NESTED_KEY = 'nk-"NESTED"-0a9c'  # (its quotes are escaped in an echoed JSON body)
# Each as sent, and as the echo spells it (within a JSON string within a JSON string).
RUN_SECRETS = (
    RUN_HEADER_KEY,
    RUN_BODY_KEY,
    NESTED_KEY,
    json.dumps(NESTED_KEY)[1:-1],
    json.dumps(json.dumps(NESTED_KEY)[1:-1])[1:-1],
    "NESTED",
)


def _echoing_server(status: int) -> Callable[[trio.SocketStream], Awaitable[None]]:
    """A server answering *status* with an error quoting the whole request, head and
    body (200: a stream ending in an error object that quotes it)."""

    async def serve(conn: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await conn.receive_some()
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        while length is not None and len(body) < int(length[1]):
            body += await conn.receive_some()
        # (the extra headers and body fields only: what is shown is cut at 300 characters)
        headers = [line for line in head.decode().split("\r\n") if line.startswith("x-")]
        sent = json.loads(body)
        fields = json.dumps(
            {k: sent[k] for k in ("user_token", "meta", "n")}, separators=(",", ":")
        )
        said = {"error": {"message": f"cannot take {headers} {fields}"}}
        echo = json.dumps(said).encode()
        kind = b"application/json"
        if status == 200:
            echo, kind = b"data: " + echo + b"\n\n", b"text/event-stream"
        await conn.send_all(
            b"HTTP/1.1 %d Echo\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, kind, len(echo), echo)
        )
        await conn.aclose()

    return serve


@pytest.mark.parametrize("status", [400, 401, 500, 200])
async def test_a_runs_extra_headers_and_body_echoed_by_a_server_are_shown_nowhere(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    status: int,
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = ModelSettings(
        extra_headers={"x-run-key": RUN_HEADER_KEY, "x-n": "1"},
        extra_body={"user_token": RUN_BODY_KEY, "meta": {"deep": [NESTED_KEY]}, "n": "2"},
    )
    store, trace = MemoryStore(), tmp_path / "trace.jsonl"
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, _echoing_server(status), 0, host="127.0.0.1")
        (listener,) = await nursery.start(serve)
        url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}/v1"
        stream = status == 200
        config = ProviderConfig(name="p", kind="openai", base_url=url, max_retries=1, stream=stream)
        async with Provider(config) as provider:

            def make() -> AgentSpec[str]:
                return AgentSpec("worker", provider.model("m"))

            async with agentrio.open_runtime(
                trace=trace, store=store, specs={"worker": make}
            ) as rt:
                events = record_events(rt)
                agent = await rt.spawn_agent(make())
                result = await agent.run("hi", settings=settings)
                await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert result.stop_reason == "error" and result.error is not None
    # What the server said is quoted, all but the run's values; short ones are left.
    assert "x-run-key: [redacted]" in result.error and "x-n: 1" in result.error
    assert "user_token" in result.error and "deep" in result.error
    assert (f"HTTP {status}" if status != 200 else "the stream reported an error") in result.error
    logged = caplog.text + "".join(repr(r.args) + r.getMessage() for r in caplog.records)
    stored = b"".join(store.records).decode("utf-8", "replace")
    shown = [repr(result), repr(events), trace.read_text(), logged, stored]
    assert "[redacted]" in trace.read_text()
    for secret in RUN_SECRETS:
        assert not [text for text in shown if secret in text], secret


def test_settings_secrets_are_the_long_values_as_sent_and_as_an_echo_spells_them() -> None:
    accented = "cl\u00e9-\u00e0-secret"
    found = settings_secrets(
        {"x-key": RUN_HEADER_KEY, "x-n": "1"},
        {"token": accented, "deep": {"a": [[NESTED_KEY]]}, "n": 123456789, "short": "abc"},
    )
    assert {RUN_HEADER_KEY, NESTED_KEY, accented} <= set(found)
    assert json.dumps(NESTED_KEY)[1:-1] in found  # nk-\"NESTED\"-0a9c
    assert json.dumps(json.dumps(NESTED_KEY)[1:-1])[1:-1] in found  # nk-\\\"NESTED...
    assert "cl\\u00e9-\\u00e0-secret" in found
    assert not {"1", "abc", "123456789"} & set(found)
    assert found == sorted(found, key=len, reverse=True)  # the longest is replaced first
    assert settings_secrets(None, None) == []
    # A key as keys are written has one spelling.
    assert settings_secrets({"k": RUN_HEADER_KEY}, None) == [RUN_HEADER_KEY]


@pytest.mark.parametrize("overflow", [False, True])
async def test_a_failed_responses_answer_echoing_the_request_shows_no_secret(
    overflow: bool,
) -> None:
    # A whole (not streamed) Responses answer that failed is quoted, a context
    # overflow included: neither the key nor a run's header values may be.
    said = " context_length_exceeded: maximum context length is 10 tokens" if overflow else ""

    def handler(request: httpx.Request) -> httpx.Response:
        echoed = {k: v for k, v in request.headers.items() if k.startswith(("x-", "auth"))}
        error = {"code": "bad", "message": f"cannot take {echoed}{said}"}
        return httpx.Response(200, json={"status": "failed", "output": [], "error": error})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    config = ProviderConfig(
        name="p", kind="openai-responses", base_url="http://127.0.0.1:9/v1", max_retries=0
    )
    settings = ModelSettings(extra_headers={"x-run-key": RUN_HEADER_KEY})
    async with Provider(config, client=client, api_key=KEY) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.model("m").complete(HI, [], max_output_tokens=8, settings=settings)
    shown = texts(caught.value)
    assert "the response failed" in shown and "[redacted]" in shown
    assert KEY not in shown and RUN_HEADER_KEY not in shown
