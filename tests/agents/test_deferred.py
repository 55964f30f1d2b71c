"""Deferred decisions (#27): an approver or a tool answers ``agentrio.Defer``, the
phase parks in the checkpoint store (no task, no budget reservation), and a
decision given later, in this process or another one, makes it go on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

import agentrio
from agentrio import AgentSpec, PermissionPolicy, ToolCallRequest, ask_rule
from agentrio.errors import InvalidArgument, UnknownName
from agentrio.events import PhaseDeferred
from agentrio.testing import FunctionModel, Reply

PAID: list[str] = []
HOLD = [False]  # pay waits forever (the process dies while it runs)
ENTERED = [False]


@pytest.fixture(autouse=True)
def _paid() -> None:
    PAID.clear()
    HOLD[0] = ENTERED[0] = False


@agentrio.tool
async def pay(invoice: str) -> str:
    """Pay an invoice."""
    ENTERED[0] = True
    if HOLD[0]:
        await trio.sleep_forever()
    PAID.append(invoice)
    return f"paid {invoice}"


@agentrio.tool
async def build(target: str) -> object:
    """Start a build (an external job): its result comes later."""
    PAID.append(f"build {target}")
    return agentrio.Defer(f"build of {target} started")


async def defer(request: agentrio.events.ConfirmationRequired) -> agentrio.Defer:
    return agentrio.Defer("ask the treasurer")


def clerk_model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    results = [m for m in messages if m.role == "tool"]
    if not results:
        calls = (ToolCallRequest("pay", {"invoice": "A-7"}, id="call_1"),)
        return Reply(tool_calls=calls, usage=agentrio.Usage(10, 5))
    return Reply(text=f"the tool said: {results[-1].content}", usage=agentrio.Usage(10, 5))


def make_clerk() -> AgentSpec[str]:
    return AgentSpec(
        "clerk",
        FunctionModel(clerk_model),
        tools=[pay],
        permissions=PermissionPolicy(rules=[ask_rule("pay")]),
        approver=defer,
    )


def builder_model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    results = [m for m in messages if m.role == "tool"]
    if not results:
        calls = (ToolCallRequest("build", {"target": "docs"}, id="call_1"),)
        return Reply(tool_calls=calls)
    return Reply(text=f"{results[-1].name}: {results[-1].content} ({results[-1].is_error})")


def make_builder() -> AgentSpec[str]:
    return AgentSpec("builder", FunctionModel(builder_model), tools=[build])


async def test_an_approval_deferred_parks_the_phase_and_approve_resumes_it(tmp_path: Path) -> None:
    async with agentrio.open_runtime(store=tmp_path / "s", specs={"clerk": make_clerk}) as rt:
        events = rt.events()
        clerk = await rt.spawn_agent(make_clerk())
        parked = await clerk.run("Pay A-7", phase_id="p-1")
        assert parked.stop_reason == "deferred"
        assert PAID == []
        assert clerk._state.phase is None  # (the phase holds no task)
        assert rt.budget.reserved_tokens == 0  # (nor any reservation)
        [pending] = rt.pending_approvals()
        assert (pending.phase_id, pending.tool, dict(pending.arguments)) == (
            "p-1",
            "pay",
            {"invoice": "A-7"},
        )
        assert pending.note == "ask the treasurer" and pending.kind == "approval"
        assert rt.pending_results() == []
        with pytest.raises(InvalidArgument):
            await rt.give_result(pending, "no")
        await rt.approve(pending, "ok by the treasurer")
        result = await rt.resumed_result("p-1")
        assert result.stop_reason == "done"
        assert result.final_text == "the tool said: paid A-7"
        assert PAID == ["A-7"]
        assert rt.pending_approvals() == []
        with pytest.raises(UnknownName):
            await rt.approve(pending)
    deferred = [e async for e in events if isinstance(e, PhaseDeferred)]
    assert [(e.phase_id, e.waiting) for e in deferred] == [("p-1", 1)]


async def test_deny_gives_the_model_the_message(tmp_path: Path) -> None:
    async with agentrio.open_runtime(store=tmp_path / "s", specs={"clerk": make_clerk}) as rt:
        clerk = await rt.spawn_agent(make_clerk())
        await clerk.run("Pay A-7", phase_id="p-2")
        [pending] = rt.pending_approvals()
        await rt.deny(pending, "over the limit")
        result = await rt.resumed_result("p-2")
    assert result.final_text == "the tool said: the approver refused 'pay': over the limit"
    assert PAID == []


async def test_a_tool_that_defers_its_result_gets_it_later(tmp_path: Path) -> None:
    async with agentrio.open_runtime(store=tmp_path / "s", specs={"builder": make_builder}) as rt:
        builder = await rt.spawn_agent(make_builder())
        first = await builder.run("Build the docs", phase_id="b-1")
        assert first.stop_reason == "deferred"
        [pending] = rt.pending_results()
        assert (pending.tool, pending.kind, pending.note) == (
            "build",
            "result",
            "build of docs started",
        )
        await rt.give_result(pending, "the docs are built")
        result = await rt.resumed_result("b-1")
    assert result.final_text == "build: the docs are built (False)"
    assert PAID == ["build docs"]  # (run once: its given result is not made again)


async def test_without_a_store_a_deferral_is_a_refusal() -> None:
    async with agentrio.open_runtime() as rt:
        clerk = await rt.spawn_agent(make_clerk())
        result = await clerk.run("Pay A-7")
        builder = await rt.spawn_agent(make_builder())
        built = await builder.run("Build")
    assert result.stop_reason == "done"
    assert "which only a durable agent can wait for" in result.final_text
    assert built.stop_reason == "done" and "(True)" in built.final_text
    assert rt.pending_approvals() == []


def test_the_sync_host_parks_decides_and_continues_sessions(tmp_path: Path) -> None:
    specs = {"clerk": make_clerk, "builder": make_builder}
    with agentrio.open_runtime_sync(store=tmp_path / "s", specs=specs) as rt:
        clerk = rt.spawn_agent(make_clerk())
        assert clerk.run("Pay A-7", phase_id="h-1").stop_reason == "deferred"
        [pending] = rt.pending_approvals()
        rt.approve(pending, "fine")
        assert rt.resumed_result("h-1").final_text == "the tool said: paid A-7"
        builder = rt.spawn_agent(make_builder())
        assert builder.run("Build", phase_id="h-2").stop_reason == "deferred"
        [job] = rt.pending_results()
        rt.give_result(job, "the build failed: disk full", status="failed")
        assert rt.resumed_result("h-2").final_text == "build: the build failed: disk full (True)"
        session = rt.session("desk", "clerk")
        assert session.path == "sessions/desk"
        assert set(rt.sessions()) == {"desk"}
    assert PAID == ["A-7", "build docs"]


async def test_a_parallel_batch_parks_after_its_other_calls_end(tmp_path: Path) -> None:
    """Two calls in one turn: one deferred, one run. The run one is recorded and
    not run again when the phase goes on; meanwhile the agent serves other phases,
    and the parked phase's id is in use."""

    def model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
        results = [m for m in messages if m.role == "tool"]
        if [m.content for m in messages if m.role == "user"][-1] == "other":
            return Reply(text="served")
        if not results:
            calls = (
                ToolCallRequest("pay", {"invoice": "B-1"}, id="call_1"),
                ToolCallRequest("build", {"target": "site"}, id="call_2"),
            )
            return Reply(tool_calls=calls)
        return Reply(text="; ".join(f"{m.name}={m.content}" for m in results))

    def make() -> AgentSpec[str]:
        return AgentSpec("mixed", FunctionModel(model), tools=[pay, build])

    async with agentrio.open_runtime(store=tmp_path / "s", specs={"mixed": make}) as rt:
        agent = await rt.spawn_agent(make())
        assert (await agent.run("go", phase_id="m-1")).stop_reason == "deferred"
        assert (await agent.run("other", continue_context=False)).final_text == "served"
        with pytest.raises(InvalidArgument, match="phase_id 'm-1'"):
            await agent.run("go", phase_id="m-1")
        [job] = rt.pending_results()
        await rt.give_result(job, "site built")
        result = await rt.resumed_result("m-1")
    assert result.final_text == "pay=paid B-1; build=site built"
    assert sorted(PAID) == ["B-1", "build site"]  # (each once)


