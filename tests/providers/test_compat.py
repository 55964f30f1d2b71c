"""Compatible servers, tested: each recipe of docs/providers.md ("Compatible
servers") against a small server on 127.0.0.1 that answers as that server does
(its paths, headers, and the shapes of its answers, streamed and not), checking
what agentrio sends and what it reads back: reasoning kept as thinking, never as
text; DeepSeek's cache counts; and a server that reports no usage charged an
estimate that a token budget bounds."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h11
import pytest
import trio

import agentrio
from agentrio import (
    AgentSpec,
    Budget,
    ChatMessage,
    Limits,
    ModelReply,
    ModelSettings,
    Provider,
    ProviderConfig,
    ToolCallRequest,
    Usage,
)
from agentrio.errors import ConfigError, ProviderError
from agentrio.events import RunDone, TextDelta
from agentrio.providers.openai import UNREPORTED, OpenAIWire
from agentrio.providers.tokens import estimate_tokens, message_tokens
from agentrio.testing import Reply, open_fake_llm
from agentrio.types import ThinkingBlock

KEY = "sk-compat-0123456789abcdef"
QUESTION = [ChatMessage("system", "be brief"), ChatMessage("user", "Is 9.11 more than 9.8?")]
THOUGHT = "9.11 has 11 hundredths, 9.8 has 80: so 9.8 is larger."
ANSWER = "No: 9.8 is larger."

Event = dict[str, Any] | str  # a JSON chunk, "[DONE]", or an SSE line as it is (": comment")


@attrs.frozen
class Seen:
    """One request as the server got it."""

    method: str
    target: str  # the path and the query
    headers: dict[str, str]  # (names in lower case)
    body: dict[str, Any]


@attrs.frozen
class Answer:
    """What the server sends back: a JSON body, or (*events*) an SSE stream."""

    body: object = None
    events: Sequence[Event] = ()
    status: int = 200


Handler = Callable[[Seen], Answer]


class Server:
    """A server on 127.0.0.1 that records each request and answers it with *handler*
    (HTTP/1.1 by h11: JSON with a Content-Length, streams chunked, as the APIs do)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.seen: list[Seen] = []
        self.url = ""

    async def serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            request: h11.Request | None = None
            body = b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Request):
                    request, body = event, b""
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    assert request is not None
                    await self._answer(stream, conn, request, body)
                    if conn.our_state is not h11.DONE:
                        return
                    conn.start_next_cycle()
                else:  # (the client closed the connection)
                    return

    async def _answer(
        self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> None:
        seen = Seen(
            request.method.decode(),
            request.target.decode(),
            {k.decode().lower(): v.decode() for k, v in request.headers},
            json.loads(body),
        )
        self.seen.append(seen)
        answer = self.handler(seen)
        if not answer.events:
            data = json.dumps(answer.body).encode()
            head = [("content-type", "application/json"), ("content-length", str(len(data)))]
            out = conn.send(h11.Response(status_code=answer.status, headers=head))
            out += conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage())
            await stream.send_all(out)
            return
        head = [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]
        out = conn.send(h11.Response(status_code=200, headers=head))
        for event in answer.events:
            if isinstance(event, str) and event.startswith(":"):
                line = event.encode() + b"\n\n"
            else:
                line = b"data: " + (event if event == "[DONE]" else json.dumps(event)).encode()
                line += b"\n\n"
            out += conn.send(h11.Data(data=line))
        await stream.send_all(out + conn.send(h11.EndOfMessage()))


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[Server]:
    server = Server(handler)
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1")
        (listener,) = await nursery.start(serve)
        server.url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
        yield server
        nursery.cancel_scope.cancel()


def configured(base_url: str, **options: Any) -> ProviderConfig:
    return ProviderConfig(name="compat", kind="openai", base_url=base_url, max_retries=0, **options)


async def ask(config: ProviderConfig, *, key: str | None = None, **call: Any) -> ModelReply:
    """One call of *config*'s provider (what a streamed call's text deltas were goes
    to ``call["on_text"]``)."""
    messages = call.pop("messages", QUESTION)
    async with Provider(config, api_key=key) as p:
        return await p.complete("m", messages, call.pop("tools", []), max_output_tokens=64, **call)


