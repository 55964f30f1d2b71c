"""The protocol every model object satisfies, and the tool schemas a model is told of."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from .._checks import check_int
from ..errors import ConfigError, InvalidArgument
from ..messages import ChatMessage, ModelReply, Usage

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "MODEL_FORMAT",
    "AttemptMeter",
    "Model",
    "OUTPUT_TOOL",
    "OutputSchema",
    "Prices",
    "ToolSchema",
    "check_model",
    "model_pricing",
    "split_model",
]

DEFAULT_CONTEXT_WINDOW = 128_000


class ToolSchema(msgspec.Struct, frozen=True):
    """What a model is told about a tool.

    Attributes:
        name: the tool's name.
        description: what it does (the function's docstring by default).
        parameters: a JSON schema of its arguments object.
    """

    name: str
    description: str
    parameters: dict[str, object]


# The tool a wire format without a place for an answer's schema (Anthropic's)
# offers, and forces, for a typed answer: its input is the answer.
OUTPUT_TOOL = "final_result"

# Keywords of a JSON schema that OpenAI's strict mode takes (msgspec's "default"
# is dropped: every property is required there; "oneOf" is read as "anyOf").
_STRICT_KEYWORDS = frozenset(
    (
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "const",
        "$ref",
        "$defs",
        "title",
        "description",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
    )
)
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class _NoStrictForm(Exception):
    """A schema that OpenAI's strict mode cannot take."""


def _strict(node: object) -> object:
    """*node*, a JSON schema, in OpenAI's strict form: every object closed
    (``additionalProperties: false``) with all its properties required.

    Raises:
        _NoStrictForm: a keyword strict mode does not take, or an object
            with open keys (a ``dict[str, int]``).
    """
    if not isinstance(node, dict):
        raise _NoStrictForm
    out: dict[str, object] = {}
    for key, value in node.items():
        if key in ("default", "discriminator"):
            continue
        if key == "oneOf":
            key = "anyOf"
        if key not in _STRICT_KEYWORDS:
            raise _NoStrictForm
        if key in ("properties", "$defs"):
            out[key] = {k: _strict(v) for k, v in value.items()}
        elif key == "items":
            out[key] = _strict(value)
        elif key == "anyOf":
            out[key] = [_strict(v) for v in value]
        elif key == "additionalProperties":
            if value is not False:
                raise _NoStrictForm
        else:
            out[key] = value
    if node.get("type") == "object":
        properties = out.get("properties", {})
        assert isinstance(properties, dict)
        out["properties"] = properties
        out["required"] = list(properties)
        out["additionalProperties"] = False
    return out


def _object_schema(schema: Mapping[str, object]) -> tuple[dict[str, object], bool]:
    """The schema of a JSON object for the answer *schema* describes, and whether
    the answer is wrapped in it, as ``{"result": <answer>}`` (it is not an object)."""
    defs = schema.get("$defs")
    root = {k: v for k, v in schema.items() if k != "$defs"}
    ref = root.get("$ref")
    if isinstance(defs, dict) and isinstance(ref, str) and ref.startswith("#/$defs/"):
        # msgspec's schema of a class is a reference to its definition: the
        # wire formats want an object at the root.
        name = ref[len("#/$defs/") :]
        target = defs.get(name)
        if isinstance(target, dict):
            root = dict(target)
            others = {k: v for k, v in defs.items() if k != name}
            if ref not in json.dumps([root, others]):  # (not recursive: kept once)
                defs = others
    wrapped = not (root.get("type") == "object" and isinstance(root.get("properties"), dict))
    if wrapped:
        root = {
            "type": "object",
            "properties": {"result": root},
            "required": ["result"],
            "additionalProperties": False,
        }
    if isinstance(defs, dict) and defs:
        root["$defs"] = defs
    return root, wrapped


class OutputSchema:
    """What a model is told of the answer it must give: an agent's ``output_type``.

    An agent passes one as ``output_schema=`` to a model whose ``complete``
    takes that keyword (see [`Model`][agentrio.Model]). The model's answer,
    its reply's ``text``, must then be the answer as JSON (a model that asks
    its server for the ``{"result": ...}`` object of a *wrapped* schema gives
    the ``result``'s value).

    Args:
        name: the answer's name, for the wire formats that want one: letters,
            digits, ``_`` and ``-`` (other characters are dropped; at most
            64; ``"result"`` if none is left).
        schema: the answer's JSON schema (``msgspec.json.schema(output_type)``).

    Attributes:
        name: as given, cleaned.
        schema: as given.
        object_schema: the schema of the JSON object to ask a server for: the
            answer's own when it is an object (a class's definition, its
            ``$defs`` alongside), else ``{"result": <answer>}`` (*wrapped*).
        wrapped: whether ``object_schema`` wraps the answer in ``"result"``.
        strict_schema: ``object_schema`` in OpenAI's strict form (every object
            closed and all its properties required, ``default`` left out), or
            None when it has none (a mapping with open keys, a tuple, a
            keyword strict mode does not take): then it is sent as it is, not
            strict.
    """

    __slots__ = ("name", "object_schema", "schema", "strict_schema", "wrapped")

    def __init__(self, name: str, schema: Mapping[str, object]) -> None:
        cleaned = "".join(_NAME.findall(name))[:64]
        self.name = cleaned or "result"
        self.schema = schema
        self.object_schema, self.wrapped = _object_schema(schema)
        try:
            strict = _strict(self.object_schema)
        except (_NoStrictForm, AttributeError, TypeError):
            strict = None
        self.strict_schema: object = strict

    def __repr__(self) -> str:
        return f"<OutputSchema {self.name}>"


@runtime_checkable
class Model(Protocol):
    """What an agent needs of a model: one async call and a context window.

    ``complete`` answers the conversation *messages*, optionally with calls
    to *tools*, in at most *max_output_tokens* tokens, and reports the usage.
    Whatever it raises ends the phase with ``"error"``; so does usage that is
    not a ``Usage`` (``None``, a tuple, a dict), or negative, NaN or infinite
    (tokens or cost): a [`UsageInvalid`][agentrio.errors.UsageInvalid], and the
    call's reservation is charged.

    ``complete`` may also take, as keywords (an agent passes each only to a
    model whose ``complete`` names it; the others never receive it, and pay
    nothing for it):

    - ``on_text``: the model streams; while someone subscribes to events,
      or the run's own stream is read (``AgentRef.stream``), the agent
      passes a callback that publishes each piece of text as a
      ``TextDelta`` event.
    - ``meter``: the model retries on its own (a provider's models do); the
      agent passes an [`AttemptMeter`][agentrio.types.AttemptMeter] that charges each
      failed attempt to the budget and allows each retry only if the budget
      has room for it.
    - ``lane``: the model queues by lane (a provider's models do); the agent
      passes its phase's lane, a str such as ``"interactive"``: the priority
      of the call while a limit is full.
    - ``settings``: the model takes request settings; the agent passes the
      phase's [`ModelSettings`][agentrio.ModelSettings] (the run's laid over the
      spec's) when there are any, and nothing otherwise. Settings for a model
      without that keyword are refused (``InvalidArgument`` at
      ``spawn_agent`` or ``run()``). A model may also have a
      ``check_settings(settings)`` method that raises ``InvalidArgument``
      naming a setting it cannot send; the agent calls it at the same
      moments ([`ProviderModel`][agentrio.types.ProviderModel] has one).
    - ``output_schema``: the model can be told the schema of its answer
      (a provider's models can); an agent whose spec has an
      ``output_type`` passes its [`OutputSchema`][agentrio.types.OutputSchema],
      and the model's answer (a reply without tool calls) must be that
      JSON. A model without the keyword is not told: its answer is parsed
      and validated all the same (see [Typed outputs][typed-outputs]).

    A user turn given as content parts (images, documents: see [Images and
    documents][images-and-documents]) reaches ``complete`` as a
    ``ChatMessage`` whose ``parts`` holds them (its ``content`` is their
    text). A model may have a ``check_parts(parts)`` method that raises
    ``InvalidArgument`` naming a part it cannot take; the agent calls it
    when ``run()``, ``stream()`` or ``start_background()`` is given parts,
    before the turn is stored
    ([`ProviderModel`][agentrio.types.ProviderModel] has one). A model
    without it is given every part.

    A model whose API refuses a call that holds tool calls and results but
    offers no tools (Anthropic's) has a true ``needs_tools_for_tool_turns``
    attribute: a call that may call no tool (a final answer, a phase with
    ``tool_names=[]``) is then offered the tools, with ``settings`` whose
    ``tool_choice`` is ``"none"``. Any other model is offered no tools then.

    Implementations: [`ProviderModel`][agentrio.types.ProviderModel],
    [`ScriptedModel`][agentrio.testing.ScriptedModel],
    [`FunctionModel`][agentrio.testing.FunctionModel].

    Attributes:
        context_window: the model's window in tokens; an object without one is
            taken to have ``DEFAULT_CONTEXT_WINDOW`` (128,000).
        pricing: optional ``(usd_per_input_token, usd_per_output_token)``, or
            ``(input, output, cached_input, cache_write)`` with the prices of
            input tokens read from and written to the prompt cache, or
            ``(input, output, cached_input, cache_write, cache_write_1h)``
            with the price of writes to Anthropic's 1-hour cache (those of
            ``Usage.cache_write_1h_tokens``). With it,
            each call reserves its worst-case cost from the budget before it
            is made (every input token at the dearest input price), so
            ``max_cost_usd`` is not overspent while calls use no more tokens
            than they reserved, and calls whose provider reports no cost are
            priced from it, each kind of token at its price: ``(input -
            cached - writes) * input + cached * cached_input + writes *
            cache_write + output * output``. Prices are numbers >= 0.
            Without it, ``max_cost_usd`` stops new calls once reached, but
            calls in flight can pass it.
    """

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
    ) -> ModelReply:
        """Answer the conversation *messages*, optionally with calls to *tools*."""
        ...


