"""Output validators: functions of a spec that refuse a parsed answer with ModelRetry
(sync or async), within output_retries (one count with answers that did not parse),
OutputInvalid naming the last reason past them; in streams, map and agent tools too."""

from __future__ import annotations

import msgspec
import pytest
import trio

import agentrio
from agentrio import AgentSpec, InvalidArgument, ModelRetry, ToolCallRequest
from agentrio.agents.tools.output import WHY_CHARS
from agentrio.events import RunDone
from agentrio.testing import FunctionModel, Reply, ScriptedModel


class Movie(msgspec.Struct):
    title: str
    year: int


ALIEN = '{"title": "Alien", "year": 1979}'
FUTURE = '{"title": "Alien", "year": 2979}'


def in_the_past(movie: Movie) -> None:
    if movie.year > 2025:
        raise ModelRetry(f"{movie.year} is in the future")


async def run_with_history(
    spec: AgentSpec[object], message: str = "go"
) -> tuple[agentrio.PhaseResult[object], list[agentrio.ChatMessage]]:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run(message)
        history = [m.message for m in await agent.history()]
    return result, history


def movie_spec(replies: list[str], **options: object) -> AgentSpec[object]:
    model = ScriptedModel([Reply(text=t) for t in replies])
    return AgentSpec("critic", model, output_type=Movie, **options)  # type: ignore[arg-type]


async def test_a_refused_answer_is_sent_back_with_the_reason_and_answered_again() -> None:
    seen: list[object] = []

    def validator(movie: Movie) -> None:
        seen.append(movie)
        in_the_past(movie)

    spec = movie_spec([FUTURE, ALIEN], output_validators=[validator])
    result, history = await run_with_history(spec)
    assert (result.stop_reason, result.output) == ("done", Movie("Alien", 1979))
    assert seen == [Movie("Alien", 2979), Movie("Alien", 1979)]  # the parsed values
    assert history[2].role == "user"
    assert history[2].content == (
        "Your answer was refused: 2979 is in the future. Give your final answer again, "
        "as JSON only (no other text), matching the required schema."
    )


async def test_an_async_validator_refuses_as_a_plain_one_does() -> None:
    async def checked(movie: Movie) -> None:
        await trio.lowlevel.checkpoint()
        in_the_past(movie)

    result, _ = await run_with_history(movie_spec([FUTURE, ALIEN], output_validators=[checked]))
    assert result.output == Movie("Alien", 1979)


async def test_refusals_share_output_retries_with_answers_that_did_not_parse() -> None:
    spec = movie_spec(["not json", FUTURE, ALIEN], output_validators=[in_the_past])
    result, _ = await run_with_history(spec)  # output_retries=1: the second refusal ends it
    assert (result.stop_reason, result.error_type) == ("error", "OutputInvalid")
    assert result.error == (
        "the model's 2 answers were refused; the last by an output validator: 2979 is in the future"
    )
    assert result.output is None
    with pytest.raises(agentrio.errors.OutputInvalid, match="2979 is in the future"):
        result.raise_for_error()


async def test_with_no_retries_the_first_refusal_ends_the_phase() -> None:
    spec = movie_spec([FUTURE], output_validators=[in_the_past], output_retries=0)
    result, _ = await run_with_history(spec)
    assert result.error == (
        "the model's answer was refused by an output validator: 2979 is in the future"
    )


async def test_the_reason_is_bounded_and_scrubbed() -> None:
    def long_winded(movie: Movie) -> None:
        raise ModelRetry("\ud800" + "x" * 100_000)

    spec = movie_spec([ALIEN, ALIEN], output_validators=[long_winded])
    result, history = await run_with_history(spec)
    assert result.error_type == "OutputInvalid"
    why = history[2].content.removeprefix("Your answer was refused: ")
    assert why.startswith("\ufffdxxx")
    assert len(why) < WHY_CHARS + 100
    assert len(result.error) < WHY_CHARS + 100
    assert result.error.endswith("x…")


