"""OpenTelemetry: spans and metrics of phases, model calls and tool calls.

By the OpenTelemetry GenAI semantic conventions: a span ``invoke_agent
{agent}`` for each phase, ``chat {model}`` for each model call and
``execute_tool {tool}`` for each tool call, with the conventions' attributes
(``gen_ai.*``, ``error.type``) and agentrio's own (``agentrio.*``); the
histograms ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.duration``; and agentrio's metrics for operators
(``agentrio.*``: phases in flight, the root budget's room, waits, restarts,
events dropped), most of them read when the SDK collects.

This module imports no OpenTelemetry package itself: `OpenTelemetry()` does,
when it is made (the API package, the ``otel`` extra). A runtime without one
(``open_runtime(otel=None)``, the default) pays one attribute test at a
phase's start and end, at each model call and each turn of tool calls.

Nesting. Each phase's span is the current span (OpenTelemetry's context, a
context variable) of its agent's task while the phase runs, and each tool
call's while the tool runs: a model call's span, and a tool's, nest under
their phase's, and anything the tool instruments itself nests under the
tool's. A phase runs in its agent's own task, which does not see its caller's
context: ``AgentRef.run`` hands the caller's context to the phase it asks for
(`OpenTelemetry.asked`), so a subagent's phase nests under the tool call (or
the phase, or the user's span) that ran it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..._checks import check_int
from ...actors import exit_reason
from ...errors import InvalidArgument
from ...messages import (
    ChatMessage,
    ModelReply,
    PhaseResult,
    RunPhase,
    ToolCallRequest,
    ToolResult,
    Usage,
)
from ..tools.tool_call import ToolGate, ToolRunner, hide_env

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import (
        CallbackOptions,
        Histogram,
        Meter,
        MeterProvider,
        Observation,
    )
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from ...supervisors import Tree
    from ..budgets.budget import Budget
    from ..loop.phase import Phase
    from ..loop.state import _AgentState
    from ..tools.tool import Tool

from .parts import (
    _PHASE_FINISH,
    _SECONDS_BUCKETS,
    _TOKEN_BUCKETS,
    _Attributes,
    _budget_left,
    _cut,
    _error_type,
    _finish_reason,
    _in_flight,
    _limited,
    _PhaseSpan,
    _Runtimes,
    _Shared,
    model_name,
    provider_name,
)

__all__ = ["OpenTelemetry"]


# The most sets of model-call attributes kept (past it, they are made anew).
_SHARED_MOST = 1024

# The phases in flight past which those that will not end are looked for (see _sweep).
_SWEEP_AT = 64

# The most agent names whose phases in flight are reported (past it, those with none
# are forgotten).
_NAMES_MOST = 1024


class OpenTelemetry:
    """Record a runtime's phases, model calls and tool calls with OpenTelemetry.

    Give it to [`open_runtime`][agentrio.open_runtime] (``otel=``): each
    phase is a span ``invoke_agent {agent}``, each model call a span
    ``chat {model}`` under it, each tool call a span ``execute_tool {tool}``
    under it, and a subagent's phase nests under the tool call (or phase)
    that ran it; the model calls' token counts and the operations' durations
    go to the histograms ``gen_ai.client.token.usage`` and
    ``gen_ai.client.operation.duration``. The names and attributes are the
    OpenTelemetry GenAI semantic conventions'; agentrio's own attributes
    are named ``agentrio.*``, and so are its metrics for operators:
    ``agentrio.phases.active``, ``agentrio.budget.remaining``,
    ``agentrio.wait.duration``, ``agentrio.actor.restarts`` and
    ``agentrio.events.dropped``. A phase the sampler drops records its
    metrics, and no span of its calls. Messages, tool arguments and tool results are
    recorded only with *capture_content*. See [How to trace agents with
    OpenTelemetry][how-to-trace-agents-with-opentelemetry].

    It needs the OpenTelemetry API package (the ``otel`` extra:
    ``pip install 'agentrio[otel]'``); an SDK (``opentelemetry-sdk``) or
    another implementation, set up by the application, exports what is
    recorded. Without one, OpenTelemetry's no-op providers record nothing.

    Example:

        from opentelemetry.sdk.trace import TracerProvider

        otel = agentrio.otel.OpenTelemetry(tracer_provider=TracerProvider())
        async with agentrio.open_runtime(otel=otel) as rt:
            ...

    Args:
        tracer_provider: where the spans go (default: OpenTelemetry's global
            tracer provider, as ``opentelemetry.trace.get_tracer_provider()``
            finds it when this object is made).
        meter_provider: where the metrics go (default: the global meter
            provider).
        capture_content: also record the messages of each model call
            (``gen_ai.input.messages``, ``gen_ai.output.messages``), a
            phase's user message and final text, and each tool call's
            arguments and result (``gen_ai.tool.call.arguments``,
            ``gen_ai.tool.call.result``; the agent's ``env`` values hidden).
            Off by default: they may hold what must not leave the process.
        content_chars: the most characters of each recorded content
            attribute (a longer one is cut, and ends with ``…``).

    Raises:
        ImportError: the OpenTelemetry API package is not installed.
        InvalidArgument: *capture_content* is not a bool, *content_chars* not an int >= 16.
    """

    __slots__ = (
        "_active_names",
        "_attach",
        "_client",
        "_current",
        "_detach",
        "_duration",
        "_error",
        "_in_context",
        "_internal",
        "_observation",
        "_parents",
        "_phases",
        "_root",
        "_runtimes",
        "_shared",
        "_sweep_at",
        "_tokens",
        "_tracer",
        "_unsampled",
        "_waits",
        "capture_content",
        "content_chars",
    )

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
        content_chars: int = 4096,
    ) -> None:
        if not isinstance(capture_content, bool):
            raise InvalidArgument(f"capture_content must be a bool, got {capture_content!r}")
        self.capture_content = capture_content
        self.content_chars = check_int("content_chars", content_chars, 16)
        try:
            from opentelemetry import context, metrics, trace
        except ImportError as exc:
            raise ImportError(
                "agentrio.otel.OpenTelemetry needs the OpenTelemetry API: "
                "pip install 'agentrio[otel]' (or opentelemetry-api)"
            ) from exc
        from ..._version import __version__

        self._tracer: Tracer = trace.get_tracer(
            "agentrio", __version__, tracer_provider=tracer_provider
        )
        meter = metrics.get_meter("agentrio", __version__, meter_provider=meter_provider)
        self._tokens: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS),
        )
        self._duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(_SECONDS_BUCKETS),
        )
        self._waits: Histogram = meter.create_histogram(
            "agentrio.wait.duration",
            unit="s",
            description="How long model calls waited, by what they waited for.",
            explicit_bucket_boundaries_advisory=list(_SECONDS_BUCKETS),
        )
        self._observe(meter)
        # OpenTelemetry's functions, kept here: this module does not import the package.
        self._attach = context.attach
        self._detach = context.detach
        self._current = context.get_current
        self._root: Context = context.Context()
        # (Not empty: an empty context is false, and the SDK would look up the current one.)
        self._unsampled: Context = context.Context({"agentrio.otel.unsampled": True})
        self._in_context = trace.set_span_in_context
        self._internal = trace.SpanKind.INTERNAL
        self._client = trace.SpanKind.CLIENT
        self._error = trace.Status(trace.StatusCode.ERROR)
        # The context of each phase's caller, by id of its RunPhase while run() waits.
        self._parents: dict[int, Context] = {}
        self._phases: dict[Phase, _PhaseSpan] = {}
        self._sweep_at = _SWEEP_AT
        # The model calls' attributes, by (agent name, provider, model, output limit).
        self._shared: dict[tuple[str, str, str | None, int], _Shared] = {}

    def __repr__(self) -> str:
        return f"OpenTelemetry(capture_content={self.capture_content})"

    # -- what is read when the metrics are collected -------------------------------------

    def _observe(self, meter: Meter) -> None:
        """Make the instruments read at each collection (nothing on the agents' path)."""
        from opentelemetry.metrics import Observation

        self._observation = Observation
        self._runtimes = _Runtimes()
        self._active_names: set[str] = set()
        meter.create_observable_up_down_counter(
            "agentrio.phases.active",
            callbacks=[self._phases_active],
            unit="{phase}",
            description="Phases in flight.",
        )
        meter.create_observable_gauge(
            "agentrio.budget.remaining",
            callbacks=[self._budget_remaining],
            unit="1",
            description="What is left of the root budget's limits (tokens, requests, USD).",
        )
        meter.create_observable_counter(
            "agentrio.actor.restarts",
            callbacks=[self._counted(self._runtimes.restarts)],
            unit="{restart}",
            description="Actors and supervisors restarted by their supervisor.",
        )
        meter.create_observable_counter(
            "agentrio.events.dropped",
            callbacks=[self._counted(self._runtimes.dropped)],
            unit="{event}",
            description="Events the event bus dropped for subscribers that fell behind.",
        )

    def observe(self, tree: Tree[Any], budget: Budget) -> None:
        """Read *tree*'s restarts and dropped events, and *budget*'s room, in the
        metrics (``open_runtime`` calls it for its runtime, once)."""
        self._runtimes.add(tree, budget)

    def waited(self, st: _AgentState, what: str, seconds: float) -> None:
        """Record a model call's wait (made only when it did wait)."""
        attributes = {"agentrio.wait.kind": what, "gen_ai.agent.name": st.spec.name}
        self._waits.record(seconds, attributes)

    def _phases_active(self, options: CallbackOptions) -> Iterable[Observation]:
        counts: dict[str, int] = {}
        for phase in list(self._phases):  # (a copy: it may run in the reader's thread)
            if _in_flight(phase):
                name = phase.st.spec.name
                counts[name] = counts.get(name, 0) + 1
        names = self._active_names
        if len(names) + len(counts) > _NAMES_MOST:
            names.clear()
        names.update(counts)
        # (A name with none now is reported 0, not left at its last count.)
        return [
            self._observation(counts.get(name, 0), {"gen_ai.agent.name": name}) for name in names
        ]

    def _budget_remaining(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            self._observation(left, {"agentrio.budget.kind": kind})
            for kind, left in self._runtimes.budget_left()
        ]

    def _counted(
        self, count: Callable[[], int]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observed(options: CallbackOptions) -> Iterable[Observation]:
            return [self._observation(count())]

        return observed

    # -- phases ------------------------------------------------------------------------

    def asked(self, cmd: RunPhase, reply: Awaitable[object]) -> Awaitable[object]:
        """*reply*, the answer to *cmd*, to await: the phase's span is a child of the
        caller's current span (the caller's OpenTelemetry context)."""
        context = self._current()
        if not context:  # (no span, no baggage: the phase starts a trace of its own)
            return reply
        return self._asked(cmd, reply, context)

    async def _asked(self, cmd: RunPhase, reply: Awaitable[object], context: Context) -> object:
        key = id(cmd)
        self._parents[key] = context
        try:
            return await reply
        finally:
            self._parents.pop(key, None)

    async def run_phase(
        self, phase: Phase, body: Coroutine[object, None, PhaseResult[object]]
    ) -> PhaseResult[object]:
        """Run *body*, the phase's turns, with its span current (started on its first run)."""
        record = self._phases.get(phase)
        if record is None:
            if len(self._phases) >= self._sweep_at:
                self._sweep()
            record = self._phases[phase] = self._start_phase(phase)
        token = self._attach(record.context)
        try:
            return await body
        except Exception as exc:  # a bug: the phase will not end (its agent crashes)
            if self._phases.pop(phase, None) is record:
                self._failed(record.span, type(exc).__name__)
                record.span.end()
            raise
        finally:
            self._detach(token)

    def _sweep(self) -> None:
        """End the spans of phases that will not end: their agent was cancelled (or
        crashed) mid-phase. Now and then (each time the phases in flight double):
        a long-lived runtime must not keep them all."""
        for phase, record in list(self._phases.items()):
            ref = phase.st.ref
            if phase.st.phase is not phase or (ref is not None and exit_reason(ref) is not None):
                del self._phases[phase]
                span = record.span
                span.set_attribute("agentrio.stop_reason", "cancelled")
                self._failed(span, "cancelled")
                span.end()
        self._sweep_at = max(_SWEEP_AT, 2 * len(self._phases))

    def _start_phase(self, phase: Phase) -> _PhaseSpan:
        st, cmd = phase.st, phase.cmd
        name = st.spec.name
        model = st.model
        provider, requested = provider_name(model), model_name(model)
        attributes: _Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.agent.id": phase.path,
            "gen_ai.provider.name": provider,
        }
        if requested is not None:
            attributes["gen_ai.request.model"] = requested
        if cmd.context_label is not None:
            attributes["agentrio.context_label"] = cmd.context_label
        if self.capture_content:
            attributes["gen_ai.input.messages"] = self._messages(
                (ChatMessage("user", cmd.user_message),), st
            )
        key = (name, provider, requested, st.spec.limits.max_output_tokens)
        shared = self._shared.get(key)
        if shared is None:
            if len(self._shared) >= _SHARED_MOST:
                self._shared.clear()
            shared = self._shared[key] = _Shared(*key)
        # The caller's context (its baggage too), else a trace of its own.
        parent = self._parents.get(id(cmd), self._root)
        span = self._tracer.start_span(
            shared.phase_name, context=parent, kind=self._internal, attributes=attributes
        )
        return _PhaseSpan(span, self._in_context(span, parent), shared, self._unsampled)

    def phase_ended(self, phase: Phase) -> None:
        """End the phase's span (started now if the phase never ran: it failed first)."""
        record = self._phases.pop(phase, None)
        if record is None:
            record = self._start_phase(phase)
        span = record.span
        if not record.recording:  # (sampled out: its attributes would go nowhere)
            span.end()
            return
        st = phase.st
        attributes: _Attributes = {
            "agentrio.stop_reason": phase.reason,
            "agentrio.iterations": phase.iterations,
            "agentrio.tool_calls": len(phase.calls),
            "gen_ai.usage.input_tokens": record.input_tokens,
            "gen_ai.usage.output_tokens": record.output_tokens,
        }
        budget = st.budget
        if budget.parent is not None or _limited(budget):
            attributes.update(_budget_left(budget))
        if phase.reason == "error":
            attributes["error.type"] = phase.error[0] if phase.error is not None else "error"
            span.set_status(self._error)
        elif self.capture_content:
            final = ChatMessage("assistant", phase.final_text)
            finish = _PHASE_FINISH.get(phase.reason, phase.reason)
            attributes["gen_ai.output.messages"] = self._messages((final,), st, finish)
        span.set_attributes(attributes)
        span.end()

    def context_added(
        self, phase: Phase, source: str, tokens: int, *, cut: bool = False, skipped: str = ""
    ) -> None:
        """What a memory or a context provider (*source*) added to the phase's next
        model call (#26): an event ``agentrio.context`` on the phase's span, with its
        ``tokens``, whether it was ``cut``, or why it was ``skipped``."""
        record = self._phases.get(phase)
        if record is None or not record.recording:
            return
        attributes: _Attributes = {
            "agentrio.context.source": source,
            "agentrio.context.tokens": tokens,
            "agentrio.context.cut": cut,
        }
        if skipped:
            attributes["agentrio.context.skipped"] = skipped
        record.span.add_event("agentrio.context", attributes)

    # -- model calls -------------------------------------------------------------------

    async def chat(
        self,
        phase: Phase,
        messages: Sequence[ChatMessage],
        max_output_tokens: int,
        call: Coroutine[object, None, ModelReply],
    ) -> ModelReply:
        """Await *call*, the phase's model call on *messages*, in a ``chat`` span."""
        record = self._phases.get(phase)
        if record is None:  # (a phase runs within run_phase: not reached)
            record = self._start_phase(phase)
        shared = record.shared
        span = (
            self._chat_span(phase, record, messages, max_output_tokens)
            if record.recording
            else None
        )
        started = time.perf_counter()
        try:
            reply = await call
        except BaseException as exc:
            error = _error_type(exc)
            if span is not None:
                self._failed(span, error)
                span.end()
            self._duration.record(
                time.perf_counter() - started,
                {**shared.metric, "error.type": error},
                record.measured,
            )
            raise
        # (The phase's context, current here: given, the SDK need not look it up.)
        self._duration.record(time.perf_counter() - started, shared.metric, record.measured)
        if isinstance(reply, ModelReply):
            self._replied(span, phase, reply, record)
        if span is not None:
            span.end()
        return reply

    def _chat_span(
        self,
        phase: Phase,
        record: _PhaseSpan,
        messages: Sequence[ChatMessage],
        max_output_tokens: int,
    ) -> Span:
        """A model call's span, under its phase's (which is recording)."""
        shared = record.shared
        attributes = shared.chat
        if max_output_tokens != attributes["gen_ai.request.max_tokens"] or self.capture_content:
            attributes = {**attributes, "gen_ai.request.max_tokens": max_output_tokens}
            if self.capture_content:
                attributes["gen_ai.input.messages"] = self._messages(messages, phase.st)
        return self._tracer.start_span(
            shared.chat_name, context=record.context, kind=self._client, attributes=attributes
        )

    def _replied(
        self, span: Span | None, phase: Phase, reply: ModelReply, record: _PhaseSpan
    ) -> None:
        usage = reply.usage
        tokens_in = tokens_out = None
        if type(usage) is Usage:  # (a model's own object may hold anything: recorded if sound)
            tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
            if type(tokens_in) is int and type(tokens_out) is int:
                if tokens_in >= 0 and tokens_out >= 0:
                    tokens = record.shared.tokens
                    self._tokens.record(tokens_in, tokens[0], record.measured)
                    self._tokens.record(tokens_out, tokens[1], record.measured)
                record.input_tokens += tokens_in
                record.output_tokens += tokens_out
            else:
                tokens_in = tokens_out = None
        if span is None or not span.is_recording():  # (sampled out: the metrics are all)
            return
        finish = _finish_reason(reply)
        attributes: _Attributes = {"gen_ai.response.finish_reasons": (finish,)}
        if tokens_in is not None:
            attributes["gen_ai.usage.input_tokens"] = tokens_in
            attributes["gen_ai.usage.output_tokens"] = tokens_out
        if self.capture_content:
            text = reply.text or reply.refusal
            out = ChatMessage("assistant", text, tool_calls=reply.tool_calls)
            attributes["gen_ai.output.messages"] = self._messages((out,), phase.st, finish)
        span.set_attributes(attributes)

    # -- tool calls --------------------------------------------------------------------

    def runner(
        self,
        phase: Phase,
        tool: Tool,
        request: ToolCallRequest,
        timeout: float,
        gate: ToolGate | None,
    ) -> ToolRunner:
        """A runner for one tool call of *phase* that records it in an ``execute_tool``
        span (a plain one if the phase is not recorded)."""
        record = self._phases.get(phase)
        if record is not None and not record.recording:
            return ToolRunner(tool, request, timeout, gate)
        runner = _TracedRunner(tool, request, timeout, gate)
        runner.otel = self
        runner.st = phase.st
        return runner

    async def execute_tool(
        self, runner: _TracedRunner, call: Coroutine[object, None, ToolResult]
    ) -> ToolResult:
        """Await *call*, the runner's tool call, with its span current."""
        req = runner.request
        st = runner.st
        attributes: _Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.agent.name": st.spec.name,
            "gen_ai.tool.name": req.name,
            "gen_ai.tool.call.id": req.id,
            "gen_ai.tool.type": "function",
        }
        description = runner.tool.description
        if description:
            attributes["gen_ai.tool.description"] = _cut(description, self.content_chars)
        if self.capture_content:
            arguments = msgspec.json.encode(req.arguments).decode()
            attributes["gen_ai.tool.call.arguments"] = self._content(arguments, st)
        span = self._tracer.start_span(
            f"execute_tool {req.name}", kind=self._internal, attributes=attributes
        )
        token = self._attach(self._in_context(span))
        try:
            result = await call
        except BaseException as exc:
            # Cut short: the lone call's alarm (its timeout), or the phase's end.
            self._failed(span, "timeout" if runner.expired else _error_type(exc))
            span.end()
            raise
        finally:
            self._detach(token)
        if result.status != "ok":
            self._failed(span, result.status)
        if self.capture_content:
            span.set_attribute("gen_ai.tool.call.result", self._content(result.content, st))
        span.end()
        return result

    # -- helpers -----------------------------------------------------------------------

    def _failed(self, span: Span, error: str) -> None:
        span.set_attribute("error.type", error)
        span.set_status(self._error)

    def _content(self, text: str, st: _AgentState) -> str:
        env = st.spec.env
        return _cut(hide_env(text, env) if env else text, self.content_chars)

    def _messages(
        self, messages: Sequence[ChatMessage], st: _AgentState, finish: str | None = None
    ) -> str:
        """*messages* as the conventions' JSON (role and parts), cut to ``content_chars``.

        With *finish*, they are output messages, which the conventions' schema gives
        a ``finish_reason`` each.
        """
        out: list[dict[str, object]] = []
        for m in messages:
            parts: list[dict[str, object]] = []
            if m.content:
                if m.role == "tool":
                    parts.append(
                        {"type": "tool_call_response", "id": m.tool_call_id, "response": m.content}
                    )
                else:
                    parts.append({"type": "text", "content": m.content})
            for c in m.tool_calls:
                parts.append(
                    {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
                )
            if finish is None:
                out.append({"role": m.role, "parts": parts})
            else:
                out.append({"role": m.role, "parts": parts, "finish_reason": finish})
        text = msgspec.json.encode(out).decode()
        if finish is not None and len(text) > self.content_chars:
            fitted = self._fitted(out, st)
            if fitted is not None:
                return fitted
        return self._content(text, st)

    def _fitted(self, out: list[dict[str, object]], st: _AgentState) -> str | None:
        """Output messages *out* as JSON within ``content_chars``, their texts cut (each
        ending with ``…``; a tool call's arguments then as their JSON text) instead of
        the JSON, which stays whole: each message keeps its ``finish_reason``. None if
        even texts of one character do not fit."""
        env = st.spec.env
        texts: list[tuple[dict[str, object], str, str]] = []
        for message in out:
            parts = message["parts"]
            assert isinstance(parts, list)
            for part in parts:
                for key in ("content", "response", "arguments"):
                    if key in part:
                        value = part[key]
                        if not isinstance(value, str):
                            value = msgspec.json.encode(value).decode()
                        texts.append((part, key, hide_env(value, env) if env else value))

        def encoded(most: int) -> str:
            for part, key, text in texts:
                part[key] = _cut(text, most)
            return msgspec.json.encode(out).decode()

        # The longest cut that fits, by bisection (a character may take 6 in JSON).
        low, high = 0, min(self.content_chars, max((len(t) for _, _, t in texts), default=0))
        while low < high:
            middle = (low + high + 1) // 2
            if len(encoded(middle)) <= self.content_chars:
                low = middle
            else:
                high = middle - 1
        if low < 1:
            return None
        return self._content(encoded(low), st)  # (the ids and names hidden too)


class _TracedRunner(ToolRunner):
    """A tool call recorded in an ``execute_tool`` span (made only with OpenTelemetry on)."""

    __slots__ = ("otel", "st")

    otel: OpenTelemetry
    st: _AgentState

    def run(self) -> Coroutine[object, None, ToolResult]:
        return self.otel.execute_tool(self, ToolRunner.run(self))


def check_otel(otel: object) -> OpenTelemetry | None:
    """*otel* if an `OpenTelemetry` or None, else InvalidArgument."""
    if otel is not None and not isinstance(otel, OpenTelemetry):
        raise InvalidArgument(f"otel must be an agentrio.otel.OpenTelemetry or None, got {otel!r}")
    return otel