def test_defer_notes_are_checked() -> None:
    with pytest.raises(InvalidArgument):
        agentrio.Defer(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        agentrio.Defer("x" * 1001)


async def test_a_decision_recorded_before_a_crash_goes_on_when_the_store_opens(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s"
    specs = {"clerk": make_clerk}
    async with agentrio.open_runtime(store=store, specs=specs) as rt:
        clerk = await rt.spawn_agent(make_clerk())
        assert (await clerk.run("Pay A-7", phase_id="c-1")).stop_reason == "deferred"
    HOLD[0] = True
    async with agentrio.open_runtime(store=store, specs=specs) as rt:
        assert rt.resumed == ()  # (a parked phase is not resumed: it waits)
        [pending] = rt.pending_approvals()
        await rt.approve(pending, "yes")
        while not ENTERED[0]:  # (the phase went on, and pay runs)
            await trio.sleep(0.001)
        rt.cancel()  # (the crash)
    assert PAID == []
    async with agentrio.open_runtime(store=store, specs=specs) as rt:
        assert rt.resumed == ("c-1",)  # (decided: it goes on at once, not asked again)
        assert rt.pending_approvals() == []
        result = await rt.resumed_result("c-1")
    # (pay is not idempotent: at most once, as after any crash)
    assert result.final_text.startswith("the tool said: tool 'pay' was interrupted")
    assert PAID == []


async def test_decisions_are_checked(tmp_path: Path) -> None:
    async with agentrio.open_runtime(store=tmp_path / "s", specs={"clerk": make_clerk}) as rt:
        clerk = await rt.spawn_agent(make_clerk())
        await clerk.run("Pay A-7", phase_id="d-1")
        [pending] = rt.pending_approvals()
        with pytest.raises(InvalidArgument, match="PendingCall"):
            await rt.approve(("d-1", "call_1"))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="at most 100,000"):
            await rt.approve(pending, "x" * 100_001)
        with pytest.raises(InvalidArgument):
            await rt.deny(pending, 7)  # type: ignore[arg-type]
        assert rt.pending_approvals() == [pending]  # (nothing was decided)
        await rt.deny(pending, "no \ud800 surrogates")
        result = await rt.resumed_result("d-1")
    assert result.final_text == "the tool said: the approver refused 'pay': no \ufffd surrogates"


def test_a_parked_record_no_runtime_writes_is_corrupt() -> None:
    import msgspec

    from agentrio.agents.durability.records import ParkedCall, PhaseParked, decode_records
    from agentrio.errors import StoreCorrupt
    from agentrio.store import Entry

    call = ToolCallRequest("pay", {"invoice": "A-7"}, id="call_1")
    good = msgspec.msgpack.encode(PhaseParked("p", (ParkedCall(call, "approval", "n"),), 1.0))
    assert decode_records([Entry("s", 0, good)])[0].calls[0].kind == "approval"  # type: ignore[union-attr]
    bad = good.replace(b"approval", b"whatever")
    with pytest.raises(StoreCorrupt, match="offset 7"):
        decode_records([Entry("s", 7, bad)])


async def test_in_a_parallel_batch_only_the_deferred_call_waits(tmp_path: Path) -> None:
    """Two calls needing approval in one turn: one approved at once (it runs), one
    deferred; approved later, it runs when the phase goes on, the first not again."""

    async def approver(request: agentrio.events.ConfirmationRequired) -> object:
        if request.tool_call.arguments["invoice"] == "A-1":
            return True
        return agentrio.Defer("B-2 is large")

    def model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
        results = [m for m in messages if m.role == "tool"]
        if not results:
            calls = (
                ToolCallRequest("pay", {"invoice": "A-1"}, id="call_1"),
                ToolCallRequest("pay", {"invoice": "B-2"}, id="call_2"),
            )
            return Reply(tool_calls=calls)
        return Reply(text="; ".join(m.content for m in results))

    def make() -> AgentSpec[str]:
        return AgentSpec(
            "payer",
            FunctionModel(model),
            tools=[pay],
            permissions=PermissionPolicy(rules=[ask_rule("pay")]),
            approver=approver,
        )

    store = tmp_path / "s"
    async with agentrio.open_runtime(store=store, specs={"payer": make}) as rt:
        agent = await rt.spawn_agent(make())
        assert (await agent.run("go", phase_id="pb-1")).stop_reason == "deferred"
        assert PAID == ["A-1"]
    async with agentrio.open_runtime(store=store, specs={"payer": make}) as rt:
        [pending] = rt.pending_approvals()
        assert pending.arguments["invoice"] == "B-2"
        await rt.approve(pending)
        result = await rt.resumed_result("pb-1")
    assert result.final_text == "paid A-1; paid B-2"
    assert PAID == ["A-1", "B-2"]


async def test_a_phase_that_goes_on_may_park_again(tmp_path: Path) -> None:
    def model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
        results = [m for m in messages if m.role == "tool"]
        if len(results) < 2:
            invoice = f"I-{len(results) + 1}"
            calls = (ToolCallRequest("pay", {"invoice": invoice}, id=f"call_{invoice}"),)
            return Reply(tool_calls=calls)
        return Reply(text="; ".join(m.content for m in results))

    def make() -> AgentSpec[str]:
        return AgentSpec(
            "twice",
            FunctionModel(model),
            tools=[pay],
            permissions=PermissionPolicy(rules=[ask_rule("pay")]),
            approver=defer,
        )

    async with agentrio.open_runtime(store=tmp_path / "s", specs={"twice": make}) as rt:
        events = rt.events()
        agent = await rt.spawn_agent(make())
        assert (await agent.run("go", phase_id="t-1")).stop_reason == "deferred"
        [first] = rt.pending_approvals()
        await rt.approve(first)
        while not rt.pending_approvals():  # (it went on, paid I-1, and parked again)
            await trio.sleep(0.001)
        [second] = rt.pending_approvals()
        assert (first.arguments["invoice"], second.arguments["invoice"]) == ("I-1", "I-2")
        await rt.deny(second, "one is enough")
        result = await rt.resumed_result("t-1")
    assert result.final_text == "paid I-1; the approver refused 'pay': one is enough"
    assert PAID == ["I-1"]
    deferred = [e async for e in events if isinstance(e, PhaseDeferred)]
    assert [e.phase_id for e in deferred] == ["t-1", "t-1"]


async def test_a_deferred_approval_over_the_fake_server(tmp_path: Path) -> None:
    """The model is a real provider over HTTP (the fake server on 127.0.0.1): the
    request after the decision carries the call and its approved result."""
    from agentrio import ModelReply
    from agentrio.providers.provider import Provider, ProviderConfig
    from agentrio.testing import FakeRequest, open_fake_llm

    def reply(request: FakeRequest) -> ModelReply:
        results = [m for m in request.messages if m.role == "tool"]
        if not results:
            call = ToolCallRequest("pay", {"invoice": "H-1"}, id="call_h1")
            return ModelReply(tool_calls=(call,), usage=agentrio.Usage(10, 3))
        return ModelReply(text=f"done: {results[-1].content}", usage=agentrio.Usage(20, 3))

    async with open_fake_llm(reply) as server:
        config = ProviderConfig(name="fake", kind="openai", base_url=server.base_url + "/v1")
        async with Provider(config) as provider:
            model = provider.model("m")

            def make() -> AgentSpec[str]:
                return AgentSpec(
                    "http-clerk",
                    model,
                    tools=[pay],
                    permissions=PermissionPolicy(rules=[ask_rule("pay")]),
                    approver=defer,
                )

            specs = {"http-clerk": make}
            async with agentrio.open_runtime(store=tmp_path / "s", specs=specs) as rt:
                clerk = await rt.spawn_agent(make())
                assert (await clerk.run("Pay H-1", phase_id="h-1")).stop_reason == "deferred"
            assert len(server.requests) == 1
            async with agentrio.open_runtime(store=tmp_path / "s", specs=specs) as rt:
                [pending] = rt.pending_approvals()
                await rt.approve(pending, "ok")
                result = await rt.resumed_result("h-1")
        last = server.requests[-1]
    assert result.final_text == "done: paid H-1"
    assert len(server.requests) == 2  # (the first call was not made again)
    assert [m.role for m in last.messages] == ["user", "assistant", "tool"]
    assert PAID == ["H-1"]
