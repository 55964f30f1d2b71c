"""The fake LLM server's answer to a request over its context window: the 400 each real
API sends, body for body."""

from __future__ import annotations

import msgspec

from ..providers.tokens import estimate_tokens, message_tokens
from ._fake_wire import FakeRequest

__all__ = ["overflow_body", "request_tokens"]

_RESPONSES = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


def request_tokens(request: FakeRequest) -> int:
    """What *request* counts against the window: its messages, by agentrio's default
    estimate (``estimate_tokens``, and the images' and documents' tokens)."""
    return sum(message_tokens(estimate_tokens, m) for m in request.messages)


def overflow_body(api: str, limit: int, requested: int) -> dict[str, object]:
    """The JSON body *api* answers (HTTP 400) to a request of *requested* tokens over
    a window of *limit*: OpenAI's ``context_length_exceeded``, Anthropic's "prompt
    is too long", and Ollama's with ``truncate: false`` (llama.cpp's error, as a
    JSON string in its own ``error``); another API (the Responses API), OpenAI's
    Responses text."""
    if api == "openai":
        message = (
            f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {requested} tokens. Please reduce the length of the messages."
        )
        return _openai(message, "messages")
    if api == "anthropic":
        return {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {requested} tokens > {limit} maximum",
            },
            "request_id": "req_fake_overflow",
        }
    if api == "ollama":
        inner = {
            "error": {
                "code": 400,
                "message": f"request ({requested} tokens) exceeds the available context size "
                f"({limit} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": requested,
                "n_ctx": limit,
            }
        }
        return {"error": msgspec.json.encode(inner).decode()}
    return _openai(_RESPONSES, "input")


def _openai(message: str, param: str) -> dict[str, object]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": "context_length_exceeded",
        }
    }
