"""Pydantic v2 models as output types and tool parameters (agentrio[pydantic]): the
schema from the model, validation by Pydantic, its error sent back without the answer,
OutputInvalid past the retries; tool parameters that are models or Fields, their
arguments checked; and a program of msgspec types never imports Pydantic."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from typing import Annotated, Literal

import msgspec
import pydantic
import pytest
from pydantic import BaseModel, Field

import agentrio
from agentrio import AgentSpec, InvalidArgument, ToolCallRequest
from agentrio.agents.tools.output import OUTPUT_RETRY_PROMPT, WHY_CHARS, OutputType
from agentrio.agents.tools.pydantic_models import PydanticDecoder
from agentrio.errors import ToolArgumentsInvalid
from agentrio.testing import Reply, ScriptedModel, open_fake_llm


class Movie(BaseModel):
    title: str
    year: int = Field(description="The year it came out.")
    genres: list[str] = []


class Cast(BaseModel):
    lead: Movie
    extras: int | None = None


@dataclasses.dataclass
class Pick:  # a stdlib dataclass that holds a model: msgspec cannot read it, Pydantic can
    movie: Movie
    stars: int


@pydantic.dataclasses.dataclass
class Point:
    x: int
    y: int = 0


async def run(spec: AgentSpec[object], message: str = "go") -> agentrio.PhaseResult[object]:
    async with agentrio.open_runtime() as rt:
        return await (await rt.spawn_agent(spec)).run(message)


def spec_of(model: object, output_type: object, **options: object) -> AgentSpec[object]:
    return AgentSpec("typed", model, output_type=output_type, **options)  # type: ignore[arg-type]


# -- output types --------------------------------------------------------------------


async def test_a_model_output_type_over_http_is_retried_after_a_validation_error() -> None:
    script = [
        Reply(text='{"title": "Alien", "year": "SECRET-late-seventies"}'),
        Reply(text='{"title": "Alien", "year": 1979, "genres": ["horror"]}'),
    ]
    async with open_fake_llm(script) as server:
        config = agentrio.ProviderConfig("p", "openai", base_url=server.base_url + "/v1")
        async with agentrio.Provider(config) as provider:
            result = await run(spec_of(provider.model("m"), Movie))
        first, second = server.requests
    assert (result.stop_reason, result.output) == (
        "done",
        Movie(title="Alien", year=1979, genres=["horror"]),
    )
    assert type(result.output) is Movie
    # The schema is the model's own, in OpenAI's strict form.
    schema = OutputType(Movie, 1).schema
    assert schema.schema == Movie.model_json_schema()
    assert first.output_schema == schema.strict_schema
    assert first.body["response_format"]["json_schema"]["strict"] is True
    props = first.output_schema["properties"]
    assert props["year"]["description"] == "The year it came out."
    assert first.output_schema["required"] == ["title", "year", "genres"]
    # Pydantic's error went back, cut, naming the field and not quoting the answer.
    retry = second.messages[-1].content
    assert retry == OUTPUT_RETRY_PROMPT.format(
        why="it does not match the schema: Input should be a valid integer, unable to parse "
        "string as an integer - at `$.year`"
    )
    assert "SECRET" not in retry


async def test_past_the_retries_a_model_output_type_ends_with_output_invalid() -> None:
    model = ScriptedModel([Reply(text="not json"), Reply(text='{"lead": {"title": 1}}')])
    result = await run(spec_of(model, Cast))  # output_retries=1: two answers in all
    assert (result.stop_reason, result.error_type, result.output) == (
        "error",
        "OutputInvalid",
        None,
    )
    assert result.error == (
        "the model's 2 answers did not match the output type Cast; the last: it does not "
        "match the schema: Input should be a valid string - at `$.lead.title`; Field "
        "required - at `$.lead.year`"
    )
    assert model.calls[1][-1].content.startswith("Your answer is not valid: it is not JSON: ")


@pytest.mark.parametrize(
    ("output_type", "text", "value"),
    [
        (list[Movie], '[{"title": "Up", "year": 2009}]', [Movie(title="Up", year=2009)]),
        (Movie | None, "null", None),
        (Point, '{"x": 1}', Point(1, 0)),
        (Annotated[int, Field(ge=0)], "3", 3),
    ],
    ids=["list-of-models", "optional-model", "pydantic-dataclass", "annotated-field"],
)
async def test_types_that_hold_pydantic_are_read_by_pydantic(
    output_type: object, text: str, value: object
) -> None:
    result = await run(spec_of(ScriptedModel([Reply(text=text)]), output_type))
    assert (result.stop_reason, result.output, result.error) == ("done", value, "")


async def test_a_dataclass_holding_a_model_is_read_by_pydantic() -> None:
    # typed-outputs.md: Pydantic reads a type that is, or holds, something of its.
    texts = [
        '{"movie": {"title": "Up"}, "stars": 4}',
        '{"movie": {"title": "Up", "year": 2009}, "stars": 4}',
    ]
    result = await run(spec_of(ScriptedModel([Reply(text=t) for t in texts]), Pick))
    assert result.output == Pick(Movie(title="Up", year=2009), 4)
    assert OutputType(Pick, 1).schema.schema["$defs"]["Movie"]["required"] == ["title", "year"]

    @agentrio.tool
    def rate(pick: Pick) -> str:
        """Rate a pick."""
        return f"{pick.movie.title}: {pick.stars}"

    assert rate.schema.parameters["properties"]["pick"] == {"$ref": "#/$defs/Pick"}
    assert rate.validate({"pick": {"movie": {"title": "Up", "year": 1}, "stars": 2}}) == {
        "pick": Pick(Movie(title="Up", year=1), 2)
    }
    with pytest.raises(ToolArgumentsInvalid, match=r"\$\.pick\.movie\.year"):
        rate.validate({"pick": {"movie": {"title": "Up"}, "stars": 2}})


@dataclasses.dataclass
class Holder:  # neither msgspec nor Pydantic reads it
    thing: Opaque


def test_a_type_neither_reads_is_still_msgspec_s_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match=r"(?s)output_type.*Opaque'> is not supported"):
        OutputType(Holder, 1)
    # (Pydantic reads more than classes holding models: a function is a TypeAdapter's
    # "call" type. Only a class with a field of Pydantic's goes to it.)
    with pytest.raises(InvalidArgument, match="output_type"):
        OutputType(lambda: 1, 1)

    def fn(holder: Holder) -> None: ...

    with pytest.raises(InvalidArgument, match="have no JSON schema"):
        agentrio.Tool(fn, name="t")


def test_a_field_constraint_is_checked_by_pydantic() -> None:
    # msgspec would take Annotated[int, Field(ge=0)] as a plain int: -1 would pass.
    kind = OutputType(Annotated[int, Field(ge=0)], 1)
    assert kind.parse("-1") == (
        None,
        "it does not match the schema: Input should be greater than or equal to 0",
    )


def test_many_errors_are_counted_not_listed() -> None:
    kind = OutputType(list[int], 1)  # (msgspec's: stops at the first)
    assert kind.parse('["a"]')[1].endswith("- at `$[0]`")
    errors = OutputType(list[Movie], 1).parse('[{"title": 1}, {"title": 2}]')[1]
    assert errors.endswith(" (and 1 more)"), errors


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000 + "]" * 200_000,
        '{"title": "' + "x" * 1_000_000 + '", "year": "no"}',
        '{"title": "a", "year": 1, "' + "x" * 100_000 + '": 1, "genres": 7}',
        '{"title": "report-\udcff", "year": 1}',
        "",
    ],
    ids=["deep", "huge", "huge-key", "lone-surrogate", "empty"],
)
async def test_hostile_answers_get_a_bounded_error_without_the_answer(text: str) -> None:
    model = ScriptedModel([Reply(text=text)])
    result = await run(spec_of(model, Movie, output_retries=0))
    assert (result.stop_reason, result.error_type) == ("error", "OutputInvalid")
    assert len(result.error) < 200 + WHY_CHARS
    assert "xxxx" not in result.error and "report" not in result.error


def test_a_python_value_is_converted_as_a_json_answer_is_decoded() -> None:
    decoder = OutputType(Movie, 1).decoder
    assert isinstance(decoder, PydanticDecoder)  # (what a partial answer's value goes through)
    assert decoder.convert({"title": "Up", "year": "2009"}) == Movie(title="Up", year=2009)
    with pytest.raises(msgspec.ValidationError, match=r"Field required - at `\$\.year`"):
        decoder.convert({"title": "Up"})


def test_a_discriminator_tag_is_not_quoted() -> None:
    class Cat(BaseModel):
        kind: Literal["cat"]

    class Dog(BaseModel):
        kind: Literal["dog"]

    class Pet(BaseModel):
        pet: Annotated[Cat | Dog, Field(discriminator="kind")]

    why = OutputType(Pet, 1).parse('{"pet": {"kind": "SECRET"}}')[1]
    assert "SECRET" not in why and why.endswith("- at `$.pet`"), why


def test_a_model_pydantic_cannot_describe_is_invalid_argument() -> None:
    class Later(BaseModel):
        other: Undefined  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(InvalidArgument, match=r"AgentSpec\.output_type .* Pydantic"):
        spec_of(ScriptedModel([]), Later)


async def test_an_agent_tool_of_a_model_typed_spec_answers_in_json() -> None:
    child = spec_of(ScriptedModel([Reply(text='{"title": "Up", "year": 2009}')]), Movie)
    lead_model = ScriptedModel(
        [Reply(tool_calls=(ToolCallRequest("typed", {"task": "a film"}),)), Reply(text="ok")]
    )
    lead = AgentSpec("lead", lead_model, tools=[agentrio.agent_tool(child)])
    result = await run(lead)
    (call,) = result.tool_calls
    assert (call.status, call.content) == ("ok", '{"title":"Up","year":2009,"genres":[]}')


# -- tool parameters -----------------------------------------------------------------


@agentrio.tool
def rate(
    movie: Movie,
    stars: Annotated[int, Field(description="From 1 to 5.", ge=1, le=5)],
    note: str = Field("", description="A word on it.", max_length=20),
    json: bool = False,
) -> Movie:
    """Rate a film.

    Args:
        movie: The film.
        stars: (the Field's description wins over this one)
        json: Answer in JSON.
    """
    return movie.model_copy(update={"genres": [f"{stars} stars"]})


async def test_a_streamed_run_s_items_encode_with_the_hook_streaming_md_gives() -> None:
    # streaming.md: the items encode with msgspec.json.encode(item); a RunDone holding
    # a model needs the enc_hook the page gives (msgspec knows no BaseModel).
    spec = spec_of(ScriptedModel([Reply(text='{"title": "Alien", "year": 1979}')]), Movie)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        async with agent.stream("Alien") as stream:
            items = [item async for item in stream]
    done = items[-1]
    assert isinstance(done, agentrio.events.RunDone)
    with pytest.raises(TypeError, match="Movie"):
        msgspec.json.encode(done)
    encoded = msgspec.json.encode(done, enc_hook=lambda m: m.model_dump(mode="json"))
    assert msgspec.json.decode(encoded)["result"]["output"] == {
        "title": "Alien",
        "year": 1979,
        "genres": [],
    }


def test_a_tool_with_model_and_field_parameters_has_their_schema() -> None:
    params = rate.schema.parameters
    assert rate.schema.description == "Rate a film."
    assert params["required"] == ["movie", "stars"]
    assert params["additionalProperties"] is False
    assert "title" not in params
    props = params["properties"]
    assert props["movie"] == {"$ref": "#/$defs/Movie", "description": "The film."}
    assert params["$defs"] == {"Movie": Movie.model_json_schema()}
    assert props["stars"] == {
        "description": "From 1 to 5.",
        "maximum": 5,
        "minimum": 1,
        "type": "integer",
    }
    assert props["note"] == {
        "default": "",
        "description": "A word on it.",
        "maxLength": 20,
        "type": "string",
    }
    assert props["json"] == {"default": False, "type": "boolean", "description": "Answer in JSON."}


def test_a_model_parameter_is_given_as_the_model() -> None:
    kwargs = rate.validate({"movie": {"title": "Up", "year": "2009"}, "stars": 4})
    assert kwargs == {
        "movie": Movie(title="Up", year=2009),
        "stars": 4,
        "note": "",
        "json": False,
    }


UP = {"title": "Up", "year": 2009}


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"movie": {"title": "Up"}, "stars": 4}, "Field required - at `$.movie.year`"),
        ({"movie": UP, "stars": 9}, "less than or equal to 5 - at `$.stars`"),
        ({"movie": UP, "stars": 1, "p0": 1}, "not permitted - at `$.p0`"),  # (no inner name)
        ({"movie": UP, "stars": 1, "note": "y" * 99}, "at `$.note`"),
    ],
    ids=["nested-field", "constraint", "unknown", "too-long"],
)
def test_bad_arguments_name_the_field(arguments: dict[str, object], where: str) -> None:
    with pytest.raises(ToolArgumentsInvalid, match="invalid arguments for 'rate'") as info:
        rate.validate(arguments)
    assert where in str(info.value)
    assert "yyyy" not in str(info.value)


async def test_a_bad_argument_is_a_failed_tool_result_naming_the_field() -> None:
    model = ScriptedModel(
        [
            Reply(tool_calls=(ToolCallRequest("rate", {"movie": {"title": "Up"}, "stars": 4}),)),
            Reply(
                tool_calls=(
                    ToolCallRequest("rate", {"movie": {"title": "Up", "year": 2009}, "stars": 4}),
                )
            ),
            Reply(text="rated"),
        ]
    )
    result = await run(AgentSpec("critic", model, tools=[rate]))
    failed, rated = result.tool_calls
    assert failed.status == "failed"
    assert failed.content == "invalid arguments for 'rate': Field required - at `$.movie.year`"
    assert (rated.status, rated.content) == (
        "ok",
        '{"title":"Up","year":2009,"genres":["4 stars"]}',
    )


class Opaque:
    """No schema, no validator: neither msgspec nor Pydantic knows it."""


def test_a_parameter_pydantic_cannot_read_is_invalid_argument() -> None:
    def bad(movie: Movie, thing: Opaque) -> None:
        """Bad."""

    with pytest.raises(InvalidArgument, match="'bad': its parameters' annotations have no JSON"):
        agentrio.tool(bad)


# -- msgspec programs pay nothing ----------------------------------------------------


def test_a_msgspec_typed_agent_never_imports_pydantic() -> None:
    program = textwrap.dedent(
        """
        import sys

        import msgspec
        import trio

        import agentrio
        from agentrio.testing import Reply, ScriptedModel


        class Movie(msgspec.Struct):
            title: str
            year: int


        @agentrio.tool
        def year_of(title: str, exact: bool = False) -> Movie:
            \"\"\"The film of a title.

            Args:
                title: Its title.
            \"\"\"
            return Movie(title, 1979)


        async def main() -> None:
            model = ScriptedModel(
                [
                    Reply(tool_calls=(agentrio.ToolCallRequest("year_of", {"title": "A"}),)),
                    Reply(text='{"title": "A"}'),
                    Reply(text='{"title": "A", "year": 1979}'),
                ]
            )
            spec = agentrio.AgentSpec("m", model, output_type=Movie, tools=[year_of])
            async with agentrio.open_runtime() as rt:
                result = await (await rt.spawn_agent(spec)).run("go")
            assert result.output == Movie("A", 1979), result
            print("pydantic" in sys.modules)


        trio.run(main)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "False\n", "")
