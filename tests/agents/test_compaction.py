"""Compaction: Compaction's checks, what is replaced (plan), the summary request, and
compaction in phases: the summary call, the history replaced in the phase and in the
context actor, the budget, the events, the failures and the summary model's resolution."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    Budget,
    ChatMessage,
    Compaction,
    InvalidArgument,
    Limits,
    ToolCallRequest,
    Usage,
)
from agentrio.agents.loop.compaction import plan, summary_request
from agentrio.agents.loop.summary import COMPACTION_PROMPT, SUMMARY_PREFIX
from agentrio.config import Config
from agentrio.events import CompactionFailed, ContextCompacted, ContextTruncated
from agentrio.testing import FakeRequest, FunctionModel, Reply, ScriptedModel, open_fake_llm
from agentrio.types import ContextAppend, ContextRead, ToolSchema

RecordEvents = Callable[..., list[agentrio.events.Event]]


def chars(text: str) -> int:
    return len(text)


def call(n: int, id: str = "") -> ChatMessage:
    return ChatMessage("assistant", "", tool_calls=(ToolCallRequest("page", {"n": n}, id=id),))


def result(n: int, id: str = "") -> ChatMessage:
    return ChatMessage("tool", f"p{n}:" + "x" * 100, tool_call_id=id, name="page")


@agentrio.tool
async def page(n: int) -> str:
    """Read one page."""
    await trio.lowlevel.checkpoint()
    return f"p{n}:" + "x" * 100


# -- Compaction --------------------------------------------------------------------------


def test_compaction_defaults() -> None:
    c = Compaction()
    assert (c.threshold, c.model, c.keep_recent, c.prompt) == (0.8, None, 4, COMPACTION_PROMPT)
    assert agentrio.AgentSpec("a", model=ScriptedModel([])).compaction is None  # off by default


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 0}, r"Compaction.threshold must be in \(0, 1\], got 0"),
        ({"threshold": 1.5}, "Compaction.threshold"),
        ({"threshold": float("nan")}, "Compaction.threshold"),
        ({"threshold": True}, "Compaction.threshold"),
        ({"threshold": "0.8"}, "Compaction.threshold"),
        ({"keep_recent": 0}, "Compaction.keep_recent must be an int >= 1, got 0"),
        ({"keep_recent": 2.0}, "Compaction.keep_recent"),
        ({"prompt": ""}, "Compaction.prompt must be a non-empty str"),
        ({"prompt": 3}, "Compaction.prompt"),
        ({"model": ""}, "Compaction.model must not be empty"),
        ({"model": object()}, "Compaction.model must be a model object"),
    ],
)
def test_compaction_checks_its_fields(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Compaction(**kwargs)  # type: ignore[arg-type]


def test_compaction_model_string_is_checked() -> None:
    assert Compaction(threshold=1, model="fast").model == "fast"
    with pytest.raises(agentrio.ConfigError, match="model strings are"):
        Compaction(model="local:")


def test_agent_spec_checks_compaction() -> None:
    with pytest.raises(
        InvalidArgument, match=r"AgentSpec.compaction must be an agentrio.Compaction"
    ):
        AgentSpec("a", model=ScriptedModel([]), compaction=0.8)  # type: ignore[arg-type]


# -- plan ----------------------------------------------------------------------------------


def history(pages: int) -> list[ChatMessage]:
    msgs = [ChatMessage("system", "sys"), ChatMessage("user", "read")]
    for n in range(1, pages + 1):
        msgs += [call(n, f"call_{n}"), result(n, f"call_{n}")]
    return msgs


def test_plan_keeps_the_head_and_the_recent_turns() -> None:
    msgs = history(5)
    sizes = [10] * len(msgs)
    # system + first user | pages 1-3 (6 messages) | pages 4-5 (the 2 newest turns)
    assert plan(msgs, sizes, 2, 1000) == (2, 8)
    assert plan(msgs, sizes, 4, 1000) == (2, 4)
    assert plan(msgs, sizes, 5, 1000) is None  # nothing left between them


def test_plan_keeps_the_current_phases_user_message() -> None:
    # an earlier phase's pages 1-2 and answer, then this phase's "more" and pages 3-6
    msgs = [*history(2), ChatMessage("assistant", "done"), ChatMessage("user", "more")]
    for n in range(3, 7):
        msgs += [call(n, f"call_{n}"), result(n, f"call_{n}")]
    more = 7
    sizes = [10] * len(msgs)
    assert plan(msgs, sizes, 2, 1000) == (2, 12)  # without keep: "more" is replaced
    # kept: the part before "more" (pages 1-2 and "done": 50 tokens) is summarised,
    # not the part after it (pages 3-4: 40)
    assert plan(msgs, sizes, 2, 1000, keep=more) == (2, 7)
    sizes[8:12] = [30] * 4  # now pages 3-4 hold more
    assert plan(msgs, sizes, 2, 1000, keep=more) == (8, 12)
    # one message on a side is not worth a summary: the other side is taken, or none
    assert plan(msgs, [10] * len(msgs), 2, 1000, keep=3) == (4, 12)
    assert plan(msgs[:10], [10] * 10, 1, 1000, keep=more) == (2, 7)
    short = [*msgs[:2], ChatMessage("assistant", "a"), msgs[more], msgs[6], *msgs[8:10]]
    assert plan(short, [10] * 7, 1, 1000) == (2, 5)
    assert plan(short, [10] * 7, 1, 1000, keep=3) is None
    # outside the span, keep changes nothing
    assert plan(msgs, sizes, 2, 1000, keep=13) == plan(msgs, sizes, 2, 1000)


def test_plan_never_splits_a_call_from_its_results() -> None:
    msgs = [
        ChatMessage("user", "go"),
        ChatMessage("assistant", "a"),
        ChatMessage(
            "assistant", "", tool_calls=(ToolCallRequest("f", id="1"), ToolCallRequest("f", id="2"))
        ),
        ChatMessage("tool", "r1", tool_call_id="1"),
        ChatMessage("tool", "r2", tool_call_id="2"),
        ChatMessage("assistant", "b"),
    ]
    # the newest turn is "b"; the one before it is the call with both results
    assert plan(msgs, [1] * 6, 1, 100) == (1, 5)
    assert plan(msgs, [1] * 6, 2, 100) is None  # only "a" is left: not worth a summary
    msgs.insert(1, ChatMessage("assistant", "z"))
    assert plan(msgs, [1] * 7, 2, 100) == (1, 3)


def test_plan_keeps_fewer_recent_turns_when_they_are_big_but_always_the_newest() -> None:
    msgs = history(4)
    sizes = [10] * len(msgs)
    sizes[-1] = 500  # the newest result alone is bigger than the room for the tail
    assert plan(msgs, sizes, 3, 100) == (2, 8)
    sizes[-1] = 10
    assert plan(msgs, sizes, 3, 45) == (2, 6)  # two turns of 20 fit in 45, not three


def test_plan_without_a_user_message_or_turns_to_replace() -> None:
    assert plan([ChatMessage("system", "s")], [1], 1, 10) is None
    assert plan([], [], 1, 10) is None
    assert plan(history(1), [1] * 4, 1, 10) is None


# -- the summary request ---------------------------------------------------------------


def test_summary_request_is_the_prompt_and_a_transcript() -> None:
    older = [
        ChatMessage("assistant", "let me look", tool_calls=(ToolCallRequest("page", {"n": 1}),)),
        ChatMessage("tool", "p1", tool_call_id="call_1", name="page"),
        ChatMessage("user", "and?"),
    ]
    request, estimate = summary_request("Summarise.", older, chars, 10_000)
    assert request[0] == ChatMessage("system", "Summarise.")
    assert request[1].role == "user"
    assert request[1].content == (
        '[assistant] let me look\n[assistant called page({"n":1})]\n\n'
        "[tool result of page] p1\n\n"
        "[user] and?"
    )
    assert estimate == len("Summarise.") + len(request[1].content)


def test_summary_request_says_what_a_user_turn_attached() -> None:
    png = agentrio.ImagePart(data=b"\x89PNG\r\n\x1a\n", media_type="image/png")
    parts = (
        agentrio.types.TextPart("compare"),
        png,
        agentrio.ImagePart(url="https://example.com/b.png"),
        agentrio.DocumentPart(data=b"%PDF-1.7", name="spec.pdf"),
    )
    older = [ChatMessage("user", "compare", parts=parts), ChatMessage("assistant", "same")]
    request, _ = summary_request("Summarise.", older, chars, 10_000)
    # The summary model reads text: it is told what was attached, never sent it.
    assert request[1].parts == ()
    assert request[1].content == (
        "[user] compare\n[user attached an image (image/png)]\n"
        "[user attached an image (by URL)]\n"
        "[user attached a document 'spec.pdf' (application/pdf)]\n\n"
        "[assistant] same"
    )


def test_summary_request_leaves_out_the_oldest_lines_past_the_room_but_not_a_summary() -> None:
    earlier = ChatMessage("user", SUMMARY_PREFIX + "S")
    older = [earlier] + [ChatMessage("user", f"{i}" * 50) for i in range(5)]
    first = "[user] " + SUMMARY_PREFIX + "S"
    # the room is 200 - 1 (the prompt): the summary made before (84) and 2 of the
    # 5 lines of 57 fit; the 3 oldest are left out
    assert len(first) + 2 * 57 <= 199 < len(first) + 3 * 57
    request, estimate = summary_request("P", older, chars, 200)
    assert request[1].content == "\n\n".join(
        [
            first,
            "[3 earlier messages left out: they did not fit]",
            "[user] " + "3" * 50,
            "[user] " + "4" * 50,
        ]
    )
    assert estimate == 1 + len(request[1].content)
    # the newest line always stays, even alone over the room
    request, _ = summary_request("P", [ChatMessage("user", "y" * 500)], chars, 10)
    assert request[1].content == "[user] " + "y" * 500


# -- compaction in a phase --------------------------------------------------------------


class Summariser:
    """A summary model body that records each request."""

    def __init__(self, text: str = "pages 1-3 read", usage: Usage | None = None) -> None:
        self.text = text
        self.usage = usage or Usage(50, 10)
        self.requests: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        assert tools == ()
        self.requests.append(list(messages))
        return Reply(text=self.text, usage=self.usage)


def reader(pages: int, seen: list[list[ChatMessage]]) -> FunctionModel:
    """A main model that reads pages 1..pages, one per call, then answers."""

    def fn(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        seen.append(list(messages))
        n = len(seen)
        if n <= pages:
            return Reply(tool_calls=[ToolCallRequest("page", {"n": n})], usage=Usage(10, 5))
        return Reply(text="done", usage=Usage(10, 5))

    return FunctionModel(fn, context_window=1000)


def spec(model: object, summariser: object, **kw: object) -> AgentSpec:
    compaction = Compaction(threshold=0.5, model=summariser, keep_recent=2)  # type: ignore[arg-type]
    return AgentSpec(
        "a",
        model=model,  # type: ignore[arg-type]
        instructions="sys",
        tools=[page],
        token_estimator=chars,
        compaction=kw.pop("compaction", compaction),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def summary_of(text: str) -> ChatMessage:
    return ChatMessage("user", SUMMARY_PREFIX + text)


async def test_a_phase_past_the_threshold_replaces_older_turns_with_a_summary(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    seen: list[list[ChatMessage]] = []
    summariser = Summariser()
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec(reader(5, seen), FunctionModel(summariser)))
        outcome = await agent.run("read")
        stored = await rt.lookup("a.context").ask(ContextRead())
        usage, budget = agent.usage(), rt.budget.usage()
        await trio.testing.wait_all_tasks_blocked()
    assert (outcome.stop_reason, outcome.final_text, len(outcome.tool_calls)) == ("done", "done", 5)
    # a page turn is 11 tokens (the call) + 103 (its result): 5 of them and "sys" +
    # "read" are 577 > 500 (0.5 of the window) before the sixth call, and not before
    assert len(summariser.requests) == 1
    (request,) = summariser.requests
    assert request[0] == ChatMessage("system", COMPACTION_PROMPT)
    transcript = request[1].content
    assert [f'page({{"n":{n}}})' in transcript for n in range(1, 6)] == [True] * 3 + [False] * 2
    assert "[tool result of page] p3:" in transcript and "p4:" not in transcript
    # the sixth call sees the system prompt, the first user message, the summary and
    # the two newest turns (calls with their results)
    kept = [
        ChatMessage("system", "sys"),
        ChatMessage("user", "read"),
        summary_of("pages 1-3 read"),
        call(4, "call_4"),
        result(4, "call_4"),
        call(5, "call_5"),
        result(5, "call_5"),
    ]
    assert seen[5] == kept
    assert len(seen[4]) == 10  # (the fifth call saw everything: 4 pages)
    # the context holds the compacted history
    assert stored == (*kept, ChatMessage("assistant", "done"))
    (compacted,) = [e for e in events if isinstance(e, ContextCompacted)]
    after = 3 + 4 + len(SUMMARY_PREFIX) + 14 + 2 * 114
    assert compacted == ContextCompacted(
        path="a",
        context_label=None,
        replaced=6,
        tokens_before=577,
        tokens_after=after,
        usage=Usage(50, 10),
    )
    # the summary call is charged like any other, and is not an iteration
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (7, 110, 40)
    assert (budget.requests, budget.input_tokens, budget.output_tokens) == (7, 110, 40)
    (ended,) = [e for e in events if isinstance(e, agentrio.events.PhaseEnded)]
    assert ended.iterations == 6
    assert not [e for e in events if isinstance(e, ContextTruncated)]


async def test_compaction_of_the_stored_history_is_applied_by_the_context_actor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[list[ChatMessage]] = []
    summariser = Summariser("the story so far")
    # under the threshold in the first phase (4 pages: 463 tokens): the second
    # phase's first call is past it, and compacts what the context holds
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(reader(4, seen), FunctionModel(summariser)))
        await agent.run("read")
        ctx = rt.lookup("a.context")
        assert len(await ctx.ask(ContextRead())) == 11  # type: ignore[arg-type]
        assert summariser.requests == []
        await agent.run("once more " * 5)
        stored = await ctx.ask(ContextRead())
    assert len(summariser.requests) == 1
    # 463 + 50 > 500 at the second phase's first call: pages 1-4 (all held by the
    # context) are replaced; kept: the 2 newest turns, "done" and the new message
    assert stored == (
        ChatMessage("system", "sys"),
        ChatMessage("user", "read"),
        summary_of("the story so far"),
        ChatMessage("assistant", "done"),
        ChatMessage("user", "once more " * 5),
        ChatMessage("assistant", "done"),
    )
    assert seen[-1] == list(stored[:-1])


async def test_call_ids_after_a_compaction_do_not_repeat_those_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[list[ChatMessage]] = []
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(reader(5, seen), FunctionModel(Summariser())))
        await agent.run("read")
        # the context keeps call_4 and call_5 but holds 2 calls: the next phase's
        # calls are call_6..., not call_3, call_4 (again)...
        seen.clear()
        outcome = await agent.run("more")
    assert [r.id for r in outcome.tool_calls] == ["call_6", "call_7", "call_8", "call_9", "call_10"]


async def test_call_ids_after_a_compaction_within_a_phase_do_not_repeat(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    def pages(*numbers: int) -> list[Reply]:
        turns = [Reply(tool_calls=[ToolCallRequest("page", {"n": n})]) for n in numbers]
        return [*turns, Reply(text="done")]

    model = ScriptedModel(pages(1, 2) + pages(3, 4, 5, 6, 7, 8), context_window=1000)
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec(model, FunctionModel(Summariser())))
        await agent.run("read")
        # the compaction before the call after page 5 replaces pages 1-2 and "done"
        # (in the context), not "more", this phase's request
        outcome = await agent.run("more")
        stored = await rt.lookup("a.context").ask(ContextRead())
        await trio.testing.wait_all_tasks_blocked()
    assert next(e.replaced for e in events if isinstance(e, ContextCompacted)) == 5
    assert ChatMessage("user", "more") in stored
    assert [r.id for r in outcome.tool_calls] == [f"call_{n}" for n in range(3, 9)]
    ids = [c.id for m in stored for c in m.tool_calls]  # type: ignore[union-attr]
    assert len(ids) == len(set(ids))
    assert ids[-1] == "call_8"


async def test_no_compaction_below_the_threshold_or_without_compaction(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    summariser = Summariser()
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        below = await rt.spawn_agent(spec(reader(4, []), FunctionModel(summariser)), name="below")
        await below.run("read")  # 463 tokens at most: under 500
        off = await rt.spawn_agent(
            spec(reader(6, []), FunctionModel(summariser), compaction=None), name="off"
        )
        await off.run("read")
        await trio.testing.wait_all_tasks_blocked()
    assert summariser.requests == []
    assert not [e for e in events if isinstance(e, (ContextCompacted, CompactionFailed))]


async def test_a_failed_summary_leaves_the_history_and_the_phase_goes_on_truncated(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    attempts = 0

    def broken(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        nonlocal attempts
        attempts += 1
        raise agentrio.errors.ProviderUnavailable("the summary model is down", provider="fast")

    seen: list[list[ChatMessage]] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec(reader(8, seen), FunctionModel(broken)))
        outcome = await agent.run("read")
        stored = await rt.lookup("a.context").ask(ContextRead())
        usage = agent.usage()
        await trio.testing.wait_all_tasks_blocked()
    assert (outcome.stop_reason, len(outcome.tool_calls)) == ("done", 8)
    # tried once (before the sixth call), not again in the phase
    assert attempts == 1
    (failed,) = [e for e in events if isinstance(e, CompactionFailed)]
    assert failed == CompactionFailed(
        path="a",
        context_label=None,
        error_type="ProviderUnavailable",
        error="the summary model is down",
    )
    assert not [e for e in events if isinstance(e, ContextCompacted)]
    # the history is whole; the calls past the window (750) were truncated views
    assert len(stored) == 2 + 2 * 8 + 1  # type: ignore[arg-type]
    assert [e for e in events if isinstance(e, ContextTruncated)]
    assert all(m.role != "user" or not m.content.startswith(SUMMARY_PREFIX) for m in seen[-1])
    assert usage.requests == 9 + 1  # the failed summary call is counted


async def test_a_compaction_that_leaves_the_history_over_the_threshold_is_not_repeated(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    summariser = Summariser()
    # the first user message alone is over the threshold (500): a summary of what
    # lies between it and the newest turns cannot get the history under it
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec(reader(6, []), FunctionModel(summariser)))
        outcome = await agent.run("r" * 600)
        await trio.testing.wait_all_tasks_blocked()
    assert (outcome.stop_reason, len(outcome.tool_calls)) == ("done", 6)
    # once, when 3 pages were read: page 1 (2 messages) was replaced; then no more
    assert len(summariser.requests) == 1
    (compacted,) = [e for e in events if isinstance(e, ContextCompacted)]
    assert compacted.replaced == 2 and compacted.tokens_after > 500
    assert [e for e in events if isinstance(e, ContextTruncated)]


@pytest.mark.parametrize("usage", [None, (50, 10)], ids=repr)
async def test_a_summary_whose_usage_is_not_a_usage_is_a_failure_charged_its_reservation(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents, usage: object
) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        summariser = FunctionModel(lambda m, t: Reply(text="summary", usage=usage))  # type: ignore[arg-type]
        agent = await rt.spawn_agent(spec(reader(6, []), summariser))
        outcome = await agent.run("read")
        budget = rt.budget.usage()
        reserved = rt.budget.reserved_tokens
        await trio.testing.wait_all_tasks_blocked()
    assert outcome.stop_reason == "done"
    (failed,) = [e for e in events if isinstance(e, CompactionFailed)]
    assert failed.error_type == "UsageInvalid" and "expected a Usage" in failed.error
    assert not [e for e in events if isinstance(e, ContextCompacted)]
    # the seven main calls (10 + 5 each), and the summary call's whole reservation
    assert budget.requests == 8 and reserved == 0
    assert budget.output_tokens == 7 * 5 + Limits().max_output_tokens
    assert budget.input_tokens > 7 * 10 + 500  # (the summary request's estimate)


async def test_a_summary_without_text_is_a_failure(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec(reader(6, []), FunctionModel(Summariser("  "))))
        outcome = await agent.run("read")
        await trio.testing.wait_all_tasks_blocked()
    assert outcome.stop_reason == "done"
    (failed,) = [e for e in events if isinstance(e, CompactionFailed)]
    assert (failed.error_type, failed.error) == (
        "ValueError",
        "the summary model answered with no text",
    )


async def test_a_context_written_during_the_summary_is_not_compacted(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    note = ChatMessage("user", "a note written meanwhile")

    async def meddling(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await rt.lookup("a.context").send(ContextAppend((note,)))
        return Reply(text="summary", usage=Usage(5, 5))

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec(reader(4, []), FunctionModel(meddling)))
        await agent.run("read")
        await agent.run("once more " * 5)
        stored = await rt.lookup("a.context").ask(ContextRead())
        await trio.testing.wait_all_tasks_blocked()
    (failed,) = [e for e in events if isinstance(e, CompactionFailed)]
    assert failed.error_type == "ContextChanged"
    # nothing was replaced: the first phase's turns, the note, the second phase's
    assert len(stored) == 11 + 1 + 2  # type: ignore[arg-type]
    assert stored[11] == note  # type: ignore[index]
    assert not any(m.content.startswith(SUMMARY_PREFIX) for m in stored)  # type: ignore[union-attr]


async def test_a_phase_timeout_during_the_summary_leaves_the_history_whole(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    async def slow(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(100)
        return Reply(text="too late")

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(
            spec(reader(6, []), FunctionModel(slow), limits=Limits(timeout=10))
        )
        outcome = await agent.run("read")
        stored = await rt.lookup("a.context").ask(ContextRead())
        reserved = rt.budget.reserved_tokens
        usage = agent.usage()
        await trio.testing.wait_all_tasks_blocked()
    assert (outcome.stop_reason, len(outcome.tool_calls)) == ("timeout", 5)
    assert len(stored) == 2 + 2 * 5  # type: ignore[arg-type]
    assert not [e for e in events if isinstance(e, (ContextCompacted, CompactionFailed))]
    assert reserved == 0  # the summary's reservation was settled as it was cut short
    assert usage.requests == 5 + 1


async def test_the_summary_call_is_budgeted_with_its_models_pricing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reserved: list[float] = []

    def priced(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        reserved.append(rt.budget.usage().cost_usd)
        return Reply(text="short", usage=Usage(100, 20))

    summary_model = FunctionModel(priced, pricing=(0.01, 0.1))
    async with agentrio.open_runtime(budget=Budget(max_cost_usd=1000.0)) as rt:
        agent = await rt.spawn_agent(spec(reader(5, []), summary_model))
        await agent.run("read")
        cost = rt.budget.usage().cost_usd
    # priced from the summary model (the main model has no pricing)
    assert cost == pytest.approx(100 * 0.01 + 20 * 0.1)


async def test_no_room_in_the_budget_for_the_summary_is_a_failure(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    summariser = Summariser()
    # the main model has no pricing; the summary call's worst case (1024 output
    # tokens at 0.1) is over max_cost_usd: it is not made, the turns go on
    summary_model = FunctionModel(summariser, pricing=(0.01, 0.1))
    async with agentrio.open_runtime(budget=Budget(max_cost_usd=50.0)) as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec(reader(7, []), summary_model))
        outcome = await agent.run("read")
        await trio.testing.wait_all_tasks_blocked()
    assert (outcome.stop_reason, len(outcome.tool_calls)) == ("done", 7)
    assert summariser.requests == []
    (failed,) = [e for e in events if isinstance(e, CompactionFailed)]  # (tried once)
    assert (failed.error_type, failed.error) == (
        "BudgetExhausted",
        "no room in the budget for the summary call (max_cost_usd)",
    )
    assert rt.budget.usage().requests == 8


# -- the summary model ---------------------------------------------------------------------


async def test_without_a_model_and_a_configuration_the_agents_own_model_summarises(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("AGENTRIO_CONFIG", raising=False)
    seen: list[list[ChatMessage]] = []
    model = reader(5, seen)
    compaction = Compaction(threshold=0.5, keep_recent=2)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model, None, compaction=compaction))
        await agent.run("read")
    # the sixth call of the agent's model was the summary request (its answer, "done",
    # is the summary), then the sixth turn saw it
    assert seen[5] == [ChatMessage("system", COMPACTION_PROMPT), seen[5][1]]
    assert seen[6][2] == summary_of("done")


def fast_and_smart(request: FakeRequest) -> agentrio.ModelReply:
    if request.model == "small":
        return Reply(text="summary by the fast tier", usage=Usage(7, 3))
    raise AssertionError(f"unexpected model {request.model}")


async def test_the_fast_tier_of_the_configuration_summarises_by_default(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[list[ChatMessage]] = []
    async with open_fake_llm(fast_and_smart) as server:
        local = agentrio.ProviderConfig(name="local", kind="ollama", base_url=server.base_url)
        config = Config(
            providers={"local": local}, tiers={"fast": "local:small", "smart": "local:big"}
        )
        async with agentrio.open_runtime(config=config) as rt:
            agent = await rt.spawn_agent(
                spec(reader(5, seen), None, compaction=Compaction(threshold=0.5, keep_recent=2))
            )
            await agent.run("read")
            usage = agent.usage()
    assert [r.model for r in server.requests] == ["small"]
    assert server.requests[0].messages[0].content == COMPACTION_PROMPT
    assert seen[5][2] == summary_of("summary by the fast tier")
    # a provider's call counts its HTTP attempt too
    assert (usage.requests, usage.attempts) == (7, 1)


async def test_a_named_summary_model_must_resolve_at_spawn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = Config(providers={}, tiers={})
    async with agentrio.open_runtime(config=config) as rt:
        with pytest.raises(agentrio.ConfigError, match="'tiny' is neither a tier"):
            await rt.spawn_agent(spec(reader(1, []), None, compaction=Compaction(model="tiny")))
        # nothing was spawned
        assert rt.statistics().children == 0


def counting_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """time.time() as 1.0, 2.0, ...: each turn's time tells when it was made."""
    ticks = iter(range(1, 1_000_000))
    monkeypatch.setattr("time.time", lambda: float(next(ticks)))


