"""N concurrent agentrio agents on the 3-turn workload, beside the raw-Trio floor.

The workload is ../shared/bench/raw_trio_agent_loop.py's: each run is fake
model -> tool -> fake model -> tool -> fake model (final text), 3 model turns
and 2 tool calls, each awaiting exactly one scheduler checkpoint.

  floor     ``trio_mailbox``: N actor-shaped tasks, each with an inbox; a
            driver sends each a request and collects the replies (timing
            includes spawning), copied from the shared floor script.
  agentrio  N agents spawned from one AgentSpec (a FunctionModel and an async
            ``lookup`` tool), each running one phase, all at once; timing
            includes spawning.

Both run with CPython's default GC, and again with gc.set_threshold(100_000,
50, 100) (the ``_gc_tuned`` figures). Every run checks each answer and the
exact model-call and tool-call counts.

  otel      agentrio again (default GC), with ``open_runtime(otel=...)``: the
            OpenTelemetry SDK's TracerProvider with a SimpleSpanProcessor to an
            exporter that drops each span (every span is built, ended and
            handed to the exporter, synchronously: the SDK's whole cost but the
            I/O), and a MeterProvider with an InMemoryMetricReader (every
            histogram record aggregated, never exported). ``otel_ratio`` is its
            runs/s over agentrio's without it (goal >= 0.6): off and the three
            kinds of on below run in turn, ``--repeats`` rounds, and each ratio
            is of their medians (``otel_off_runs_per_s`` is off's); all null,
            with ``otel_skipped``, when the SDK is not installed. The figures
            without it are agentrio's usual ones: off, OpenTelemetry is not
            even imported. (The SDK's own cost per span
            is most of the difference: see docs/design.md, "OpenTelemetry".)
  otel_sampled  the same SDK set-up with the sampler
            ``ParentBased(TraceIdRatioBased(0.1))``: one phase in ten traced
            (its calls with it), the metrics of all. ``otel_sampled_ratio``
            (goal >= 0.8).
  otel_noop  OpenTelemetry on with the API's no-op providers
            (``NoOpTracerProvider``, ``NoOpMeterProvider``): what agentrio's
            own part costs, the SDK's left out. ``otel_noop_ratio`` (goal
            >= 0.9).

Run: python bench/agents.py --agents 10000 [--repeats 3]; prints one JSON line.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import msgspec
import trio
from _common import main, median_of, rss_now_mb, run_child

import agentrio
import agentrio.otel
from agentrio.testing import FunctionModel, Reply

GC_TUNED = (100_000, 50, 100)
TOOL_CALLS_PER_RUN = 2
MODEL_TURNS_PER_RUN = TOOL_CALLS_PER_RUN + 1
COUNTS = {"model": 0, "tool": 0}


# -- the floor (copied from ../shared/bench/raw_trio_agent_loop.py) -------------------


class ToolCall(msgspec.Struct):
    id: str
    name: str
    args: dict[str, Any]


class RawMessage(msgspec.Struct):
    role: str
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None


class Request(msgspec.Struct):
    idx: int
    prompt: str
    reply_to: Any


class RawReply(msgspec.Struct):
    idx: int
    answer: str


def _decide(history: list[RawMessage]) -> RawMessage:
    n = sum(1 for m in history if m.role == "tool")
    if n < TOOL_CALLS_PER_RUN:
        return RawMessage("assistant", "", [ToolCall(f"call_{n}", "lookup", {"key": f"k{n}"})])
    return RawMessage("assistant", "done: both lookups succeeded")


async def _fake_model(history: list[RawMessage]) -> RawMessage:
    COUNTS["model"] += 1
    await trio.lowlevel.checkpoint()
    return _decide(history)


async def _raw_lookup(key: str) -> str:
    COUNTS["tool"] += 1
    await trio.lowlevel.checkpoint()
    return "value-" + key


async def _agent_loop(prompt: str) -> str:
    history = [RawMessage("system", "You are a benchmark agent."), RawMessage("user", prompt)]
    while True:
        resp = await _fake_model(history)
        history.append(resp)
        if not resp.tool_calls:
            return resp.content
        for tc in resp.tool_calls:
            result = await _raw_lookup(**tc.args)
            history.append(RawMessage("tool", result, tool_call_id=tc.id))


async def _trio_mailbox(n: int) -> tuple[list[str], float]:
    t0 = time.perf_counter()
    answers = [""] * n

    async def actor(inbox: trio.MemoryReceiveChannel[Request]) -> None:
        async with inbox:
            async for req in inbox:
                ans = await _agent_loop(req.prompt)
                await req.reply_to.send(RawReply(req.idx, ans))

    async with trio.open_nursery() as nursery:
        reply_send, reply_recv = trio.open_memory_channel[RawReply](n)
        inboxes = []
        for _ in range(n):
            s, r = trio.open_memory_channel[Request](0)
            inboxes.append(s)
            nursery.start_soon(actor, r)
        for i, s in enumerate(inboxes):
            await s.send(Request(i, f"task {i}", reply_send))
        for _ in range(n):
            rep = await reply_recv.receive()
            answers[rep.idx] = rep.answer
        for s in inboxes:
            await s.aclose()
    return answers, time.perf_counter() - t0


# -- agentrio ---------------------------------------------------------------------------


async def _model(messages: Any, tools: Any) -> Reply:
    COUNTS["model"] += 1
    await trio.lowlevel.checkpoint()
    n = 0
    for m in messages:
        if m.role == "tool":
            n += 1
    if n < TOOL_CALLS_PER_RUN:
        call = agentrio.ToolCallRequest("lookup", {"key": f"k{n}"}, id=f"call_{n}")
        return Reply(tool_calls=(call,), usage=agentrio.Usage(40, 8))
    return Reply(text="done: both lookups succeeded", usage=agentrio.Usage(60, 6))


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    COUNTS["tool"] += 1
    await trio.lowlevel.checkpoint()
    return "value-" + key


SPEC = agentrio.AgentSpec(
    name="bench",
    model=FunctionModel(_model),
    instructions="You are a benchmark agent.",
    tools=[lookup],
)


def _otel(sampled: bool = False) -> agentrio.otel.OpenTelemetry:
    """OpenTelemetry on the SDK, exporting nothing (see the module's docstring);
    *sampled*: one trace in ten."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(0.1)) if sampled else ALWAYS_ON
    )
    tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return agentrio.otel.OpenTelemetry(
        tracer_provider=tracer_provider, meter_provider=meter_provider
    )


