"""ScriptedModel and FunctionModel: models whose answers the test decides."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence

import trio

from ..errors import AgentrioError, InvalidArgument
from ..messages import ChatMessage, ModelReply, ModelSettings
from ..providers.base import DEFAULT_CONTEXT_WINDOW, ToolSchema

__all__ = ["FunctionModel", "Reply", "ScriptExhausted", "ScriptedModel"]

Reply = ModelReply
"""One scripted answer: ``Reply(text="", tool_calls=[...], usage=Usage(...))`` (= ModelReply)."""


class ScriptExhausted(AgentrioError):
    """A [`ScriptedModel`][agentrio.testing.ScriptedModel] was called more times than it has
    replies.

    It is raised inside the model call, so an agent's phase ends with
    ``"error"`` and a ``PhaseError`` event whose ``error_type`` is
    ``"ScriptExhausted"``; ``run()`` does not raise it.
    """


def _check_chunk_size(chunk_size: object) -> int | None:
    if chunk_size is None:
        return None
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidArgument(f"chunk_size must be an int >= 1 or None, got {chunk_size!r}")
    return chunk_size


_Complete = Callable[..., Awaitable[ModelReply]]


def _streaming(model: ScriptedModel | FunctionModel, plain: _Complete) -> _Complete:
    """*model*'s ``complete`` that streams: it takes ``on_text`` too (so an agent
    passes it), and gives it each reply's text in pieces of ``chunk_size``
    characters, one scheduler checkpoint before each, as a network's would come.

    Set on the instance, and only with a ``chunk_size``: a model that does not
    stream keeps a ``complete`` without ``on_text``, and an agent's calls of it
    pay nothing for streaming.
    """
    size = model.chunk_size
    assert size is not None

    async def complete(
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        settings: ModelSettings | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        reply = await plain(
            model, messages, tools, max_output_tokens=max_output_tokens, settings=settings
        )
        if on_text is not None:
            text = reply.text
            for start in range(0, len(text), size):
                await trio.lowlevel.checkpoint()
                on_text(text[start : start + size])
        return reply

    return complete


def _check_window(context_window: object) -> int:
    if isinstance(context_window, bool) or not isinstance(context_window, int):
        raise InvalidArgument(f"context_window must be an int, got {context_window!r}")
    if context_window < 1:
        raise InvalidArgument(f"context_window must be >= 1, got {context_window!r}")
    return context_window


class ScriptedModel:
    """Answers each call with the next reply of a script.

    A [model][agentrio.Model]: *replies* is the script, a sequence of ``Reply``.
    One script may be shared by many agents: each call, from whichever agent,
    takes the next reply. Each call awaits one scheduler checkpoint, as a
    network call would.

    Example:

        model = ScriptedModel([
            Reply(tool_calls=[ToolCallRequest("lookup", {"key": "a"})],
                  usage=Usage(input_tokens=20, output_tokens=5)),
            Reply(text="a is 1", usage=Usage(input_tokens=30, output_tokens=4)),
        ])

    Attributes:
        calls: every call's messages, in order: what the model was shown.
        call_settings: every call's ``settings`` (None: none), in order.
        context_window: the window it claims, in tokens.
        pricing: ``(usd_per_input_token, usd_per_output_token)``, with the
            cached-input and cache-write prices (and the 1-hour cache-write
            price) after them if wanted, or None
            (see [`agentrio.Model`][agentrio.Model]).
        chunk_size: with an int, the model streams: each reply's text is
            given to the call's ``on_text`` in pieces of that many characters,
            one scheduler checkpoint before each, as a provider's deltas are
            (a run's stream, ``TextDelta`` events); None (the default): it
            does not.

    Raises:
        InvalidArgument: a reply is not a ``Reply``; *context_window* is not
            an int >= 1; *chunk_size* is not None or an int >= 1.
    """

    def __init__(
        self,
        replies: Iterable[ModelReply],
        *,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        pricing: tuple[float, ...] | None = None,
        chunk_size: int | None = None,
    ) -> None:
        self.pricing = pricing
        self.chunk_size = _check_chunk_size(chunk_size)
        if self.chunk_size is not None:
            self.complete = _streaming(self, ScriptedModel.complete)  # type: ignore[method-assign,assignment]
        script = list(replies)
        for i, reply in enumerate(script):
            if not isinstance(reply, ModelReply):
                raise InvalidArgument(
                    f"replies[{i}] must be an agentrio.testing.Reply, got {reply!r}"
                )
        self._script = script
        self._next = 0
        self.context_window = _check_window(context_window)
        self.calls: list[tuple[ChatMessage, ...]] = []
        self.call_settings: list[ModelSettings | None] = []

    @property
    def remaining(self) -> int:
        """Replies not yet used."""
        return len(self._script) - self._next

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        settings: ModelSettings | None = None,
    ) -> ModelReply:
        """Return the next scripted reply.

        *tools* and *max_output_tokens* are ignored; *settings* is recorded in
        ``call_settings``. (With a ``chunk_size``, the model's ``complete``
        also takes ``on_text``, which gets the reply's text in pieces.)

        Raises:
            ScriptExhausted: every reply has been used (in an agent, this ends
                the phase with ``"error"``).
        """
        await trio.lowlevel.checkpoint()
        if self._next >= len(self._script):
            raise ScriptExhausted(
                f"ScriptedModel ran out of replies after {len(self._script)} calls"
            )
        self.calls.append(tuple(messages))
        self.call_settings.append(settings)
        reply = self._script[self._next]
        self._next += 1
        return reply


ReplyFunction = Callable[
    [Sequence[ChatMessage], Sequence[ToolSchema]], ModelReply | Awaitable[ModelReply]
]


class FunctionModel:
    """Answers each call with ``fn(messages, tools)`` (a plain or async function).

    *fn* may be a plain function (the call then awaits one scheduler
    checkpoint first, as a network call would), an ``async def``, or any
    callable that returns an awaitable of a ``Reply``. *tools* is what the
    phase offers: empty for a final-answer call. ``context_window``,
    ``pricing`` and ``chunk_size`` are as for ``ScriptedModel``; its
    ``complete`` takes ``settings`` and ``on_text`` keywords too.

    Example:

        def answer(messages, tools):
            done = sum(m.role == "tool" for m in messages)
            if done < 2:
                return Reply(tool_calls=[ToolCallRequest("lookup", {"key": f"k{done}"})])
            return Reply(text="done")

        model = FunctionModel(answer)

    Attributes:
        call_settings: the ``settings`` of every call made with some, in order.

    Raises:
        InvalidArgument: *fn* is not callable; *context_window* is not an int
            >= 1; *chunk_size* is not None or an int >= 1. From ``complete``:
            *fn* returned something that is not a ``Reply``.
    """

    def __init__(
        self,
        fn: ReplyFunction,
        *,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        pricing: tuple[float, ...] | None = None,
        chunk_size: int | None = None,
    ) -> None:
        self.pricing = pricing
        self.chunk_size = _check_chunk_size(chunk_size)
        if self.chunk_size is not None:
            self.complete = _streaming(self, FunctionModel.complete)  # type: ignore[method-assign,assignment]
        self.call_settings: list[ModelSettings | None] = []
        if not callable(fn):
            raise InvalidArgument(f"fn must be callable as fn(messages, tools), got {fn!r}")
        self._fn = fn
        self._is_async = inspect.iscoroutinefunction(fn)
        self.context_window = _check_window(context_window)

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        settings: ModelSettings | None = None,
    ) -> ModelReply:
        """Return what the function returns for this conversation. (With a
        ``chunk_size``, the model's ``complete`` also takes ``on_text``, which
        gets the reply's text in pieces.)"""
        if settings is not None:
            self.call_settings.append(settings)
        if self._is_async:
            reply = await self._fn(messages, tools)  # type: ignore[misc]
        else:
            await trio.lowlevel.checkpoint()
            reply = self._fn(messages, tools)
            if inspect.isawaitable(reply):  # an object with an async __call__, say
                reply = await reply
        if not isinstance(reply, ModelReply):
            raise InvalidArgument(
                f"FunctionModel's function must return an agentrio.testing.Reply, got {reply!r}"
            )
        return reply
