"""@tool: async and sync functions, JSON schemas from signatures, validation, encoding."""

from __future__ import annotations

import threading
import types
from typing import Annotated, Literal

import msgspec
import pytest
import trio

import agentrio
from agentrio import InvalidArgument, Tool
from agentrio.agents.tools.tool import ToolArgumentsInvalid, ToolResultInvalid
from agentrio.types import ToolSchema


class Point(msgspec.Struct):
    x: int
    y: int = 0


@agentrio.tool
async def search(query: str, limit: int = 5, *, exact: bool = False) -> list[str]:
    """Search the index.

    Returns matching titles.
    """
    await trio.lowlevel.checkpoint()
    return [query] * limit if exact else [query.upper()] * limit


@agentrio.tool
def area(width: float, height: float) -> float:
    """Multiply."""
    return width * height


def test_async_tool() -> None:
    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.is_async
    assert search.description == "Search the index.\n\nReturns matching titles."
    assert repr(search) == "<Tool 'search'>"
    assert search.schema == ToolSchema(
        name="search",
        description="Search the index.\n\nReturns matching titles.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "default": 5},
                "exact": {"type": "boolean", "default": False},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )


def test_sync_tool() -> None:
    assert not area.is_async
    assert area.schema.parameters["properties"] == {
        "width": {"type": "number"},
        "height": {"type": "number"},
    }
    assert area(2, 3) == 6  # still callable directly


