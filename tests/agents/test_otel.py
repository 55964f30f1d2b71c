"""OpenTelemetry: the span tree of phases, model calls and tool calls (a subagent's
under the tool call that ran it), the GenAI conventions' attributes and metrics,
errors, content only when asked for, and nothing at all when it is off."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence

import opentelemetry.trace
import pytest
import trio
import trio.testing
from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter, ExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import DataPointT, HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import StatusCode

import agentrio
import agentrio.otel
from agentrio import AgentSpec, ChatMessage, Limits, ToolCallRequest, Usage, agent_tool
from agentrio.testing import FunctionModel, Reply, ScriptedModel
from agentrio.types import ToolSchema


class Recorded:
    """An OpenTelemetry instance on the SDK's in-memory span exporter and metric reader."""

    def __init__(
        self,
        *,
        capture_content: bool = False,
        content_chars: int = 4096,
        sampler: Sampler | None = None,
        exemplar_filter: ExemplarFilter | None = None,
    ) -> None:
        self.exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider(sampler=sampler)
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = tracer_provider.get_tracer("test")
        self.reader = InMemoryMetricReader()
        self.otel = agentrio.otel.OpenTelemetry(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(
                metric_readers=[self.reader], exemplar_filter=exemplar_filter
            ),
            capture_content=capture_content,
            content_chars=content_chars,
        )

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> ReadableSpan:
        (span,) = [s for s in self.spans() if s.name == name]
        return span

    def tree(self) -> list[str]:
        """The spans as an indented outline, children in start order."""
        spans = sorted(self.spans(), key=lambda s: s.start_time or 0)
        ids = {s.context.span_id for s in spans if s.context is not None}
        lines: list[str] = []

        def walk(parent: int | None, depth: int) -> None:
            children = []
            for s in spans:
                mine = s.parent.span_id if s.parent is not None else None
                if mine not in ids:
                    mine = None
                if mine == parent:
                    children.append(s)
            # A turn's tool calls start together, in no set order: by call id.
            ordered: list[ReadableSpan] = []
            for tools, group in itertools.groupby(children, key=_is_tool):
                ordered += sorted(group, key=_call_id if tools else _not_moved)
            for s in ordered:
                lines.append("  " * depth + s.name)
                assert s.context is not None
                walk(s.context.span_id, depth + 1)

        walk(None, 0)
        return lines

    def histogram(self, name: str) -> list[HistogramDataPoint]:
        return self.points(name)  # type: ignore[return-value]

    def points(self, name: str) -> list[DataPointT]:
        """The data points of the metric *name* (collected now)."""
        data = self.reader.get_metrics_data()
        if data is None:  # nothing recorded
            return []
        points: list[DataPointT] = []
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        points += metric.data.data_points
        return points

    def values(self, name: str) -> dict[tuple[tuple[str, object], ...], object]:
        """The values of the sum or gauge *name*, by their attributes (sorted)."""
        return {
            tuple(sorted((p.attributes or {}).items())): p.value  # type: ignore[union-attr]
            for p in self.points(name)
        }


def _is_tool(span: ReadableSpan) -> bool:
    return span.name.startswith("execute_tool")


def _not_moved(span: ReadableSpan) -> int:
    return 0


def _call_id(span: ReadableSpan) -> str:
    return str((span.attributes or {})["gen_ai.tool.call.id"])


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    yield Recorded()


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    return f"{key}=1"


@agentrio.tool
async def broken(key: str) -> str:
    """Always fails."""
    raise ValueError(f"no {key}")


def calls(*pairs: tuple[str, dict[str, object]]) -> Reply:
    return Reply(
        tool_calls=tuple(ToolCallRequest(name, args) for name, args in pairs),
        usage=Usage(10, 5),
    )


def lead_spec(model: agentrio.Model, **kwargs: object) -> AgentSpec:
    worker = agent_tool(AgentSpec("worker", ScriptedModel([Reply(text="42", usage=Usage(4, 2))])))
    return AgentSpec("lead", model, tools=[lookup, worker, broken], **kwargs)  # type: ignore[arg-type]


