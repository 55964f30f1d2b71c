"""Checked by mypy in test_output.py (not run): an output type flows from the spec to
the results, and a spec without one gives str.

Each ``# type: ignore[assert-type]`` line is a wrong claim that mypy must refuse: with
``--warn-unused-ignores``, an ignore that is not needed (the type became ``Any``, say)
is an error too.
"""

from __future__ import annotations

from typing import assert_type

import msgspec
import pydantic

import agentrio
from agentrio.events import RunDone, RunItem
from agentrio.testing import ScriptedModel


class Movie(msgspec.Struct):
    title: str
    year: int


async def flow(rt: agentrio.Runtime) -> None:
    spec = agentrio.AgentSpec("movie", ScriptedModel([]), output_type=Movie)
    assert_type(spec, agentrio.AgentSpec[Movie])
    agent = await rt.spawn_agent(spec)
    assert_type(agent, agentrio.AgentRef[Movie])
    result = await agent.run("a film")
    assert_type(result, agentrio.PhaseResult[Movie])
    assert_type(result.output, Movie | None)
    assert_type(result.output, str | None)  # type: ignore[assert-type]

    async with agent.stream("a film") as stream:  # a streamed run's result is as typed
        async for item in stream:
            assert_type(item, RunItem[Movie])
            if isinstance(item, RunDone):
                assert_type(item.result, agentrio.PhaseResult[Movie])
                assert_type(item.result.output, Movie | None)
                assert_type(item.result.output, str | None)  # type: ignore[assert-type]

    sub = await agent.spawn_subagent(spec)
    assert_type((await sub.run("another")).output, Movie | None)

    many = await rt.map(
        agentrio.AgentSpec("tags", ScriptedModel([]), output_type=list[str]), ["a", "b"]
    )
    assert_type(many, list[agentrio.PhaseResult[list[str]] | agentrio.ActorError])
    more = await agent.map(spec, ["c"])
    assert_type(more, list[agentrio.PhaseResult[Movie] | agentrio.ActorError])

    plain = await rt.spawn_agent(agentrio.AgentSpec("plain", ScriptedModel([])))
    assert_type(plain, agentrio.AgentRef[str])
    assert_type((await plain.run("hi")).output, str | None)
    assert_type((await plain.run("hi")).output, Movie | None)  # type: ignore[assert-type]


class Review(pydantic.BaseModel):
    stars: int


async def pydantic_flow(rt: agentrio.Runtime) -> None:  # a Pydantic model flows the same
    spec = agentrio.AgentSpec("critic", ScriptedModel([]), output_type=Review)
    assert_type(spec, agentrio.AgentSpec[Review])
    result = await (await rt.spawn_agent(spec)).run("a film")
    assert_type(result, agentrio.PhaseResult[Review])
    assert_type(result.output, Review | None)
    assert_type(result.output, Movie | None)  # type: ignore[assert-type]


def hosted(spec: agentrio.AgentSpec[Movie]) -> None:
    assert_type(agentrio.run_sync(spec, "a film").output, Movie | None)
    with agentrio.open_runtime_sync() as rt:
        for item in rt.spawn_agent(spec).stream("a film"):
            if isinstance(item, RunDone):
                assert_type(item.result.output, Movie | None)


def plain_items(items: list[RunItem]) -> None:  # bare, as PhaseResult is: an untyped run's
    for item in items:
        if isinstance(item, RunDone):
            assert_type(item.result.output, str | None)
