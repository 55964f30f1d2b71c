"""Recognising a server's answer that says the request is over the model's context window.

One function, ``context_overflow``, reads the text of an error (a 4xx or 5xx
body, or a stream's error event) and says whether it is a context overflow,
with the window and the request's size when the text gives them. The texts it
knows, as the servers write them:

- OpenAI (chat completions, Azure, Groq, DeepSeek): ``"code":
  "context_length_exceeded"``, ``This model's maximum context length is 4097
  tokens. However, your messages resulted in 4619 tokens`` (or ``you requested
  4268 tokens (4012 in the messages, 256 in the completion)``); the Responses
  API's ``Your input exceeds the context window of this model``.
- Anthropic: ``prompt is too long: 208310 tokens > 200000 maximum`` and
  ``input length and `max_tokens` exceed context limit: 178959 + 64000 >
  200000``.
- vLLM: OpenAI's text (``... However, your request has 33000 input tokens``,
  ``... and your request has 2778 input tokens (8000 > 4096 - 2778)``), and
  ``The decoder prompt (length 17772) is longer than the maximum model length
  of 16384``.
- llama.cpp's server: ``"type": "exceed_context_size_error"`` with
  ``n_prompt_tokens`` and ``n_ctx``, ``the request exceeds the available
  context size`` or ``request (4476 tokens) exceeds the available context size
  (4096 tokens)``; Ollama passes it on (as a JSON string inside its own
  ``error``), and says ``the prompt is longer than the context length`` or
  ``the input length exceeds the context length``.
- LM Studio: ``Trying to keep the first 15857 tokens when context the
  overflows. However, the model is loaded with context length of only 4096
  tokens``.
- OpenRouter: ``This endpoint's maximum context length is 200000 tokens.
  However, you requested about 5028244 tokens``.
- Gemini: ``The input token count (1200293) exceeds the maximum number of
  tokens allowed (1048576)``.
- xAI: ``This model's maximum prompt length is 131072 but the request
  contains 136973 tokens``.
- Hugging Face TGI: ``Input validation error: `inputs` tokens +
  `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 500
  `max_new_tokens```.

The text is the server's, so hostile: only its first ``SCANNED`` characters
are read, every pattern is bounded (no unbounded repetition, numbers of at
most 12 digits), and a number that does not fit is left out (None), never
guessed.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import BadResponse, ContextTooLong
from .wire import QUOTED, bad

__all__ = ["SCANNED", "Overflow", "context_overflow", "stream_error", "too_long"]

SCANNED = 16 * 1024
"""The most characters of an error's text read: a real overflow says so at once."""


class Overflow(NamedTuple):
    """What an overflow error said about the sizes (None: it did not say).

    Attributes:
        limit: the context window, in tokens.
        requested: the tokens the request came to, as the server counted them
            (its input, or its input and the output asked for).
    """

    limit: int | None
    requested: int | None


# Any one of these makes the text an overflow (the codes, then each server's words).
_MARK = re.compile(
    r"\bcontext_length_exceeded\b"
    r"|\bexceed_context_size_error\b"
    r"|maximum context length"
    r"|maximum prompt length is"
    r"|exceeds the context window"
    r"|prompt is too long: \d"
    r"|exceed context limit"
    r"|exceeds the available context size"
    r"|exceeds the context length"
    r"|longer than the context length"
    r"|longer than the maximum model length"
    r"|exceeds the maximum number of tokens allowed"
    r"|when context the overflows"
    r"|max_new_tokens. must be <=",
    re.IGNORECASE,
)

_N = r"(\d{1,12})(?!\d)"  # a count: more digits than that is no count anyone sends

