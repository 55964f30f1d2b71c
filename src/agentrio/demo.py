"""The demo: many agents at once on the built-in scripted model.

Each agent runs one phase of three model turns: it looks a topic up, counts
the words of what it found, then answers. The tools are async and the model
is scripted. By default the script is served over HTTP by the fake LLM
server, so the demo measures the HTTP path too; in process it measures the
runtime alone; the report says which (``DemoReport.path``). ``agentrio
demo`` (``cli.py``) prints the progress, the report, the failures and what to
try next.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from typing import Literal

import attrs
import trio

from .agents.budgets.budget import Budget
from .agents.budgets.limits import Limits
from .agents.budgets.usage import UsageTotals
from .agents.loop.ref import AgentRef
from .agents.loop.spec import AgentSpec
from .agents.tools.tool import tool
from .config import Models, found_config
from .messages import PhaseResult
from .providers.base import Model
from .providers.provider import Kind, Provider, ProviderConfig, ProviderModel
from .providers.redact import redact_url, shown_env_name
from .runtime import open_runtime
from .testing.fake_server import demo_reply, open_fake_llm
from .testing.models import FunctionModel

__all__ = ["DemoProgress", "DemoReport", "demo_spec", "run_demo", "watch_progress"]


@tool
async def lookup(key: str) -> str:
    """Look a key up in the demo's store."""
    await trio.lowlevel.checkpoint()
    return f"the value of {key} is {len(key) * 7}"


@tool
async def word_count(text: str) -> int:
    """Count the words of a text."""
    await trio.lowlevel.checkpoint()
    return len(text.split())


def demo_spec(model: Model | None = None) -> AgentSpec:
    """The spec every demo agent is spawned from (default model: the script, in process)."""
    return AgentSpec(
        name="demo",
        model=model if model is not None else FunctionModel(demo_reply),
        instructions="Look the topic up, count the words of what you found, then answer.",
        tools=[lookup, word_count],
        limits=Limits(max_iterations=5),
    )


DemoPath = Literal["http", "in-process"]
_FAILED = ("error", "lost")  # the stop reasons of a run that failed
_SHOWN_MESSAGES = 3  # distinct messages shown per kind of failure
_PATHS = {
    "http": "HTTP: each model call is a request through a Provider",
    "in-process": "in-process: each model call is a function call, no HTTP (the runtime alone)",
}


def _cache_row(usage: UsageTotals) -> list[tuple[str, str]]:
    """The prompt cache's row, once a call read from or wrote to one."""
    if not (usage.cached_input_tokens or usage.cache_write_tokens):
        return []
    read, written = usage.cached_input_tokens, usage.cache_write_tokens
    return [
        ("prompt cache", f"read={read} written={written} hit ratio={usage.cache_hit_ratio:.1%}")
    ]


@attrs.frozen
class DemoProgress:
    """A snapshot of a running demo, for `run_demo`'s *on_progress*.

    Attributes:
        agents: how many agents the demo runs.
        started: the agents spawned so far.
        finished: the agents whose phase has ended (done, failed or stopped).
        elapsed: seconds since the demo began (on Trio's clock).
        total_tokens: tokens spent so far.
        max_total_tokens: the swarm's budget, if it has one.
        final: the last snapshot, taken once every agent has finished.
    """

    agents: int
    started: int
    finished: int
    elapsed: float
    total_tokens: int
    max_total_tokens: int | None = None
    final: bool = False

    def line(self) -> str:
        """The snapshot as one line of text (no newline)."""
        rate = f"{self.finished / self.elapsed:,.0f}" if self.elapsed > 0 else "-"
        parts = [
            f"{self.started - self.finished:,} running",
            f"{self.finished:,}/{self.agents:,} finished",
            f"{rate} runs/s",
            f"{self.total_tokens:,} tokens",
        ]
        if self.max_total_tokens:
            used = 100 * self.total_tokens / self.max_total_tokens
            parts.append(f"{used:.0f}% of max_total_tokens {self.max_total_tokens:,}")
        return f"agentrio demo: {', '.join(parts)}, {self.elapsed:.1f} s"


