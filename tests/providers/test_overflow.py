"""Context overflows: the servers' texts recognised (with the window and the request's
size, bounded), garbage not taken for one, and ContextTooLong raised by a provider
(never retried) for the real APIs' 400s, from the fake server, for compatible
servers' texts, and for a stream's error event."""

from __future__ import annotations

import random
from typing import Any

import httpx
import msgspec
import pytest
import trio
import trio.testing

from agentrio import ChatMessage, ModelReply, Provider, ProviderConfig, ProviderError, Usage
from agentrio.errors import BadResponse, ContextTooLong
from agentrio.providers.overflow import SCANNED, Overflow, context_overflow, stream_error
from agentrio.providers.provider import Kind
from agentrio.testing import FakeRequest, open_fake_llm
from agentrio.testing._fake_overflow import request_tokens

BASE = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}
HI = [ChatMessage("user", "hello there, " * 20)]

# -- the texts --------------------------------------------------------------------------

# As each server writes it (quoted from their answers), and what it says.
REAL: list[tuple[str, str, Overflow]] = [
    (
        "openai",
        '{"error":{"message":"This model\'s maximum context length is 4097 tokens. However, '
        'your messages resulted in 4619 tokens. Please reduce the length of the messages.",'
        '"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}',
        Overflow(4097, 4619),
    ),
    (
        "openai, with the completion",
        "This model's maximum context length is 4097 tokens. However, you requested 4268 "
        "tokens (4012 in the messages, 256 in the completion). Please reduce the length of "
        "the messages or completion.",
        Overflow(4097, 4268),
    ),
    (
        "openai responses",
        '{"type":"error","sequence_number":2,"error":{"type":"invalid_request_error",'
        '"code":"context_length_exceeded","message":"Your input exceeds the context window '
        'of this model. Please adjust your input and try again.","param":"input"}}',
        Overflow(None, None),
    ),
    (
        "anthropic",
        '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too '
        'long: 208310 tokens > 200000 maximum"},"request_id":"req_011CVQe1dLrGNMJyE1ghG1av"}',
        Overflow(200000, 208310),
    ),
    (
        "anthropic, with max_tokens",
        '{"type":"error","error":{"type":"invalid_request_error","message":"input length and '
        "`max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length "
        'or `max_tokens` and try again"}}',
        Overflow(200000, 242959),
    ),
    (
        "vllm",
        '{"object":"error","message":"This model\'s maximum context length is 32768 tokens. '
        "However, your request has 33000 input tokens. Please reduce the length of the input "
        'messages.","type":"BadRequestError","param":null,"code":400}',
        Overflow(32768, 33000),
    ),
    (
        "vllm, max_tokens too large",
        '{"error":{"message":"\'max_tokens\' or \'max_completion_tokens\' is too large: 8000. '
        "This model's maximum context length is 4096 tokens and your request has 2778 input "
        'tokens (8000 > 4096 - 2778). None","type":"BadRequestError","param":null,"code":400}}',
        Overflow(4096, 2778),
    ),
    (
        "vllm, decoder prompt",
        "The decoder prompt (length 17772) is longer than the maximum model length of 16384. "
        "Make sure that `max_model_len` is no smaller than the number of text tokens.",
        Overflow(16384, 17772),
    ),
    (
        "llama.cpp",
        '{"error":{"code":400,"message":"the request exceeds the available context size. try '
        'increasing the context size or enable context shift","type":"exceed_context_size_error",'
        '"n_prompt_tokens":14429,"n_ctx":8192}}',
        Overflow(8192, 14429),
    ),
    (
        "llama.cpp, newer",
        '{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context '
        'size (4096 tokens), try increasing it","type":"exceed_context_size_error",'
        '"n_prompt_tokens":4476,"n_ctx":4096}}',
        Overflow(4096, 4476),
    ),
    (
        "ollama, truncate false",
        '{"error":"{\\"error\\":{\\"code\\":400,\\"message\\":\\"the request exceeds the '
        'available context size\\",\\"type\\":\\"exceed_context_size_error\\",'
        '\\"n_prompt_tokens\\":8889,\\"n_ctx\\":4096}}"}',
        Overflow(4096, 8889),
    ),
    (
        "ollama, shift false",
        '{"error":"the prompt is longer than the context length currently available to the model"}',
        Overflow(None, None),
    ),
    (
        "ollama, embed",
        '{"error":"the input length exceeds the context length"}',
        Overflow(None, None),
    ),
    (
        "lm studio",
        '{"error":"Trying to keep the first 15857 tokens when context the overflows. However, '
        "the model is loaded with context length of only 4096 tokens, which is not enough. "
        'Try to load the model with a larger context length, or provide a shorter input"}',
        Overflow(4096, 15857),
    ),
    (
        "openrouter",
        '{"error":{"message":"This endpoint\'s maximum context length is 200000 tokens. '
        "However, you requested about 5028244 tokens (4945291 of text input, 2953 of tool "
        "input, 80000 in the output). Please reduce the length of either one, or use the "
        '\\"middle-out\\" transform to compress your prompt automatically.","code":400}}',
        Overflow(200000, 5028244),
    ),
    (
        "gemini",
        '[{"error": {"code": 400, "message": "The input token count (1200293) exceeds the '
        'maximum number of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}]',
        Overflow(1048576, 1200293),
    ),
    (
        "deepseek",
        '{"error":{"message":"This model\'s maximum context length is 131072 tokens. However, '
        "you requested 131134 tokens (122942 in the messages, 8192 in the completion). Please "
        'reduce the length of the messages or completion.","type":"invalid_request_error",'
        '"param":null,"code":"invalid_request_error"}}',
        Overflow(131072, 131134),
    ),
    (
        "xai",
        "This model's maximum prompt length is 131072 but the request contains 136973 tokens.",
        Overflow(131072, 136973),
    ),
    (
        "tgi",
        '{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. '
        'Given: 4000 `inputs` tokens and 500 `max_new_tokens`","error_type":"validation"}',
        Overflow(4096, 4500),
    ),
    (
        "a repr (a stream's error event)",
        "{'code': 400, 'message': 'the request exceeds the available context size', "
        "'type': 'exceed_context_size_error', 'n_prompt_tokens': 300, 'n_ctx': 256}",
        Overflow(256, 300),
    ),
]


