"""Typed outputs: an agent's answer parsed and validated as its spec's output_type, sent
back with why when it does not match (up to output_retries), OutputInvalid past them;
the schema told to models that take it; results typed for mypy."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Annotated

import attrs
import msgspec
import pytest

import agentrio
from agentrio import AgentSpec, ChatMessage, InvalidArgument, Limits, ModelReply, ToolCallRequest
from agentrio.agents.tools.output import OUTPUT_RETRY_PROMPT, WHY_CHARS, OutputType, output_type_of
from agentrio.testing import FunctionModel, Reply, ScriptedModel
from agentrio.types import OutputSchema, ToolSchema


class Movie(msgspec.Struct):
    title: str
    year: int


@attrs.define
class Book:
    title: str
    pages: int = 0


@dataclasses.dataclass
class Song:
    name: str


def answer(text: str) -> Reply:
    return Reply(text=text)


async def run(spec: AgentSpec[object], message: str = "go") -> agentrio.PhaseResult[object]:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        return await agent.run(message)


def spec_of(model: object, output_type: object, **options: object) -> AgentSpec[object]:
    return AgentSpec("typed", model, output_type=output_type, **options)  # type: ignore[arg-type]


# -- valid answers -------------------------------------------------------------------


async def test_a_struct_answer_is_the_output() -> None:
    model = ScriptedModel([answer('{"title": "Alien", "year": 1979}')])
    result = await run(spec_of(model, Movie))
    assert (result.stop_reason, result.output) == ("done", Movie("Alien", 1979))
    assert result.final_text == '{"title": "Alien", "year": 1979}'


@pytest.mark.parametrize(
    ("output_type", "text", "value"),
    [
        (Book, '{"title": "Dune"}', Book("Dune", 0)),
        (Song, '{"name": "Blue"}', Song("Blue")),
        (list[str], '["a", "b"]', ["a", "b"]),
        (int | None, "null", None),
        (dict[str, int], '{"a": 1}', {"a": 1}),
    ],
)
async def test_attrs_dataclass_and_plain_types(
    output_type: object, text: str, value: object
) -> None:
    result = await run(spec_of(ScriptedModel([answer(text)]), output_type))
    assert (result.stop_reason, result.output, result.error) == ("done", value, "")


async def test_without_an_output_type_the_output_is_the_text_when_done() -> None:
    done = await run(AgentSpec("plain", ScriptedModel([answer("hello")])))
    assert (done.output, done.final_text) == ("hello", "hello")
    # Not done (its one call asked for a tool): no output.
    model = ScriptedModel([Reply(tool_calls=(ToolCallRequest("nope", {}),))])
    limits = Limits(max_iterations=1, final_answer=False)
    capped = await run(AgentSpec("plain", model, limits=limits))
    assert (capped.stop_reason, capped.output) == ("max_iterations", None)


async def test_output_type_str_is_plain_text() -> None:
    # Not read as JSON: "hello" is no JSON string, yet it is the output.
    result = await run(spec_of(ScriptedModel([answer("hello")]), str))
    assert (result.stop_reason, result.output) == ("done", "hello")


async def test_tools_first_then_the_typed_answer() -> None:
    @agentrio.tool
    def year_of(title: str) -> int:
        """The year of a film."""
        return 1979

    model = ScriptedModel(
        [
            Reply(tool_calls=(ToolCallRequest("year_of", {"title": "Alien"}),)),
            answer('{"title": "Alien", "year": 1979}'),
        ]
    )
    result = await run(spec_of(model, Movie, tools=[year_of]))
    assert result.output == Movie("Alien", 1979)
    assert [c.content for c in result.tool_calls] == ["1979"]


# -- refused answers -----------------------------------------------------------------


async def test_a_refused_answer_is_sent_back_with_why_and_answered_again() -> None:
    model = ScriptedModel([answer('{"title": "Alien"}'), answer('{"title": "Alien", "year": 1}')])
    async with agentrio.open_runtime() as rt:
        events = rt.events()
        agent = await rt.spawn_agent(spec_of(model, Movie))
        result = await agent.run("go")
        history = await agent.history()
    assert (result.stop_reason, result.output) == ("done", Movie("Alien", 1))
    retry = model.calls[1][-1]
    assert retry.role == "user"
    assert retry.content == OUTPUT_RETRY_PROMPT.format(
        why="it does not match the schema: Object missing required field `year`"
    )
    assert [m.role for m in (t.message for t in history)] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    del events


async def test_past_the_retries_the_phase_ends_with_output_invalid() -> None:
    model = ScriptedModel([answer("not json"), answer('{"title": 1, "year": 2}')])
    result = await run(spec_of(model, Movie))  # output_retries=1: two answers in all
    assert model.remaining == 0
    assert (result.stop_reason, result.error_type, result.output) == (
        "error",
        "OutputInvalid",
        None,
    )
    assert result.error == (
        "the model's 2 answers did not match the output type Movie; the last: it does not "
        "match the schema: Expected `str`, got `int` - at `$.title`"
    )
    assert result.final_text == '{"title": 1, "year": 2}'


async def test_an_answer_with_a_lone_surrogate_is_refused_then_output_invalid() -> None:
    # (A Model of the caller's hands its text on as it is; a provider's is scrubbed.)
    bad = answer('{"title": "report-\udcff", "year": 1}')
    model = ScriptedModel([bad, bad])
    result = await run(spec_of(model, Movie))  # output_retries=1: two answers in all
    assert model.remaining == 0
    assert (result.stop_reason, result.error_type) == ("error", "OutputInvalid")
    assert result.error.endswith("the last: it is not valid text: a lone surrogate at character 18")


async def test_no_retries() -> None:
    model = ScriptedModel([answer("[1, 2]"), answer("[]")])
    result = await run(spec_of(model, list[str], output_retries=0))
    assert model.remaining == 1
    assert (result.error_type, result.error) == (
        "OutputInvalid",
        "the model's answer did not match the output type list[str]; the last: it does not "
        "match the schema: Expected `str`, got `int` - at `$[0]`",
    )


async def test_more_retries() -> None:
    model = ScriptedModel([answer("x"), answer("y"), answer("z"), answer('["ok"]')])
    result = await run(spec_of(model, list[str], output_retries=3))
    assert (result.output, model.remaining) == (["ok"], 0)


async def test_a_retry_is_a_model_call_of_the_phase() -> None:
    model = ScriptedModel([answer("x"), answer('["late"]')])
    result = await run(spec_of(model, list[str], limits=Limits(max_iterations=1)))
    assert model.remaining == 1  # no call left for the retry
    assert result.error_type == "OutputInvalid"
    assert "(no model call left)" in result.error


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000 + "]" * 200_000,  # deeper than any recursion limit
        '{"title": "' + "x" * 1_000_000 + '", "year": "no"}',  # huge
        '{"title": "a", "year": 1, "extra": ' + '{"k": ' * 50_000 + "1" + "}" * 50_000 + "}",
        "",
        "   ",
    ],
    ids=["deep", "huge", "deep-unknown-field", "empty", "blank"],
)
async def test_hostile_answers_get_a_bounded_error(text: str) -> None:
    model = ScriptedModel([answer(text)])
    result = await run(spec_of(model, Movie, output_retries=0))
    assert (result.stop_reason, result.error_type) == ("error", "OutputInvalid")
    assert len(result.error) < 200 + WHY_CHARS
    assert "xxxx" not in result.error  # the answer is never quoted back


async def test_the_retry_message_does_not_quote_the_answer() -> None:
    secretive = '{"title": "SECRET-' + "y" * 5000 + '", "year": "1979"}'
    model = ScriptedModel([answer(secretive), answer('{"title": "a", "year": 1}')])
    await run(spec_of(model, Movie))
    retry = model.calls[1][-1].content
    assert "SECRET" not in retry and len(retry) < 600


# -- the schema, told to models that take it ------------------------------------------


class SchemaModel:
    """A model whose complete() takes output_schema: it records what it was told."""

    def __init__(self, replies: list[ModelReply]) -> None:
        self.replies = replies
        self.schemas: list[OutputSchema | None] = []

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        output_schema: OutputSchema | None = None,
    ) -> ModelReply:
        self.schemas.append(output_schema)
        return self.replies.pop(0)


async def test_a_model_that_takes_output_schema_is_told_the_schema() -> None:
    model = SchemaModel([answer('{"title": "a", "year": 1}')])
    result = await run(spec_of(model, Movie))
    assert result.output == Movie("a", 1)
    (schema,) = model.schemas
    assert schema is not None
    assert (schema.name, schema.schema, schema.wrapped) == (
        "Movie",
        msgspec.json.schema(Movie),
        False,
    )


async def test_an_untyped_agent_tells_no_schema() -> None:
    model = SchemaModel([answer("plain")])
    await run(AgentSpec("plain", model))
    assert model.schemas == [None]


async def test_a_model_without_the_keyword_is_not_told() -> None:
    seen: list[int] = []

    def fn(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> ModelReply:
        seen.append(len(messages))
        return answer('["a"]')

    result = await run(spec_of(FunctionModel(fn), list[str]))
    assert (result.output, seen) == (["a"], [1])


# -- the spec ------------------------------------------------------------------------


def test_output_type_that_msgspec_cannot_validate() -> None:
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.output_type must be a type msgspec"):
        spec_of(ScriptedModel([]), lambda: 1)


def test_a_tool_named_final_result_is_refused_with_an_output_type() -> None:
    @agentrio.tool
    def final_result(x: int) -> int:
        """Clash."""
        return x

    with pytest.raises(InvalidArgument, match="'final_result'"):
        spec_of(ScriptedModel([]), Movie, tools=[final_result])
    AgentSpec("ok", ScriptedModel([]), tools=[final_result])  # untyped: no clash


@pytest.mark.parametrize("retries", [-1, 1.5, True, "2"])
def test_output_retries_must_be_an_int_of_zero_or_more(retries: object) -> None:
    with pytest.raises(InvalidArgument, match="output_retries"):
        spec_of(ScriptedModel([]), Movie, output_retries=retries)


def test_output_type_is_derived_once_per_spec() -> None:
    kind = OutputType(list[str], 2)
    assert (kind.label, kind.schema.name, kind.retries) == ("list[str]", "result", 2)
    assert kind.parse('["a"]') == (["a"], "")
    assert kind.parse('["a"') == (None, "it is not JSON: Input data was truncated")
    assert kind.parse(" ") == (None, "the answer is empty")


def test_specs_of_one_type_share_what_it_gives() -> None:
    first = spec_of(ScriptedModel([]), Movie)
    again = attrs.evolve(first, name="again")  # (a child's spec is made so)
    assert output_type_of(Movie, 1) is output_type_of(Movie, 1)
    assert output_type_of(Movie, 2) is not output_type_of(Movie, 1)
    del first, again
    unhashable = Annotated[list[int], {"not": ["hashable"]}]
    assert output_type_of(unhashable, 1).parse("[1]") == ([1], "")


# -- mypy sees the type flow ---------------------------------------------------------


def test_mypy_sees_the_output_type_flow() -> None:
    api = pytest.importorskip("mypy.api")
    flow = pathlib.Path(__file__).with_name("typed_flow.py")
    out, err, status = api.run(["--strict", "--warn-unused-ignores", str(flow)])
    assert status == 0, out + err


# -- over HTTP: each wire format, against the fake server ------------------------------


@pytest.mark.parametrize(
    ("kind", "path"), [("openai", "/v1"), ("anthropic", "/v1"), ("ollama", "")]
)
async def test_a_typed_agent_over_http(kind: str, path: str) -> None:
    script = [answer('{"title": "Alien"}'), answer('{"title": "Alien", "year": 1979}')]
    async with agentrio.testing.open_fake_llm(script) as server:
        config = agentrio.ProviderConfig(
            name="p",
            kind=kind,
            base_url=server.base_url + path,
            max_retries=0,  # type: ignore[arg-type]
        )
        async with agentrio.Provider(config) as provider:
            result = await run(spec_of(provider.model("m"), Movie))
        first, second = server.requests
    assert (result.stop_reason, result.output) == ("done", Movie("Alien", 1979))
    schema = OutputType(Movie, 1).schema
    wanted = schema.strict_schema if kind == "openai" else schema.object_schema
    assert first.output_schema == second.output_schema == wanted
    assert second.messages[-1].content.startswith("Your answer is not valid: it does not match")
    if kind == "anthropic":  # the answer went as the forced tool's input, and back as text
        assert first.tool_choice == "final_result"
        assert second.messages[-2] == ChatMessage("assistant", '{"title":"Alien"}')


async def test_a_run_on_another_model_tells_that_model_the_schema() -> None:
    # The agent's own model does not take output_schema; run(model=...)'s does:
    # whether the schema is sent is the model's the phase calls, not the agent's.
    async with agentrio.testing.open_fake_llm([answer('{"title": "Up", "year": 2009}')]) as server:
        url = server.base_url + "/v1"
        local = agentrio.ProviderConfig(name="local", kind="openai", base_url=url)
        config = agentrio.Config(providers={"local": local})
        async with agentrio.open_runtime(config=config) as rt:
            agent = await rt.spawn_agent(spec_of(FunctionModel(lambda m, t: answer("")), Movie))
            result = await agent.run("Up", model="local:m")
        (request,) = server.requests
    assert (result.stop_reason, result.output) == ("done", Movie("Up", 2009))
    assert request.output_schema == OutputType(Movie, 1).schema.strict_schema
