"""Typed outputs: a phase's answer parsed and validated as its spec's ``output_type``.

What is derived from a spec's ``output_type`` (a decoder, the schema the
model is told of) is made once per spec (`OutputType`, on the spec's info);
a phase of such a spec keeps a `TypedAnswer`: its refused answers so far and
the value it accepted. A spec without one costs its phases nothing but a
``None``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Protocol

import msgspec

from ...errors import InvalidArgument, OutputInvalid
from ...providers.base import OutputSchema
from .pydantic_models import PydanticDecoder, holds_pydantic, uses_pydantic
from .validators import OutputValidator, refusal

__all__ = [
    "OUTPUT_REFUSED_PROMPT",
    "OUTPUT_RETRY_PROMPT",
    "TEXT_REFUSED_PROMPT",
    "WHY_CHARS",
    "OutputType",
    "TypedAnswer",
    "output_type_of",
]

# What the model is told of a refused answer (its text is never quoted back:
# the reason msgspec gives, cut at WHY_CHARS, says where it went wrong).
OUTPUT_RETRY_PROMPT = (
    "Your answer is not valid: {why}. Give your final answer again, as JSON only "
    "(no other text), matching the required schema."
)
WHY_CHARS = 300
# What the model is told of an answer an output validator refused (ModelRetry's message).
OUTPUT_REFUSED_PROMPT = (
    "Your answer was refused: {why}. Give your final answer again, as JSON only "
    "(no other text), matching the required schema."
)
TEXT_REFUSED_PROMPT = "Your answer was refused: {why}. Give your final answer again."


def _cut(text: str) -> str:
    return text if len(text) <= WHY_CHARS else text[: WHY_CHARS - 1] + "…"


class _Decoder(Protocol):
    def decode(self, text: str, /) -> object: ...


def _decoder_of(output_type: object) -> tuple[_Decoder, Mapping[str, object]]:
    """What decodes and describes *output_type*: Pydantic for a type of its (a
    ``BaseModel``, ``list[Model]``...: see `pydantic_models`), msgspec for any other.
    Either decoder raises msgspec's errors."""
    if uses_pydantic(output_type):
        pydantic = PydanticDecoder(output_type)
        return pydantic, pydantic.schema
    try:
        return msgspec.json.Decoder(output_type), msgspec.json.schema(output_type)
    except (TypeError, ValueError):
        # A class that holds a model in a field (a dataclass, a TypedDict, a
        # NamedTuple of Pydantic models) is no type of msgspec's: Pydantic reads
        # it, when the program has Pydantic (only on this failure: a msgspec type
        # pays nothing). Else msgspec's error; if Pydantic cannot either, its own
        # (a typing.TypedDict before 3.12, say: the reason is Pydantic's).
        if not holds_pydantic(output_type):
            raise
        pydantic = PydanticDecoder(output_type)
        return pydantic, pydantic.schema


class OutputType:
    """What a spec's ``output_type`` gives, once: its decoder and its schema.

    Raises:
        InvalidArgument: neither msgspec nor Pydantic can decode and describe the type.
    """

    __slots__ = ("decoder", "label", "retries", "schema", "type")

    def __init__(self, output_type: object, retries: int) -> None:
        try:
            self.decoder, schema = _decoder_of(output_type)
        except (TypeError, ValueError) as exc:  # (msgspec's word for an unsupported type)
            raise InvalidArgument(
                f"AgentSpec.output_type must be a type msgspec or Pydantic can validate "
                f"(a msgspec.Struct, an attrs class, a dataclass, a pydantic.BaseModel, "
                f"list[str]...), got {output_type!r}: {exc}"
            ) from None
        self.type = output_type
        self.retries = retries
        # A class's name; "result" for list[str], int | None...
        name = output_type.__name__ if isinstance(output_type, type) else "result"
        self.schema = OutputSchema(name, schema)
        self.label = name if isinstance(output_type, type) else repr(output_type)

    def parse(self, text: str) -> tuple[object, str]:
        """*text* decoded and validated: ``(value, "")``, or ``(None, why)`` if refused."""
        if not text.strip():
            return None, "the answer is empty"
        try:
            return self.decoder.decode(text), ""
        except msgspec.ValidationError as exc:  # (a PydanticDecoder's too: see pydantic_models)
            return None, _cut(f"it does not match the schema: {exc}")
        except msgspec.DecodeError as exc:
            return None, _cut(f"it is not JSON: {exc}")
        except RecursionError:
            return None, "it is not JSON: nested too deeply"
        except UnicodeEncodeError as exc:  # (a Model of the caller's may hand one on)
            return None, f"it is not valid text: a lone surrogate at character {exc.start}"