async def test_span_tree_of_a_phase_with_two_tools_and_a_subagent(recorded: Recorded) -> None:
    model = ScriptedModel(
        [
            calls(("lookup", {"key": "a"}), ("worker", {"task": "add"})),
            Reply(text="done", usage=Usage(20, 3)),
        ]
    )
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        lead = await rt.spawn_agent(lead_spec(model))
        result = await lead.run("go")
    assert result.stop_reason == "done"
    assert recorded.tree() == [
        "invoke_agent lead",
        "  chat",
        "  execute_tool lookup",
        "  execute_tool worker",
        "    invoke_agent worker",
        "      chat",
        "  chat",
    ]
    # One trace for all of it.
    assert len({s.context.trace_id for s in recorded.spans() if s.context is not None}) == 1


async def test_attributes_follow_the_genai_conventions(recorded: Recorded) -> None:
    model = ScriptedModel([calls(("lookup", {"key": "a"})), Reply(text="done", usage=Usage(20, 3))])
    budget = agentrio.Budget(max_total_tokens=100_000)
    async with agentrio.open_runtime(otel=recorded.otel, budget=budget) as rt:
        lead = await rt.spawn_agent(lead_spec(model))
        await lead.run("go", context_label="ticket-7")
    phase = recorded.named("invoke_agent lead").attributes or {}
    assert phase["gen_ai.operation.name"] == "invoke_agent"
    assert phase["gen_ai.agent.name"] == "lead"
    assert phase["gen_ai.provider.name"] == "ScriptedModel"
    assert phase["agentrio.context_label"] == "ticket-7"
    assert phase["agentrio.stop_reason"] == "done"
    assert phase["agentrio.iterations"] == 2
    assert phase["agentrio.tool_calls"] == 1
    assert phase["gen_ai.usage.input_tokens"] == 30
    assert phase["gen_ai.usage.output_tokens"] == 8
    assert phase["agentrio.budget.tokens_left"] == 100_000 - 38
    chats = [s for s in recorded.spans() if s.name == "chat"]
    first = chats[0].attributes or {}
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.usage.input_tokens"] == 10
    assert first["gen_ai.usage.output_tokens"] == 5
    # The first reply asked for a tool: the conventions call that "tool_call".
    assert first["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert (chats[1].attributes or {})["gen_ai.response.finish_reasons"] == ("stop",)
    assert first["gen_ai.request.max_tokens"] == Limits().max_output_tokens
    tool = recorded.named("execute_tool lookup").attributes or {}
    assert tool["gen_ai.operation.name"] == "execute_tool"
    assert tool["gen_ai.tool.name"] == "lookup"
    assert tool["gen_ai.tool.call.id"] == "call_1"
    assert tool["gen_ai.tool.description"] == "Look a key up."
    assert "error.type" not in tool
    assert recorded.named("execute_tool lookup").status.status_code == StatusCode.UNSET
    # The metrics: the model calls' tokens by type, and their durations.
    tokens = {
        p.attributes["gen_ai.token.type"]: p.sum
        for p in recorded.histogram("gen_ai.client.token.usage")
        if p.attributes is not None
    }
    assert tokens == {"input": 30, "output": 8}
    durations = {
        p.attributes["gen_ai.operation.name"]: p.count
        for p in recorded.histogram("gen_ai.client.operation.duration")
        if p.attributes is not None
    }
    assert durations == {"chat": 2}


async def test_a_provider_model_names_its_provider_and_model(recorded: Recorded) -> None:
    from agentrio.agents.observation.parts import model_name, provider_name

    config = agentrio.ProviderConfig(name="local", kind="ollama", base_url="http://127.0.0.1:9")
    async with agentrio.Provider(config) as provider:
        model = provider.model("llama3")
        assert provider_name(model) == "ollama"
        assert model_name(model) == "llama3"


async def test_errors_of_tools_and_models(recorded: Recorded) -> None:
    def fails(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        if not any(m.role == "tool" for m in messages):
            return calls(("broken", {"key": "a"}))
        raise ConnectionError("the model is down")

    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        lead = await rt.spawn_agent(lead_spec(FunctionModel(fails)))
        result = await lead.run("go")
    assert result.stop_reason == "error"
    tool = recorded.named("execute_tool broken")
    assert tool.status.status_code == StatusCode.ERROR
    assert (tool.attributes or {})["error.type"] == "failed"
    chat = [s for s in recorded.spans() if s.name == "chat"][-1]
    assert chat.status.status_code == StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "ConnectionError"
    phase = recorded.named("invoke_agent lead")
    assert phase.status.status_code == StatusCode.ERROR
    assert (phase.attributes or {})["error.type"] == "ConnectionError"
    assert (phase.attributes or {})["agentrio.stop_reason"] == "error"
    failed = [
        p
        for p in recorded.histogram("gen_ai.client.operation.duration")
        if p.attributes is not None and p.attributes.get("error.type") == "ConnectionError"
    ]
    assert [p.attributes["gen_ai.operation.name"] for p in failed if p.attributes] == ["chat"]


async def test_a_lone_call_past_its_timeout_is_a_timeout(
    recorded: Recorded, autojump_clock: trio.testing.MockClock
) -> None:
    @agentrio.tool
    async def slow() -> str:
        """Takes a minute."""
        await trio.sleep(60)
        return "late"

    model = ScriptedModel([calls(("slow", {})), Reply(text="gave up")])
    spec = AgentSpec("lead", model, tools=[slow], limits=Limits(tool_timeout=1.0))
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        lead = await rt.spawn_agent(spec)
        result = await lead.run("go")
        # A second phase of the same agent is a trace of its own: the first
        # left nothing current in the agent's task.
        await lead.run("again", direct_tool_calls=[])
    assert result.stop_reason == "done"
    tool = recorded.named("execute_tool slow")
    assert (tool.attributes or {})["error.type"] == "timeout"
    phases = [s for s in recorded.spans() if s.name == "invoke_agent lead"]
    assert len(phases) == 2
    assert all(s.parent is None for s in phases)
    assert phases[0].context is not None and phases[1].context is not None
    assert phases[0].context.trace_id != phases[1].context.trace_id


async def test_the_spans_of_phases_whose_agent_was_cancelled_end(recorded: Recorded) -> None:
    async def never(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep_forever()
        raise AssertionError

    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        stuck = [
            await rt.spawn_agent(AgentSpec(f"stuck{i}", FunctionModel(never))) for i in range(64)
        ]
        async with trio.open_nursery() as nursery:
            for agent in stuck:
                nursery.start_soon(agent.run, "hang")
            await trio.testing.wait_all_tasks_blocked()
            for agent in stuck:
                agent.ref.cancel()  # the agent itself, not its caller: its phase never ends
            nursery.cancel_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert not [s for s in recorded.spans() if s.name.startswith("invoke_agent")]
        # The next phase to start looks for them, and ends their spans.
        agent = await rt.spawn_agent(AgentSpec("next", ScriptedModel([Reply(text="hi")])))
        await agent.run("hello")
    ended = [s for s in recorded.spans() if s.name.startswith("invoke_agent stuck")]
    assert len(ended) == 64
    assert {(s.attributes or {})["error.type"] for s in ended} == {"cancelled"}


async def test_a_phase_nests_under_its_callers_span(recorded: Recorded) -> None:
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        agent = await rt.spawn_agent(AgentSpec("solo", ScriptedModel([Reply(text="hi")])))
        with recorded.tracer.start_as_current_span("request") as request:
            await agent.run("hello")
    phase = recorded.named("invoke_agent solo")
    assert phase.parent is not None
    assert phase.parent.span_id == request.get_span_context().span_id


async def test_a_tool_sees_its_callers_baggage(recorded: Recorded) -> None:
    from opentelemetry import baggage, context

    seen: list[object] = []

    @agentrio.tool
    async def who() -> str:
        """Who asked."""
        seen.append(baggage.get_baggage("user"))
        return "ok"

    model = ScriptedModel([calls(("who", {})), Reply(text="done")])
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        agent = await rt.spawn_agent(AgentSpec("solo", model, tools=[who]))
        token = context.attach(baggage.set_baggage("user", "ada"))
        try:
            await agent.run("hello")
        finally:
            context.detach(token)
    assert seen == ["ada"]


async def test_content_is_not_recorded_by_default(recorded: Recorded) -> None:
    model = ScriptedModel([calls(("lookup", {"key": "secret-a"})), Reply(text="the secret answer")])
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        lead = await rt.spawn_agent(lead_spec(model))
        await lead.run("a secret question")
    for span in recorded.spans():
        for key, value in (span.attributes or {}).items():
            assert "secret" not in str(value), (span.name, key)
            assert key not in ("gen_ai.input.messages", "gen_ai.output.messages")


async def test_content_is_recorded_when_asked_for() -> None:
    recorded = Recorded(capture_content=True)
    model = ScriptedModel([calls(("lookup", {"key": "tok-12345"})), Reply(text="x" * 10_000)])
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        lead = await rt.spawn_agent(lead_spec(model, env={"TOKEN": "tok-12345"}))
        await lead.run("a question")
    chats = [s.attributes or {} for s in recorded.spans() if s.name == "chat"]
    assert '"content":"a question"' in str(chats[0]["gen_ai.input.messages"])
    assert '"name":"lookup"' in str(chats[0]["gen_ai.output.messages"])
    tool = recorded.named("execute_tool lookup").attributes or {}
    # The agent's env values are hidden, as in events.
    assert tool["gen_ai.tool.call.arguments"] == '{"key":"[redacted]"}'
    assert tool["gen_ai.tool.call.result"] == "[redacted]=1"
    # Bounded: content_chars (4096) at most; output messages cut in their text, so
    # that they stay JSON and keep their finish_reason (review of #21).
    out = str(chats[1]["gen_ai.output.messages"])
    assert len(out) <= 4096
    (message,) = json.loads(out)
    assert message["finish_reason"] == "stop"
    assert message["parts"][0]["content"].endswith("x…")
    phase = recorded.named("invoke_agent lead").attributes or {}
    assert "a question" in str(phase["gen_ai.input.messages"])


async def test_output_messages_carry_their_finish_reason() -> None:
    # The conventions' schema requires finish_reason on each output message.
    recorded = Recorded(capture_content=True)
    model = ScriptedModel([calls(("lookup", {"key": "a"})), Reply(text="the answer")])
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        lead = await rt.spawn_agent(lead_spec(model))
        await lead.run("a question")
    chats = [s.attributes or {} for s in recorded.spans() if s.name == "chat"]
    outputs = [json.loads(str(c["gen_ai.output.messages"])) for c in chats]
    assert [[m["finish_reason"] for m in out] for out in outputs] == [["tool_call"], ["stop"]]
    assert outputs[1][0]["parts"] == [{"type": "text", "content": "the answer"}]
    phase = recorded.named("invoke_agent lead").attributes or {}
    final = json.loads(str(phase["gen_ai.output.messages"]))
    assert final == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "the answer"}],
            "finish_reason": "stop",
        }
    ]