@attrs.frozen
class DemoReport:
    """What a demo run did.

    Attributes:
        agents: how many agents ran.
        stop_reasons: runs by stop reason (``"lost"``: a run that returned nothing).
        usage: what the swarm spent.
        wall_s: seconds from the first spawn to the last result.
        model: the model, and where it was served.
        path: ``"http"`` (model calls over HTTP) or ``"in-process"`` (no HTTP).
        failures: for the runs that ended with ``"error"``, the exception's
            type name -> its message -> how many runs.
        max_total_tokens: the swarm's budget, if any.
        max_output_tokens: the output tokens each model call reserves.
        base_url: the server given with ``--base-url``, or the provider
            instance's (credentials redacted).
        api_key_env: on a provider instance (``--model INSTANCE:MODEL``),
            the variable its key came from, for what to try when it is
            refused.
        instance: the provider instance of ``--model INSTANCE:MODEL``
            (None otherwise): what to try then names its agentrio.toml
            table, not ``--kind`` or ``--api-key-env``, which go only with
            ``--base-url``.
    """

    agents: int
    stop_reasons: dict[str, int]
    usage: UsageTotals
    wall_s: float
    model: str = "scripted (in process)"
    path: DemoPath = "in-process"
    failures: dict[str, dict[str, int]] = attrs.field(factory=dict)
    max_total_tokens: int | None = None
    max_output_tokens: int = 1024
    base_url: str | None = None
    api_key_env: str | None = None
    instance: str | None = None

    @property
    def failed(self) -> int:
        """Runs that failed: ended with ``"error"``, or returned nothing."""
        return sum(self.stop_reasons.get(r, 0) for r in _FAILED)

    def table(self) -> str:
        """The report as the lines the CLI prints."""
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.stop_reasons.items()))
        u = self.usage
        rows = [
            ("model", self.model),
            ("path", _PATHS[self.path]),
            ("agents", f"{self.agents}"),
            ("runs", f"{sum(self.stop_reasons.values())}"),
            ("stop reasons", reasons),
            ("model calls", f"{u.requests}"),
            ("tool calls", f"{u.tool_calls}"),
            ("tokens", f"input={u.input_tokens} output={u.output_tokens} total={u.total_tokens}"),
            *_cache_row(u),
            ("wall time", f"{self.wall_s:.3f} s"),
            ("runs/s", f"{self.agents / self.wall_s:,.0f}" if self.wall_s else "-"),
        ]
        budget = self.budget_note()
        if budget:
            rows.append(("budget", budget))
        return "\n".join(f"  {name:<13} {value}" for name, value in rows)

    def budget_note(self) -> str:
        """Why runs stopped with ``budget_exhausted``: what a call reserves, what was left."""
        stopped = self.stop_reasons.get("budget_exhausted", 0)
        limit = self.max_total_tokens
        if not stopped or limit is None:
            return ""
        spent = self.usage.total_tokens
        return (
            f"{stopped:,} runs stopped: each model call first reserves its prompt's estimate "
            f"plus max_output_tokens ({self.max_output_tokens:,}) from max_total_tokens "
            f"({limit:,}); {spent:,} were spent, and their next call did not fit in the "
            f"{limit - spent:,} left"
        )

    def causes(self) -> list[str]:
        """Each kind of failure once: its type, how many runs, its distinct messages."""
        lines = []
        for kind, messages in sorted(self.failures.items(), key=lambda kv: -sum(kv[1].values())):
            lines.append(f"  {kind}, {sum(messages.values())} runs:")
            ranked = sorted(messages.items(), key=lambda kv: -kv[1])
            for message, runs in ranked[:_SHOWN_MESSAGES]:
                lines.append(f"    {runs}x {message}")
            if len(ranked) > _SHOWN_MESSAGES:
                lines.append(f"    ... and {len(ranked) - _SHOWN_MESSAGES} other messages")
        lost = self.stop_reasons.get("lost", 0)
        if lost:
            lines.append(f"  {lost} runs returned no result")
        return lines

    def next_steps(self) -> list[str]:
        """What to try next, given what this run measured and how it went."""
        server = self.base_url or "the server"
        hints = dict(_FAILURE_HINTS)
        if self.instance is not None:
            table = f"a [providers.{self.instance}] table of agentrio.toml"
            hints["AuthError"] = (
                f"api_key_env in {table}, naming the environment variable that holds "
                "the key {server} accepts"
            )
            hints["BadResponse"] = f"kind in {table}: the wire format {{server}} speaks"
            hints["ProviderError"] = "check the model in --model: {server} refused the requests"
        if self.api_key_env is not None:
            hints["AuthError"] = f"check the key in {self.api_key_env}: {{server}} refused it"
        steps = [hints[k].format(server=server) for k in self.failures if k in hints]
        if self.stop_reasons.get("budget_exhausted") and self.max_total_tokens is not None:
            steps.append("a larger --max-total-tokens, for every run to finish")
        if self.base_url is not None:
            steps.append("--agents N, for a bigger or smaller swarm")
            return steps
        if self.path == "http":
            steps.append("--in-process, to measure the runtime alone (no HTTP)")
        else:
            steps.append("without --in-process, to measure the HTTP path too")
        steps.append("--agents 10000, for a bigger swarm")
        steps.append(
            "--base-url http://127.0.0.1:11434/v1 --model qwen2.5:0.5b, for a real server "
            "(here a local Ollama)"
        )
        steps.append(
            "agentrio fake-llm --port 8000 in another terminal, then --base-url "
            "http://127.0.0.1:8000/v1, for the fake server in a process of its own"
        )
        return steps