# -- the answers, as each server sends them -----------------------------------------------


def completion(message: dict[str, Any], usage: object, **extra: Any) -> dict[str, Any]:
    """A ``chat.completion`` body: *message* the choice's, *usage* None for none."""
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": "m",
        "choices": [choice],
        **extra,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [choice],
        **extra,
    }


def usage_chunk(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [],
        "usage": usage,
    }


def pieces(field: str, text: str) -> list[Event]:
    """*text* streamed as three deltas of *field*."""
    third = len(text) // 3 + 1
    return [chunk({field: text[i : i + third]}) for i in range(0, len(text), third)]


def stream_of(
    reasoning_field: str | None, usage: dict[str, Any] | None, *, comments: bool = False
) -> list[Event]:
    """A streamed answer: the role, the reasoning (in *reasoning_field*), the text,
    the finish, the usage chunk (None: none), ``[DONE]``; OpenRouter's comments
    between them if asked."""
    events: list[Event] = [chunk({"role": "assistant", "content": ""})]
    if comments:
        events.append(": OPENROUTER PROCESSING")
    if reasoning_field is not None:
        events += pieces(reasoning_field, THOUGHT)
    if comments:
        events.append(": OPENROUTER PROCESSING")
    events += [*pieces("content", ANSWER), chunk({}, "stop")]
    if usage is not None:
        events.append(usage_chunk(usage))
    return [*events, "[DONE]"]


def answers(streamed: Answer, whole: Answer) -> Handler:
    """A handler answering a streamed request with *streamed*, another with *whole*."""
    return lambda seen: streamed if seen.body.get("stream") else whole


def reads_the_thought(reply: ModelReply, texts: list[str]) -> None:
    """*reply*'s reasoning is its thinking, never its text nor a text delta."""
    assert reply.text == ANSWER
    assert reply.thinking == (ThinkingBlock(THOUGHT),)
    assert "".join(texts) in ("", ANSWER)
    assert THOUGHT not in reply.text and not any(THOUGHT[:10] in t for t in texts)


# -- Azure OpenAI ---------------------------------------------------------------------------

AZURE_USAGE = {
    "prompt_tokens": 21,
    "completion_tokens": 7,
    "total_tokens": 28,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}
# What Azure adds to OpenAI's shapes: its content filters' results, and a first
# streamed chunk with no choices that holds the prompt's.
FILTERED = {"hate": {"filtered": False, "severity": "safe"}}
AZURE = answers(
    Answer(
        events=[
            {"id": "", "object": "", "model": "", "choices": [], "prompt_filter_results": []},
            *stream_of(None, AZURE_USAGE)[:-1],
            "[DONE]",
        ]
    ),
    Answer(
        completion(
            {"content": ANSWER, "refusal": None},
            AZURE_USAGE,
            prompt_filter_results=[{"prompt_index": 0, "content_filter_results": FILTERED}],
        )
    ),
)


