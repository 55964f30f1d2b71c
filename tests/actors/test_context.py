"""ContextActor (one history per label), the token estimate, and fit_window."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentrio
from agentrio import (
    ActorCrashed,
    ChatMessage,
    ContextAppend,
    ContextRead,
    ContextReadTurns,
    ContextReset,
    ToolCallRequest,
    Turn,
)
from agentrio.actors.context import ContextActor, estimate_tokens, fit_window, message_text


def test_estimate_tokens_is_chars_over_3_5_rounded_up() -> None:
    assert agentrio.estimate_tokens is estimate_tokens
    assert estimate_tokens("") == 1
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("x" * 7) == 3
    assert estimate_tokens("x" * 35) == 11
    assert estimate_tokens("x" * 3500) == 1001


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("漢字" * 50, 101),  # one token for each character that is not ASCII
        ("日本語のテキスト", 9),
        ("naïve café", 2 + int(8 / 3.5) + 1),
        ("emoji 🙂 and Ελληνικά", 9 + int(11 / 3.5) + 1),
    ],
)
def test_estimate_tokens_counts_each_non_ascii_character_as_a_token(text: str, tokens: int) -> None:
    # CJK text ran 2.1x over the characters / 3.5 estimate: reservations under-counted it.
    assert estimate_tokens(text) == tokens


def test_message_text_counts_tool_calls() -> None:
    plain = ChatMessage("user", "hello")
    assert message_text(plain) == "hello"
    calls = ChatMessage(
        "assistant", "so", tool_calls=(ToolCallRequest("f", {"a": 1}), ToolCallRequest("g"))
    )
    assert message_text(calls) == 'sof{"a":1}g{}'  # the arguments as JSON
    odd = ChatMessage("assistant", "", tool_calls=(ToolCallRequest("h", {"x": 1 + 2j}),))
    assert message_text(odd) == "h{'x': (1+2j)}"  # not JSON: their repr


async def test_context_actor_reads_appends_and_resets() -> None:
    one = ChatMessage("user", "one")
    two = ChatMessage("assistant", "two")
    async with agentrio.open_runtime() as rt:
        ctx = await rt.spawn(ContextActor, name="ctx")
        assert await ctx.ask(ContextRead()) == ()
        await ctx.send(ContextAppend((one,)))
        await ctx.send(ContextAppend((two,)))
        assert await ctx.ask(ContextRead()) == (one, two)
        await ctx.send(ContextReset())
        assert await ctx.ask(ContextRead()) == ()
        await ctx.send(ContextAppend((two,)))
        history = await ctx.ask(ContextRead())
        assert history == (two,)
        assert isinstance(history, tuple)  # a copy: later appends do not change it
        await ctx.send(ContextAppend((one,)))
        assert history == (two,)


async def test_context_actor_keeps_each_turns_time(monkeypatch: pytest.MonkeyPatch) -> None:
    one, two, three = (ChatMessage("user", t) for t in ("one", "two", "three"))
    monkeypatch.setattr("agentrio.actors.context.time.time", lambda: 500.0)
    async with agentrio.open_runtime() as rt:
        ctx = await rt.spawn(ContextActor, name="ctx")
        assert await ctx.ask(ContextReadTurns()) == ()
        # the times that come with the turns (a phase's: when each was made)
        await ctx.send(ContextAppend((one, two), (100.0, 101.5)))
        # none given (or not one per turn): the time they are appended
        await ctx.send(ContextAppend((three,)))
        await ctx.send(ContextAppend((one,), (1.0, 2.0)))
        turns = await ctx.ask(ContextReadTurns())
        assert turns == (Turn(one, 100.0), Turn(two, 101.5), Turn(three, 500.0), Turn(one, 500.0))
        # the plain read is unchanged: the messages alone
        assert await ctx.ask(ContextRead()) == (one, two, three, one)
        await ctx.send(ContextReset())
        assert await ctx.ask(ContextReadTurns()) == ()
        await ctx.send(ContextAppend((two,), (7.0,)))
        assert await ctx.ask(ContextReadTurns()) == (Turn(two, 7.0),)


def test_context_actor_turns_when_the_history_was_changed_without_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one, two, summary = (ChatMessage("user", t) for t in ("one", "two", "summary"))
    monkeypatch.setattr("agentrio.actors.context.time.time", lambda: 500.0)
    actor = ContextActor()
    actor.handle(ContextAppend((one, two), (1.0, 2.0)))
    # older turns replaced by one: the newest keep their times
    actor.history[:] = [summary, two]
    assert actor.turns() == (Turn(summary, 1.0), Turn(two, 2.0))
    actor.history.insert(0, one)  # a turn with no time gets the read's
    assert actor.turns() == (Turn(one, 500.0), Turn(summary, 1.0), Turn(two, 2.0))
    actor.history.clear()
    assert actor.turns() == ()
    actor.handle(ContextAppend((one,), (3.0,)))
    actor.handle(ContextReset())  # the times go with their turns
    assert (actor.history, list(actor.timestamps)) == ([], [])


async def test_context_actor_rejects_other_messages() -> None:
    class Other(agentrio.Message):
        pass

    async with agentrio.open_runtime() as rt:
        ctx = await rt.spawn(ContextActor, name="ctx", restart="temporary")
        with pytest.raises(ActorCrashed, match="ContextActor cannot handle Other"):
            await ctx.ask(Other())


# -- fit_window --------------------------------------------------------------------------


def conversation() -> list[ChatMessage]:
    return [
        ChatMessage("system", "sys"),  # 0
        ChatMessage("user", "task"),  # 1
        ChatMessage("assistant", "a1", tool_calls=(ToolCallRequest("f", id="1"),)),  # 2
        ChatMessage("tool", "r1", tool_call_id="1", name="f"),  # 3
        ChatMessage("assistant", "a2", tool_calls=(ToolCallRequest("f", id="2"),)),  # 4
        ChatMessage("tool", "r2", tool_call_id="2", name="f"),  # 5
        ChatMessage("user", "more"),  # 6
        ChatMessage("assistant", "a3"),  # 7
        ChatMessage("tool", "r3", tool_call_id="3", name="f"),  # 8 (newest)
    ]


def test_fit_window_keeps_everything_that_fits() -> None:
    msgs = conversation()
    sizes = [10] * len(msgs)
    kept, dropped, total = fit_window(msgs, sizes, 90)
    assert (kept, dropped, total) == (msgs, 0, 90)


def test_fit_window_drops_the_oldest_tool_results_first() -> None:
    msgs = conversation()
    sizes = [10] * len(msgs)
    kept, dropped, total = fit_window(msgs, sizes, 80)
    assert (dropped, total) == (1, 80)
    assert kept == msgs[:3] + msgs[4:]  # r1 went
    kept, dropped, total = fit_window(msgs, sizes, 70)
    assert (dropped, total) == (2, 70)
    assert [m.content for m in kept] == ["sys", "task", "a1", "a2", "more", "a3", "r3"]


def test_fit_window_then_the_oldest_assistant_turns() -> None:
    msgs = conversation()
    sizes = [10] * len(msgs)
    kept, dropped, total = fit_window(msgs, sizes, 50)
    # r1, r2 (tool results, not the newest r3), then a1, a2
    assert (dropped, total) == (4, 50)
    assert [m.content for m in kept] == ["sys", "task", "more", "a3", "r3"]


def test_fit_window_never_drops_system_first_user_or_newest() -> None:
    msgs = conversation()
    sizes = [10] * len(msgs)
    kept, dropped, total = fit_window(msgs, sizes, 0)
    # every user message stays; so do the system prompt and the newest message
    assert [m.content for m in kept] == ["sys", "task", "more", "r3"]
    assert (dropped, total) == (5, 40)


def test_fit_window_uses_the_sizes_given() -> None:
    msgs = conversation()
    sizes = [1, 1, 1, 100, 1, 1, 1, 1, 1]
    kept, dropped, total = fit_window(msgs, sizes, 50)
    # only the big result needed to go
    assert (dropped, total) == (1, 8)
    assert "r1" not in [m.content for m in kept]


def test_fit_window_empty() -> None:
    assert fit_window([], [], 0) == ([], 0, 0)


roles = st.sampled_from(["system", "user", "assistant", "tool"])


@given(
    st.lists(st.tuples(roles, st.integers(0, 50)), max_size=30),
    st.integers(0, 600),
)
def test_fit_window_properties(entries: list[tuple[str, int]], limit: int) -> None:
    msgs = [ChatMessage(role, f"m{i}") for i, (role, _) in enumerate(entries)]  # type: ignore[arg-type]
    sizes = [size for _, size in entries]
    kept, dropped, total = fit_window(msgs, sizes, limit)
    kept_i = [int(m.content[1:]) for m in kept]
    gone = sorted(set(range(len(msgs))) - set(kept_i))
    assert kept_i == sorted(kept_i)  # the order is kept
    assert dropped == len(gone)
    assert total == sum(sizes[i] for i in kept_i)
    if sum(sizes) <= limit:
        assert gone == []
        return
    first_user = next((i for i, m in enumerate(msgs) if m.role == "user"), None)
    protected = {len(msgs) - 1} | {i for i, m in enumerate(msgs) if m.role == "system"}
    if first_user is not None:
        protected.add(first_user)
    assert protected <= set(kept_i)
    # only tool results and assistant turns go; every user message stays
    assert all(msgs[i].role in ("tool", "assistant") for i in gone)
    droppable = {
        role: [i for i, m in enumerate(msgs) if m.role == role and i not in protected]
        for role in ("tool", "assistant")
    }
    for role, candidates in droppable.items():
        # the oldest of each kind go first
        went = [i for i in gone if msgs[i].role == role]
        assert went == candidates[: len(went)]
    if any(msgs[i].role == "assistant" for i in gone):
        # tool results all go before any assistant turn does
        assert set(droppable["tool"]) <= set(gone)
    if total > limit:
        assert gone == sorted(droppable["tool"] + droppable["assistant"])  # all it could
    # it stopped as soon as it fitted: the last one left out was still needed
    order = [i for i in droppable["tool"] + droppable["assistant"] if i in gone]
    if order:
        assert total + sizes[order[-1]] > limit
