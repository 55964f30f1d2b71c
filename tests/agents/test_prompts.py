"""Prompt slots (#26): role, guidelines, style and extra parts of the system prompt set by
the user, in a fixed order around the spec's instructions, with agentrio's parts after."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, ChatMessage, PromptSlots, SkillRegistry
from agentrio.testing import FunctionModel, Reply
from agentrio.types import Skill


class Seen:
    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []

    def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
        self.messages = list(messages)
        return Reply(text="ok")


async def system_of(spec: AgentSpec, seen: Seen) -> str:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        await agent.run("hi")
    first = seen.messages[0]
    assert first.role == "system"
    return first.content


async def test_the_slots_are_put_in_order_around_the_instructions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    slots = PromptSlots(
        role="You are the support agent of a bike shop.",
        guidelines="Never promise a delivery date.",
        style="Two sentences at most.",
        extra="Today is Monday.",
    )
    spec = AgentSpec("a", FunctionModel(seen), instructions="Answer questions.", prompt=slots)
    assert await system_of(spec, seen) == (
        "You are the support agent of a bike shop.\n\nAnswer questions.\n\n"
        "Never promise a delivery date.\n\nTwo sentences at most.\n\nToday is Monday."
    )


async def test_agentrios_parts_come_after_the_users(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    skills = SkillRegistry([Skill("refunds", "How to refund an order.")])
    spec = AgentSpec(
        "a", FunctionModel(seen), prompt=PromptSlots(style="Be brief.", extra=""), skills=skills
    )
    system = await system_of(spec, seen)
    assert system.startswith("Be brief.\n\nYou have skills.")
    assert system.endswith("- refunds: How to refund an order.")


async def test_without_slots_the_system_prompt_is_the_instructions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    spec = AgentSpec("a", FunctionModel(seen), instructions="  Exactly this.\n")
    assert await system_of(spec, seen) == "  Exactly this.\n"
    seen = Seen()
    await system_of(AgentSpec("b", FunctionModel(seen), prompt=PromptSlots(role="R")), seen)


def test_a_slot_must_be_a_str() -> None:
    with pytest.raises(agentrio.InvalidArgument, match=r"PromptSlots\.style must be a str"):
        PromptSlots(style=3)  # type: ignore[arg-type]
    with pytest.raises(agentrio.InvalidArgument, match=r"AgentSpec\.prompt must be"):
        AgentSpec("a", FunctionModel(Seen()), prompt="be nice")  # type: ignore[arg-type]