# The sizes, by the first of these that matches: (pattern, the group of the limit,
# the groups whose sum is the request).
_SIZES: tuple[tuple[re.Pattern[str], int, tuple[int, ...]], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), limit, requested)
    for pattern, limit, requested in (
        # Anthropic
        (rf"prompt is too long: {_N} tokens > {_N} maximum", 2, (1,)),
        (rf"exceed context limit: {_N} \+ {_N} > {_N}", 3, (1, 2)),
        # Gemini
        (
            rf"input token count \({_N}\) exceeds the maximum number of tokens allowed \({_N}\)",
            2,
            (1,),
        ),
        # llama.cpp (and Ollama passing it on)
        (rf"request \({_N} tokens\) exceeds the available context size \({_N} tokens\)", 2, (1,)),
        # LM Studio
        (
            rf"keep the first {_N} tokens when context the overflows\D{{0,80}}of only {_N} tokens",
            2,
            (1,),
        ),
        # vLLM
        (rf"prompt \(length {_N}\) is longer than the maximum model length of {_N}", 2, (1,)),
        (rf"prompt length of {_N} is longer than the maximum model length of {_N}", 2, (1,)),
        # xAI
        (rf"maximum prompt length is {_N} but the request contains {_N} tokens", 1, (2,)),
        # Hugging Face TGI
        (rf"must be <= {_N}\. Given: {_N} .inputs. tokens and {_N} .max_new_tokens.", 1, (2, 3)),
        # OpenAI and the servers that copy its words (vLLM, OpenRouter, DeepSeek, ...)
        (
            rf"maximum context length is {_N} tokens"
            rf"(?:\D{{0,40}}?(?:requested(?: about)?|resulted in|request has) {_N})?",
            1,
            (2,),
        ),
    )
)
# llama.cpp's fields, where its message gives no numbers (a JSON string inside
# Ollama's error has them with escaped quotes; a repr, with single ones).
_N_CTX = re.compile(rf"\bn_ctx\\?[\"']?\s*:\s*{_N}")
_N_PROMPT = re.compile(rf"\bn_prompt_tokens\\?[\"']?\s*:\s*{_N}")


def context_overflow(text: str) -> Overflow | None:
    """Whether *text*, a server's error, says the request is over the context window.

    Args:
        text: the error's text: a response body, or a stream's error event
            (JSON or its ``repr``); only its first ``SCANNED`` characters
            are read.

    Returns:
        The sizes it gave (each None when it did not), or None when it is
        not a context overflow.
    """
    head = text[:SCANNED]
    if _MARK.search(head) is None:
        return None
    for pattern, limit_group, requested_groups in _SIZES:
        found = pattern.search(head)
        if found is not None:
            limit = _count(found.group(limit_group))
            parts = [found.group(g) for g in requested_groups]
            requested = sum(int(p) for p in parts) if all(parts) else None
            return Overflow(limit, requested)
    return Overflow(_field(_N_CTX, head), _field(_N_PROMPT, head))


def _count(digits: str | None) -> int | None:
    return None if digits is None else int(digits)


def _field(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    return None if found is None else int(found.group(1))


def too_long(provider: str, text: str, overflow: Overflow, status: int | None) -> ContextTooLong:
    """The ContextTooLong of *provider* for an error whose (redacted) *text* said
    *overflow* (*status*: the HTTP status, None for a stream's error event)."""
    limit, requested = overflow
    said = [] if status is None else [f"HTTP {status}"]
    if limit is not None:
        said.append(f"limit {limit} tokens")
    if requested is not None:
        said.append(f"requested {requested}")
    detail = f" ({', '.join(said)})" if said else ""
    return ContextTooLong(
        f"provider {provider!r}: the request is over the model's context window{detail}: {text}",
        provider=provider,
        status=status,
        limit=limit,
        requested=requested,
    )


def stream_error(provider: str, error: object) -> BadResponse | ContextTooLong:
    """What a stream parser raises for a stream's error event *error* (a parsed JSON
    value): ContextTooLong if it says the request is over the context window,
    else a BadResponse quoting it (in part). The provider takes the key out of
    either message."""
    quoted = repr(error)[:QUOTED]
    overflow = context_overflow(quoted)
    if overflow is not None:
        return too_long(provider, f"the stream reported an error: {quoted}", overflow, None)
    return bad(provider, f"the stream reported an error: {quoted}")