# What to try for each kind of failure ({server}: the --base-url, redacted).
_FAILURE_HINTS = {
    "AuthError": "--api-key-env NAME, naming the environment variable that holds the key "
    "{server} accepts",
    "ProviderUnavailable": "check that a server answers at {server}: agentrio fake-llm "
    "--port 8000 runs a fake one (then --base-url http://127.0.0.1:8000/v1)",
    "BadResponse": "--kind openai, anthropic or ollama: the wire format {server} speaks",
    "ProviderError": "check --model and --kind: {server} refused the requests",
    "RateLimited": "fewer --agents: {server} is rate limiting",
}


async def run_demo(
    agents: int,
    *,
    max_total_tokens: int | None = None,
    base_url: str | None = None,
    model: str = "demo",
    kind: Kind = "openai",
    api_key_env: str | None = None,
    over_http: bool = True,
    on_progress: Callable[[DemoProgress], None] | None = None,
    progress_every: float = 0.5,
    trace: str | os.PathLike[str] | None = None,
) -> DemoReport:
    """Spawn *agents* agents, run one phase on each at once, and report.

    By default the model is the built-in script served by the fake LLM server
    on 127.0.0.1, so every model call is a real HTTP request through a
    [`Provider`][agentrio.Provider]. With *base_url* the same swarm talks to a real
    server (OpenAI-compatible by default: OpenAI, vLLM, LM Studio, Ollama's
    ``/v1``). Without *base_url*, a *model* that is an ``"instance:model"``
    string (``"openai:gpt-5-mini"``) runs the swarm on that provider instance:
    a built-in one, set by its environment variables (see [No
    configuration][no-configuration]), or one of the agentrio.toml found.
    With ``over_http=False`` the script runs in process.

    Raises:
        ConfigError: *model* is an ``"instance:model"`` string that names no
            instance, or whose instance's environment variables cannot be
            used (the message names the variable, never its value).

    *on_progress*, if given, is called every *progress_every* seconds while
    the swarm runs, and once more at the end (``final=True``), with a
    `DemoProgress`; it must not block.

    *trace*, if given, is the file the runtime writes its trace to (see
    ``open_runtime(trace=...)``), read with ``agentrio trace FILE``.
    """
    swarm = partial(_swarm, agents, max_total_tokens, on_progress, progress_every, trace=trace)
    if base_url is None and over_http and ":" in model:
        return await _on_instance(swarm, model)
    if base_url is not None:
        config = ProviderConfig(name="demo", kind=kind, base_url=base_url, api_key_env=api_key_env)
        shown = redact_url(base_url)
        report = await swarm(config, model, f"{model} at {shown} ({kind})", "http")
        return attrs.evolve(report, base_url=shown)
    if not over_http:
        return await swarm(None, model, "scripted (in process)", "in-process")
    # (keep_requests=False: 30,000 requests at 10,000 agents, none of them read again)
    async with open_fake_llm(keep_requests=False) as server:
        # A small pool: the local server is CPU-bound in this same process (2 to
        # 64 measured alike here, 8 the best of them; a remote server wants more).
        config = ProviderConfig(
            name="demo", kind="openai", base_url=server.base_url + "/v1", max_concurrent=8
        )
        where = f"scripted, served over HTTP at {server.base_url} (the fake LLM server)"
        return await swarm(config, model, where, "http")


