"""Every message and event type of agentrio.

Messages are frozen, tagged :class:`msgspec.Struct` subclasses: together they
form one tagged union that encodes to msgpack and JSON, so the same messages
can later cross a process boundary. They hold data only: no callables, locks
or handles. New fields get defaults (msgspec's schema-evolution rules).
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "ActorExited",
    "BudgetExhausted",
    "ChatMessage",
    "ConfirmationReceived",
    "ConfirmationRequired",
    "ContextAppend",
    "ContextRead",
    "ContextReadTurns",
    "ContextReset",
    "ContextTruncated",
    "ContinuationInjected",
    "ModelReply",
    "PhaseEnded",
    "PhaseError",
    "PhaseResult",
    "PermissionDenied",
    "PhaseStarted",
    "Routed",
    "RunPhase",
    "Stalled",
    "StopReason",
    "SubagentEnded",
    "SubagentStarted",
    "TextDelta",
    "ToolCallRequest",
    "ToolDeadLetter",
    "ToolEnded",
    "ToolResult",
    "ToolRetry",
    "ToolStarted",
    "ToolStatus",
    "Turn",
    "TurnEnded",
    "TurnStarted",
    "Usage",
    "ActorFailed",
    "ActorRestarted",
    "CompactionFailed",
    "WorkspaceWriteFailed",
    "ContextCompact",
    "ContextCompacted",
    "ActorStarted",
    "DeadLetter",
    "Event",
    "EventsLost",
    "Lane",
    "Message",
    "SupervisorEscalated",
]


class Message(msgspec.Struct, frozen=True, tag=True, gc=False):
    """Base class of everything an actor can be sent.

    Subclasses are frozen and tagged with their class name, so any message
    round-trips through ``msgspec.msgpack`` and ``msgspec.json``. Messages are
    not tracked by CPython's cyclic GC (``gc=False``, inherited): they are
    immutable data and cannot be part of a reference cycle, and at 10k live
    agents the collector walking every message in every history costs more
    than any hop::

        class Greet(agentrio.Message):
            who: str
    """


class Event(Message, frozen=True, tag=True):
    """Base class of the events published on ``rt.events()``.

    Attributes:
        path: the path of the actor or supervisor the event is about.
    """

    path: str


ExitReason = Literal["stopped", "cancelled", "crashed"]


class ActorStarted(Event, frozen=True, tag=True):
    """An actor (or supervisor) started; ``restarts`` counts earlier incarnations."""

    restarts: int = 0


class ActorExited(Event, frozen=True, tag=True):
    """An actor (or supervisor) ended for good and will not be restarted."""

    reason: ExitReason = "stopped"


class ActorFailed(Event, frozen=True, tag=True):
    """An actor's ``handle`` or ``on_start`` raised; its supervisor decides what next.

    Attributes:
        error_type: the exception's class name.
        error: ``str()`` of the exception.
    """

    error_type: str = ""
    error: str = ""


class ActorRestarted(Event, frozen=True, tag=True):
    """A supervisor restarted an actor after ``delay`` seconds of backoff."""

    restarts: int = 0
    delay: float = 0.0


class DeadLetter(Event, frozen=True, tag=True):
    """A message that was never handled: sent to a stopped actor, or the one that crashed it.

    Attributes:
        reason: ``"stopped"``, ``"cancelled"``, ``"crashed"`` or ``"crashed_on"``
            (this message crashed the actor).
        message_type: the tag of the message.
        message: a short ``repr`` of the message, for logs.
    """

    reason: str = "stopped"
    message_type: str = ""
    message: str = ""


class SupervisorEscalated(Event, frozen=True, tag=True):
    """A supervisor exceeded its restart intensity and failed to its parent.

    Attributes:
        child: the child whose crash went over the limit.
        error: ``str()`` of that child's exception.
    """

    child: str = ""
    error: str = ""


class EventsLost(Event, frozen=True, tag=True):
    """This subscriber fell behind and ``count`` events were dropped for it."""

    count: int = 0


# -- the agent loop ------------------------------------------------------------------

StopReason = Literal[
    "done",
    "max_iterations",
    "budget_exhausted",
    "stop_requested",
    "timeout",
    "stalled",
    "error",
    "cancelled",
]
ToolStatus = Literal["ok", "failed", "timeout", "denied"]
# The priority lanes, highest first ("control" is another name for "interactive").
Lane = Literal["interactive", "control", "query", "execute", "background"]


class Usage(Message, frozen=True, tag=True):
    """What one model call consumed, as the provider reported it.

    Attributes:
        input_tokens: prompt tokens.
        output_tokens: completion tokens.
        cost_usd: the call's price, when the provider or model knows it.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens


class ToolCallRequest(Message, frozen=True, tag=True):
    """A request to call the tool *name* with *arguments* (from a model, or direct).

    Attributes:
        name: the tool's name.
        arguments: the arguments, a JSON object.
        id: the call's id, echoed in its :class:`ToolResult` (made up when empty).
        error: set by a provider when the model's arguments could not be
            parsed: the call is not run, the model is told why.
    """

    name: str
    arguments: dict[str, object] = {}
    id: str = ""
    error: str = ""


class ToolResult(Message, frozen=True, tag=True):
    """What came of one tool call; the model sees ``content``.

    Attributes:
        id: the id of the :class:`ToolCallRequest`.
        name: the tool's name.
        arguments: the arguments it was called with.
        status: ``"ok"``, ``"failed"`` (raised, bad arguments, unusable result),
            ``"timeout"`` or ``"denied"`` (not allowed, no budget for it, or
            given up after its lane's retries: a dead letter).
        content: the result as JSON text, or the error message.
    """

    id: str
    name: str
    arguments: dict[str, object] = {}
    status: ToolStatus = "ok"
    content: str = ""


class ChatMessage(Message, frozen=True, tag=True):
    """One entry of a conversation history.

    Attributes:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        content: the text.
        tool_calls: for an assistant turn, the tool calls it asked for.
        tool_call_id: for a tool turn, the call it answers.
        name: for a tool turn, the tool's name.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class ModelReply(Message, frozen=True, tag=True):
    """One answer from a model: text, tool calls, or both, and the usage it reported."""

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = Usage()


class RunPhase(Message, frozen=True, tag=True):
    """Ask an agent to run one bounded phase (see ``AgentRef.run``).

    The fields after ``direct_tool_calls`` are this phase's own lane, limits
    and model, each ``None`` for the agent's: ``lane``, ``timeout`` in seconds
    (``math.inf``: no deadline), ``max_continuation_turns``, and ``model``
    (a tier name or an ``"instance:model"`` string).
    """

    user_message: str
    tool_names: tuple[str, ...] | None = None
    max_iterations: int = 10
    continue_context: bool = True
    context_label: str | None = None
    direct_tool_calls: tuple[ToolCallRequest, ...] | None = None
    lane: Lane | None = None  # None: the agent's spec's lane
    timeout: float | None = None
    max_continuation_turns: int | None = None
    model: str | None = None


class PhaseResult(Message, frozen=True, tag=True):
    """What a phase produced. It carries no token, cost or budget data on purpose.

    Attributes:
        final_text: the model's last text ("" if it gave none).
        tool_calls: every tool call of the phase with its result, in order.
        stop_reason: why the phase ended.
        error_type: when *stop_reason* is ``"error"``, the class name of the
            exception that ended the phase (as in its ``PhaseError`` event);
            otherwise ``""``.
        error: when *stop_reason* is ``"error"``, its ``str()``; otherwise ``""``.
    """

    final_text: str
    tool_calls: tuple[ToolResult, ...]
    stop_reason: StopReason
    error_type: str = ""
    error: str = ""


# -- agent events ------------------------------------------------------------------------


class PhaseStarted(Event, frozen=True, tag=True):
    """An agent began a phase in the context *context_label* (None: the primary one)."""

    context_label: str | None = None


class PhaseEnded(Event, frozen=True, tag=True):
    """An agent's phase ended; *iterations* counts its model calls."""

    context_label: str | None = None
    stop_reason: StopReason = "done"
    iterations: int = 0


class TurnStarted(Event, frozen=True, tag=True):
    """A model call is about to be made (iteration numbers start at 1)."""

    iteration: int = 0