@pytest.mark.parametrize("stream", [False, True])
async def test_azure_deployment_path_api_version_and_api_key_header(
    stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    async with serving(AZURE) as server:
        config = configured(
            server.url + "/openai/deployments/gpt-4o-prod?api-version=2024-10-21",
            api_key_env="AZURE_OPENAI_API_KEY",
            auth_header="api-key",
            stream=stream,
        )
        reply = await ask(config)
    (seen,) = server.seen
    assert seen.method == "POST"
    assert seen.target == "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    assert seen.headers["api-key"] == KEY and "authorization" not in seen.headers
    assert reply.text == ANSWER and reply.usage == Usage(21, 7)
    assert KEY not in repr(config) and "2024-10-21" not in repr(config)  # (query values hidden)


async def test_azure_v1_path_takes_the_deployment_as_the_model() -> None:
    async with serving(AZURE) as server:
        config = configured(server.url + "/openai/v1", auth_header="api-key")
        async with Provider(config, api_key=KEY) as p:
            reply = await p.complete("gpt-4o-prod", QUESTION, [], max_output_tokens=64)
    (seen,) = server.seen
    assert seen.target == "/openai/v1/chat/completions"
    assert seen.headers["api-key"] == KEY and "authorization" not in seen.headers
    assert seen.body["model"] == "gpt-4o-prod"
    assert reply.text == ANSWER


async def test_azure_v1_responses_api_takes_the_api_key_header() -> None:
    # Azure's v1 path serves the Responses API too: auth_header holds on that wire
    # (it was ignored there, so the key went as Bearer and Azure refused it).
    response = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 21, "output_tokens": 7, "total_tokens": 28},
    }
    async with serving(lambda seen: Answer(response)) as server:
        config = ProviderConfig(
            name="azure",
            kind="openai-responses",
            base_url=server.url + "/openai/v1",
            auth_header="api-key",
            max_retries=0,
        )
        async with Provider(config, api_key=KEY) as p:
            reply = await p.complete("gpt-5-mini-prod", QUESTION, [], max_output_tokens=64)
    (seen,) = server.seen
    assert seen.target == "/openai/v1/responses"
    assert seen.headers["api-key"] == KEY and "authorization" not in seen.headers
    assert reply.text == ANSWER


async def test_a_refused_api_key_header_names_no_key() -> None:
    refused = {"error": {"code": "401", "message": f"Access denied: key {KEY} is invalid."}}
    async with serving(lambda seen: Answer(refused, status=401)) as server:
        config = configured(server.url + "/openai/v1", auth_header="api-key")
        with pytest.raises(ProviderError) as info:
            await ask(config, key=KEY)
    assert info.value.status == 401 and KEY not in str(info.value)


@pytest.mark.parametrize("header", ["api key", "", "x:y", 7])
def test_auth_header_must_be_a_header_name(header: object) -> None:
    with pytest.raises(ConfigError, match="auth_header must be a header's name"):
        configured("https://h/v1", auth_header=header)


def test_auth_header_default_is_bearer() -> None:
    assert OpenAIWire().headers(KEY) == {"Authorization": f"Bearer {KEY}"}
    assert OpenAIWire(auth_header="api-key").headers(KEY) == {"api-key": KEY}
    assert OpenAIWire(auth_header="api-key").headers(None) == {}  # (a local server: no key)


# -- Gemini's OpenAI-compatible endpoint --------------------------------------------------

GEMINI_USAGE = {"completion_tokens": 9, "prompt_tokens": 14, "total_tokens": 23}


def gemini(seen: Seen) -> Answer:
    """As Gemini's endpoint answers: it refuses a field it does not know (400)."""
    known = {"model", "messages", "max_tokens", "stream", "stream_options", "reasoning_effort"}
    for field in seen.body:
        if field not in known:
            text = f'Invalid JSON payload received. Unknown name "{field}": Cannot find field.'
            return Answer([{"error": {"code": 400, "message": text}}], status=400)
    if seen.body.get("stream"):
        return Answer(events=stream_of(None, GEMINI_USAGE))
    return Answer(completion({"content": ANSWER}, GEMINI_USAGE))


@pytest.mark.parametrize("stream", [False, True])
async def test_gemini_bearer_key_max_tokens_and_reasoning_effort(stream: bool) -> None:
    async with serving(gemini) as server:
        config = configured(
            server.url + "/v1beta/openai",
            max_tokens_field="max_tokens",
            stream=stream,
            settings=ModelSettings(extra_body={"reasoning_effort": "low"}),
        )
        reply = await ask(config, key=KEY)
    (seen,) = server.seen
    assert seen.target == "/v1beta/openai/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.body["max_tokens"] == 64 and seen.body["reasoning_effort"] == "low"
    assert reply.text == ANSWER and reply.usage == Usage(14, 9)