async def test_turn_times_follow_a_compaction_within_a_phase(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting_clock(monkeypatch)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(reader(5, []), FunctionModel(Summariser())))
        await agent.run("read")
        turns = await agent.history()
    assert [t.message for t in turns][2] == summary_of("pages 1-3 read")
    times = [t.timestamp for t in turns]
    # each turn keeps the time it was made (not all stamped at the write), the
    # summary the time of the compaction: after the turns it kept, before the answer
    others = times[:2] + times[3:]
    assert others == sorted(set(others))
    assert max(times[3:-1]) < times[2] < times[-1]


async def test_turn_times_follow_a_compaction_of_the_stored_history(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting_clock(monkeypatch)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(reader(4, []), FunctionModel(Summariser())))
        await agent.run("read")
        first = await agent.history()
        await agent.run("once more " * 5)
        turns = await agent.history()
    assert [t.message for t in turns][2] == summary_of("pages 1-3 read")
    # the head and the turns kept from the first phase keep their times
    assert turns[:2] == first[:2]
    assert turns[3] == first[-1]
    # the summary has the time of the compaction, in the second phase
    # (made before the next call: after the new user message, before the answer)
    assert turns[4].timestamp < turns[2].timestamp < turns[5].timestamp


class LanedModel:
    """A model whose ``complete`` takes ``lane``: records the lane of each call."""

    context_window = 1000

    def __init__(self, fn: Callable[[Sequence[ChatMessage], Sequence[ToolSchema]], Reply]) -> None:
        self.fn = fn
        self.lanes: list[tuple[str | None, str]] = []

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        lane: str | None = None,
    ) -> agentrio.ModelReply:
        self.lanes.append((lane, messages[0].content))
        await trio.lowlevel.checkpoint()
        return self.fn(messages, tools)


@pytest.mark.parametrize("own", [True, False])
async def test_the_summary_call_is_made_in_the_phases_lane(
    autojump_clock: trio.testing.MockClock, own: bool
) -> None:
    summariser = Summariser()

    def both(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        if messages[0].content == COMPACTION_PROMPT:
            return summariser(messages, tools)
        n = 1 + sum(m.role == "tool" for m in messages)
        if n <= 5:
            return Reply(tool_calls=[ToolCallRequest("page", {"n": n})], usage=Usage(10, 5))
        return Reply(text="done", usage=Usage(10, 5))

    model = LanedModel(both)
    summary = LanedModel(summariser)
    compaction = Compaction(threshold=0.5, keep_recent=2, model=None if own else summary)  # type: ignore[arg-type]
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model, None, compaction=compaction))
        await agent.run("read", lane="interactive")
    calls = model.lanes + summary.lanes
    summaries = [lane for lane, first in calls if first == COMPACTION_PROMPT]
    assert summaries and set(summaries) == {"interactive"}
    assert {lane for lane, _ in calls} == {"interactive"}
