"""A lead agent, a tool and a subagent, traced with OpenTelemetry to the console.

Needs the OpenTelemetry SDK (``pip install 'agentrio[otel]' opentelemetry-sdk``).
The models are scripted: no network, no key. The lead calls a tool and an
agent tool (a subagent) in one turn, then answers; each span is printed as
JSON as it ends (the SDK's ConsoleSpanExporter), then the span tree and the
token counts the ``gen_ai.client.token.usage`` histogram holds.

    python examples/otel_console.py
"""

from __future__ import annotations

import trio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrio
import agentrio.otel
from agentrio.testing import Reply, ScriptedModel


@agentrio.tool
async def lookup(city: str) -> str:
    """The population of a city, in millions."""
    await trio.sleep(0.01)
    return {"Paris": "2.1", "Lyon": "0.5"}.get(city, "unknown")


def outline(spans: tuple[ReadableSpan, ...]) -> list[str]:
    """The spans as an indented tree, each under its parent."""
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent is not None else None
        by_parent.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in by_parent.get(parent, []):
            lines.append("  " * depth + span.name)
            assert span.context is not None
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return lines


async def main() -> None:
    kept = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    tracer_provider.add_span_processor(SimpleSpanProcessor(kept))
    reader = InMemoryMetricReader()
    otel = agentrio.otel.OpenTelemetry(
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        capture_content=True,  # messages and tool results too: this is a demo
    )

    analyst = agentrio.AgentSpec(
        "analyst",
        ScriptedModel([Reply(text="Paris is about 4x Lyon.", usage=agentrio.Usage(30, 8))]),
    )
    lead_model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    agentrio.ToolCallRequest("lookup", {"city": "Lyon"}),
                    agentrio.ToolCallRequest("analyst", {"task": "Compare Paris and Lyon."}),
                ],
                usage=agentrio.Usage(50, 20),
            ),
            Reply(
                text="Lyon has 0.5 million people; Paris about 4x that.",
                usage=agentrio.Usage(90, 15),
            ),
        ]
    )
    spec = agentrio.AgentSpec("lead", lead_model, tools=[lookup, agentrio.agent_tool(analyst)])
    async with agentrio.open_runtime(otel=otel) as rt:
        lead = await rt.spawn_agent(spec)
        result = await lead.run("How big is Lyon next to Paris?")
    print(result.final_text)

    spans = kept.get_finished_spans()
    print("\n".join(outline(spans)))
    tokens: dict[str, int] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "gen_ai.client.token.usage":
                    for point in metric.data.data_points:
                        kind = str((point.attributes or {})["gen_ai.token.type"])
                        # (not every point has .sum to the SDK's newer types; to 1.30's, it has)
                        tokens[kind] = tokens.get(kind, 0) + int(point.sum)  # type: ignore[union-attr,unused-ignore]
    traces = {s.context.trace_id for s in spans if s.context is not None}
    phases = sum(s.name.startswith("invoke_agent") for s in spans)
    print(
        f"otel: {len(spans)} spans in {len(traces)} trace, {phases} phases, "
        f"tokens in {tokens['input']}, out {tokens['output']}"
    )


if __name__ == "__main__":
    trio.run(main)