@pytest.mark.parametrize(
    ("text", "said"), [(t, s) for _, t, s in REAL], ids=[n for n, _, _ in REAL]
)
def test_each_servers_text_is_an_overflow_with_its_sizes(text: str, said: Overflow) -> None:
    assert context_overflow(text) == said


NOT_OVERFLOWS = [
    "",
    "<html><body><h1>400 Bad Request</h1></body></html>",
    '{"error":{"message":"Invalid \'messages[0].content\': string too long. Expected a string '
    'with maximum length 10485760","type":"invalid_request_error",'
    '"code":"string_above_max_length"}}',
    '{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 10000 > '
    '4096, which is the maximum allowed number of output tokens for claude-3-5-sonnet"}}',
    '{"error":{"message":"Request too large for model in organization on tokens per minute '
    '(TPM): Limit 6000, Requested 14810","type":"tokens","code":"rate_limit_exceeded"}}',
    '{"error":{"message":"Unsupported parameter: \'max_tokens\'","code":"unsupported_parameter"}}',
    "prompt is too long",  # (Anthropic's says by how much; a bare phrase is anyone's)
    "context length",
    "a context_length_exceededness",  # (the code as a word, not inside another)
]


@pytest.mark.parametrize("text", NOT_OVERFLOWS)
def test_other_errors_are_not_overflows(text: str) -> None:
    assert context_overflow(text) is None