def test_schema_of_richer_types() -> None:
    @agentrio.tool
    async def place(
        at: Point,
        tags: list[str],
        mode: Literal["a", "b"] = "a",
        note: str | None = None,
    ) -> None:
        """Place."""

    params = place.schema.parameters
    assert params["required"] == ["at", "tags"]
    props = params["properties"]
    assert isinstance(props, dict)
    assert props["at"] == {"$ref": "#/$defs/Point"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["mode"] == {"enum": ["a", "b"], "default": "a"}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    defs = params["$defs"]
    assert isinstance(defs, dict) and set(defs) == {"Point"}
    assert "title" not in params
    # what is advertised is what is checked
    assert place.validate({"at": {"x": 1}, "tags": []}) == {
        "at": Point(1, 0),
        "tags": [],
        "mode": "a",
        "note": None,
    }
    with pytest.raises(ToolArgumentsInvalid):
        place.validate({"at": {"x": 1}, "tags": [], "mode": "c"})


def test_no_parameters() -> None:
    @agentrio.tool
    async def now() -> str:
        return "t"

    assert now.schema.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert now.validate({}) == {}


def test_unannotated_parameters_take_any_json_value() -> None:
    @agentrio.tool
    def loose(x, y=3):  # type: ignore[no-untyped-def]
        return x

    assert loose.schema.parameters["properties"] == {"x": {}, "y": {"default": 3}}
    assert loose.validate({"x": {"k": [1, "a"]}}) == {"x": {"k": [1, "a"]}, "y": 3}


def test_decorator_with_name_and_description() -> None:
    @agentrio.tool(name="web.search-v2", description="Find pages.")
    async def anything(q: str) -> str:
        """Ignored docstring."""
        return q

    assert anything.name == anything.schema.name == "web.search-v2"
    assert anything.description == anything.schema.description == "Find pages."
    assert Tool(area.fn, name="other").name == "other"


def test_no_docstring_means_empty_description() -> None:
    def bare(x: int) -> int:
        return x

    assert agentrio.tool(bare).description == ""


# -- descriptions from docstrings ----------------------------------------------------


def google(ctx: agentrio.ToolContext, path: str, count: int = 1) -> str:
    """Read lines of a file.

    Reads from the top, in the agent's workspace.

    Args:
        ctx: Where the call runs (not the model's).
        path: The file, relative to the workspace.
        count: How many lines,
            at most.
        other: Not a parameter.

    Returns:
        The lines.

    Raises:
        OSError: The file cannot be read.
    """
    return path


def numpy(path: str, count: int = 1) -> str:
    """Read lines of a file.

    Reads from the top, in the agent's workspace.

    Parameters
    ----------
    path : str
        The file, relative to the workspace.
    count : int, optional
        How many lines,
        at most.

    Returns
    -------
    str
        The lines.
    """
    return path


def sphinx(path: str, count: int = 1) -> str:
    """Read lines of a file.

    Reads from the top, in the agent's workspace.

    :param path: The file, relative to the workspace.
    :param int count: How many lines,
        at most.
    :returns: The lines.
    :raises OSError: The file cannot be read.
    """
    return path


@pytest.mark.parametrize("fn", [google, numpy, sphinx])
def test_the_docstring_gives_the_description_and_the_parameters(fn: types.FunctionType) -> None:
    made = agentrio.tool(fn)
    summary = "Read lines of a file.\n\nReads from the top, in the agent's workspace."
    assert made.description == made.schema.description == summary
    assert made.schema.parameters["properties"] == {
        "path": {"type": "string", "description": "The file, relative to the workspace."},
        "count": {"type": "integer", "default": 1, "description": "How many lines,\nat most."},
    }


def test_an_explicit_description_wins_and_the_parameters_are_still_read() -> None:
    made = agentrio.tool(description="Read a file.")(google)
    assert made.description == "Read a file."
    assert made.schema.parameters["properties"]["path"]["description"].startswith("The file")


def test_an_annotation_s_description_wins_over_the_docstring() -> None:
    def described(n: Annotated[int, msgspec.Meta(description="From the annotation.", ge=0)]) -> int:
        """Describe.

        Args:
            n: From the docstring.
        """
        return n

    made = agentrio.tool(described)
    assert made.schema.parameters["properties"]["n"] == {
        "type": "integer",
        "description": "From the annotation.",
        "minimum": 0,
    }
    with pytest.raises(ToolArgumentsInvalid, match=">= 0"):  # (Meta's constraint is kept)
        made.validate({"n": -1})


def no_summary(path: str, count: int = 1) -> str:
    """
    Args:
        path: The file, relative to the workspace.
        count: How many lines,
            at most.
    """
    return path


def no_summary_numpy(path: str, count: int = 1) -> str:
    """
    Parameters
    ----------
    path : str
        The file, relative to the workspace.
    count : int, optional
        How many lines,
        at most.
    """
    return path


@pytest.mark.parametrize("fn", [no_summary, no_summary_numpy])
def test_a_docstring_of_its_parameters_alone_gives_them_and_no_description(
    fn: types.FunctionType,
) -> None:
    made = agentrio.tool(fn)
    assert made.description == ""
    assert made.schema.parameters["properties"] == {
        "path": {"type": "string", "description": "The file, relative to the workspace."},
        "count": {"type": "integer", "default": 1, "description": "How many lines,\nat most."},
    }


def test_a_one_line_docstring_is_the_description() -> None:
    assert area.description == "Multiply."
    assert "description" not in area.schema.parameters["properties"]["width"]


@pytest.mark.parametrize("name", ["", "has space", "1abc", "a/b", "x" * 65, "é"])
def test_bad_names(name: str) -> None:
    with pytest.raises(InvalidArgument, match="tool name"):
        agentrio.tool(name=name)(area.fn)


def test_lambda_needs_a_name() -> None:
    with pytest.raises(InvalidArgument, match="<lambda>"):
        agentrio.tool(lambda x: x)
    assert agentrio.tool(name="ok")(lambda x: x).name == "ok"


def test_longest_name() -> None:
    assert agentrio.tool(name="x" * 64)(area.fn).name == "x" * 64


def test_not_callable() -> None:
    with pytest.raises(InvalidArgument, match="needs a function"):
        agentrio.tool(3)  # type: ignore[call-overload]


def test_description_must_be_a_str() -> None:
    with pytest.raises(InvalidArgument, match="description"):
        agentrio.tool(description=3)(area.fn)  # type: ignore[arg-type]


def test_star_args_and_positional_only_are_refused() -> None:
    def star(*args: int) -> None: ...

    def kw(**kwargs: int) -> None: ...

    def positional(a: int, /) -> None: ...

    for fn, param in ((star, "args"), (kw, "kwargs"), (positional, "a")):
        with pytest.raises(InvalidArgument, match=f"parameter '{param}'"):
            agentrio.tool(fn)


def test_unresolvable_annotations() -> None:
    def broken(x: NoSuchType) -> None:  # type: ignore[name-defined] # noqa: F821
        ...

    with pytest.raises(InvalidArgument, match="cannot resolve its annotations"):
        agentrio.tool(broken)


def test_annotation_without_a_json_schema() -> None:
    class Opaque:
        pass

    def uses(x: Opaque) -> None: ...

    uses.__annotations__ = {"x": Opaque, "return": None}
    with pytest.raises(InvalidArgument, match=r"'uses'.*JSON schema"):
        agentrio.tool(uses)


# -- validate, invoke, encode, call ------------------------------------------------------


def test_validate_converts_and_fills_defaults() -> None:
    assert search.validate({"query": "q"}) == {"query": "q", "limit": 5, "exact": False}
    # lax conversion of what models often send as strings
    assert search.validate({"query": "q", "limit": "7", "exact": "true"}) == {
        "query": "q",
        "limit": 7,
        "exact": True,
    }


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({}, "missing required field `query`"),
        ({"query": 3}, "Expected `str`"),
        ({"query": "q", "limit": "many"}, "Expected `int`"),
        ({"query": "q", "other": 1}, "unknown field `other`"),
    ],
)
def test_validate_errors(arguments: dict[str, object], why: str) -> None:
    with pytest.raises(ToolArgumentsInvalid) as info:
        search.validate(arguments)
    assert str(info.value).startswith("invalid arguments for 'search': ")
    assert why in str(info.value)