async def test_a_server_refusing_stream_options_is_asked_without() -> None:
    def strict(seen: Seen) -> Answer:
        if "stream_options" in seen.body:
            text = 'Invalid JSON payload received. Unknown name "stream_options"'
            return Answer({"error": {"message": text}}, status=400)
        return Answer(events=stream_of(None, None))  # (and then: no usage at all)

    async with serving(strict) as server:
        with pytest.raises(ProviderError, match="stream_options"):
            await ask(configured(server.url + "/v1", stream=True))
        reply = await ask(configured(server.url + "/v1", stream=True, stream_usage=False))
    assert "stream_options" not in server.seen[1].body
    assert reply.text == ANSWER
    assert reply.usage == Usage(input_estimate(QUESTION), estimate_tokens(ANSWER))


# -- OpenRouter --------------------------------------------------------------------------------

OPENROUTER_USAGE = {
    "prompt_tokens": 30,
    "completion_tokens": 40,
    "total_tokens": 70,
    "completion_tokens_details": {"reasoning_tokens": 25},
    "cost": 0.00012,
}
DETAILS = [{"type": "reasoning.text", "text": THOUGHT, "format": "unknown", "index": 0}]
OPENROUTER = answers(
    Answer(events=stream_of("reasoning", OPENROUTER_USAGE, comments=True)),
    Answer(
        completion(
            {"content": ANSWER, "reasoning": THOUGHT, "reasoning_details": DETAILS},
            OPENROUTER_USAGE,
            provider="DeepInfra",
        )
    ),
)


@pytest.mark.parametrize("stream", [False, True])
async def test_openrouter_headers_and_reasoning(stream: bool) -> None:
    texts: list[str] = []
    headers = {"HTTP-Referer": "https://example.com/app", "X-Title": "my app"}
    async with serving(OPENROUTER) as server:
        config = configured(
            server.url + "/api/v1",
            stream=stream,
            settings=ModelSettings(
                extra_headers=headers, extra_body={"reasoning": {"effort": "high"}}
            ),
        )
        reply = await ask(config, key=KEY, on_text=texts.append)
    (seen,) = server.seen
    assert seen.target == "/api/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["http-referer"] == headers["HTTP-Referer"]
    assert seen.headers["x-title"] == "my app"
    assert seen.body["reasoning"] == {"effort": "high"}
    reads_the_thought(reply, texts)
    assert reply.usage == Usage(30, 40, reasoning_tokens=25)  # (its count, not an estimate)


# -- vLLM, LM Studio, llama.cpp's server -------------------------------------------------------

LOCAL_USAGE = {"prompt_tokens": 18, "completion_tokens": 60, "total_tokens": 78}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "fields", [("reasoning_content",), ("reasoning",), ("reasoning", "reasoning_content")]
)
async def test_local_servers_reasoning_no_key(stream: bool, fields: tuple[str, ...]) -> None:
    """vLLM's reasoning parsers, LM Studio and llama.cpp send ``reasoning_content``;
    newer vLLM ``reasoning`` (and, while it renames it, both: read once)."""
    message = {"content": ANSWER, **dict.fromkeys(fields, THOUGHT)}
    events: list[Event] = [chunk({"role": "assistant", "content": ""})]
    third = len(THOUGHT) // 3 + 1
    for i in range(0, len(THOUGHT), third):
        events.append(chunk(dict.fromkeys(fields, THOUGHT[i : i + third])))
    events += [*pieces("content", ANSWER), chunk({}, "stop"), usage_chunk(LOCAL_USAGE), "[DONE]"]
    texts: list[str] = []
    handler = answers(Answer(events=events), Answer(completion(message, LOCAL_USAGE)))
    async with serving(handler) as server:
        config = configured(server.url + "/v1", max_tokens_field="max_tokens", stream=stream)
        reply = await ask(config, on_text=texts.append)
    (seen,) = server.seen
    assert "authorization" not in seen.headers  # (no key: none sent)
    assert seen.body["max_tokens"] == 64
    reads_the_thought(reply, texts)
    # No count of the reasoning came with it: its share is estimated from its text.
    assert reply.usage == Usage(18, 60, reasoning_tokens=estimate_tokens(THOUGHT))