def _otel_noop() -> agentrio.otel.OpenTelemetry:
    """OpenTelemetry on the API's no-op providers: agentrio's own part alone."""
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    return agentrio.otel.OpenTelemetry(
        tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
    )


async def _agentrio_otel(n: int) -> tuple[list[str], float]:
    return await _agentrio(n, _otel())


async def _agentrio_otel_sampled(n: int) -> tuple[list[str], float]:
    return await _agentrio(n, _otel(sampled=True))


async def _agentrio_otel_noop(n: int) -> tuple[list[str], float]:
    return await _agentrio(n, _otel_noop())


async def _agentrio(
    n: int, otel: agentrio.otel.OpenTelemetry | None = None
) -> tuple[list[str], float]:
    answers = [""] * n
    async with agentrio.open_runtime(otel=otel) as rt:
        t0 = time.perf_counter()

        async def one(i: int, agent: agentrio.AgentRef) -> None:
            result = await agent.run(f"task {i}")
            answers[i] = result.final_text if result.stop_reason == "done" else result.stop_reason

        async with trio.open_nursery() as nursery:
            for i in range(n):
                agent = await rt.spawn_agent(SPEC, name=f"a{i}")
                nursery.start_soon(one, i, agent)
    # like the floor, the timing includes stopping every agent
    dt = time.perf_counter() - t0
    return answers, dt