def test_encode() -> None:
    assert search.encode("plain text") == "plain text"
    assert search.encode({"a": [1, 2.5, None, True]}) == '{"a":[1,2.5,null,true]}'
    assert search.encode(Point(1, 2)) == '{"x":1,"y":2}'
    assert search.encode(None) == "null"
    with pytest.raises(ToolResultInvalid, match="tool 'search' returned a object"):
        search.encode(object())
    with pytest.raises(ToolResultInvalid, match="returned a dict"):
        search.encode({(1, 2): "tuple key"})


async def test_call_async() -> None:
    assert await search.call({"query": "q", "limit": 2}) == '["Q","Q"]'
    assert await search.call({"query": "q", "limit": 1, "exact": True}) == '["q"]'
    with pytest.raises(ToolArgumentsInvalid):
        await search.call({"limit": 1})


async def test_sync_tools_run_in_a_worker_thread() -> None:
    seen: list[threading.Thread] = []

    @agentrio.tool
    def where() -> str:
        seen.append(threading.current_thread())
        return "here"

    assert await where.call({}) == "here"
    assert seen[0] is not threading.current_thread()
    assert await area.call({"width": 2, "height": 2.5}) == "5.0"


async def test_what_the_tool_raises_comes_through_call() -> None:
    @agentrio.tool
    def bad() -> None:
        raise LookupError("nope")

    with pytest.raises(LookupError, match="nope"):
        await bad.call({})


async def test_unencodable_result_through_call() -> None:
    @agentrio.tool
    async def weird() -> object:
        return object()

    with pytest.raises(ToolResultInvalid, match="'weird'"):
        await weird.call({})


# -- ToolContext ------------------------------------------------------------------------


CONTEXT = agentrio.ToolContext(
    agent="lead", context_label=None, call_id="call_1", step=2, env={"TOKEN": "s3cret"}
)


@agentrio.tool
async def where_first(ctx: agentrio.ToolContext, query: str, limit: int = 5) -> str:
    """Say where it runs."""
    return f"{ctx.agent} {ctx.call_id} {query} {limit}"


@agentrio.tool
def where_middle(query: str, context: agentrio.ToolContext, limit: int = 5) -> str:
    """Say where it runs (sync)."""
    return f"{context.agent} {context.call_id} {query} {limit}"


@agentrio.tool
async def where_last(query: str, limit: int = 5, *, ctx: agentrio.ToolContext) -> str:
    """Say where it runs (keyword-only)."""
    return f"{ctx.agent} {ctx.call_id} {query} {limit}"


@agentrio.tool
async def nowhere(query: str, limit: int = 5) -> str:
    """The same parameters, no context."""
    return f"{query} {limit}"


@pytest.mark.parametrize(
    ("declaring", "param"),
    [(where_first, "ctx"), (where_middle, "context"), (where_last, "ctx")],
    ids=["first", "middle", "keyword-only"],
)
def test_the_context_parameter_is_left_out_of_the_schema(declaring: Tool, param: str) -> None:
    assert declaring.context_param == param
    assert declaring.schema.parameters == nowhere.schema.parameters
    assert nowhere.context_param is None
    assert search.context_param is None