async def test_validators_run_in_order_and_the_first_refusal_wins() -> None:
    calls: list[str] = []

    def first(movie: Movie) -> None:
        calls.append("first")

    def second(movie: Movie) -> None:
        calls.append("second")
        raise ModelRetry("")  # (no reason given: the model is told so)

    spec = movie_spec([ALIEN], output_validators=[first, second, in_the_past], output_retries=0)
    result, _ = await run_with_history(spec)
    assert calls == ["first", "second"]
    assert result.error.endswith("by an output validator: no reason given")


async def test_a_validator_that_raises_something_else_ends_the_phase_with_it() -> None:
    def broken(movie: Movie) -> None:
        raise KeyError("oops")

    result, _ = await run_with_history(movie_spec([ALIEN], output_validators=[broken]))
    assert (result.stop_reason, result.error_type, result.output) == ("error", "KeyError", None)


async def test_a_plain_text_answer_is_validated_as_its_text() -> None:
    def polite(text: str) -> None:
        if "please" not in text:
            raise ModelRetry("say please")

    model = ScriptedModel([Reply(text="give it"), Reply(text="give it, please")])
    spec = AgentSpec("asker", model, output_validators=[polite])
    result, history = await run_with_history(spec)  # type: ignore[arg-type]
    assert (result.stop_reason, result.output) == ("done", "give it, please")
    assert (
        history[2].content == "Your answer was refused: say please. Give your final answer again."
    )


def test_output_validators_must_be_functions() -> None:
    model = ScriptedModel([])
    for bad in ("fn", 3, [in_the_past, 3]):
        with pytest.raises(InvalidArgument, match="output_validators"):
            AgentSpec("a", model, output_validators=bad)
    spec = AgentSpec("a", model, output_type=Movie, output_validators=in_the_past)
    assert spec.output_validators == (in_the_past,)


def test_a_validator_that_cannot_take_the_answer_alone_is_refused_when_the_spec_is_made() -> None:
    # (pydantic-ai's fn(ctx, output) would otherwise end every phase with a TypeError.)
    def two(ctx: object, movie: Movie) -> None: ...

    def keyword_only(*, movie: Movie) -> None: ...

    for bad in (two, keyword_only, lambda: None):
        with pytest.raises(InvalidArgument, match="one argument, the answer"):
            AgentSpec("a", ScriptedModel([]), output_validators=[bad])

    def extra_default(movie: Movie, strict: bool = True) -> None: ...

    for good in (extra_default, print, lambda *args: None, in_the_past):
        AgentSpec("a", ScriptedModel([]), output_validators=[good])


# -- streams, map and agent tools honour them ----------------------------------------


async def test_a_streamed_run_honours_the_validators() -> None:
    spec = movie_spec([FUTURE, ALIEN], output_validators=[in_the_past])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        async with agent.stream("go") as stream:
            items = [item async for item in stream]
    done = items[-1]
    assert isinstance(done, RunDone)
    assert done.result.output == Movie("Alien", 1979)


def future_then_past(messages: list[agentrio.ChatMessage], tools: object) -> Reply:
    refused = any(m.content.startswith("Your answer was refused") for m in messages)
    return Reply(text=ALIEN if refused else FUTURE)


async def test_map_and_an_agent_tool_honour_the_childs_validators() -> None:
    child = AgentSpec(
        "critic",
        FunctionModel(future_then_past),  # type: ignore[arg-type]
        output_type=Movie,
        output_validators=[in_the_past],
    )
    lead_model = ScriptedModel(
        [Reply(tool_calls=(ToolCallRequest("critic", {"task": "Alien"}),)), Reply(text="done")]
    )
    lead = AgentSpec("lead", lead_model, tools=[agentrio.agent_tool(child)])
    async with agentrio.open_runtime() as rt:
        results = await rt.map(child, ["a", "b"])
        called = await (await rt.spawn_agent(lead)).run("go")
    assert [r.output for r in results if isinstance(r, agentrio.PhaseResult)] == [
        Movie("Alien", 1979)
    ] * 2
    assert msgspec.json.decode(called.tool_calls[0].content) == {"title": "Alien", "year": 1979}