def input_estimate(messages: Sequence[ChatMessage]) -> int:
    return sum(message_tokens(estimate_tokens, m) for m in messages)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_server_reporting_no_usage_is_charged_an_estimate(stream: bool) -> None:
    """llama.cpp's and LM Studio's streams, and some servers' answers, have no usage."""
    message = {"content": ANSWER, "reasoning_content": THOUGHT}
    handler = answers(
        Answer(events=stream_of("reasoning_content", None)), Answer(completion(message, None))
    )
    async with serving(handler) as server:
        reply = await ask(configured(server.url + "/v1", stream=stream))
    thought = estimate_tokens(THOUGHT)
    assert reply.usage == Usage(
        input_estimate(QUESTION), estimate_tokens(ANSWER) + thought, reasoning_tokens=thought
    )
    assert reply.usage is not UNREPORTED


async def test_the_output_estimate_counts_tool_calls_and_stops_at_the_limit() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"key": "x" * 2000})},
    }
    handler = answers(Answer(), Answer(completion({"content": None, "tool_calls": [call]}, None)))
    async with serving(handler) as server:
        reply = await ask(configured(server.url + "/v1"))
    assert reply.tool_calls[0].arguments == {"key": "x" * 2000}
    assert reply.usage == Usage(input_estimate(QUESTION), 64)  # (max_output_tokens at most)


async def test_a_reported_usage_of_zero_is_kept() -> None:
    zero = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    async with serving(lambda seen: Answer(completion({"content": "hi"}, zero))) as server:
        reply = await ask(configured(server.url + "/v1"))
    assert reply.usage == Usage()


def looping(seen: Seen) -> Answer:
    """A local server that reports no usage and calls a tool every time."""
    n = len(seen.body["messages"])
    call = {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": "note", "arguments": json.dumps({"text": f"step {n}"})},
    }
    return Answer(completion({"content": None, "tool_calls": [call]}, None))


def note(text: str) -> str:
    """Take a note."""
    return "noted: " + text * 20


async def test_the_no_usage_estimate_bounds_a_token_budget() -> None:
    async with (
        serving(looping) as server,
        Provider(configured(server.url + "/v1")) as provider,
        agentrio.open_runtime() as rt,
    ):
        spec = AgentSpec(
            "a",
            provider.model("local-model"),
            instructions="take notes",
            tools=[note],
            limits=Limits(max_iterations=50, max_output_tokens=32),
        )
        agent = await rt.spawn_agent(spec, budget=Budget(max_total_tokens=1500))
        result = await agent.run("go")
        spent = agent.usage()
    assert result.stop_reason == "budget_exhausted"
    assert 3 <= len(server.seen) < 50  # (bounded by the budget, not by max_iterations)
    assert 0 < spent.total_tokens <= 1500
    assert spent.requests == len(server.seen)


# -- DeepSeek ----------------------------------------------------------------------------------

DEEPSEEK_USAGE = {
    "prompt_tokens": 200,
    "completion_tokens": 90,
    "total_tokens": 290,
    "prompt_tokens_details": {"cached_tokens": 128},
    "completion_tokens_details": {"reasoning_tokens": 70},
    "prompt_cache_hit_tokens": 128,
    "prompt_cache_miss_tokens": 72,
}
DEEPSEEK = answers(
    Answer(events=stream_of("reasoning_content", DEEPSEEK_USAGE)),
    Answer(
        completion(
            {"content": ANSWER, "reasoning_content": THOUGHT},
            DEEPSEEK_USAGE,
            system_fingerprint="fp_1",
        )
    ),
)