@pytest.mark.parametrize("declaring", [where_first, where_middle, where_last], ids=repr)
def test_the_context_parameter_is_left_out_of_validation(declaring: Tool) -> None:
    assert declaring.validate({"query": "q"}) == {"query": "q", "limit": 5}
    # a model cannot fill it: it is an unknown argument like any other
    with pytest.raises(ToolArgumentsInvalid, match=f"unknown field `{declaring.context_param}`"):
        declaring.validate({"query": "q", declaring.context_param or "": {}})


def test_the_context_is_found_by_its_annotation_under_future_annotations() -> None:
    # this module uses `from __future__ import annotations`: the annotation is the
    # string "agentrio.ToolContext", resolved when the tool is made
    assert where_first.fn.__annotations__["ctx"] == "agentrio.ToolContext"
    assert where_first.context_param == "ctx"


def test_two_context_parameters_are_refused() -> None:
    async def twice(a: agentrio.ToolContext, b: agentrio.ToolContext) -> str:
        return ""

    with pytest.raises(InvalidArgument, match="'a' and 'b' are both annotated ToolContext"):
        agentrio.tool(twice)


def test_a_positional_only_context_parameter_is_refused() -> None:
    async def positional(ctx: agentrio.ToolContext, /, x: int) -> str:
        return ""

    with pytest.raises(InvalidArgument, match="parameter 'ctx' must be a plain or keyword-only"):
        agentrio.tool(positional)


@pytest.mark.parametrize("declaring", [where_first, where_middle, where_last], ids=repr)
async def test_call_hands_the_context_to_a_tool_that_declares_it(declaring: Tool) -> None:
    assert await declaring.call({"query": "q"}, context=CONTEXT) == "lead call_1 q 5"
    with pytest.raises(InvalidArgument, match=r"takes a ToolContext .* pass context="):
        await declaring.call({"query": "q"})


async def test_call_gives_a_tool_without_the_parameter_nothing() -> None:
    # (nowhere would raise TypeError on an unexpected keyword argument)
    assert await nowhere.call({"query": "q"}, context=CONTEXT) == "q 5"


def test_tool_context_fields_and_defaults() -> None:
    ctx = agentrio.ToolContext(agent="a/b", context_label="notes", call_id="c1", step=3)
    assert (ctx.agent, ctx.context_label, ctx.call_id, ctx.step) == ("a/b", "notes", "c1", 3)
    assert ctx.workspace is None
    assert ctx.env == {}
    with pytest.raises(AttributeError):
        ctx.step = 4  # type: ignore[misc]
    assert ctx == agentrio.ToolContext(agent="a/b", context_label="notes", call_id="c1", step=3)
    assert hash(ctx) == hash(agentrio.ToolContext("a/b", "notes", "c1", 3))


def test_tool_context_env_is_a_read_only_copy_shown_by_names_only() -> None:
    env = {"TOKEN": "s3cret", "HOME": "/home/a"}
    ctx = agentrio.ToolContext("a", None, "c1", 1, env=env)
    env["TOKEN"] = "changed"
    assert ctx.env == {"TOKEN": "s3cret", "HOME": "/home/a"}
    with pytest.raises(TypeError):
        ctx.env["TOKEN"] = "x"  # type: ignore[index]
    assert "env=<TOKEN, HOME>" in repr(ctx)
    assert "s3cret" not in repr(ctx)


def test_tool_context_env_given_as_another_read_only_mapping_is_checked_and_copied() -> None:
    variables = {"TOKEN": "s3cret"}
    ctx = agentrio.ToolContext("a", None, "c1", 1, env=types.MappingProxyType(variables))
    variables["TOKEN"] = "changed"
    assert ctx.env == {"TOKEN": "s3cret"}
    with pytest.raises(InvalidArgument, match=r"ToolContext.env\['N'\] must be a str"):
        agentrio.ToolContext("a", None, "c1", 1, env=types.MappingProxyType({"N": 1}))  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("env", "why"),
    [
        (["TOKEN"], "ToolContext.env must be a mapping of str to str, got a list"),
        ({1: "x"}, "ToolContext.env keys must be str, got 1"),
        ({"TOKEN": 12345}, r"ToolContext.env\['TOKEN'\] must be a str, got a int"),
    ],
)
def test_tool_context_bad_env(env: object, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why) as info:
        agentrio.ToolContext("a", None, "c1", 1, env=env)  # type: ignore[arg-type]
    assert "12345" not in str(info.value)  # a value is never shown: it may be a secret