async def test_long_output_messages_are_cut_in_their_text_and_keep_their_finish_reason() -> None:
    # Cut as a string, a long reply's JSON lost its end: its finish_reason too.
    recorded = Recorded(capture_content=True, content_chars=300)
    long_key = "k" * 1000
    model = ScriptedModel(
        [calls(("lookup", {"key": long_key}), ("lookup", {"key": "b"})), Reply(text="é\n" * 900)]
    )
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        lead = await rt.spawn_agent(lead_spec(model, env={"TOKEN": "kkkkkkkkkk"}))
        await lead.run("a question")
    spans = [s for s in recorded.spans() if s.name in ("chat", "invoke_agent lead")]
    outputs = [str((s.attributes or {})["gen_ai.output.messages"]) for s in spans]
    assert len(outputs) == 3 and all(len(out) <= 300 for out in outputs)
    calls_out, answer, final = (json.loads(out)[0] for out in outputs)
    assert calls_out["finish_reason"] == "tool_call"
    assert [p["name"] for p in calls_out["parts"]] == ["lookup", "lookup"]
    assert "kkkkkkkkkk" not in outputs[0] and calls_out["parts"][0]["arguments"].endswith("…")
    assert answer["finish_reason"] == final["finish_reason"] == "stop"
    assert answer["parts"][0]["content"].startswith("é\né\n")
    assert answer["parts"][0]["content"].endswith("…")