def runs(n: int, impl: str, gc_tuned: bool = False) -> dict[str, Any]:
    if gc_tuned:
        gc.set_threshold(*GC_TUNED)
    base = rss_now_mb()
    driver = {
        "floor": _trio_mailbox,
        "agentrio": _agentrio,
        "otel": _agentrio_otel,
        "otel_sampled": _agentrio_otel_sampled,
        "otel_noop": _agentrio_otel_noop,
    }[impl]
    trio.run(driver, 10)  # warm-up
    COUNTS["model"] = COUNTS["tool"] = 0
    answers, dt = trio.run(driver, n)
    bad = [a for a in answers if not a.startswith("done")]
    assert not bad, bad[:3]
    assert {"model": n * MODEL_TURNS_PER_RUN, "tool": n * TOOL_CALLS_PER_RUN} == COUNTS, COUNTS
    return {"runs_per_s": round(n / dt, 1), "elapsed_s": round(dt, 4), "rss_base_mb": base}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    n = args.agents
    out: dict[str, Any] = {"bench": "agents", "agents": n, "repeats": args.repeats}
    for suffix, tuned in (("", False), ("_gc_tuned", True)):
        floor = median_of(
            script, "runs", {"n": n, "impl": "floor", "gc_tuned": tuned}, args.repeats, args.timeout
        )
        ours = median_of(
            script,
            "runs",
            {"n": n, "impl": "agentrio", "gc_tuned": tuned},
            args.repeats,
            args.timeout,
        )
        print(
            f"[agents] floor{suffix}: {floor}\n[agents] agentrio{suffix}: {ours}",
            file=sys.stderr,
            flush=True,
        )
        out[f"runs_per_s{suffix}"] = ours["runs_per_s"]
        out[f"floor_runs_per_s{suffix}"] = floor["runs_per_s"]
        out[f"ratio{suffix}"] = round(ours["runs_per_s"] / floor["runs_per_s"], 3)
        out[f"peak_rss_mb{suffix}"] = ours["peak_rss_mb"]
        out[f"floor_peak_rss_mb{suffix}"] = floor["peak_rss_mb"]
        if suffix == "":
            _otel_figures(out, script, args)
    goal = 0.3 if n >= 10_000 else 0.5
    out["goals_met"] = {
        f"ratio>={goal}": out["ratio"] >= goal,
        "peak_rss_mb<140 (at 10k)": n != 10_000 or out["peak_rss_mb"] < 140,
    }
    if out["otel_ratio"] is not None:
        for key, least in OTEL_GOALS.items():
            out["goals_met"][f"{key}>={least}"] = out[key] >= least
    return out


# The OpenTelemetry figures: the runs' impl, and the goal of each ratio to off.
OTEL_GOALS = {"otel_ratio": 0.6, "otel_sampled_ratio": 0.8, "otel_noop_ratio": 0.9}
OTEL_IMPLS = {
    "otel_ratio": "otel",
    "otel_sampled_ratio": "otel_sampled",
    "otel_noop_ratio": "otel_noop",
}


def _otel_figures(out: dict[str, Any], script: str, args: Any) -> None:
    """Add agentrio's runs/s with OpenTelemetry on (the SDK; the SDK sampling one
    trace in ten; the API's no-op providers), and each one's ratio to *off*'s."""
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        for key in OTEL_IMPLS:
            out[key] = None
        out["otel_skipped"] = "the OpenTelemetry SDK is not installed (opentelemetry-sdk)"
        return
    # Off and the three kinds of on, in turn, each *repeats* times: a ratio
    # compares runs that shared the machine's load of the same minutes.
    impls = {"agentrio": "off", **{impl: key for key, impl in OTEL_IMPLS.items()}}
    measured: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for _ in range(args.repeats):
        for impl, runs_of in measured.items():
            params = {"n": args.agents, "impl": impl}
            runs_of.append(run_child(script, "runs", params, args.timeout))
    median = {
        impl: {k: statistics.median(r[k] for r in rs) for k in ("runs_per_s", "peak_rss_mb")}
        for impl, rs in measured.items()
    }
    print(f"[agents] off and on, alternately: {median}", file=sys.stderr, flush=True)
    out["otel_off_runs_per_s"] = median["agentrio"]["runs_per_s"]
    for key, impl in OTEL_IMPLS.items():
        name = key.removesuffix("_ratio")
        out[f"{name}_runs_per_s"] = median[impl]["runs_per_s"]
        out[key] = round(median[impl]["runs_per_s"] / median["agentrio"]["runs_per_s"], 3)
        out[f"{name}_peak_rss_mb"] = median[impl]["peak_rss_mb"]


def _args(ap: Any) -> None:
    ap.add_argument("--agents", type=int, default=10_000)


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"runs": runs}, report, _args)
