"""ContextActor (one history per label) and fit_window. (The token estimate:
tests/providers/test_tokens.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentrio
from agentrio import (
    ActorCrashed,
    ChatMessage,
    ToolCallRequest,
)
from agentrio.agents.loop.context import ContextActor, fit_window, turn_units
from agentrio.types import (
    ContextAppend,
    ContextCompact,
    ContextRead,
    ContextReadTurns,
    ContextReset,
    Turn,
)


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
    monkeypatch.setattr("agentrio.agents.loop.context.time.time", lambda: 500.0)
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
    monkeypatch.setattr("agentrio.agents.loop.context.time.time", lambda: 500.0)
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


async def test_context_actor_compacts_in_one_message_if_unchanged() -> None:
    msgs = tuple(ChatMessage("user", str(i)) for i in range(5))
    summary = ChatMessage("user", "summary")
    async with agentrio.open_runtime() as rt:
        ctx = await rt.spawn(ContextActor, name="ctx")
        await ctx.send(ContextAppend(msgs))
        # planned on a history of 4 messages: it has 5, so it is left as it is
        assert await ctx.ask(ContextCompact(1, 3, (summary,), 4)) is False
        assert await ctx.ask(ContextRead()) == msgs
        # a span outside the history is refused too
        assert await ctx.ask(ContextCompact(3, 7, (summary,), 5)) is False
        assert await ctx.ask(ContextCompact(3, 2, (summary,), 5)) is False
        assert await ctx.ask(ContextCompact(1, 3, (summary,), 5)) is True
        assert await ctx.ask(ContextRead()) == (msgs[0], summary, msgs[3], msgs[4])


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
        ChatMessage("assistant", "thinking"),  # 4
        ChatMessage("assistant", "a2", tool_calls=(ToolCallRequest("f", id="2"),)),  # 5
        ChatMessage("tool", "r2", tool_call_id="2", name="f"),  # 6
        ChatMessage("user", "more"),  # 7
        ChatMessage("assistant", "a3", tool_calls=(ToolCallRequest("f", id="3"),)),  # 8
        ChatMessage("tool", "r3", tool_call_id="3", name="f"),  # 9 (newest)
    ]


def contents(messages: list[ChatMessage]) -> list[str]:
    return [m.content for m in messages]


def test_turn_units_keep_a_call_with_its_results() -> None:
    assert turn_units(conversation()) == [(0, 1), (1, 2), (2, 4), (4, 5), (5, 7), (7, 8), (8, 10)]
    two = [
        ChatMessage(
            "assistant", "", tool_calls=(ToolCallRequest("f", id="1"), ToolCallRequest("g", id="2"))
        ),
        ChatMessage("tool", "r1", tool_call_id="1"),
        ChatMessage("tool", "r2", tool_call_id="2"),
        ChatMessage("tool", "stray", tool_call_id="9"),  # (contiguous: the same unit)
        ChatMessage("user", "u"),
        ChatMessage("tool", "orphan", tool_call_id="8"),
        ChatMessage("assistant", "", tool_calls=(ToolCallRequest("h", id="3"),)),  # no result
    ]
    assert turn_units(two) == [(0, 4), (4, 5), (5, 6), (6, 7)]
    assert turn_units([]) == []


def test_fit_window_keeps_everything_that_fits() -> None:
    msgs = conversation()
    sizes = [10] * len(msgs)
    kept, dropped, total = fit_window(msgs, sizes, 100)
    assert (kept, dropped, total) == (msgs, 0, 100)


def test_fit_window_drops_a_call_and_its_result_together_oldest_first() -> None:
    msgs = conversation()
    sizes = [10] * len(msgs)
    kept, dropped, total = fit_window(msgs, sizes, 90)
    # a1 and its result r1 go as one: never a result without its call, nor a call
    # without its result (OpenAI and Anthropic refuse such a history)
    assert (dropped, total) == (2, 80)
    assert contents(kept) == ["sys", "task", "thinking", "a2", "r2", "more", "a3", "r3"]
    kept, dropped, total = fit_window(msgs, sizes, 70)
    assert (dropped, total) == (4, 60)
    assert contents(kept) == ["sys", "task", "thinking", "more", "a3", "r3"]


def test_fit_window_then_the_oldest_assistant_turns_without_calls() -> None:
    msgs = conversation()
    sizes = [10] * len(msgs)
    kept, dropped, total = fit_window(msgs, sizes, 55)
    # the units with tool calls first (a1+r1, a2+r2), then "thinking"
    assert (dropped, total) == (5, 50)
    assert contents(kept) == ["sys", "task", "more", "a3", "r3"]


def test_fit_window_never_drops_system_user_messages_or_the_newest_unit() -> None:
    msgs = conversation()
    sizes = [10] * len(msgs)
    kept, dropped, total = fit_window(msgs, sizes, 0)
    # every user message stays; so do the system prompt and the newest call with its result
    assert contents(kept) == ["sys", "task", "more", "a3", "r3"]
    assert (dropped, total) == (5, 50)


def test_fit_window_uses_the_sizes_given() -> None:
    msgs = conversation()
    sizes = [1, 1, 1, 1, 1, 1, 100, 1, 1, 1]
    kept, dropped, total = fit_window(msgs, sizes, 50)
    # a1 + r1 go first (the oldest), then a2 with its big result r2: it then fits
    assert (dropped, total) == (4, 6)
    assert contents(kept) == ["sys", "task", "thinking", "more", "a3", "r3"]


def test_fit_window_leaves_out_a_stray_result_first_and_a_call_without_result_last() -> None:
    msgs = [
        ChatMessage("user", "task"),
        ChatMessage("tool", "stray", tool_call_id="9"),
        ChatMessage("assistant", "lone", tool_calls=(ToolCallRequest("f", id="1"),)),
        ChatMessage("user", "next"),
    ]
    kept, dropped, _ = fit_window(msgs, [10, 10, 10, 10], 30)
    assert (contents(kept), dropped) == (["task", "lone", "next"], 1)
    kept, dropped, _ = fit_window(msgs, [10, 10, 10, 10], 20)
    assert (contents(kept), dropped) == (["task", "next"], 2)


def test_fit_window_empty() -> None:
    assert fit_window([], [], 0) == ([], 0, 0)


# A history of whole units: (kind, sizes), kind one of system, user, text (an
# assistant turn without calls) or calls (an assistant turn with its results).
units_strategy = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["system", "user", "text"]),
            st.lists(st.integers(0, 50), min_size=1, max_size=1),
        ),
        st.tuples(st.just("calls"), st.lists(st.integers(0, 50), min_size=2, max_size=4)),
    ),
    max_size=15,
)


def build(
    units: list[tuple[str, list[int]]],
) -> tuple[list[ChatMessage], list[int], list[list[int]]]:
    """The messages, their sizes, and the indices of each unit."""
    msgs: list[ChatMessage] = []
    sizes: list[int] = []
    spans = []
    for kind, unit_sizes in units:
        first = len(msgs)
        if kind == "calls":
            ids = [f"c{first}-{k}" for k in range(len(unit_sizes) - 1)]
            calls = tuple(ToolCallRequest("f", id=i) for i in ids)
            msgs.append(ChatMessage("assistant", f"m{first}", tool_calls=calls))
            msgs += [
                ChatMessage("tool", f"m{first + 1 + k}", tool_call_id=i) for k, i in enumerate(ids)
            ]
        else:
            role = "assistant" if kind == "text" else kind
            msgs.append(ChatMessage(role, f"m{first}"))  # type: ignore[arg-type]
        sizes += unit_sizes
        spans.append(list(range(first, len(msgs))))
    return msgs, sizes, spans


def assert_calls_and_results_paired(view: list[ChatMessage]) -> None:
    """Every tool result follows its call, every call is followed by its results."""
    open_ids: set[str] = set()
    for msg in view:
        if msg.role == "tool":
            assert msg.tool_call_id in open_ids, f"a result without its call: {msg}"
            open_ids.discard(msg.tool_call_id)
            continue
        assert not open_ids, f"a call without its result: {open_ids}"
        open_ids = {c.id for c in msg.tool_calls}
    assert not open_ids, f"a call without its result: {open_ids}"


@given(units_strategy, st.integers(0, 600))
def test_fit_window_properties(units: list[tuple[str, list[int]]], limit: int) -> None:
    msgs, sizes, spans = build(units)
    kept, dropped, total = fit_window(msgs, sizes, limit)
    assert_calls_and_results_paired(kept)
    kept_i = [int(m.content[1:]) for m in kept]
    gone = set(range(len(msgs))) - set(kept_i)
    assert kept_i == sorted(kept_i)  # the order is kept
    assert dropped == len(gone)
    assert total == sum(sizes[i] for i in kept_i)
    if sum(sizes) <= limit:
        assert not gone
        return
    went = [u for u, span in enumerate(spans) if set(span) <= gone]
    # a unit goes whole or not at all
    assert set().union(*(spans[u] for u in went)) == gone
    # system prompts, user messages and the newest unit always stay
    droppable = [u for u, (kind, _) in enumerate(units[:-1]) if kind in ("calls", "text")]
    assert set(went) <= set(droppable)
    calls = [u for u in droppable if units[u][0] == "calls"]
    texts = [u for u in droppable if units[u][0] == "text"]
    # the oldest calls (with their results) go first, then the oldest texts
    assert [u for u in went if u in calls] == calls[: len([u for u in went if u in calls])]
    assert [u for u in went if u in texts] == texts[: len([u for u in went if u in texts])]
    if any(u in texts for u in went):
        assert set(calls) <= set(went)
    if total > limit:
        assert set(went) == set(droppable)  # all it could
    # it stopped as soon as it fitted: the last unit left out was still needed
    order = [u for u in calls + texts if u in went]
    if order:
        assert total + sum(sizes[i] for i in spans[order[-1]]) > limit


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["system", "user", "assistant", "tool"]),
            st.booleans(),
            st.integers(0, 50),
        ),
        max_size=30,
    ),
    st.integers(0, 600),
)
def test_fit_window_on_any_history_keeps_what_it_must(
    entries: list[tuple[str, bool, int]], limit: int
) -> None:
    msgs = [
        ChatMessage(
            role,
            f"m{i}",
            tool_calls=(ToolCallRequest("f", id=str(i)),) if calls and role == "assistant" else (),
        )  # type: ignore[arg-type]
        for i, (role, calls, _) in enumerate(entries)
    ]
    sizes = [size for _, _, size in entries]
    kept, dropped, total = fit_window(msgs, sizes, limit)
    kept_i = [int(m.content[1:]) for m in kept]
    assert kept_i == sorted(kept_i)
    assert dropped == len(msgs) - len(kept)
    assert total == sum(sizes[i] for i in kept_i)
    assert {i for i, m in enumerate(msgs) if m.role in ("system", "user")} <= set(kept_i)
    if msgs:
        assert len(msgs) - 1 in kept_i
    # a result kept right after its call stays right after it
    for i, m in enumerate(msgs[1:], 1):
        if m.role == "tool" and i in kept_i and msgs[i - 1].tool_calls:
            assert i - 1 in kept_i
    # and a call kept keeps the result right after it
    for i, m in enumerate(msgs[:-1]):
        if m.role == "assistant" and m.tool_calls and i in kept_i and msgs[i + 1].role == "tool":
            assert i + 1 in kept_i