class TurnEnded(Event, frozen=True, tag=True):
    """A model call returned; *usage* is what the provider reported."""

    iteration: int = 0
    usage: Usage = Usage()
    tool_calls: int = 0


class ToolStarted(Event, frozen=True, tag=True):
    """A tool call started."""

    tool: str = ""
    call_id: str = ""


class ToolEnded(Event, frozen=True, tag=True):
    """A tool call ended with *status*.

    Attributes:
        tool: the tool's name.
        call_id: the call's id.
        status: the result's status.
        duration: seconds on Trio's clock from the call's start (for a call
            that waited for a ``Limits.max_parallel_tools`` slot, from when it
            got one) to its result.
        arguments_preview: the call's arguments as JSON, at most 200 characters
            (a longer text is cut and ends with ``"…"``).
        output_preview: the result's content, bounded the same way.
    """

    tool: str = ""
    call_id: str = ""
    status: ToolStatus = "ok"
    duration: float = 0.0
    arguments_preview: str = ""
    output_preview: str = ""


class ContextTruncated(Event, frozen=True, tag=True):
    """Old turns were left out of a model call to fit the context window."""

    context_label: str | None = None
    dropped: int = 0
    tokens_before: int = 0
    tokens_after: int = 0


class Stalled(Event, frozen=True, tag=True):
    """The agent repeated itself; *why* says how. The phase ends with ``stalled``."""

    why: str = ""


class BudgetExhausted(Event, frozen=True, tag=True):
    """A budget limit stopped a model call or a tool call; *limit* names it."""

    limit: str = ""


class TextDelta(Event, frozen=True, tag=True):
    """A piece of a model's answer as it streams in (streaming providers only)."""

    text: str = ""


class PhaseError(Event, frozen=True, tag=True):
    """A phase ended with ``error``: the model call or a hook raised."""

    error_type: str = ""
    error: str = ""


# -- context actors ----------------------------------------------------------------------


class ContextRead(Message, frozen=True, tag=True):
    """Ask a ContextActor for its whole history (a tuple of ChatMessage)."""


class ContextReadTurns(Message, frozen=True, tag=True):
    """Ask a ContextActor for its whole history with the time of each turn (a tuple of Turn)."""


class ContextAppend(Message, frozen=True, tag=True):
    """Tell a ContextActor to append *messages* to its history.

    Attributes:
        messages: the turns to append, oldest first.
        timestamps: when each was made (``time.time()``), one per message;
            if their numbers differ, every message gets the time it is appended.
    """

    messages: tuple[ChatMessage, ...] = ()
    timestamps: tuple[float, ...] = ()


class ContextReset(Message, frozen=True, tag=True):
    """Tell a ContextActor to forget its history."""


class Turn(Message, frozen=True, tag=True):
    """One turn of a history and when it was made (see ``AgentRef.history``).

    Attributes:
        message: the turn.
        timestamp: when it was made, in seconds since the epoch
            (``time.time()``, the wall clock).
    """

    message: ChatMessage
    timestamp: float = 0.0


# -- permissions and composition ---------------------------------------------------------


class ConfirmationRequired(Event, frozen=True, tag=True):
    """A tool call waits for its approver (a permission rule said ``ask``).

    The same message is what an approver actor receives; it answers with a
    bool or an :class:`agentrio.Approval`.

    Attributes:
        tool_call: the call waiting for approval.
        agent: the path of the agent that wants to make it.
        request_id: a number unique within the runtime.
    """

    tool_call: ToolCallRequest = ToolCallRequest("")
    agent: str = ""
    request_id: int = 0


class ConfirmationReceived(Event, frozen=True, tag=True):
    """An approver answered (or the approval timed out, which always denies)."""

    tool: str = ""
    request_id: int = 0
    approved: bool = False
    reason: str = ""


class PermissionDenied(Event, frozen=True, tag=True):
    """A tool call was refused: not allowed, a deny rule, an approver, or a hook."""

    tool: str = ""
    reason: str = ""


class SubagentStarted(Event, frozen=True, tag=True):
    """An agent spawned a subagent (or an agent tool started its child)."""

    child: str = ""


