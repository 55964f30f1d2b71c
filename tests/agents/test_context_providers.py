"""Context providers (#26): sources that add context before each model call, in
parallel, under a timeout and a token allowance; what they add (or why they were
skipped) in events; the shipped FileRetrieval."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, ChatMessage
from agentrio.events import ContextProvided, ContextProviderFailed, Event, PhaseEnded
from agentrio.memory import ContextProviders, ContextQuery, FileRetrieval, Memory
from agentrio.testing import FakeRequest, FunctionModel, Reply, open_fake_llm


def context_of(messages: Sequence[ChatMessage]) -> str:
    """The context message a call was given ("" if none): its system messages'."""
    return "".join(m.content for m in messages if m.role == "system")


def recorder(seen: list[Sequence[ChatMessage]]) -> FunctionModel:
    def answer(messages: Sequence[ChatMessage], tools: object) -> Reply:
        seen.append(messages)
        return Reply(text="ok")

    return FunctionModel(answer)


class Fixed:
    def __init__(self, name: str, text: object) -> None:
        self.name = name
        self.text = text
        self.queries: list[ContextQuery] = []

    async def provide(self, query: ContextQuery) -> str:
        self.queries.append(query)
        await trio.lowlevel.checkpoint()
        return self.text  # type: ignore[return-value]  # (hostile: maybe not text)


class Slow:
    name = "slow"

    async def provide(self, query: ContextQuery) -> str:
        await trio.sleep_forever()
        raise AssertionError


class Broken:
    name = "broken"

    async def provide(self, query: ContextQuery) -> str:
        raise RuntimeError("the index is down")


async def run_collecting(spec: AgentSpec[str], message: str) -> list[Event]:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        events: list[Event] = []
        async with rt.events() as stream:
            result = await agent.run(message)
            while True:
                event = await stream.receive()
                events.append(event)
                if isinstance(event, PhaseEnded):
                    break
        assert result.stop_reason == "done"
    return events


async def test_a_provider_adds_context_to_each_call_with_an_event() -> None:
    seen: list[Sequence[ChatMessage]] = []
    facts = Fixed("facts", "The office opens at 9.")
    spec = AgentSpec("a", recorder(seen), instructions="Be brief.", context_providers=[facts])
    events = await run_collecting(spec, "when does the office open?")
    (messages,) = seen
    assert [m.role for m in messages] == ["system", "system", "user"]
    assert messages[0].content == "Be brief."
    assert messages[1].content == "Context from facts:\nThe office opens at 9."
    assert facts.queries[0].text == "when does the office open?"
    assert facts.queries[0].agent == "a"
    (provided,) = [e for e in events if isinstance(e, ContextProvided)]
    assert (provided.provider, provided.cut, provided.preview) == (
        "facts",
        False,
        "The office opens at 9.",
    )
    assert provided.tokens == agentrio.estimate_tokens("The office opens at 9.")


async def test_providers_run_in_parallel() -> None:
    # Each waits for the other: run one after the other, both would time out.
    a_ready, b_ready = trio.Event(), trio.Event()

    class Waiting:
        def __init__(self, name: str, mine: trio.Event, theirs: trio.Event) -> None:
            self.name, self.mine, self.theirs = name, mine, theirs

        async def provide(self, query: ContextQuery) -> str:
            self.mine.set()
            await self.theirs.wait()
            return f"from {self.name}"

    seen: list[Sequence[ChatMessage]] = []
    providers = [Waiting("a", a_ready, b_ready), Waiting("b", b_ready, a_ready)]
    spec = AgentSpec("x", recorder(seen), context_providers=ContextProviders(providers, timeout=5))
    await run_collecting(spec, "hi")
    assert context_of(seen[0]) == "Context from a:\nfrom a\n\nContext from b:\nfrom b"