async def test_nothing_is_recorded_when_it_is_off(recorded: Recorded) -> None:
    model = ScriptedModel([calls(("lookup", {"key": "a"})), Reply(text="done")])
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(lead_spec(model))
        await lead.run("go")
    assert recorded.spans() == ()
    assert recorded.histogram("gen_ai.client.token.usage") == []


def test_arguments_are_checked() -> None:
    with pytest.raises(agentrio.InvalidArgument, match="capture_content"):
        agentrio.otel.OpenTelemetry(capture_content="yes")  # type: ignore[arg-type]
    with pytest.raises(agentrio.InvalidArgument, match="content_chars"):
        agentrio.otel.OpenTelemetry(content_chars=3)


async def test_open_runtime_refuses_what_is_not_an_opentelemetry() -> None:
    with pytest.raises(agentrio.InvalidArgument, match="otel"):
        async with agentrio.open_runtime(otel=object()):  # type: ignore[arg-type]
            pass


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=60,
        check=False,
    )


def test_agentrio_imports_and_runs_without_opentelemetry() -> None:
    done = _python(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if it were not installed
        import trio
        import agentrio
        import agentrio.otel
        from agentrio.testing import Reply, ScriptedModel

        async def main():
            async with agentrio.open_runtime() as rt:
                agent = await rt.spawn_agent(
                    agentrio.AgentSpec("a", ScriptedModel([Reply(text="hi")]))
                )
                print((await agent.run("hello")).final_text)

        trio.run(main)
        try:
            agentrio.otel.OpenTelemetry()
        except ImportError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "hi",
        "agentrio.otel.OpenTelemetry needs the OpenTelemetry API: "
        "pip install 'agentrio[otel]' (or opentelemetry-api)",
    ]