class AttemptMeter(Protocol):
    """What a model call's failed attempts are charged to, and who allows a retry.

    An agent passes one as ``meter=`` to a model whose ``complete`` takes that
    keyword (as it passes ``on_text`` to one that streams); a provider's models
    do. The model tells it of every attempt that failed after it was sent,
    and asks it before each retry: the agent charges each attempt on its
    budget at once and reserves the room for the next, so a retried call is
    billed for every attempt and never goes past a limit.
    [`Provider.complete`][agentrio.Provider.complete] calls ``failed`` after
    every attempt that failed once it was sent (including the last, and one
    cut short by a cancellation), and ``await retry()`` before each retry.
    The agent counts one attempt for each ``failed`` and one for the
    answer; the answer's ``usage`` is the answered attempt's alone. It is
    also told of each wait at the provider (``waited``).
    """

    def failed(self, input_tokens: int | None, output_tokens: int | None, received: str) -> None:
        """Charge an attempt that failed after it was sent.

        Args:
            input_tokens: the input tokens the server reported for it; 0 if it
                generated nothing (a 429, a 5xx, a connection that could not
                be made); None if its answer had begun but did not say, or it
                was cut short once sent (a timeout, a reset, a cancel): the
                estimate of the call's input is charged.
            output_tokens: the same for output; None charges the estimate of
                *received*, at most the call's ``max_output_tokens``.
            received: the text and tool calls (names and arguments) received.

        Raises:
            UsageInvalid: a count is negative (the call's room is charged).
        """

    def waited(self, what: str, seconds: float, provider: str) -> None:
        """The call waited at the provider (told only when it did, after the wait).

        [`Provider.complete`][agentrio.Provider.complete] tells it of each
        wait of the call: the pause after a 429 (``"rate_limit"``), the
        backoff before a retry (``"retry"``), a slot of ``max_concurrent``
        or of its lane's cap (``"concurrency"``), room in
        ``requests_per_minute`` or ``tokens_per_minute`` (those names), a
        hold until a count of the server's rate-limit headers resets
        (``"rate_limit_headers"``); the agent publishes a
        [`Waited`][agentrio.events.Waited] event. A meter without this
        method is told nothing.

        Args:
            what: what the call waited for (above).
            seconds: how long.
            provider: the provider's name.
        """

    async def retry(self) -> bool:
        """May another attempt be made? Waits while calls in flight hold the room.

        It reserves the call's room on the budget again (a retry goes before
        calls waiting to start).

        Returns:
            False when the budget is exhausted for it: the model must give up
            (the agent then ends the phase with ``budget_exhausted``).
        """