def test_garbage_and_huge_bodies_are_not_overflows_and_are_read_bounded() -> None:
    rng = random.Random(22)
    noise = "".join(chr(rng.randrange(32, 127)) for _ in range(200_000))
    assert context_overflow(noise) is None
    assert (
        context_overflow(bytes(rng.randrange(256) for _ in range(65536)).decode("latin-1")) is None
    )
    # a real overflow said only past the part read is not read at all
    assert context_overflow(" " * SCANNED + '"code":"context_length_exceeded"') is None
    assert context_overflow(" " * (SCANNED - 40) + '"code":"context_length_exceeded"') == (
        Overflow(None, None)
    )
    # patterns that could backtrack long meet their bound
    assert context_overflow("maximum context length is " + "9" * 100_000) == Overflow(None, None)
    worst = "maximum context length is 5 tokens" + " requested" * 5000
    assert context_overflow(worst) == Overflow(5, None)
    assert context_overflow("keep the first 1 tokens when context the overflows" + "x" * 9000) == (
        Overflow(None, None)
    )


def test_counts_that_no_server_sends_are_left_out() -> None:
    # more than 12 digits: not a count, never guessed at (nor a huge int made)
    text = "This model's maximum context length is 99999999999999999999 tokens. However, you "
    assert context_overflow(text + "requested 5 tokens") == Overflow(None, None)
    assert context_overflow("prompt is too long: 1234567890123 tokens > 5 maximum") == (
        Overflow(None, None)
    )
    assert context_overflow('"exceed_context_size_error", "n_ctx": 10000000000000') == (
        Overflow(None, None)
    )


def test_a_streams_error_event_is_an_overflow_or_a_bad_response() -> None:
    event = {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "x"}
    error = stream_error("p", event)
    assert type(error) is ContextTooLong and error.status is None
    assert str(error).startswith(
        "provider 'p': the request is over the model's context window: the stream reported"
    )
    other = stream_error("p", {"message": "overloaded", "type": "overloaded_error"})
    assert type(other) is BadResponse and "the stream reported an error" in str(other)
    huge = stream_error("p", {"message": "x" * 100_000, "code": "context_length_exceeded"})
    assert type(huge) is BadResponse  # (its code comes after what is read)


# -- from a provider: the real APIs (the fake server) ----------------------------------------


def ok(request: FakeRequest) -> ModelReply:
    return ModelReply(text="fine", usage=Usage(3, 2))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
async def test_a_request_over_the_window_is_context_too_long_and_not_retried(
    autojump_clock: trio.testing.MockClock, kind: Kind, stream: bool
) -> None:
    async with open_fake_llm(ok, context_window=20) as server:
        config = ProviderConfig(
            name="p", kind=kind, base_url=server.base_url + BASE[kind], max_retries=3, stream=stream
        )
        async with Provider(config) as p:
            with pytest.raises(ContextTooLong) as info:
                await p.complete("m", HI, [], max_output_tokens=16)
            # a short request still goes through: nothing was held against the provider
            assert (
                await p.complete("m", [ChatMessage("user", "hi")], [], max_output_tokens=16)
            ).text == "fine"
            stats = p.statistics()
        assert server.statistics().rejected == {400: 1}
    error = info.value
    tokens = request_tokens(FakeRequest(api=kind, model="m", messages=HI, tools=[], stream=False))
    assert isinstance(error, ProviderError)  # (what a 400 raised before: still caught)
    assert (error.provider, error.status, error.limit, error.requested) == ("p", 400, 20, tokens)
    assert str(error).startswith(
        f"provider 'p': the request is over the model's context window "
        f"(HTTP 400, limit 20 tokens, requested {tokens}): "
    )
    assert (stats.retries, stats.breaker) == (0, "closed")