async def _on_instance(swarm: Callable[..., Awaitable[DemoReport]], model: str) -> DemoReport:
    """The demo on the model of an ``"instance:model"`` string: a built-in instance
    (``openai``, ``anthropic``, ``ollama``, set by their environment variables) or
    one of the agentrio.toml found (ConfigError, naming the variable, if it cannot
    be used)."""
    models = Models(found_config())
    try:
        resolved = models.resolve(model)
        assert isinstance(resolved, ProviderModel)  # (a string resolves to one)
        config = resolved.provider.config
        shown_url = redact_url(config.base_url)
        where = f"{model} at {shown_url} ({config.kind})"
        report = await swarm(resolved, model, where, "http")
    finally:
        await models.aclose()
    key_env = config.api_key_env and (
        shown_env_name(config.api_key_env) or "the variable named by api_key_env"
    )
    instance = model.partition(":")[0]
    return attrs.evolve(report, base_url=shown_url, api_key_env=key_env or None, instance=instance)


class _Counts:
    """What the progress line reads: two ints bumped by the agents' tasks."""

    __slots__ = ("finished", "started")

    def __init__(self) -> None:
        self.started = self.finished = 0


async def _swarm(
    agents: int,
    max_total_tokens: int | None,
    on_progress: Callable[[DemoProgress], None] | None,
    progress_every: float,
    config: ProviderConfig | Model | None,
    model_name: str,
    where: str,
    path: DemoPath,
    *,
    trace: str | os.PathLike[str] | None = None,
) -> DemoReport:
    results: list[PhaseResult | None] = [None] * agents
    budget = Budget(max_total_tokens=max_total_tokens)
    counts = _Counts()
    begun = trio.current_time()

    def snapshot(final: bool = False) -> DemoProgress:
        elapsed = trio.current_time() - begun
        tokens = budget.usage().total_tokens
        return DemoProgress(
            agents, counts.started, counts.finished, elapsed, tokens, max_total_tokens, final
        )

    async with AsyncExitStack() as stack:
        model: Model | None = None
        if isinstance(config, ProviderConfig):
            provider = await stack.enter_async_context(Provider(config))
            model = provider.model(model_name)
        elif config is not None:  # a model already made (and closed by its maker)
            model = config
        spec = demo_spec(model)
        t0 = time.perf_counter()
        async with open_runtime(budget=budget, trace=trace) as rt, trio.open_nursery() as watching:
            if on_progress is not None:
                watching.start_soon(watch_progress, progress_every, snapshot, on_progress)

            async def one(i: int, agent: AgentRef) -> None:
                results[i] = await agent.run(f"Tell me about topic-{i}")
                counts.finished += 1

            async with trio.open_nursery() as nursery:
                for i in range(agents):
                    agent = await rt.spawn_agent(spec, name=f"agent-{i}")
                    counts.started += 1
                    nursery.start_soon(one, i, agent)
            watching.cancel_scope.cancel()  # the watcher ends with the swarm
            usage = rt.usage()
        wall = time.perf_counter() - t0
    if on_progress is not None:
        on_progress(snapshot(final=True))
    return _report(agents, results, usage, wall, where, path, budget, spec)


async def watch_progress(
    every: float, snapshot: Callable[[], DemoProgress], on_progress: Callable[[DemoProgress], None]
) -> None:
    """Call ``on_progress(snapshot())`` every *every* seconds, until cancelled."""
    while True:
        await trio.sleep(every)
        on_progress(snapshot())


def _report(
    agents: int,
    results: list[PhaseResult | None],
    usage: UsageTotals,
    wall: float,
    where: str,
    path: DemoPath,
    budget: Budget,
    spec: AgentSpec,
) -> DemoReport:
    reasons = Counter(r.stop_reason if r is not None else "lost" for r in results)
    failures: dict[str, Counter[str]] = {}
    for r in results:
        if r is not None and r.stop_reason == "error":
            failures.setdefault(r.error_type or "error", Counter())[r.error] += 1
    return DemoReport(
        agents,
        dict(reasons),
        usage,
        wall,
        where,
        path,
        {kind: dict(messages) for kind, messages in failures.items()},
        budget.max_total_tokens,
        spec.limits.max_output_tokens,
    )