async def test_a_provider_that_times_out_raises_or_gives_no_text_is_skipped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Sequence[ChatMessage]] = []
    providers = ContextProviders(
        [Slow(), Broken(), Fixed("odd", 42), Fixed("good", "still here")], timeout=2.0
    )
    spec = AgentSpec("a", recorder(seen), context_providers=providers)
    before = trio.current_time()
    events = await run_collecting(spec, "hi")
    assert trio.current_time() - before == pytest.approx(2.0)  # (the mock clock: the timeout)
    assert context_of(seen[0]) == "Context from good:\nstill here"
    failed = [
        (e.provider, e.reason, e.error_type, e.error)
        for e in events
        if isinstance(e, ContextProviderFailed)
    ]
    assert failed == [
        ("slow", "timeout", "", "no answer in 2 s"),
        ("broken", "error", "RuntimeError", "the index is down"),
        ("odd", "not_text", "TypeError", "provide() returned int, not text"),
    ]


async def test_what_does_not_fit_the_token_allowance_is_cut() -> None:
    seen: list[Sequence[ChatMessage]] = []
    big = "word " * 5000
    providers = ContextProviders([Fixed("first", big), Fixed("second", big)], max_tokens=100)
    spec = AgentSpec("a", recorder(seen), context_providers=providers)
    events = await run_collecting(spec, "hi")
    provided = [e for e in events if isinstance(e, ContextProvided)]
    assert [(e.provider, e.cut) for e in provided] == [("first", True)]
    assert provided[0].tokens <= 100
    added = context_of(seen[0])
    assert added.startswith("Context from first:\nword word") and added.endswith("…")
    assert "second" not in added
    assert agentrio.estimate_tokens(added.split("\n", 1)[1]) <= 101