def check_model(model: object, argument: str = "model") -> Model:
    """Return *model* if it satisfies [`Model`][agentrio.Model], else raise naming *argument*."""
    complete = getattr(model, "complete", None)
    # A class is not a model object: its complete() is unbound and every call would fail.
    if isinstance(model, type) or complete is None or not inspect.iscoroutinefunction(complete):
        raise InvalidArgument(
            f"{argument} must be a model object with an async complete(messages, tools, "
            f"*, max_output_tokens) method (for example agentrio.testing.ScriptedModel), "
            f"got {model!r}"
        )
    window = getattr(model, "context_window", DEFAULT_CONTEXT_WINDOW)
    check_int(f"{argument}.context_window", window, 1)
    return model  # type: ignore[return-value]


def context_window(model: object) -> int:
    """The model's context window in tokens."""
    window = getattr(model, "context_window", DEFAULT_CONTEXT_WINDOW)
    return window if isinstance(window, int) else DEFAULT_CONTEXT_WINDOW


class Prices:
    """A model's prices per token, worked out once from its ``pricing``.

    Args:
        input: USD per uncached input token.
        output: USD per output token (reasoning tokens included).
        cached_input: USD per input token read from the prompt cache
            (None: *input*).
        cache_write: USD per input token written to the prompt cache
            (None: *input*).
        cache_write_1h: USD per input token written to a 1-hour cache
            (Anthropic's; None: *cache_write*).
    """

    __slots__ = (
        "cache_write",
        "cache_write_1h",
        "cached_input",
        "input",
        "output",
        "worst_input",
    )

    def __init__(
        self,
        input: float,
        output: float,
        cached_input: float | None = None,
        cache_write: float | None = None,
        cache_write_1h: float | None = None,
    ) -> None:
        self.input = input
        self.output = output
        self.cached_input = input if cached_input is None else cached_input
        self.cache_write = input if cache_write is None else cache_write
        self.cache_write_1h = self.cache_write if cache_write_1h is None else cache_write_1h
        # Before a call, nobody knows how its input will split between the kinds.
        self.worst_input = max(self.input, self.cached_input, self.cache_write, self.cache_write_1h)

    def __repr__(self) -> str:
        return (
            f"Prices(input={self.input!r}, output={self.output!r}, "
            f"cached_input={self.cached_input!r}, cache_write={self.cache_write!r}, "
            f"cache_write_1h={self.cache_write_1h!r})"
        )

    def reserve(self, input_tokens: int, output_tokens: int) -> float:
        """The most a call of this size may cost: every input token at the dearest input price."""
        return input_tokens * self.worst_input + output_tokens * self.output

    def cost(self, usage: Usage) -> float:
        """What *usage* costs, each kind of input token at its own price."""
        cached, written = usage.cached_input_tokens, usage.cache_write_tokens
        if not (cached or written):  # (the common case)
            return usage.input_tokens * self.input + usage.output_tokens * self.output
        uncached = max(0, usage.input_tokens - cached - written)
        written_1h = min(written, max(0, usage.cache_write_1h_tokens))
        return (
            uncached * self.input
            + cached * self.cached_input
            + (written - written_1h) * self.cache_write
            + written_1h * self.cache_write_1h
            + usage.output_tokens * self.output
        )


