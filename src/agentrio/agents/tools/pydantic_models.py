"""Pydantic v2 models, when the application has them: read by Pydantic, found without it.

agentrio never imports Pydantic (an optional extra, ``agentrio[pydantic]``). A type
is Pydantic's only if Pydantic is already in ``sys.modules``, which it is in any
program that made a model: a program of msgspec Structs pays a dictionary look-up
when a spec or a tool is made, and nothing per turn.

What Pydantic reads here (a spec's ``output_type``, a tool's parameters) it also
describes: the schema a model is told and the validation of its answer come from
the same Pydantic type, as they come from the same msgspec type for the others.
Pydantic's ``ValidationError`` is translated into msgspec's errors, which is what
the callers already handle, with a message that names where the answer went wrong
and never quotes it.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Sequence
from typing import Annotated, Any

import msgspec

__all__ = [
    "ArgumentsModel",
    "PydanticDecoder",
    "describe",
    "enc_hook",
    "holds_pydantic",
    "uses_pydantic",
]

# Errors past these are counted, not described (the whole is cut at WHY_CHARS anyway).
_ERRORS_SHOWN = 3
# Nesting of generics looked into for a Pydantic type (list[dict[str, Model]]...).
_DEPTH = 8
# Pydantic's message for these quotes a part of the input: a fixed one is used instead.
_QUOTING = {"union_tag_invalid": "the tag does not match any of the expected tags"}


def _pydantic() -> Any:
    """The pydantic module, if the application imported it and it is v2 or later
    (None otherwise: Pydantic 1's models are no types of ours)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or str(getattr(pydantic, "VERSION", "1")).startswith(("0.", "1.")):
        return None
    return pydantic


def holds_pydantic(*annotations: object) -> bool:
    """Does a class in *annotations* (or inside one: ``list[Pick]``) have a field
    that is Pydantic's (a dataclass, a TypedDict, a NamedTuple with a ``Movie``
    field)? msgspec cannot read such a class; Pydantic can. False at once when
    Pydantic was never imported."""
    pydantic = _pydantic()
    if pydantic is None:
        return False
    return any(_holds(pydantic, item, 0) for item in annotations)


def _holds(pydantic: Any, item: object, depth: int) -> bool:
    if depth > _DEPTH:
        return False
    if isinstance(item, type):
        try:
            hints = typing.get_type_hints(item, include_extras=True)
        except Exception:  # (names it cannot resolve: not ours to judge)
            hints = {}
        if any(_mentions(pydantic, hint, 0) for hint in hints.values()):
            return True
    return any(_holds(pydantic, arg, depth + 1) for arg in typing.get_args(item))


def uses_pydantic(*annotations: object) -> bool:
    """Is any of *annotations* (or a type inside one, or a default) Pydantic's?

    A ``BaseModel`` subclass, a Pydantic dataclass, or a ``pydantic.Field``
    (``Annotated[int, Field(description=...)]``, or ``= Field(...)`` as a default).
    False at once when Pydantic was never imported.
    """
    pydantic = _pydantic()
    if pydantic is None:
        return False
    return any(_mentions(pydantic, item, 0) for item in annotations)


def _mentions(pydantic: Any, item: object, depth: int) -> bool:
    if depth > _DEPTH:
        return False
    if isinstance(item, pydantic.fields.FieldInfo):
        return True
    if isinstance(item, type):
        try:
            if issubclass(item, pydantic.BaseModel):
                return True
        except TypeError:  # (list[int] is a type to isinstance on some versions)
            pass
        if pydantic.dataclasses.is_pydantic_dataclass(item):
            return True
    return any(_mentions(pydantic, arg, depth + 1) for arg in typing.get_args(item))


def _failures(pydantic: Any) -> tuple[type[Exception], ...]:
    """What Pydantic raises for a type it cannot validate or describe: its user
    errors (no schema, not fully defined), an undefined name, a bad argument."""
    return (pydantic.PydanticUserError, NameError, TypeError, ValueError)


def describe(exc: Any) -> str:
    """What a Pydantic ``ValidationError`` says is wrong, without the input.

    msgspec's form (``<what> - at `$.a[0]```), for at most three errors.
    """
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    said = [_one(error) for error in errors[:_ERRORS_SHOWN]]
    more = len(errors) - _ERRORS_SHOWN
    return "; ".join(said) + (f" (and {more} more)" if more > 0 else "")


def _one(error: Any) -> str:
    what = _QUOTING.get(error["type"], error["msg"])
    loc = error["loc"]
    if not loc:
        return str(what)
    path = "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return f"{what} - at `{path}`"


class PydanticDecoder:
    """A spec's ``output_type`` that Pydantic reads: its schema, and a ``decode`` as
    msgspec's ``Decoder`` has (raising msgspec's errors).

    Raises:
        TypeError: Pydantic cannot make a validator or a JSON schema of the type
            (an undefined forward reference, a class it does not know).
    """

    __slots__ = ("_adapter", "_error", "schema")

    def __init__(self, output_type: object) -> None:
        pydantic = _pydantic()
        try:
            self._adapter = pydantic.TypeAdapter(output_type)
            self.schema: dict[str, object] = self._adapter.json_schema()
        except _failures(pydantic) as exc:
            raise TypeError(str(exc).split("\n", 1)[0]) from None
        self._error = pydantic.ValidationError

    def convert(self, value: object) -> object:
        """*value*, a Python object (a partial answer's, say), validated by Pydantic.

        Raises:
            msgspec.ValidationError: it does not match (Pydantic's account of why).
        """
        try:
            return self._adapter.validate_python(value)
        except self._error as exc:
            raise msgspec.ValidationError(describe(exc)) from None

    def decode(self, text: str) -> object:
        """*text* validated by Pydantic (as ``model_validate_json``).

        Raises:
            msgspec.DecodeError: it is not JSON.
            msgspec.ValidationError: it does not match (Pydantic's account of why).
            UnicodeEncodeError: a lone surrogate (as msgspec raises for one).
        """
        data = text.encode()
        try:
            return self._adapter.validate_json(data)
        except self._error as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            if first["type"] == "json_invalid":
                raise msgspec.DecodeError(first["msg"].removeprefix("Invalid JSON: ")) from None
            raise msgspec.ValidationError(describe(exc)) from None


class ArgumentsModel:
    """A tool's arguments as a Pydantic model made from its parameters.

    Each parameter is a field under a name of its own, aliased to the
    parameter's: a parameter may then be named as no model field can be
    (``json``, ``_x``, ``model_id``). Unknown arguments are refused.

    Args:
        name: the model's name.
        params: ``(name, annotation, default)`` of each parameter the model
            fills (*default*: ``inspect.Parameter.empty`` for none; a
            ``pydantic.Field(...)`` is read as Pydantic reads it).

    Raises:
        TypeError: a parameter's annotation that Pydantic cannot validate or
            describe.
    """

    __slots__ = ("_error", "_model", "_names", "schema")

    def __init__(self, name: str, params: Sequence[tuple[str, object, object]]) -> None:
        pydantic = _pydantic()
        fields: dict[str, Any] = {}
        self._names: dict[str, str] = {}
        for i, (param, annotation, default) in enumerate(params):
            key = f"p{i}"
            self._names[key] = param
            aliased = Annotated[annotation, pydantic.Field(alias=param)]  # type: ignore[valid-type]
            fields[key] = (aliased, ... if default is inspect.Parameter.empty else default)
        try:
            config = pydantic.ConfigDict(extra="forbid")
            self._model = pydantic.create_model(name, __config__=config, **fields)
            self.schema: dict[str, object] = self._schema()
        except _failures(pydantic) as exc:
            raise TypeError(str(exc).split("\n", 1)[0]) from None
        self._error = pydantic.ValidationError

    def _schema(self) -> dict[str, object]:
        """The model's JSON schema, without the titles Pydantic makes up."""
        schema: dict[str, Any] = self._model.model_json_schema()
        schema.pop("title", None)
        properties = schema.get("properties", {})
        for key, field in self._model.model_fields.items():
            prop = properties.get(self._names[key])
            if isinstance(prop, dict) and field.title is None:
                prop.pop("title", None)
        return schema

    def validate(self, arguments: dict[str, object]) -> dict[str, object]:
        """*arguments* validated, as keyword arguments of the function (defaults filled).

        Raises:
            msgspec.ValidationError: Pydantic's account of what is wrong (the
                fields named, the values not quoted).
        """
        try:
            parsed = self._model.model_validate(arguments)
        except self._error as exc:
            raise msgspec.ValidationError(describe(exc)) from None
        return {param: getattr(parsed, key) for key, param in self._names.items()}


def enc_hook(value: object) -> object:
    """msgspec's ``enc_hook`` for a Pydantic model (a tool's result, a typed answer):
    its JSON form (``model_dump(mode="json", by_alias=True)``), as its schema says.

    Raises:
        NotImplementedError: *value* is not a Pydantic model (msgspec then says
            the type is not supported).
    """
    pydantic = _pydantic()
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        dumped: object = value.model_dump(mode="json", by_alias=True)
        return dumped
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")