async def test_file_retrieval_gives_the_best_chunks(tmp_path: Path) -> None:
    (tmp_path / "lunch.md").write_text("Lunch is served in the canteen at noon.\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "parking.txt").write_text("Parking is behind building B.\n")
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe not utf-8 \x80")
    (tmp_path / "huge.md").write_text("parking " * 200_000)
    files = FileRetrieval(tmp_path, top=1, max_file_bytes=100_000)
    seen: list[Sequence[ChatMessage]] = []
    spec = AgentSpec("a", recorder(seen), context_providers=[files])
    events = await run_collecting(spec, "where is parking?")
    found = "[sub/parking.txt] Parking is behind building B."
    assert context_of(seen[0]) == f"Context from files:\n{found}"
    assert [e.provider for e in events if isinstance(e, ContextProvided)] == ["files"]
    with pytest.raises(agentrio.InvalidArgument, match="not a folder"):
        FileRetrieval(tmp_path / "missing")


async def test_the_query_has_the_tool_results_not_yet_answered() -> None:
    @agentrio.tool
    async def weather() -> str:
        """The weather."""
        return "rain in Oslo"

    def answer(messages: Sequence[ChatMessage], tools: object) -> Reply:
        if messages[-1].role == "user":
            return Reply(tool_calls=(agentrio.ToolCallRequest("weather", {}),))
        return Reply(text="take an umbrella")

    facts = Fixed("facts", "")
    spec = AgentSpec("a", FunctionModel(answer), tools=[weather], context_providers=[facts])
    await run_collecting(spec, "what to wear?")
    assert [q.text for q in facts.queries] == ["what to wear?", "what to wear?\nrain in Oslo"]


async def test_memory_and_providers_share_one_context_message() -> None:
    seen: list[Sequence[ChatMessage]] = []
    spec = AgentSpec(
        "a", recorder(seen), memory=Memory(), context_providers=[Fixed("facts", "fact")]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        await agent.memory.remember("the fact remembered")
        await agent.run("fact?")
    added = [m for m in seen[0] if m.role == "system"]
    assert len(added) == 1
    assert "the fact remembered" in added[0].content
    assert added[0].content.endswith("Context from facts:\nfact")


def test_bad_providers_are_refused() -> None:
    model = FunctionModel(lambda m, t: Reply(text="ok"))
    with pytest.raises(agentrio.InvalidArgument, match="provide"):
        AgentSpec("a", model, context_providers=[object()])  # type: ignore[list-item]
    with pytest.raises(agentrio.InvalidArgument, match="context_providers"):
        AgentSpec("a", model, context_providers="files")  # type: ignore[arg-type]
    with pytest.raises(agentrio.InvalidArgument, match="max_tokens"):
        ContextProviders([Fixed("f", "")], max_tokens=0)
    assert AgentSpec("a", model, context_providers=[]).context_providers is None


async def test_context_providers_over_the_fake_server(tmp_path: Path) -> None:
    (tmp_path / "policy.md").write_text("Refunds are paid within 14 days.\n")
    requests: list[FakeRequest] = []

    def handler(request: FakeRequest) -> Reply:
        requests.append(request)
        return Reply(text="within 14 days")

    async with open_fake_llm(handler) as server:
        config = agentrio.ProviderConfig(
            name="an", kind="anthropic", base_url=server.base_url + "/v1"
        )
        async with agentrio.Provider(config) as provider, agentrio.open_runtime() as rt:
            spec = AgentSpec(
                "a",
                provider.model("claude"),
                instructions="Be brief.",
                context_providers=[FileRetrieval(tmp_path)],
            )
            agent = await rt.spawn_agent(spec)
            result = await agent.run("how fast are refunds paid?")
    assert result.final_text == "within 14 days"
    (request,) = requests
    assert request.api == "anthropic"
    system = request.messages[0]
    assert system.role == "system" and system.content.startswith("Be brief.\n\n")
    assert "[policy.md] Refunds are paid within 14 days." in system.content


async def test_env_values_are_hidden_in_the_events() -> None:
    class Leaky:
        name = "leaky"

        async def provide(self, query: ContextQuery) -> str:
            return "the token is tok-98765"

    class Raising:
        name = "raising"

        async def provide(self, query: ContextQuery) -> str:
            raise ValueError("cannot reach db with tok-98765")

    seen: list[Sequence[ChatMessage]] = []
    spec = AgentSpec(
        "a",
        recorder(seen),
        env={"TOKEN": "tok-98765"},
        context_providers=[Leaky(), Raising()],
    )
    events = await run_collecting(spec, "hi")
    provided = [e for e in events if isinstance(e, ContextProvided)]
    failed = [e for e in events if isinstance(e, ContextProviderFailed)]
    assert [e.preview for e in provided] == ["the token is [redacted]"]
    assert [e.error for e in failed] == ["cannot reach db with [redacted]"]
    assert "tok-98765" in context_of(seen[0])  # (the model sees what the provider gave)


async def test_what_was_added_is_on_the_opentelemetry_spans() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import agentrio.otel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel = agentrio.otel.OpenTelemetry(tracer_provider=provider, capture_content=True)
    seen: list[Sequence[ChatMessage]] = []
    spec = AgentSpec(
        "a",
        recorder(seen),
        memory=Memory(),
        context_providers=[Fixed("facts", "The office opens at 9."), Broken()],
    )
    async with agentrio.open_runtime(otel=otel) as rt:
        agent = await rt.spawn_agent(spec)
        await agent.memory.remember("the office is in Leeds")
        await agent.run("where is the office, and when does it open?")
    spans = exporter.get_finished_spans()
    (phase,) = [s for s in spans if s.name.startswith("invoke_agent")]
    added = [dict(e.attributes or {}) for e in phase.events if e.name == "agentrio.context"]
    assert [(a["agentrio.context.source"], a.get("agentrio.context.skipped")) for a in added] == [
        ("memory", None),
        ("facts", None),
        ("broken", "error"),
    ]
    assert added[1]["agentrio.context.tokens"] == agentrio.estimate_tokens("The office opens at 9.")
    (chat,) = [s for s in spans if s.name.startswith("chat")]
    inputs = str((chat.attributes or {})["gen_ai.input.messages"])
    assert "The office opens at 9." in inputs and "the office is in Leeds" in inputs


async def test_an_env_value_across_the_200th_character_of_an_error_is_hidden_whole() -> None:
    class Raising:
        name = "raising"

        async def provide(self, query: ContextQuery) -> str:
            raise ValueError("x" * 190 + " tok-98765-abcdef-long")

    spec = AgentSpec(
        "a",
        recorder([]),
        env={"TOKEN": "tok-98765-abcdef-long"},
        context_providers=[Raising()],
    )
    events = await run_collecting(spec, "hi")
    (failed,) = [e for e in events if isinstance(e, ContextProviderFailed)]
    assert "tok-98" not in failed.error and len(failed.error) == 200
    assert failed.error.endswith(" [redacted")