# What output types give, by (type, retries): a spec made again from another (a
# child's, by attrs.evolve) does not build its decoder and schema again.
_MADE: dict[tuple[object, int], OutputType] = {}
_MADE_MOST = 256


def output_type_of(output_type: object, retries: int) -> OutputType:
    """The `OutputType` of *output_type*, made once (InvalidArgument if it has none)."""
    key = (output_type, retries)
    try:
        made = _MADE.get(key)
    except TypeError:  # an unhashable type (an Annotated with a list, say): not kept
        return OutputType(output_type, retries)
    if made is None:
        made = OutputType(output_type, retries)
        if len(_MADE) >= _MADE_MOST:
            _MADE.clear()
        _MADE[key] = made
    return made


_TAKES: dict[type, bool] = {}


def takes_schema(model: object) -> bool:
    """Does *model*'s ``complete`` take ``output_schema``? (Cached per class.)"""
    cls = type(model)
    own = "complete" in getattr(model, "__dict__", {})
    known = None if own else _TAKES.get(cls)
    if known is None:
        try:
            known = "output_schema" in inspect.signature(model.complete).parameters  # type: ignore[attr-defined]
        except (TypeError, ValueError, AttributeError):
            known = False
        if not own:
            _TAKES[cls] = known
    return known


class TypedAnswer:
    """One phase's answer as its spec checks it: parsed as the spec's output type
    (if it has one), then given to its output validators (if any); the answers
    refused so far, and the value accepted.

    Args:
        kind: the spec's output type (None: the answer is its text).
        retries: the spec's ``output_retries``: refused answers sent back.
        validators: the spec's ``output_validators``.
    """

    __slots__ = ("kind", "refused", "retries", "validators", "value")

    def __init__(
        self,
        kind: OutputType | None,
        retries: int,
        validators: tuple[OutputValidator, ...] = (),
    ) -> None:
        self.kind = kind
        self.retries = retries
        self.validators = validators
        self.refused = 0
        self.value: object = None

    def schema_for(self, model: object) -> OutputSchema | None:
        """What to pass *model*, the model a call goes to, as ``output_schema=``:
        the schema, or None if it does not take the keyword (or the answer is
        text). (Asked at each call: a phase of ``run(model=...)`` calls another
        model than the agent's own.)"""
        kind = self.kind
        return kind.schema if kind is not None and takes_schema(model) else None

    def check(self, text: str, calls_left: bool) -> str | OutputInvalid | None:
        """Accept *text* as the answer (None; its value is then ``value``), or refuse
        it: the message to send the model so it answers again, or, past the
        retries (or with no model call left in the phase: *calls_left* False),
        the error that ends the phase. The validators are `validate`'s."""
        kind = self.kind
        if kind is None:
            self.value = text
            return None
        value, why = kind.parse(text)
        if not why:
            self.value = value
            return None
        self.refused += 1
        if self.refused > self.retries or not calls_left:
            tries = "answer" if self.refused == 1 else f"{self.refused} answers"
            left = "" if calls_left or self.refused > self.retries else " (no model call left)"
            return OutputInvalid(
                f"the model's {tries} did not match the output type "
                f"{kind.label}{left}; the last: {why}"
            )
        return OUTPUT_RETRY_PROMPT.format(why=why)

    async def validate(self, calls_left: bool) -> str | OutputInvalid | None:
        """Give the accepted ``value`` to the validators: None if they all accept
        it, else what `check` gives for a refusal, with the validator's reason.
        (What a validator raises other than ``ModelRetry`` goes on up.)"""
        why = await refusal(self.validators, self.value)
        if why is None:
            return None
        self.value = None
        why = _cut(why) if why else "no reason given"
        self.refused += 1
        if self.refused > self.retries or not calls_left:
            left = "" if calls_left or self.refused > self.retries else " (no model call left)"
            if self.refused == 1:
                return OutputInvalid(
                    f"the model's answer was refused by an output validator{left}: {why}"
                )
            return OutputInvalid(
                f"the model's {self.refused} answers were refused{left}; "
                f"the last by an output validator: {why}"
            )
        prompt = OUTPUT_REFUSED_PROMPT if self.kind is not None else TEXT_REFUSED_PROMPT
        return prompt.format(why=why)