@pytest.mark.parametrize("stream", [False, True])
async def test_deepseek_reasoning_and_cache_counts(stream: bool) -> None:
    texts: list[str] = []
    async with serving(DEEPSEEK) as server:
        config = configured(server.url, max_tokens_field="max_tokens", stream=stream)
        reply = await ask(config, key=KEY, on_text=texts.append)
    (seen,) = server.seen
    assert seen.target == "/chat/completions"  # (https://api.deepseek.com, no /v1)
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    reads_the_thought(reply, texts)
    assert reply.usage == Usage(200, 90, cached_input_tokens=128, reasoning_tokens=70)


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        # Without OpenAI's field (DeepSeek's older answers): the hit count is the cache.
        (
            {"prompt_tokens": 200, "prompt_cache_hit_tokens": 128, "prompt_cache_miss_tokens": 72},
            128,
        ),
        ({"prompt_tokens": 200, "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 200}, 0),
        # A count past the total is cut to it.
        ({"prompt_tokens": 100, "prompt_cache_hit_tokens": 500}, 100),
    ],
)
def test_deepseek_cache_hit_tokens_are_cached_input(usage: dict[str, Any], cached: int) -> None:
    reply = OpenAIWire().parse(completion({"content": "x"}, usage), "p", None)
    assert reply.usage.cached_input_tokens == cached


HISTORY = [
    ChatMessage("user", "look a up"),
    ChatMessage(
        "assistant",
        "",
        tool_calls=(ToolCallRequest("lookup", {"key": "a"}, id="c1"),),
        thinking=(ThinkingBlock("I should look a up."),),
    ),
    ChatMessage("tool", "a is 1", tool_call_id="c1", name="lookup"),
    ChatMessage("assistant", "a is 1.", thinking=(ThinkingBlock("It said 1."),)),
    ChatMessage("user", "and b?"),
    ChatMessage("assistant", "", tool_calls=(ToolCallRequest("lookup", {"key": "b"}, id="c2"),)),
    ChatMessage("tool", "b is 2", tool_call_id="c2", name="lookup"),
]


async def test_reasoning_is_never_sent_back_by_default() -> None:
    async with serving(DEEPSEEK) as server:
        await ask(configured(server.url), key=KEY, messages=HISTORY)
    (seen,) = server.seen
    assert not any("reasoning_content" in m or "reasoning" in m for m in seen.body["messages"])


async def test_send_reasoning_sends_it_with_tool_calls_only() -> None:
    """DeepSeek's thinking mode refuses a history whose tool-calling turns lack
    their reasoning (the other turns' is not to be sent)."""
    async with serving(DEEPSEEK) as server:
        await ask(configured(server.url, send_reasoning=True), key=KEY, messages=HISTORY)
    sent = [m.get("reasoning_content") for m in server.seen[0].body["messages"]]
    assert sent == [None, "I should look a up.", None, None, None, "", None]


async def test_an_agent_keeps_reasoning_out_of_its_text_and_history_sent() -> None:
    """Through an agent: the answer's text, the TextDelta events and the next call's
    messages hold no reasoning; the reasoning is the turn's thinking."""

    def deepseek_agent(seen: Seen) -> Answer:
        if len(seen.body["messages"]) > 1:
            return Answer(events=stream_of("reasoning_content", DEEPSEEK_USAGE))
        # The first call: why, then a tool call.
        fn = {"name": "note", "arguments": '{"text": "x"}'}
        call = {"index": 0, "id": "call_1", "type": "function", "function": fn}
        events: list[Event] = [
            chunk({"role": "assistant", "content": None}),
            *pieces("reasoning_content", THOUGHT),
            chunk({"tool_calls": [call]}),
            chunk({}, "tool_calls"),
            usage_chunk(DEEPSEEK_USAGE),
            "[DONE]",
        ]
        return Answer(events=events)

    async with serving(deepseek_agent) as server:
        config = configured(server.url, stream=True)
        async with Provider(config, api_key=KEY) as provider, agentrio.open_runtime() as rt:
            spec = AgentSpec("a", provider.model("deepseek-chat"), tools=[note])
            agent = await rt.spawn_agent(spec)
            async with agent.stream("go") as stream:
                items = [item async for item in stream]
            history = await agent.history()
    texts = [item.text for item in items if isinstance(item, TextDelta)]
    assert isinstance(items[-1], RunDone) and items[-1].result.final_text == ANSWER
    assert THOUGHT not in json.dumps(server.seen[1].body)  # (not sent back)
    called, answered = (t.message for t in history if t.message.role == "assistant")
    assert (called.content, called.thinking) == ("", (ThinkingBlock(THOUGHT),))
    assert (answered.content, answered.thinking) == (ANSWER, (ThinkingBlock(THOUGHT),))
    assert "".join(texts) == ANSWER