def test_a_runtime_without_it_never_imports_opentelemetry() -> None:
    done = _python(
        """
        import sys
        import trio
        import agentrio
        from agentrio.testing import Reply, ScriptedModel

        async def main():
            async with agentrio.open_runtime() as rt:
                agent = await rt.spawn_agent(
                    agentrio.AgentSpec("a", ScriptedModel([Reply(text="hi")]))
                )
                await agent.run("hello")

        trio.run(main)
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- sampled out: what a phase the sampler dropped costs ---------------------------------------


class Dropping(Sampler):
    """A sampler that drops every span, and counts the spans it was asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def should_sample(
        self, parent_context: object, trace_id: int, name: str, *args: object, **kwargs: object
    ) -> SamplingResult:  # type: ignore[override]
        self.asked.append(name)
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return "Dropping"


async def test_a_phase_sampled_out_asks_for_no_span_of_its_calls() -> None:
    sampler = Dropping()
    recorded = Recorded(sampler=sampler, exemplar_filter=AlwaysOnExemplarFilter())
    seen: list[opentelemetry.trace.SpanContext] = []

    @agentrio.tool
    async def look(key: str) -> str:
        """Look."""
        seen.append(opentelemetry.trace.get_current_span().get_span_context())
        return key

    model = ScriptedModel(
        [calls(("look", {"key": "a"})), calls(("look", {"key": "b"})), Reply(text="done")]
    )
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        agent = await rt.spawn_agent(AgentSpec("lead", model, tools=[look]))
        assert (await agent.run("go")).stop_reason == "done"
    # The phase's span only: its 3 model calls and 2 tool calls were not asked about.
    assert sampler.asked == ["invoke_agent lead"]
    assert recorded.spans() == ()
    # Its context is still current in its tools (their own spans follow it, unsampled).
    assert len(seen) == 2 and all(c.is_valid and not c.trace_flags.sampled for c in seen)
    # The metrics are all recorded.
    (duration,) = recorded.histogram("gen_ai.client.operation.duration")
    assert duration.count == 3
    assert sorted(p.sum for p in recorded.histogram("gen_ai.client.token.usage")) == [10, 20]
    # With no trace to point to: an exemplar, if the filter takes one, names none.
    assert duration.exemplars and all(e.trace_id is None for e in duration.exemplars)


# -- the operators' metrics ----------------------------------------------------------------------


async def test_phases_in_flight_are_counted(recorded: Recorded) -> None:
    release = trio.Event()

    async def held(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await release.wait()
        return Reply(text="ok")

    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        spec = AgentSpec("held", FunctionModel(held))
        agents = [await rt.spawn_agent(spec, name=f"held{i}") for i in range(2)]
        async with trio.open_nursery() as nursery:
            for agent in agents:
                nursery.start_soon(agent.run, "go")
            await trio.testing.wait_all_tasks_blocked()
            active = recorded.values("agentrio.phases.active")
            assert active == {(("gen_ai.agent.name", "held"),): 2}
            release.set()
    assert recorded.values("agentrio.phases.active") == {(("gen_ai.agent.name", "held"),): 0}


async def test_the_root_budgets_room_is_a_gauge(recorded: Recorded) -> None:
    model = ScriptedModel([Reply(text="ok", usage=Usage(40, 8, cost_usd=0.25))])
    budget = agentrio.Budget(max_total_tokens=1000, max_cost_usd=1.0)
    async with agentrio.open_runtime(otel=recorded.otel, budget=budget) as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model, limits=Limits(max_output_tokens=10)))
        assert (await agent.run("go")).stop_reason == "done"
        assert recorded.values("agentrio.budget.remaining") == {
            (("agentrio.budget.kind", "tokens"),): 952,
            (("agentrio.budget.kind", "cost_usd"),): 0.75,
        }
    # A runtime closed is no longer reported.
    assert recorded.values("agentrio.budget.remaining") == {}


