"""``@tool``: a function made callable by models, with a schema from its signature.

The arguments a model sends are validated by msgspec against a Struct built
from the signature; the JSON schema the model sees is msgspec's schema of that
same Struct, so what is advertised and what is checked cannot drift apart. A
signature with anything of Pydantic's (a model, a ``Field``) is read by Pydantic
instead, the same way: a model built from it gives both (see ``pydantic_models``).

The docstring is read by docstring-parser (Google, NumPy or Sphinx style): its
summary is the description, its parameters' entries the schema's descriptions.

A parameter annotated [`ToolContext`][agentrio.ToolContext] is not the model's to fill: it is
left out of that Struct (so out of the schema and of validation), found once
when the tool is made, and given the call's context when the agent calls it.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, overload

import attrs
import msgspec
import trio

from ..._text import scrub, scrub_json
from ...errors import InvalidArgument, ToolArgumentsInvalid, ToolResultInvalid
from ...messages import ContentPart, DocumentPart, ImagePart, TextPart
from ...providers.base import ToolSchema
from .pydantic_models import ArgumentsModel, enc_hook, holds_pydantic, uses_pydantic

__all__ = [
    "Tool",
    "ToolArgumentsInvalid",
    "ToolContext",
    "ToolResultInvalid",
    "check_env",
    "result_parts",
    "tool",
]

_PARTS = (TextPart, ImagePart, DocumentPart)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
# A tool's result as the model sees it: JSON, a Pydantic model's included.
_ENCODER = msgspec.json.Encoder(enc_hook=enc_hook)


class _Env(Mapping[str, str]):
    """Environment variables, read-only: a copy made (and checked) once, by `check_env`.

    Hashable, so a spec or context holding it is; its repr shows the names
    only, since values may be secrets.
    """

    __slots__ = ("_vars",)

    def __init__(self, variables: dict[str, str]) -> None:
        self._vars = variables

    def __getitem__(self, key: str) -> str:
        return self._vars[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._vars)

    def __len__(self) -> int:
        return len(self._vars)

    def __hash__(self) -> int:
        return hash(frozenset(self._vars.items()))

    def __repr__(self) -> str:
        return "<" + ", ".join(self._vars) + ">"


# The environment of an agent given none: one shared, empty, read-only mapping.
NO_ENV: Mapping[str, str] = _Env({})


def check_env(what: str, value: object) -> Mapping[str, str]:
    """*value* as a read-only copy, checked to map str to str (``None``: empty).

    One made here (a spec's, handed on to a context) is kept as it is.

    Raises:
        InvalidArgument: not a mapping, or a key or value that is not a str
            (the message names the key, never a value: values may be secrets).
    """
    if value is None:
        return NO_ENV
    if isinstance(value, _Env):
        return value
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"{what} must be a mapping of str to str, got a {type(value).__name__}"
        )
    env: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise InvalidArgument(f"{what} keys must be str, got {key!r}")
        if not isinstance(item, str):
            raise InvalidArgument(f"{what}[{key!r}] must be a str, got a {type(item).__name__}")
        env[key] = item
    return _Env(env) if env else NO_ENV


def _context_env(value: object) -> Mapping[str, str]:
    return check_env("ToolContext.env", value)


@attrs.frozen
class ToolContext:
    """Where a tool call runs: what a tool that declares a ``ToolContext`` parameter receives.

    Example:

        @agentrio.tool
        async def save(ctx: agentrio.ToolContext, name: str, text: str) -> str:
            \"\"\"Save a note in the agent's workspace.\"\"\"
            ...

    The parameter may be in any position (see ``Tool.context_param``). A new
    one is made for each call of such a tool, in every path a tool is called
    by an agent: a lone call, a parallel batch, direct tool calls, agent
    tools' agents, ``map``'s agents and helpers, sync tools (in their worker
    thread) as well as async ones; a tool without that parameter is called
    as before and receives nothing, and no ``ToolContext`` is made for its
    calls.

    It can be made directly (``ToolContext("a", None, "call_1", 2)``), to
    test a tool with [`Tool.call`][agentrio.Tool.call]. The class is frozen and
    hashable.

    Attributes:
        agent: the path of the agent making the call (a helper's calls: the
            helper's own agent, ``<agent>.helper-<n>`` for a session helper).
        context_label: the phase's context label (``None``: the primary context).
        call_id: the call's id, as in its [`ToolResult`][agentrio.ToolResult] (kept
            when ``pre_tool_use`` rewrites the call).
        step: the call's step number in its phase, as ``on_step`` numbers it
            in [`StepInfo`][agentrio.types.StepInfo]: the model's turn is a step, then each
            call of that turn in the order the model asked for them (denied
            and failed calls included), from 1 at the start of each phase;
            in a direct-tool-call phase the calls are steps 1, 2, ...
        workspace: the agent's workspace folder as a ``Path``
            (``AgentSpec.workspace``, the agent's subfolder of it when
            spawned under another name, a helper's ``workspace=``, a session
            helper's agent's), or ``None``. The folder may not exist yet. It
            is the tool's working folder: agentrio never changes the
            process's current directory (all agents share one process), so a
            tool resolves relative paths against it.
        env: the environment variables the agent was given
            (``AgentSpec.env``, a helper's ``env=``), stored read-only; not
            ``os.environ``. Its repr shows the names only.

    Raises:
        InvalidArgument: an *env* that is not a mapping of str to str.
    """

    agent: str
    context_label: str | None
    call_id: str
    step: int
    workspace: Path | None = None
    env: Mapping[str, str] = attrs.field(default=NO_ENV, converter=_context_env)


def _inline_schema(args_type: type[msgspec.Struct]) -> dict[str, object]:
    (schema,), components = msgspec.json.schema_components([args_type])
    ref = schema.get("$ref", "")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        schema = dict(components[ref.removeprefix("#/$defs/")])
        others = {k: v for k, v in components.items() if k != args_type.__name__}
        if others:
            schema["$defs"] = others
    schema.pop("title", None)
    return schema


def _parameters(
    fn: Callable[..., object], name: str
) -> tuple[list[tuple[str, object, object]], str | None]:
    """``(name, annotation, default)`` of each parameter the model fills, and the
    parameter taking the ToolContext (if any)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # unresolvable annotations are the tool author's bug
        raise InvalidArgument(f"tool {name!r}: cannot resolve its annotations: {exc}") from exc
    params: list[tuple[str, object, object]] = []
    context: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise InvalidArgument(
                f"tool {name!r}: parameter {param.name!r} must be a plain or keyword-only "
                "parameter (no *args, **kwargs or positional-only)"
            )
        # Unannotated: any JSON value (msgspec has no JSON schema for ``object``).
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            if context is not None:
                raise InvalidArgument(
                    f"tool {name!r}: parameters {context!r} and {param.name!r} are both "
                    "annotated ToolContext; a tool takes at most one"
                )
            context = param.name
        else:
            params.append((param.name, annotation, param.default))
    return params, context


def _pydantic_arguments(
    params: list[tuple[str, object, object]], name: str
) -> ArgumentsModel | None:
    """The Pydantic model of *params* that msgspec could not read, or None if
    Pydantic cannot read them either."""
    camel = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]", name)) or "Tool"
    try:
        return ArgumentsModel(f"{camel}Arguments", params)
    except TypeError:
        return None


def _arguments_type(
    params: list[tuple[str, object, object]], name: str
) -> type[msgspec.Struct] | ArgumentsModel:
    """What validates the model's arguments: a Struct made from *params*, or a Pydantic
    model when one of them is Pydantic's (a ``BaseModel``, a ``Field``).

    Raises:
        TypeError: Pydantic cannot read an annotation.
    """
    camel = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]", name)) or "Tool"
    if uses_pydantic(*(annotation for _, annotation, _ in params), *(d for _, _, d in params)):
        return ArgumentsModel(f"{camel}Arguments", params)
    fields: list[tuple[str, object] | tuple[str, object, object]] = [
        (param, annotation) if default is inspect.Parameter.empty else (param, annotation, default)
        for param, annotation, default in params
    ]
    return msgspec.defstruct(f"{camel}Arguments", fields, forbid_unknown_fields=True, kw_only=True)