class SubagentEnded(Event, frozen=True, tag=True):
    """A subagent spawned by an agent tool or ``map`` ended its phase."""

    child: str = ""
    stop_reason: str = ""


class ContinuationInjected(Event, frozen=True, tag=True):
    """A reply without tool calls read as unfinished: the phase goes on.

    The agent added its continuation message as a user turn and makes
    another model call (``Limits.max_continuation_turns``).

    Attributes:
        iteration: the model call whose reply read as unfinished.
        count: this phase's continuations so far, this one included (from 1).
        text: that reply's text.
    """

    iteration: int = 0
    count: int = 0
    text: str = ""


# -- compaction ----------------------------------------------------------------------------


class ContextCompacted(Event, frozen=True, tag=True):
    """Old turns of a context were replaced by a summary (``AgentSpec.compaction``).

    Attributes:
        context_label: the context (None: the primary one).
        replaced: how many messages the summary replaced.
        tokens_before: the history's estimated tokens before.
        tokens_after: the estimate after, the summary included.
        usage: what the summary call used (charged to the budget).
    """

    context_label: str | None = None
    replaced: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    usage: Usage = Usage()


class CompactionFailed(Event, frozen=True, tag=True):
    """A compaction was due but did not happen; the phase goes on with truncation.

    Attributes:
        context_label: the context (None: the primary one).
        error_type: the exception's class name (``"ContextChanged"`` when the
            stored history changed while the summary was made).
        error: what went wrong.
    """

    context_label: str | None = None
    error_type: str = ""
    error: str = ""


class WorkspaceWriteFailed(Event, frozen=True, tag=True):
    """An agent's ``run_summary.json`` could not be written at the end of a phase;
    the phase's result stands (its ``run()`` returns it all the same).

    Attributes:
        file: the file that could not be written.
        error_type: the exception's class name (``"PermissionError"``, ...).
        error: what went wrong.
    """

    file: str = ""
    error_type: str = ""
    error: str = ""


class ContextCompact(Message, frozen=True, tag=True):
    """Ask a ContextActor to replace ``history[start:end]`` with *summary*.

    It is applied only if the history still holds *length* messages (nothing
    was written to it since it was read); the answer says whether it was.

    Attributes:
        start: the first message replaced.
        end: the message after the last one replaced.
        summary: the messages put in their place.
        length: the history's length when the compaction was planned.
    """

    start: int = 0
    end: int = 0
    summary: tuple[ChatMessage, ...] = ()
    length: int = 0


# -- lanes -------------------------------------------------------------------------------


class ToolRetry(Event, frozen=True, tag=True):
    """A tool call raised and will be tried again, per its lane's retry policy.

    Attributes:
        tool: the tool's name.
        call_id: the call's id.
        lane: the lane it runs in.
        attempt: the attempt that failed (1 for the first).
        delay: seconds before the next attempt.
        error_type: the exception's class name.
        error: its message (at most 300 characters; the agent's ``env``
            values in it are replaced by ``[redacted]``).
    """

    tool: str = ""
    call_id: str = ""
    lane: str = ""
    attempt: int = 0
    delay: float = 0.0
    error_type: str = ""
    error: str = ""


class ToolDeadLetter(Event, frozen=True, tag=True):
    """A tool call raised on the last attempt its lane allows, and was given up.

    Its result is ``"denied"``: the model is told the call was given up,
    after how many attempts, and the last error.

    Attributes:
        tool: the tool's name.
        call_id: the call's id.
        lane: the lane it ran in.
        attempts: the attempts made.
        error_type: the last exception's class name.
        error: its message (at most 300 characters; the agent's ``env``
            values in it are replaced by ``[redacted]``).
    """

    tool: str = ""
    call_id: str = ""
    lane: str = ""
    attempts: int = 0
    error_type: str = ""
    error: str = ""


class Routed(Event, frozen=True, tag=True):
    """A router chose the mode and tier of a request (``AgentRef.respond``).

    Published before the request's phase, with the agent's path.

    Attributes:
        mode: the mode's name (``"inline"``, ``"background"``...).
        tier: the tier to run on (None: the agent's own model).
        reason: why, in the router's words.
    """

    mode: str = ""
    tier: str | None = None
    reason: str = ""