async def test_waits_are_recorded_by_kind(
    autojump_clock: trio.testing.MockClock, recorded: Recorded
) -> None:
    async def slow(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(10)
        return Reply(text="ok", usage=Usage(1, 1))

    # Each call reserves 2 + 40 tokens: the second fits only once the first settles.
    spec = AgentSpec(
        "a", FunctionModel(slow), token_estimator=len, limits=Limits(max_output_tokens=40)
    )
    budget = agentrio.Budget(max_total_tokens=60)
    async with agentrio.open_runtime(otel=recorded.otel, budget=budget) as rt:
        first = await rt.spawn_agent(spec, name="first")
        second = await rt.spawn_agent(spec, name="second")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run, "go")
            await trio.sleep(1)
            nursery.start_soon(second.run, "go")
    # (No one subscribed to the events: the wait is recorded all the same.)
    (wait,) = recorded.histogram("agentrio.wait.duration")
    assert dict(wait.attributes or {}) == {"agentrio.wait.kind": "budget", "gen_ai.agent.name": "a"}
    assert (wait.count, wait.sum) == (1, 9)


class Crash(agentrio.Message):
    pass


class Crashing(agentrio.Actor[Crash]):
    async def handle(self, msg: Crash) -> object:
        raise RuntimeError("boom")


async def test_restarts_are_counted_past_the_runtimes_end(recorded: Recorded) -> None:
    for life in (1, 2):
        async with agentrio.open_runtime(otel=recorded.otel, max_restarts=5) as rt:
            ref = await rt.spawn(Crashing, name="c", restart="permanent")
            for _ in range(2):
                with pytest.raises(agentrio.errors.ActorCrashed):
                    await ref.ask(Crash())
            await trio.testing.wait_all_tasks_blocked()
            assert recorded.values("agentrio.actor.restarts") == {(): 2 * life}
    # The runtimes closed, their restarts still count (a counter never goes down).
    assert recorded.values("agentrio.actor.restarts") == {(): 4}


async def test_events_dropped_for_a_slow_subscriber_are_counted(recorded: Recorded) -> None:
    model = ScriptedModel([calls(("lookup", {"key": "a"})), Reply(text="done")])
    async with agentrio.open_runtime(otel=recorded.otel) as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model, tools=[lookup]))
        async with rt.events(capacity=2) as stream:
            await agent.run("go")  # far more than 2 events, none read
            lost = stream.lost
        assert lost > 0
        assert recorded.values("agentrio.events.dropped") == {(): lost}