def _docstring(fn: Callable[..., object]) -> tuple[str, dict[str, str]]:
    """*fn*'s docstring read: its summary (short and long description, without its
    sections: Args, Returns, Raises, Examples...) and its parameters' descriptions,
    in Google, NumPy or Sphinx (``:param x:``) style.

    A docstring the parser cannot read is the summary as it is, with no parameters.
    """
    doc = inspect.getdoc(fn) or ""
    if not doc:
        return "", {}
    import docstring_parser  # (here: a tool without a docstring never needs it)

    try:
        # (After a blank first line: a docstring whose first line is its ``Args:``
        # is read as sections, not as a summary of "Args:"; the others read the same.)
        parsed = docstring_parser.parse("\n" + doc)
    except docstring_parser.ParseError:
        return doc, {}
    parts = [part for part in (parsed.short_description, parsed.long_description) if part]
    summary = ("\n\n" if parsed.blank_after_short_description else "\n").join(parts)
    return summary, {p.arg_name: p.description for p in parsed.params if p.description}


def _describe(schema: dict[str, object], descriptions: dict[str, str]) -> None:
    """Give each property of *schema* its docstring's description, unless its annotation
    gave one (``Meta(description=...)``, ``Field(description=...)``)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for param, text in descriptions.items():
        prop = properties.get(param)
        if isinstance(prop, dict) and "description" not in prop:
            prop["description"] = text


class Tool:
    """A function a model may call, made by [`tool`][agentrio.tool] (or ``Tool(fn, name=...,
    description=...)``).

    The parameters' annotations give the JSON schema (through msgspec, or
    Pydantic when a parameter is a Pydantic model or has a ``pydantic.Field``);
    the arguments a model sends are checked against the same schema. The
    docstring (Google, NumPy or Sphinx style) gives the description, its
    summary, and each parameter's description in the schema, from its
    ``Args:`` (a description the annotation gives wins); its other sections
    (``Returns:``, ``Raises:``...) are left out.

    Attributes:
        name: the name models call it by (default ``fn.__name__``); it must
            match ``^[A-Za-z_][A-Za-z0-9_.-]{0,63}$``.
        description: what models are told it does (default: the docstring's
            summary, its text before the first section).
        schema: the [`ToolSchema`][agentrio.types.ToolSchema] advertised to models.
        is_async: True for an ``async def``; sync functions run in a worker thread.
        idempotent: calling it twice with the same arguments does no more
            than calling it once (a read, a write of a fixed value): a call
            that was running when its process or agent crashed is made again
            when its phase resumes (see [Surviving a crash][surviving-a-crash]).
            False (the default): such a call is not made again, and the
            model is told it was interrupted and may have taken effect.
        context_param: the name of the parameter annotated [`ToolContext`][agentrio.ToolContext]
            (it receives the call's context), or ``None`` if the function
            declares none. It may be in any position (plain or
            keyword-only); it is left out of the schema and of validation:
            the model never sees it, and an argument of that name from the
            model is refused as unknown.

    Raises:
        InvalidArgument: *fn* is not callable; a bad name or description; a
            ``*args``, ``**kwargs`` or positional-only parameter; two
            parameters annotated ``ToolContext``; annotations that cannot be
            resolved, or that have no JSON schema.
    """

    __slots__ = (
        "_args_type",
        "context_param",
        "description",
        "fn",
        "idempotent",
        "is_async",
        "name",
        "needs_caller",
        "schema",
    )

    def __init__(
        self,
        fn: Callable[..., object],
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
    ) -> None:
        if not callable(fn):
            raise InvalidArgument(f"tool() needs a function, got {fn!r}")
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if not isinstance(tool_name, str) or not _NAME.match(tool_name):
            raise InvalidArgument(
                f"tool name must match {_NAME.pattern} (letters, digits, _ . -), got {tool_name!r}"
            )
        summary, param_docs = _docstring(fn)
        desc = description if description is not None else summary
        if not isinstance(desc, str):
            raise InvalidArgument(f"tool description must be a str, got {desc!r}")
        if not isinstance(idempotent, bool):
            raise InvalidArgument(f"tool idempotent must be a bool, got {idempotent!r}")
        self.fn = fn
        self.idempotent = idempotent
        self.name = tool_name
        self.description = desc
        self.is_async = inspect.iscoroutinefunction(fn)
        # True for agent tools: the phase then tells them which agent calls.
        self.needs_caller = False
        params, self.context_param = _parameters(fn, tool_name)
        try:
            self._args_type = _arguments_type(params, tool_name)
            if isinstance(self._args_type, ArgumentsModel):
                parameters = self._args_type.schema
            else:
                parameters = _inline_schema(self._args_type)
        except TypeError as exc:  # an annotation with no JSON schema (a custom class...)
            # (A dataclass or TypedDict holding a Pydantic model is no type of
            # msgspec's: Pydantic reads the tool's parameters, if the program has it.)
            annotations = (annotation for _, annotation, _ in params)
            model = _pydantic_arguments(params, tool_name) if holds_pydantic(*annotations) else None
            if model is None:
                raise InvalidArgument(
                    f"tool {tool_name!r}: its parameters' annotations have no JSON schema: {exc}"
                ) from exc
            self._args_type = model
            parameters = model.schema
        _describe(parameters, param_docs)
        self.schema = ToolSchema(tool_name, desc, parameters)

    def __repr__(self) -> str:
        return f"<Tool {self.name!r}>"

    def validate(self, arguments: dict[str, object]) -> dict[str, object]:
        """Check *arguments* against the schema and return them converted (a string
        holding a number is accepted for a number).

        Raises:
            ToolArgumentsInvalid: with msgspec's account of what is wrong.
        """
        args_type = self._args_type
        try:
            if isinstance(args_type, ArgumentsModel):
                return args_type.validate(arguments)
            parsed = msgspec.convert(arguments, args_type, strict=False)
        except msgspec.ValidationError as exc:
            raise ToolArgumentsInvalid(f"invalid arguments for {self.name!r}: {exc}") from exc
        return msgspec.structs.asdict(parsed)

    async def call(
        self, arguments: dict[str, object], *, context: ToolContext | None = None
    ) -> str:
        """Validate, run, and encode the result as the text the model sees.

        A ``str`` result is passed as it is; content parts (see `result_parts`)
        give the text of their text parts; anything else is encoded as JSON.
        Handy to test a tool alone.

        Args:
            arguments: the model's arguments.
            context: what a tool that declares a [`ToolContext`][agentrio.ToolContext]
                parameter receives (required for one; ignored by others).

        Raises:
            InvalidArgument: the tool declares a ToolContext and *context* is None.
            ToolArgumentsInvalid: bad arguments (the tool did not run).
            ToolResultInvalid: the result cannot be encoded as JSON.
            Exception: whatever the tool itself raised.
        """
        kwargs = self.validate(arguments)
        if self.context_param is not None:
            if not isinstance(context, ToolContext):
                raise InvalidArgument(
                    f"tool {self.name!r} takes a ToolContext (parameter "
                    f"{self.context_param!r}): pass context=, got {context!r}"
                )
            kwargs[self.context_param] = context
        return self.encode(await self.invoke(kwargs))

    def invoke(self, kwargs: dict[str, object]) -> Awaitable[object]:
        """Start the function with validated *kwargs*: an awaitable of its result.

        For a tool that declares a ToolContext, *kwargs* holds it too, under
        `context_param`.

        An async function's coroutine is returned as it is (no wrapper frame);
        a sync function runs in a worker thread. A thread cannot be stopped, so
        when the call is cancelled (its timeout, the phase's, ``cancel()``) it
        is abandoned: the call ends at once and the thread's result is dropped.
        """
        if self.is_async:
            return typing.cast("Callable[..., Awaitable[object]]", self.fn)(**kwargs)
        # Without abandon_on_cancel the tool timeout could not interrupt a sync
        # tool: the call would wait for the thread and then report "ok".
        return trio.to_thread.run_sync(functools.partial(self.fn, **kwargs), abandon_on_cancel=True)

    def encode(self, result: object) -> str:
        """The text the model sees for *result*: a str as it is, the text of a result
        of content parts (its text parts, joined by newlines; the parts go
        beside it, see `result_parts`), anything else as JSON.

        A string in the result that holds a lone surrogate (a file name from
        ``os.listdir`` that is not UTF-8) is encoded with U+FFFD for it (see
        `agentrio._text.scrub`; the agent scrubs a str result likewise).

        Raises:
            ToolResultInvalid: the result cannot be encoded as JSON, or is a
                list of parts that holds something else.
        """
        if isinstance(result, str):
            return result
        parts = result_parts(result, self.name)
        if parts:  # (a result of content parts: the model reads the text beside them)
            return "\n".join(p.text for p in parts if isinstance(p, TextPart))
        try:
            try:
                return _ENCODER.encode(result).decode()
            except UnicodeEncodeError:  # (a lone surrogate: the rare path, a second pass)
                builtins = msgspec.to_builtins(result, enc_hook=enc_hook)
                return _ENCODER.encode(scrub_json(builtins)).decode()
        except (TypeError, msgspec.EncodeError) as exc:
            raise ToolResultInvalid(
                f"tool {self.name!r} returned a {type(result).__name__}, "
                f"which cannot be encoded as JSON: {exc}"
            ) from exc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation)."""
        return self.fn(*args, **kwargs)


def result_parts(result: object, name: str) -> tuple[ContentPart, ...]:
    """The content parts of a tool's *result*, or ``()`` if it returned no parts.

    A part (``ImagePart``, ``DocumentPart``, ``TextPart``) or a list or tuple
    holding at least one is a result of parts; a ``str`` in the list is a
    ``TextPart``. The texts are scrubbed (`agentrio._text.scrub`).

    Raises:
        ToolResultInvalid: a list of parts also holds something that is
            neither a part nor a str (the tool is *name*).
    """
    if isinstance(result, _PARTS):
        items: list[object] | tuple[object, ...] = (result,)
    elif isinstance(result, (list, tuple)) and any(isinstance(i, _PARTS) for i in result):
        items = result
    else:
        return ()
    parts: list[ContentPart] = []
    for item in items:
        if isinstance(item, str):
            parts.append(TextPart(scrub(item)))
        elif isinstance(item, TextPart):
            parts.append(TextPart(scrub(item.text)))
        elif isinstance(item, (ImagePart, DocumentPart)):
            parts.append(item)
        else:
            raise ToolResultInvalid(
                f"tool {name!r} returned content parts with a {type(item).__name__} among "
                "them: a result of parts holds TextPart, ImagePart, DocumentPart and str only"
            )
    return tuple(parts)


@overload
def tool(fn: Callable[..., object], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, idempotent: bool = False
) -> Callable[[Callable[..., object]], Tool]: ...
def tool(
    fn: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., object]], Tool]:
    """Make a function into a [`Tool`][agentrio.Tool] that agents can be given.

    Works on ``async def`` and plain functions (run in a worker thread via
    ``trio.to_thread``). The parameters' annotations give the JSON schema;
    the docstring's summary gives the description, and its ``Args:`` (or
    NumPy's ``Parameters``, or Sphinx's ``:param x:``) the parameters'
    descriptions. An explicit ``description=`` replaces the summary only.

    Example:

        @agentrio.tool
        async def lookup(key: str) -> str:
            \"\"\"Look a key up in the store.

            Args:
                key: The key, as the user wrote it.
            \"\"\"
            return store[key]

    Use as ``@agentrio.tool`` or ``@agentrio.tool(name=..., description=...,
    idempotent=...)``: an idempotent tool's call cut short by a crash is made
    again when its phase resumes (see [`Tool`][agentrio.Tool]).

    Raises:
        InvalidArgument: a bad name, or a signature a model cannot call (see
            [`Tool`][agentrio.Tool]).
    """
    if fn is not None:
        return Tool(fn, name=name, description=description, idempotent=idempotent)

    def decorate(f: Callable[..., object]) -> Tool:
        return Tool(f, name=name, description=description, idempotent=idempotent)

    return decorate