async def test_the_fake_server_answers_as_each_api_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_fake_llm(ok, context_window=5) as server,
        httpx.AsyncClient(base_url=server.base_url) as client,
    ):
        messages = [{"role": "user", "content": "x" * 35}]  # 11 tokens
        oa = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
        an = await client.post(
            "/v1/messages", json={"model": "m", "max_tokens": 5, "messages": messages}
        )
        ol = await client.post("/api/chat", json={"model": "m", "messages": messages})
    assert (oa.status_code, an.status_code, ol.status_code) == (400, 400, 400)
    assert oa.json()["error"] == {
        "message": "This model's maximum context length is 5 tokens. However, your messages "
        "resulted in 11 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    assert an.json()["error"] == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 11 tokens > 5 maximum",
    }
    inner = msgspec.json.decode(ol.json()["error"])
    assert inner["error"]["type"] == "exceed_context_size_error"
    assert (inner["error"]["n_prompt_tokens"], inner["error"]["n_ctx"]) == (11, 5)
    assert server.requests == []  # (none reached the script)


async def test_the_fake_servers_context_window_is_checked() -> None:
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(ValueError, match="context_window must be an int >= 1 or None"):
            async with open_fake_llm(ok, context_window=bad):  # type: ignore[arg-type]
                pass


# -- from a provider: compatible servers -----------------------------------------------------


def _answering(status: int, body: str, **options: Any) -> tuple[Provider, list[float]]:
    """A provider whose every request gets *status* and *body* (a server's, outside
    this machine), noting when each went."""
    sent: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(trio.current_time())
        return httpx.Response(status, text=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    c = ProviderConfig(name="p", kind="openai", base_url="http://127.0.0.1:9/v1", **options)
    return Provider(c, client=client, api_key="sk-secret"), sent


COMPATIBLE = [
    (400, REAL[5][1], Overflow(32768, 33000)),  # vLLM
    (500, REAL[8][1], Overflow(8192, 14429)),  # llama.cpp before it said 400
    (400, REAL[13][1], Overflow(4096, 15857)),  # LM Studio
    (400, REAL[14][1], Overflow(200000, 5028244)),  # OpenRouter
    (400, REAL[15][1], Overflow(1048576, 1200293)),  # Gemini's OpenAI endpoint
    (413, REAL[0][1], Overflow(4097, 4619)),  # a proxy's status, OpenAI's body
]


@pytest.mark.parametrize(("status", "body", "said"), COMPATIBLE)
async def test_a_compatible_servers_overflow_is_context_too_long_and_not_retried(
    autojump_clock: trio.testing.MockClock, status: int, body: str, said: Overflow
) -> None:
    p, sent = _answering(status, body, max_retries=3)
    with pytest.raises(ContextTooLong) as info:
        await p.complete("m", HI, [], max_output_tokens=16)
    assert sent == [0]  # (a 5xx saying so is not retried either)
    assert (info.value.status, info.value.limit, info.value.requested) == (status, *said)


async def test_a_garbage_400_stays_a_provider_error(autojump_clock: trio.testing.MockClock) -> None:
    p, sent = _answering(400, "\x00\xff" * 40_000, max_retries=3)
    with pytest.raises(ProviderError) as info:
        await p.complete("m", HI, [], max_output_tokens=16)
    assert type(info.value) is ProviderError and sent == [0]


async def test_the_key_echoed_in_an_overflow_is_redacted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = '{"error":{"code":"context_length_exceeded","message":"key sk-secret: too long"}}'
    p, _ = _answering(400, body)
    with pytest.raises(ContextTooLong) as info:
        await p.complete("m", HI, [], max_output_tokens=16)
    assert "sk-secret" not in str(info.value) and "[redacted]" in str(info.value)


async def test_an_overflow_in_a_streams_error_event_is_context_too_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # llama.cpp's server, streaming, says it in the stream (after a 200)
    error = {
        "code": 400,
        "message": "the request exceeds the available context size sk-secret",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 14429,
        "n_ctx": 8192,
    }
    body = "data: " + msgspec.json.encode({"error": error}).decode() + "\n\n"
    p, sent = _answering(200, body, max_retries=3, stream=True)
    with pytest.raises(ContextTooLong) as info:
        await p.complete("m", HI, [], max_output_tokens=16)
    assert sent == [0] and (info.value.limit, info.value.requested) == (8192, 14429)
    assert info.value.status is None and "sk-secret" not in str(info.value)