# -- the fake server speaks it too ----------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_the_fake_server_sends_thinking_as_reasoning_content(stream: bool) -> None:
    reply = Reply(text=ANSWER, thinking=(ThinkingBlock(THOUGHT),), usage=Usage(10, 20))
    texts: list[str] = []
    async with open_fake_llm([reply]) as server:
        config = configured(server.base_url + "/v1", stream=stream)
        got = await ask(config, on_text=texts.append)
    reads_the_thought(got, texts)
    assert got.usage == Usage(10, 20, reasoning_tokens=estimate_tokens(THOUGHT))


def test_an_unsigned_reasoning_is_not_sent_to_anthropic() -> None:
    """A history that escalated from a compatible server to Anthropic: its reasoning,
    which has no signature, would be refused there; Anthropic's own blocks go."""
    from agentrio.providers.anthropic import AnthropicWire

    signed = ThinkingBlock("mine", signature="sig")
    turn = ChatMessage(
        "assistant",
        "a is 1.",
        thinking=(ThinkingBlock("theirs"), signed, ThinkingBlock(redacted="opaque")),
    )
    body = AnthropicWire().body(
        "claude", [QUESTION[1], turn], [], 64, False, ModelSettings(cache="off")
    )
    sent = body["messages"][1]["content"]  # type: ignore[index]
    assert sent == [
        {"type": "thinking", "thinking": "mine", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "a is 1."},
    ]


def test_a_stream_cut_after_its_reasoning_is_charged_for_it() -> None:
    parser = OpenAIWire().stream_parser("p", None, None)
    for event in pieces("reasoning_content", THOUGHT):
        parser.feed("data: " + json.dumps(event))
    assert parser.partial() == (None, None, THOUGHT)


# -- the recipes of the docs, as written ----------------------------------------------------


def recipes() -> list[ProviderConfig]:
    """Every provider table of docs/providers.md's "Compatible servers" section."""
    import re
    import tomllib
    from pathlib import Path

    from agentrio.config import parse_config

    page = (Path(__file__).parents[2] / "docs" / "providers.md").read_text(encoding="utf-8")
    section = page[page.index("## Compatible servers") : page.index("## agentrio.toml")]
    found = []
    for block in re.findall(r"```toml\n(.*?)```", section, re.DOTALL):
        config = parse_config(tomllib.loads(block), path="docs/providers.md")
        found += config.providers.values()
    return found


def test_the_docs_give_a_recipe_for_each_server() -> None:
    names = [config.name for config in recipes()]
    assert names == ["azure", "azure", "gemini", "openrouter", "llamacpp", "deepseek"]


@pytest.mark.parametrize("recipe", recipes(), ids=lambda config: config.base_url)
async def test_each_recipe_of_the_docs_reaches_its_path_with_its_key(
    recipe: ProviderConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each table as the docs write it, its host moved to 127.0.0.1: the path, the
    query and the key's header are what that server expects."""
    from urllib.parse import urlsplit

    wanted = urlsplit(recipe.base_url)
    if recipe.api_key_env:
        monkeypatch.setenv(recipe.api_key_env, KEY)
    async with serving(DEEPSEEK) as server:
        config = attrs.evolve(recipe, base_url=server.url + recipe.base_url.split(wanted.netloc)[1])
        reply = await ask(config)
    (seen,) = server.seen
    path, _, query = seen.target.partition("?")
    assert path == wanted.path.rstrip("/") + "/chat/completions" and query == wanted.query
    if recipe.auth_header == "api-key":
        assert seen.headers["api-key"] == KEY and "authorization" not in seen.headers
    elif recipe.api_key_env:
        assert seen.headers["authorization"] == f"Bearer {KEY}"
    else:
        assert "authorization" not in seen.headers
    assert recipe.max_tokens_field in seen.body
    reads_the_thought(reply, [])