def model_pricing(model: object) -> Prices | None:
    """The model's ``pricing`` as `Prices`, or None (no pricing, or all zero).

    Raises:
        InvalidArgument: ``pricing`` is set but not two, four or five numbers >= 0.
    """
    pricing = getattr(model, "pricing", None)
    if pricing is None:
        return None
    if (
        not isinstance(pricing, tuple)
        or len(pricing) not in (2, 4, 5)
        or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) and p >= 0 for p in pricing
        )
    ):
        raise InvalidArgument(
            "model.pricing must be (usd_per_input_token, usd_per_output_token) or "
            "(usd_per_input_token, usd_per_output_token, usd_per_cached_input_token, "
            "usd_per_cache_write_token[, usd_per_cache_write_1h_token]), numbers >= 0; "
            f"got {pricing!r}"
        )
    if not any(pricing):
        return None
    return Prices(*(float(p) for p in pricing))


MODEL_FORMAT = "'instance:model' (for example 'local:qwen2.5:0.5b'; the model part may hold colons)"
"""How a model string is written, for messages."""


def split_model(text: str) -> tuple[str, str]:
    """Split ``"instance:model"`` at the first colon.

    Raises:
        ConfigError: no colon, or an empty part; the message spells out the format.
    """
    instance, colon, model = text.partition(":")
    if not colon or not instance or not model:
        raise ConfigError(f"model strings are {MODEL_FORMAT}, got {text!r}")
    return instance, model
