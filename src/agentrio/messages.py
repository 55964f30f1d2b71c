"""Every message and event type of agentrio.

Messages are frozen, tagged `msgspec.Struct` subclasses: together they
form one tagged union that encodes to msgpack and JSON, so the same messages
can later cross a process boundary. They hold data only: no callables, locks
or handles. New fields get defaults (msgspec's schema-evolution rules).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Generic, Literal, Self
from urllib.parse import urlsplit

import msgspec

from .errors import InvalidArgument, phase_error

if sys.version_info >= (3, 13):
    from typing import TypeVar
else:  # (a TypeVar with a default: PEP 696)
    from typing_extensions import TypeVar

__all__ = [
    "ActorExited",
    "BudgetExhausted",
    "ChatMessage",
    "CheckpointTorn",
    "ConfirmationReceived",
    "ConfirmationRequired",
    "ContextAppend",
    "ContextRead",
    "ContextReadTurns",
    "ContextReset",
    "ContextTruncated",
    "ContentPart",
    "ContinuationInjected",
    "DocumentPart",
    "DOCUMENT_TYPES",
    "FinishReason",
    "IMAGE_TYPES",
    "ImagePart",
    "MAX_PART_BYTES",
    "ModelReply",
    "ModelSettings",
    "PhaseEnded",
    "PhaseError",
    "PhaseResult",
    "PhaseResumed",
    "ResumedPhaseEnded",
    "PhaseDeferred",
    "PermissionDenied",
    "PhaseStarted",
    "RawBlock",
    "Routed",
    "RunPhase",
    "RuntimeOpened",
    "Stalled",
    "TextPart",
    "StopReason",
    "SubagentEnded",
    "SubagentStarted",
    "TextDelta",
    "ThinkingBlock",
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
    "Waited",
    "ActorFailed",
    "ActorRestarted",
    "CompactionFailed",
    "WorkspaceWriteFailed",
    "TraceWriteFailed",
    "ContextCompact",
    "ContextCompacted",
    "ActorStarted",
    "DeadLetter",
    "Event",
    "EventsLost",
    "Lane",
    "Message",
    "OutputT",
    "SupervisorEscalated",
    # Memory and context providers (#26)
    "MemoryStored",
    "MemoryRecalled",
    "MemoriesSearched",
    "MemoryCleared",
    "ContextProvided",
    "ContextProviderFailed",
    # plans, goals and delegation (#26: planning)
    "GoalAchieved",
    "GoalExtracted",
    "GoalProgress",
    "PlanTask",
    "PlanningMode",
    "PlanningEnded",
    "PlanningStarted",
    "StepEnded",
    "StepStarted",
    "SubagentProgress",
    "TaskStatus",
    "TaskUpdated",
    # #26
    "OutputSanitised",
    "SkillActivated",
    "TaintBlocked",
    "TierFellBack",
]

OutputT = TypeVar("OutputT", default=str, covariant=True)
"""The type of a phase's ``output``: an ``AgentSpec``'s ``output_type`` (``str``,
plain text, without one)."""


class Message(msgspec.Struct, frozen=True, tag=True, gc=False):
    """Base class of everything an actor can be sent.

    Subclass it with typed fields:

        class Greet(agentrio.Message, frozen=True):
            who: str

    Subclasses are frozen and tagged with their class name, so any message
    round-trips through ``msgspec.msgpack`` and ``msgspec.json``. Messages
    hold data only: no callables, locks or handles. New fields of an
    existing message get defaults. (``frozen=True`` is inherited; writing it
    out keeps mypy content.)

    Messages are not tracked by CPython's cyclic GC (``gc=False``,
    inherited): they are immutable data and cannot be part of a reference
    cycle, and at 10k live agents the collector walking every message in
    every history costs more than any hop. So do not put a mutable
    container that could end up referring back to the message into a
    message field.
    """


class Event(Message, frozen=True, tag=True):
    """Base class of the events published on ``rt.events()``.

    Attributes:
        path: the path of the actor or supervisor the event is about.
    """

    path: str


ExitReason = Literal["stopped", "cancelled", "crashed"]


class ActorStarted(Event, frozen=True, tag=True):
    """An actor finished ``on_start``, or a supervisor started; ``restarts`` counts
    earlier incarnations."""

    restarts: int = 0


class ActorExited(Event, frozen=True, tag=True):
    """An actor (or supervisor) ended for good and will not be restarted.

    Attributes:
        reason: ``"stopped"`` (a graceful stop), ``"cancelled"`` or ``"crashed"``.
    """

    reason: ExitReason = "stopped"


class ActorFailed(Event, frozen=True, tag=True):
    """An actor's constructor, ``on_start``, ``handle`` or ``on_stop`` raised, or a child
    supervisor failed; its supervisor decides what happens next.

    Attributes:
        error_type: the exception's class name.
        error: ``str()`` of the exception.
    """

    error_type: str = ""
    error: str = ""


class ActorRestarted(Event, frozen=True, tag=True):
    """A supervisor decided to restart (or resume) an actor or supervisor.

    Attributes:
        restarts: the new restart count.
        delay: seconds of backoff before the new incarnation starts.
    """

    restarts: int = 0
    delay: float = 0.0


class DeadLetter(Event, frozen=True, tag=True):
    """A message that was never handled: sent to a stopped actor, left in its mailbox
    when it ended, cut short by a cancel, or the one that crashed it.

    Dead letters are counted in ``SupervisorStatistics.dead_letters`` even when
    nobody subscribes to events.

    Attributes:
        reason: ``"stopped"``, ``"cancelled"``, ``"crashed"`` or ``"crashed_on"``
            (this message crashed the actor).
        message_type: the tag (class name) of the message.
        message: a short ``repr`` of the message (at most 200 characters), for logs.
    """

    reason: str = "stopped"
    message_type: str = ""
    message: str = ""


class SupervisorEscalated(Event, frozen=True, tag=True):
    """A supervisor exceeded its restart intensity and failed to its parent.

    Attributes:
        path: the supervisor (``""`` for the root).
        child: the child whose crash went over the limit.
        error: ``str()`` of that child's exception.
    """

    child: str = ""
    error: str = ""


class EventsLost(Event, frozen=True, tag=True):
    """This subscriber fell behind and ``count`` events were dropped for it.

    It takes the place of the lost events in the stream; its ``path`` is ``""``.
    """

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
    "max_output_tokens",
    "content_filter",
    "refusal",
    "deferred",
]
"""Why a phase ended:

- ``"done"``: the model answered without tool calls (or the direct tool calls
  ran); with ``Limits.max_continuation_turns``, an answer that read as
  unfinished was continued first, up to that many times.
- ``"max_iterations"``: every allowed model call asked for tools.
- ``"budget_exhausted"``: a model call would not fit the budget, even after
  the calls in flight settle.
- ``"stop_requested"``: ``AgentRef.request_stop`` was called.
- ``"timeout"``: the phase ran past ``Limits.timeout``.
- ``"stalled"``: the model repeated a tool call (``Limits.max_identical_calls``
  times, 2 by default), or got identical results in a row
  (``Limits.max_identical_results``, 3 by default).
- ``"error"``: the model call raised or returned something that is not a
  ``ModelReply``, ``on_step`` or the ``continuation_detector`` raised, a
  provider's tool-call arguments could not be parsed ``max_parse_retries``
  turns in a row, or the answers did not match the spec's ``output_type``
  (``error_type`` ``"OutputInvalid"``: see ``AgentSpec.output_retries``).
- ``"cancelled"``: the task awaiting the phase's ``run()`` (or ``execute()``,
  or the ``map`` or agent tool that ran it) was cancelled. Nobody receives the
  ``PhaseResult``; the ``PhaseEnded`` event and the run summary carry the
  reason.
- ``"max_output_tokens"``: the model's last answer, without tool calls, was
  cut at the output limit (``ModelReply.finish_reason == "length"``), also
  when it was the final answer after ``max_iterations`` or a stall;
  ``final_text`` is the cut text.
- ``"content_filter"``: the provider's content filter cut that answer
  (``finish_reason == "content_filter"``).
- ``"deferred"``: an approver or a tool answered ``agentrio.Defer``: the
  phase is parked in the checkpoint store until a decision is given
  (``Runtime.approve``, ``deny``, ``give_result``), then goes on; its final
  result is ``Runtime.resumed_result(phase_id)``.
- ``"refusal"``: the model refused (``finish_reason == "refusal"``);
  ``final_text`` is the refusal's text.
"""
ToolStatus = Literal["ok", "failed", "timeout", "denied"]
"""How a tool call ended:

- ``"ok"``: the tool returned.
- ``"failed"``: bad or unparseable arguments, the tool raised, its result is
  not JSON-encodable, or the ``post_tool_use`` hook raised.
- ``"timeout"``: the tool ran past ``Limits.tool_timeout``, or the phase ended
  while it ran.
- ``"denied"``: it did not run: the tool is not allowed in this phase, the
  tool-call budget is spent, the permission policy, the approver or the
  ``pre_tool_use`` hook refused it, or it is past
  ``Limits.max_tool_calls_per_turn`` in its reply. Or it raised on every
  attempt its lane allows (more than 1): a dead letter, given up (see
  ``ToolDeadLetter``).
"""
# The priority lanes, highest first ("control" is another name for "interactive").
Lane = Literal["interactive", "control", "query", "execute", "background"]
"""The lanes, highest priority first: ``"interactive"`` (``"control"`` is another
name for it, a3s-code's; it is stored and reported as ``"interactive"``),
``"query"`` (the default lane), ``"execute"``, ``"background"``.

Every phase runs in one (``run(lane=...)``, else ``AgentSpec.lane``), and so
do its model calls and tool calls. While a provider's ``max_concurrent``,
``requests_per_minute`` or ``tokens_per_minute`` is full, or the runtime's tool
limit (``Lanes.tool_concurrency``), the next room goes to the oldest waiter of
the highest lane; a call that finds room goes at once, whatever its lane, and
none is preempted.
"""
FinishReason = Literal["stop", "length", "content_filter", "refusal", "pause_turn"]
"""Why a model's answer ended (``ModelReply.finish_reason``):

- ``"stop"``: the model ended its turn: an answer, tool calls, a stop sequence
  (OpenAI ``stop``, ``tool_calls``; Anthropic ``end_turn``, ``tool_use``,
  ``stop_sequence``; Ollama ``stop``; and any value not listed here).
- ``"length"``: cut at ``max_output_tokens`` (OpenAI ``length``, Anthropic
  ``max_tokens`` or ``model_context_window_exceeded``, Ollama ``length``).
- ``"content_filter"``: cut by the provider's content filter (OpenAI).
- ``"refusal"``: the model refused (an OpenAI ``message.refusal``, Anthropic
  ``refusal``).
- ``"pause_turn"``: the server paused a long turn; another call goes on from
  it (Anthropic).
"""


class Usage(Message, frozen=True, tag=True):
    """What one model call consumed, as the provider reported it.

    For a call its provider retried, this is the answered attempt; the failed
    ones were charged as they failed (see [`AttemptMeter`][agentrio.types.AttemptMeter]).
    The budget charges exactly this. Token counts must be ints >= 0 and the
    cost a finite number >= 0: anything else is a
    [`UsageInvalid`][agentrio.errors.UsageInvalid] error for the call, and its
    reservation is charged instead; so is ``cached_input_tokens +
    cache_write_tokens`` more than ``input_tokens``, or ``reasoning_tokens``
    more than ``output_tokens``.

    The totals count every kind: ``input_tokens`` holds the cached input and
    the cache writes, ``output_tokens`` the reasoning tokens; the three
    detail fields say how much of each total was of that kind.

    Attributes:
        input_tokens: every input token: uncached, read from the prompt
            cache and written to it (OpenAI ``prompt_tokens``; Anthropic
            ``input_tokens + cache_read_input_tokens +
            cache_creation_input_tokens``; Ollama ``prompt_eval_count``).
        output_tokens: every output token, reasoning included.
        cost_usd: the call's price, when the provider or model knows it.
        cached_input_tokens: of ``input_tokens``, those read from the
            prompt cache (OpenAI ``cached_tokens``, Anthropic
            ``cache_read_input_tokens``).
        cache_write_tokens: of ``input_tokens``, those written to the
            prompt cache (Anthropic ``cache_creation_input_tokens``, an
            OpenAI-compatible server's ``cache_write_tokens``).
        reasoning_tokens: of ``output_tokens``, those spent reasoning
            (OpenAI ``reasoning_tokens``, Anthropic
            ``output_tokens_details.thinking_tokens``).
        cache_write_1h_tokens: of ``cache_write_tokens``, those written to
            Anthropic's 1-hour cache (``cache_creation.ephemeral_1h_input_tokens``),
            priced apart (``usd_per_million_cache_write_1h_tokens``).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens


class ToolCallRequest(Message, frozen=True, tag=True):
    """A request to call the tool *name* with *arguments* (from a model, or direct).

    Attributes:
        name: the tool's name.
        arguments: the arguments, a JSON object.
        id: the call's id, echoed in its [`ToolResult`][agentrio.ToolResult]; when
            empty, the agent numbers the call (``"call_1"``, ...).
        error: set by a provider when the model's arguments could not be
            parsed: the call is not run; its result is ``"failed"`` and
            tells the model why.
    """

    name: str
    arguments: dict[str, object] = {}
    id: str = ""
    error: str = ""


class ToolResult(Message, frozen=True, tag=True, omit_defaults=True):
    """What came of one tool call; the model sees ``content``.

    Attributes:
        id: the id of the [`ToolCallRequest`][agentrio.ToolCallRequest].
        name: the tool's name.
        arguments: the arguments it was called with.
        status: ``"ok"``, ``"failed"`` (raised, bad arguments, unusable result),
            ``"timeout"`` or ``"denied"`` (not allowed, no budget for it, or
            given up after its lane's retries: a dead letter).
        content: the result as JSON text, or the error message; for a
            result of content parts, the text of its text parts.
        parts: the images and documents (and text) the tool returned, when
            it returned content parts (see [Tools that return
            images][tools-that-return-images]); ``()`` otherwise.

    Encoded without the fields that hold their defaults (``omit_defaults``),
    like `ChatMessage`: a checkpoint record holds every tool result.
    """

    id: str
    name: str
    arguments: dict[str, object] = {}
    status: ToolStatus = "ok"
    content: str = ""
    parts: tuple[ContentPart, ...] = ()


class ThinkingBlock(Message, frozen=True, tag=True):
    """A model's reasoning, kept to be sent back as it came: an Anthropic thinking
    block, or an OpenAI Responses reasoning item (the one with an ``id``).

    The APIs check what comes back (Anthropic the signature, OpenAI the
    encrypted content), so it is never changed. Each wire format sends back
    only its own kind and leaves the other out. The reasoning an
    OpenAI-compatible server sends (``reasoning_content``, ``reasoning``) is
    a block with neither signature nor id, which the Anthropic wire does not
    send. Never answer text.

    Attributes:
        thinking: the thinking text (``""`` for a redacted block); for a
            reasoning item, its ``reasoning_text`` content, if the server
            sent any.
        signature: the signature the API sent with it, which it checks
            when the block comes back.
        redacted: for a ``redacted_thinking`` block, its encrypted ``data``
            (``""`` for a plain ``thinking`` block).
        id: for an OpenAI Responses ``reasoning`` item, its id (``rs_...``);
            ``""`` for an Anthropic block.
        encrypted_content: for a reasoning item, its ``encrypted_content``
            (what lets a model go on from its reasoning with ``store: false``).
        summary: for a reasoning item, the texts of its ``summary_text`` parts.
    """

    thinking: str = ""
    signature: str = ""
    redacted: str = ""
    id: str = ""
    encrypted_content: str = ""
    summary: tuple[str, ...] = ()


class RawBlock(Message, frozen=True, tag=True):
    """A block of a model's answer kept as the API sent it, to be sent back unchanged.

    Anthropic's server tools (web search, code execution) answer with blocks
    of their own (``server_tool_use``, ``web_search_tool_result``,
    ``code_execution_tool_result``...) among text blocks that may carry
    ``citations``. When an answer holds any such block, every block of it
    but the thinking and ``tool_use`` ones is kept, in order, as one of
    these, so that the next call (a ``pause_turn`` continuation, the call
    after a tool) sends the turn back as it came. Blocks of a type agentrio
    does not know are kept the same way.

    Attributes:
        kind: the block's ``type`` (``"server_tool_use"``, ``"text"``...).
        json: the block, as the JSON text the API sent.
    """

    kind: str
    json: str

    @classmethod
    def of(cls, block: Mapping[str, object]) -> RawBlock:
        """The RawBlock of *block*, a JSON object with a str ``type`` (to script
        an answer, e.g. ``agentrio.testing.Reply(blocks=...)``).

        Raises:
            InvalidArgument: *block* has no str ``type``, or is not JSON.
        """
        kind = block.get("type") if isinstance(block, Mapping) else None
        if not isinstance(kind, str) or not kind:
            raise InvalidArgument("RawBlock.of: the block must be a dict with a str 'type'")
        try:
            text = msgspec.json.encode(block).decode()
        except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
            raise InvalidArgument("RawBlock.of: the block must hold JSON values only") from None
        return cls(kind, text)


# -- content parts: text, images and documents in a user turn ------------------------

# The most bytes one ImagePart or DocumentPart may hold (32 MiB, the largest
# request Anthropic's API takes); each wire format has its own, lower limit
# for images.
MAX_PART_BYTES = 32 * 1024 * 1024
# The image types OpenAI and Anthropic both take (Ollama takes PNG and JPEG).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
DOCUMENT_TYPES = ("application/pdf", "text/plain")

_MAX_URL = 8192  # characters: longer is no URL a provider fetches
# The first bytes of each image type: the APIs refuse an image whose bytes are
# not of its stated type, so a mismatch is caught before anything is sent.
_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "application/pdf": (b"%PDF-",),
}


def media_type_of(data: bytes) -> str | None:
    """The image type *data* starts like (``"image/png"``...), or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for kind, signatures in _SIGNATURES.items():
        if kind.startswith("image/") and data.startswith(signatures):
            return kind
    return None


def shown_url(url: str) -> str:
    """*url* as error messages and reprs show it: its scheme and host only (a
    signed URL's path or query may hold a credential)."""
    split = urlsplit(url)
    return f"{split.scheme}://{split.hostname or ''}/…"


def _part_error(kind: str, what: str) -> InvalidArgument:
    return InvalidArgument(f"{kind}: {what}")


def _check_source(part: ImagePart | DocumentPart, types: tuple[str, ...]) -> None:
    """Check a part's source (exactly one of data and url) and its media type."""
    kind = type(part).__name__
    data, url, media_type = part.data, part.url, part.media_type
    if (data is None) == (url is None):
        raise _part_error(kind, "give exactly one of data (bytes) and url (an http(s) URL)")
    if not isinstance(media_type, str) or (media_type and media_type not in types):
        shown = media_type if isinstance(media_type, str) else type(media_type).__name__
        raise _part_error(kind, f"media_type must be one of {', '.join(types)}, got {shown!r}")
    if data is not None:
        _check_data(part, kind, data, media_type)
    else:
        _check_url(kind, url)


def _check_data(part: ImagePart | DocumentPart, kind: str, data: object, media_type: str) -> None:
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
        msgspec.structs.force_setattr(part, "data", data)
    if not isinstance(data, bytes):
        raise _part_error(kind, f"data must be bytes, got a {type(data).__name__}")
    if not data:
        raise _part_error(kind, "data is empty")
    if len(data) > MAX_PART_BYTES:
        raise _part_error(
            kind, f"data is {len(data)} bytes, more than MAX_PART_BYTES ({MAX_PART_BYTES})"
        )
    if not media_type:
        raise _part_error(kind, "media_type is required with data")
    expected = _SIGNATURES.get(media_type)
    if media_type == "image/webp":
        ok = data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    elif media_type == "text/plain":
        try:
            data.decode("utf-8")
            ok = True
        except UnicodeDecodeError:
            ok = False
    else:
        ok = expected is None or data.startswith(expected)
    if not ok:
        found = media_type_of(data)
        looks = f"; they look like {found}" if found else ""
        what = "UTF-8 text" if media_type == "text/plain" else f"{media_type} data"
        raise _part_error(kind, f"data is not {what} (media_type={media_type!r}){looks}")


def _check_url(kind: str, url: object) -> None:
    if not isinstance(url, str):
        raise _part_error(kind, f"url must be a str, got a {type(url).__name__}")
    if len(url) > _MAX_URL or not url.isprintable() or " " in url:
        raise _part_error(
            kind, f"url must be an http(s) URL of at most {_MAX_URL} printable characters"
        )
    try:
        split = urlsplit(url)
    except ValueError:
        raise _part_error(kind, "url is not a URL") from None
    if split.scheme.lower() not in ("http", "https") or not split.hostname:
        scheme = split.scheme.lower()
        got = f"a {scheme}: URL" if scheme else "no scheme"
        raise _part_error(
            kind, f"url must be an http:// or https:// URL with a host, got {got} (give data=)"
        )


def _data_repr(data: bytes | None) -> str:
    return "None" if data is None else f"<{len(data)} bytes>"


class TextPart(Message, frozen=True, tag=True):
    """A piece of text in a user turn given as parts.

    Attributes:
        text: the text.
    """

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise _part_error("TextPart", f"text must be a str, got a {type(self.text).__name__}")


class ImagePart(Message, frozen=True, tag=True):
    """An image in a user turn: its bytes, or a URL the provider fetches.

    Checked when made (and when decoded): exactly one of *data* and *url*;
    *data* non-empty, at most 32 MiB (``MAX_PART_BYTES``), and
    starting as its *media_type* says (the APIs refuse a PNG labelled JPEG);
    *url* ``http://`` or ``https://`` (no ``file:`` or ``data:``: give
    *data*). A wrong one is an [`InvalidArgument`][agentrio.InvalidArgument]
    naming the field; its message and the part's ``repr`` never show the
    bytes, nor more of a URL than its scheme and host.

    Attributes:
        data: the image's bytes (``bytearray`` and ``memoryview`` are
            copied to ``bytes``).
        url: where the provider fetches it (OpenAI, Anthropic; not Ollama).
        media_type: ``"image/png"``, ``"image/jpeg"``, ``"image/gif"`` or
            ``"image/webp"``; required with *data*, optional with *url*.
    """

    data: bytes | None = None
    url: str | None = None
    media_type: str = ""

    def __post_init__(self) -> None:
        _check_source(self, IMAGE_TYPES)

    def __repr__(self) -> str:
        source = f"url={shown_url(self.url)!r}" if self.url is not None else ""
        if self.data is not None:
            source = f"data={_data_repr(self.data)}"
        return f"ImagePart({source}, media_type={self.media_type!r})"


class DocumentPart(Message, frozen=True, tag=True):
    """A document in a user turn: a PDF or a text file, as bytes or a URL.

    Checked as [`ImagePart`][agentrio.ImagePart] is; ``application/pdf``
    data must start ``%PDF-``, ``text/plain`` data must be UTF-8. Anthropic
    takes both (a URL for a PDF only); OpenAI's chat completions take PDFs
    as data (a ``file`` part); Ollama takes none.

    Attributes:
        data: the document's bytes.
        url: where the provider fetches it (Anthropic, PDFs only).
        media_type: ``"application/pdf"`` (the default) or ``"text/plain"``.
        name: its file name, sent where the API takes one (OpenAI's
            ``filename``, Anthropic's ``title``); ``""``: ``"document.pdf"``
            for OpenAI, none for Anthropic.
    """

    data: bytes | None = None
    url: str | None = None
    media_type: str = "application/pdf"
    name: str = ""

    def __post_init__(self) -> None:
        _check_source(self, DOCUMENT_TYPES)
        if not self.media_type:
            raise _part_error("DocumentPart", "media_type must not be empty")
        if not isinstance(self.name, str) or len(self.name) > 255 or not self.name.isprintable():
            raise _part_error(
                "DocumentPart", "name must be a str of at most 255 printable characters"
            )

    def __repr__(self) -> str:
        source = f"url={shown_url(self.url)!r}" if self.url is not None else ""
        if self.data is not None:
            source = f"data={_data_repr(self.data)}"
        name = f", name={self.name!r}" if self.name else ""
        return f"DocumentPart({source}, media_type={self.media_type!r}{name})"


ContentPart = TextPart | ImagePart | DocumentPart
"""One part of a user turn: [`TextPart`][agentrio.types.TextPart],
[`ImagePart`][agentrio.ImagePart] or [`DocumentPart`][agentrio.DocumentPart]."""


def _store_tuples(message: Message, fields: tuple[str, ...]) -> None:
    """Store each of *fields* of *message* as a tuple (given as a list, or any other
    sequence); a str, bytes or a non-sequence is an ``InvalidArgument``."""
    kind = type(message).__name__
    for name in fields:
        value = getattr(message, name)
        if type(value) is tuple:
            continue
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise InvalidArgument(
                f"{kind}.{name} must be a list or tuple, got a {type(value).__name__}"
            )
        msgspec.structs.force_setattr(message, name, tuple(value))


class ChatMessage(Message, frozen=True, tag=True, omit_defaults=True):
    """One entry of a conversation history, as models see it.

    Attributes:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        content: the text.
        tool_calls: for an assistant turn, the tool calls it asked for.
        tool_call_id: for a tool turn, the call it answers.
        name: for a tool turn, the tool's name.
        thinking: for an assistant turn, the model's thinking blocks, sent
            back first in that turn (Anthropic's thinking blocks, those with a
            signature, by the Anthropic wire; reasoning items by the OpenAI
            Responses wire; a compatible server's reasoning by the OpenAI wire
            only with its ``send_reasoning``; the others leave them out).
        is_error: for a tool turn, the call did not succeed (its status was
            ``failed``, ``timeout`` or ``denied``): Anthropic's ``is_error``.
        parts: for a user turn given as content parts (text, images,
            documents), the parts in order; ``content`` is then the text of
            its [`TextPart`][agentrio.types.TextPart]s, joined by newlines (the
            OpenAI and Anthropic wire formats send the parts, Ollama sends
            ``content`` and the images). Empty for a plain-text turn. See
            [Images and documents][images-and-documents]. For a tool turn,
            the images and documents the tool returned (see [Tools that
            return images][tools-that-return-images]).
        blocks: for an assistant turn whose answer held server-tool blocks
            or citations (Anthropic), its blocks but the thinking and tool
            calls, in order, as the API sent them: the Anthropic wire sends
            them back in place of ``content`` (the others send ``content``).

    ``tool_calls``, ``thinking``, ``parts`` and ``blocks`` take any sequence
    (a list, as one writes them) and are stored as tuples.

    Encoded without the fields that hold their defaults (``omit_defaults``;
    decoding gives them back): a checkpoint record holds every turn, and
    most turns leave most fields empty. The empty fields added with server
    tools had taken a 3-turn phase's first record from 475 to 499 bytes,
    over pymalloc's 512-byte limit once in a ``bytes`` object, so that
    10,000 durable agents' waiting records went to the C allocator and
    fragmented its heap (peak RSS +10-15 MB, see bench/checkpoint.py).
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    thinking: tuple[ThinkingBlock, ...] = ()
    is_error: bool = False
    parts: tuple[ContentPart, ...] = ()
    blocks: tuple[RawBlock, ...] = ()

    if TYPE_CHECKING:
        # What a type checker sees: any sequence where a tuple is stored (a list
        # is made a tuple by __post_init__). Keep it in step with the fields
        # (tests/test_messages.py checks that it is).
        def __init__(
            self,
            role: Literal["system", "user", "assistant", "tool"],
            content: str = "",
            tool_calls: Sequence[ToolCallRequest] = (),
            tool_call_id: str | None = None,
            name: str | None = None,
            thinking: Sequence[ThinkingBlock] = (),
            is_error: bool = False,
            parts: Sequence[ContentPart] = (),
            blocks: Sequence[RawBlock] = (),
        ) -> None: ...

    def __post_init__(self) -> None:
        # (Cheap when all are tuples, as every message the agents make has.)
        if (
            type(self.tool_calls) is not tuple
            or type(self.thinking) is not tuple
            or type(self.parts) is not tuple
            or type(self.blocks) is not tuple
        ):
            _store_tuples(self, ("tool_calls", "thinking", "parts", "blocks"))


class ModelReply(Message, frozen=True, tag=True):
    """One answer from a model: text, tool calls, or both, and the usage it reported.

    ``agentrio.testing.Reply`` is this class. A reply without tool calls that
    ended ``"length"``, ``"content_filter"`` or ``"refusal"`` ends its phase
    with ``"max_output_tokens"``, ``"content_filter"`` or ``"refusal"``; a
    ``"pause_turn"`` reply is followed by another call.

    ``tool_calls``, ``thinking`` and ``blocks`` take any sequence
    (``Reply(tool_calls=[...])``) and are stored as tuples; anything else is an
    ``InvalidArgument``.

    Attributes:
        text: the answer's text.
        tool_calls: the tool calls it asks for.
        usage: what the call consumed.
        finish_reason: why the answer ended: ``"stop"`` (the model ended its
            turn: an answer, tool calls, a stop sequence), ``"length"`` (cut
            at ``max_output_tokens``), ``"content_filter"`` (cut by the
            provider's filter), ``"refusal"`` (the model refused), or
            ``"pause_turn"`` (Anthropic paused a long turn: call again to go on).
        refusal: the refusal's text, when the provider sends it apart from
            the answer (OpenAI's ``message.refusal``); the agent uses it as
            the turn's text when *text* is empty.
        thinking: the model's thinking blocks (Anthropic extended thinking,
            OpenAI Responses reasoning items, or the reasoning an
            OpenAI-compatible server sends apart from the answer, as one block
            without a signature), kept with the assistant's turn in the
            history and sent back with it; never part of *text*.
        blocks: when the answer held server-tool blocks or citations
            (Anthropic), its blocks but the thinking and tool calls, in order
            (see [`RawBlock`][agentrio.types.RawBlock]); *text* is still the
            text of its text blocks. Kept with the assistant's turn and sent
            back with it.
    """

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = Usage()
    finish_reason: FinishReason = "stop"
    refusal: str = ""
    thinking: tuple[ThinkingBlock, ...] = ()
    blocks: tuple[RawBlock, ...] = ()

    if TYPE_CHECKING:
        # As ChatMessage's: sequences accepted, tuples stored.
        def __init__(
            self,
            text: str = "",
            tool_calls: Sequence[ToolCallRequest] = (),
            usage: Usage = ...,
            finish_reason: FinishReason = "stop",
            refusal: str = "",
            thinking: Sequence[ThinkingBlock] = (),
            blocks: Sequence[RawBlock] = (),
        ) -> None: ...

    def __post_init__(self) -> None:
        if (
            type(self.tool_calls) is not tuple
            or type(self.thinking) is not tuple
            or type(self.blocks) is not tuple
        ):
            _store_tuples(self, ("tool_calls", "thinking", "blocks"))


# -- request settings ----------------------------------------------------------------


def _bad_setting(name: str, expected: str, value: object) -> InvalidArgument:
    return InvalidArgument(f"ModelSettings.{name} must be {expected}, got {value!r}")


def _check_cache(settings: ModelSettings) -> None:
    """The prompt-caching settings: ``cache``, ``cache_control`` and OpenAI's two."""
    if settings.cache is not None and settings.cache not in _CACHE_TTLS:
        raise _bad_setting("cache", '"5m", "1h" or "off"', settings.cache)
    _check_table("cache_control", settings.cache_control)
    key = settings.prompt_cache_key
    if key is not None and (not isinstance(key, str) or not key):
        raise _bad_setting("prompt_cache_key", "a non-empty str", key)
    retention = settings.prompt_cache_retention
    if retention is not None and retention not in _RETENTIONS:
        raise _bad_setting("prompt_cache_retention", '"in-memory" or "24h"', retention)


_CACHE_TTLS = ("5m", "1h", "off")
_RETENTIONS = ("in-memory", "24h")


def _check_number(name: str, value: object, most: float | None = None) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or (most is not None and value > most)
    ):
        span = "a number >= 0" if most is None else f"a number from 0 to {most:g}"
        raise _bad_setting(name, span, value)


def _check_table(name: str, value: object, strings: bool = False, secret: bool = False) -> None:
    # (*secret*: the table may hold keys, as extra_headers and extra_body may:
    # a bad one is described, never shown)
    if value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        shown = _described(value) if secret else value
        raise _bad_setting(name, "a table (dict) with str keys", shown)
    if strings:
        for key, item in value.items():
            if not isinstance(item, str):
                got = _described(item) if secret else item
                raise _bad_setting(f"{name}[{key!r}]", "a str", got)
            if secret and ("\r" in item or "\n" in item or "\0" in item):
                raise InvalidArgument(
                    f"ModelSettings.{name}[{key!r}] holds a line break or NUL "
                    "(its value is not shown)"
                )


class _Described(str):
    """What a value is, in words, shown in place of it (its repr is the words)."""

    def __repr__(self) -> str:
        return str(self)


def _described(value: object) -> _Described:
    kinds: tuple[tuple[type, str], ...] = (
        (bool, "a bool"),
        (str, "a str"),
        (int, "an int"),
        (float, "a number"),
        (list, "a list"),
        (dict, "a table"),
    )
    for kind, words in kinds:
        if isinstance(value, kind):
            return _Described(f"{words} (not shown)")
    return _Described(f"a {type(value).__name__} (not shown)")


_SERVER_TOOL_TYPE = re.compile(r"[a-z][a-z0-9_]{0,63}_[0-9]{8}")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_SERVER_TOOL_JSON = 64 * 1024  # bytes of a server tool's definition, as JSON


class ModelSettings(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """How to sample a model call, and what else to send with it; every field is optional.

    Set per provider (``ProviderConfig.settings``, ``[providers.NAME.settings]``
    in agentrio.toml), per spec (``AgentSpec.settings``) and per run
    (``run(settings=...)``): each level's fields that are set win over the
    level before, and the three tables (``options``, ``extra_headers``,
    ``extra_body``) are merged key by key (see ``over``). ``None`` sends
    nothing: the server's default. How each wire format sends each field is
    tabled in [Request settings][request-settings].

    A setting the provider's wire format has no place for is an error naming
    it, never dropped (``ModelSettings.seed is not a setting of the anthropic
    wire format (its settings: ...)``): ``ConfigError`` in a provider's
    config, ``InvalidArgument`` elsewhere. ``extra_headers`` and
    ``extra_body`` may hold keys, so they are never shown: the repr gives
    their keys only (``ModelSettings(temperature=0.5,
    extra_headers={'Authorization': ...})``), and an error about one
    describes the bad value (``ModelSettings.extra_headers['X'] must be a
    str, got an int (not shown)``) instead of quoting it. Encoded (msgspec),
    only the fields set are written; decoding refuses unknown fields.

    Attributes:
        temperature: sampling temperature (a number >= 0).
        top_p: nucleus sampling (0 to 1).
        stop: stop sequences, a list of non-empty str stored as a tuple
            (OpenAI ``stop``, Anthropic ``stop_sequences``, Ollama
            ``options.stop``).
        seed: a sampling seed (OpenAI, Ollama).
        tool_choice: ``"auto"``, ``"none"``, ``"required"`` (a tool call is
            due), or the name of one tool the model must call (OpenAI,
            Anthropic); sent only with calls that offer tools.
        parallel_tool_calls: False asks for one tool call per reply (OpenAI
            ``parallel_tool_calls``, Anthropic ``disable_parallel_tool_use``);
            sent only with calls that offer tools.
        options: Ollama's ``options`` (``num_ctx``, ``top_k``, ``repeat_penalty``...);
            ``num_predict`` is ``Limits.max_output_tokens``, not set here.
        keep_alive: how long Ollama keeps the model loaded (``"5m"``, seconds,
            ``-1`` for ever, ``0`` to unload).
        cache: Anthropic's prompt caching: ``"5m"`` (the default: None
            is ``"5m"``), ``"1h"`` (the 1-hour TTL, whose writes cost more) or
            ``"off"``. On, the call's cache breakpoints are the last tool, the
            system prompt, the last turn's end and the previous user turn's
            end (at most the API's four); see [Prompt caching][prompt-caching].
        cache_control: Anthropic's cache marker put at each breakpoint, e.g.
            ``{"type": "ephemeral", "ttl": "1h"}`` (None: the marker of
            ``cache``; ``cache="off"`` sends none).
        prompt_cache_key: OpenAI's ``prompt_cache_key`` (chat completions
            and the Responses API): calls with the same key and prefix go to
            the same cache (a non-empty str; not sent when None).
        prompt_cache_retention: OpenAI's ``prompt_cache_retention``:
            ``"in-memory"`` or ``"24h"`` (extended caching).
        extra_headers: more HTTP headers for the request (str to str; a
            value with a line break or NUL is refused).
        extra_body: more top-level fields for the request's JSON body, added
            last (they win over the ones settings make; the fields that
            define the call, such as ``model``, ``messages``, ``tools``,
            ``stream``, the output limit and each wire's own, are refused).
        server_tools: tools the provider's server runs itself, offered
            beside the agent's (Anthropic's web search, code execution...):
            each a table as the API's ``tools`` list takes it, with a
            versioned ``type`` (``"web_search_20250305"``), a ``name``
            (``"web_search"``) and the tool's other fields (``max_uses``...),
            at most 64 KiB as JSON; names unique; a list stored as a tuple.
            The other wire formats refuse it. See [Server
            tools][server-tools].

    Raises:
        InvalidArgument: a field of the wrong type or out of range, named in
            the message (``ModelSettings.top_p must be a number from 0 to 1,
            got 1.5``).
    """

    # (The bounds are checked in __post_init__; msgspec.Meta states them for
    # decoders and schemas.)
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    options: dict[str, object] | None = None
    keep_alive: str | int | float | None = None
    cache: Literal["5m", "1h", "off"] | None = None
    cache_control: dict[str, object] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in-memory", "24h"] | None = None
    extra_headers: dict[str, str] | None = None
    extra_body: dict[str, object] | None = None
    # (a tuple once made: a list, as one writes it, is made a tuple)
    server_tools: Sequence[Mapping[str, object]] | None = None

    def __post_init__(self) -> None:
        _check_server_tools(self.server_tools)
        if isinstance(self.server_tools, list):
            msgspec.structs.force_setattr(self, "server_tools", tuple(self.server_tools))
        _check_number("temperature", self.temperature)
        _check_number("top_p", self.top_p, 1.0)
        stop = self.stop
        if stop is not None:
            if isinstance(stop, str) or not isinstance(stop, (list, tuple)):
                raise _bad_setting("stop", "a list of str", stop)
            if not all(isinstance(s, str) and s for s in stop):
                raise _bad_setting("stop", "a list of non-empty str", stop)
            if isinstance(stop, list):
                msgspec.structs.force_setattr(self, "stop", tuple(stop))
        seed = self.seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _bad_setting("seed", "an int", seed)
        choice = self.tool_choice
        if choice is not None and (not isinstance(choice, str) or not choice):
            raise _bad_setting(
                "tool_choice", '"auto", "none", "required" or a tool\'s name', choice
            )
        parallel = self.parallel_tool_calls
        if parallel is not None and not isinstance(parallel, bool):
            raise _bad_setting("parallel_tool_calls", "a bool", parallel)
        _check_table("options", self.options)
        if self.options is not None and "num_predict" in self.options:
            raise InvalidArgument(
                "ModelSettings.options must not set num_predict: it is the call's "
                "max_output_tokens (Limits.max_output_tokens)"
            )
        alive = self.keep_alive
        if alive is not None and (
            isinstance(alive, bool) or not isinstance(alive, (str, int, float))
        ):
            raise _bad_setting("keep_alive", 'a duration ("5m") or a number of seconds', alive)
        _check_cache(self)
        _check_table("extra_headers", self.extra_headers, strings=True, secret=True)
        _check_table("extra_body", self.extra_body, secret=True)

    def __repr__(self) -> str:
        # The fields that are set; extra_headers and extra_body by their keys
        # only: their values may be keys (an Authorization header, say).
        parts = []
        for name in self.fields_set():
            value = getattr(self, name)
            if name in ("extra_headers", "extra_body"):
                value = _Described("{" + ", ".join(f"{k!r}: ..." for k in value) + "}")
            parts.append(f"{name}={value!r}")
        return f"ModelSettings({', '.join(parts)})"

    def fields_set(self) -> list[str]:
        """The names of the fields that are set (not None), in declaration order."""
        return [name for name in self.__struct_fields__ if getattr(self, name) is not None]

    def over(self, base: ModelSettings | None) -> ModelSettings:
        """These settings laid over *base*: the fields set here win, tables merge by key."""
        if base is None:
            return self
        values: dict[str, object] = {}
        for name in self.__struct_fields__:
            mine, theirs = getattr(self, name), getattr(base, name)
            if mine is None:
                values[name] = theirs
            elif theirs is not None and name in _TABLES:
                values[name] = {**theirs, **mine}
            else:
                values[name] = mine
        return ModelSettings(**values)  # type: ignore[arg-type]


_TABLES = frozenset(("options", "extra_headers", "extra_body"))


def _check_server_tools(tools: object) -> None:
    if tools is None:
        return
    if isinstance(tools, (str, dict)) or not isinstance(tools, (list, tuple)):
        raise _bad_setting("server_tools", "a list of tables (dicts)", tools)
    names: set[object] = set()
    for i, tool in enumerate(tools):
        _check_server_tool(f"server_tools[{i}]", tool)
        assert isinstance(tool, dict)
        if tool["name"] in names:
            raise _bad_setting(f"server_tools[{i}].name", "a name no other has", tool["name"])
        names.add(tool["name"])


def _check_server_tool(name: str, tool: object) -> None:
    _check_table(name, tool)
    assert isinstance(tool, dict)
    kind, tool_name = tool.get("type"), tool.get("name")
    if not isinstance(kind, str) or not _SERVER_TOOL_TYPE.fullmatch(kind):
        raise _bad_setting(f"{name}.type", "a versioned tool type ('web_search_20250305')", kind)
    if not isinstance(tool_name, str) or not _TOOL_NAME.fullmatch(tool_name):
        raise _bad_setting(f"{name}.name", "1 to 64 letters, digits, '_' or '-'", tool_name)
    try:
        size = len(msgspec.json.encode(tool))
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
        raise InvalidArgument(f"ModelSettings.{name} must hold JSON values only") from None
    if size > _MAX_SERVER_TOOL_JSON:
        raise InvalidArgument(
            f"ModelSettings.{name} is {size} bytes as JSON, more than {_MAX_SERVER_TOOL_JSON}"
        )


class RunPhase(Message, frozen=True, tag=True):
    """Ask an agent to run one bounded phase; the reply is a ``PhaseResult``.

    [`AgentRef.run`][agentrio.AgentRef.run] checks its arguments and sends
    one; ``await agent.ref.ask(RunPhase(...))`` sends one without those
    checks (``max_iterations`` then defaults to 10, not to the spec's limit).

    The fields after ``direct_tool_calls`` are this phase's own lane, limits
    and model, each ``None`` for the agent's: ``lane``, ``timeout`` in seconds
    (``math.inf``: no deadline), ``max_continuation_turns``, and ``model``
    (a tier name or an ``"instance:model"`` string). A *model* the runtime's
    configuration cannot resolve ends such a phase with ``"error"`` and a
    ``PhaseError`` (``error_type="ConfigError"``); an unknown *lane* ends it
    with ``"error"`` and a ``PhaseError`` (``InvalidArgument``) before any call.

    ``parts``: the user's turn as content parts (``user_message`` is then
    their text); ``()`` for a plain-text turn.

    ``phase_id``: the phase's name in a runtime's checkpoint store
    (``open_runtime(store=...)``), by which a phase resumed after a crash is
    found (``Runtime.resumed_result``); None: one is made up (a durable
    agent's ``run()`` makes one). Unused without a store.
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
    settings: ModelSettings | None = None
    parts: tuple[ContentPart, ...] = ()
    phase_id: str | None = None


class PhaseResult(Message, Generic[OutputT], frozen=True, tag=True):
    """What a phase produced. It carries no token, cost or budget data on purpose:
    see ``AgentRef.usage`` and ``Runtime.usage``.

    It is generic in its ``output``'s type: ``PhaseResult[Movie]`` is what
    an agent spawned from an ``AgentSpec[Movie]`` (one with
    ``output_type=Movie``) returns, and a type checker knows its
    ``output`` is a ``Movie | None`` (see [Typed outputs][typed-outputs]).

    Attributes:
        final_text: the model's last text ("" if it gave none).
        tool_calls: every tool call of the phase with its result, in order.
        stop_reason: why the phase ended.
        error_type: when *stop_reason* is ``"error"``, the class name of the
            exception that ended the phase (as in its ``PhaseError`` event;
            ``"OutputInvalid"`` when the answers did not match the spec's
            ``output_type``); otherwise ``""``.
        error: when *stop_reason* is ``"error"``, its ``str()``; otherwise ``""``.
        output: when *stop_reason* is ``"done"``, the answer: the value
            parsed from it and validated as the spec's ``output_type``, or,
            without one, ``final_text``; otherwise ``None``. (A phase of
            ``direct_tool_calls`` ends ``"done"`` with no answer: ``None``
            with an ``output_type``, ``""`` without.)
    """

    final_text: str
    tool_calls: tuple[ToolResult, ...]
    stop_reason: StopReason
    error_type: str = ""
    error: str = ""
    output: OutputT | None = None

    def raise_for_error(self) -> Self:
        """Raise the phase's error if it ended with ``"error"``; else return the result.

        Named for its purpose as httpx's ``raise_for_status`` is, and chained
        the same way: ``result = (await agent.run(task)).raise_for_error()``.
        Only ``"error"`` raises: the other stop reasons (``"timeout"``,
        ``"max_iterations"``, ``"cancelled"``...) are results to read.

        Returns:
            This result, when its ``stop_reason`` is not ``"error"``.

        Raises:
            AgentrioError: the exception ``error_type`` names, made again from
                ``error`` when it is one of [`agentrio.errors`][agentrio.errors]
                (``OutputInvalid``, ``ProviderUnavailable``, ``UsageInvalid``...;
                the attributes the result does not hold, such as a
                ``ProviderError``'s ``provider``, are None), else a
                [`PhaseFailed`][agentrio.errors.PhaseFailed] that names it
                (``error_type``) and holds this result.
        """
        if self.stop_reason != "error":
            return self
        raise phase_error(self.error_type, self.error, self)


# -- agent events ------------------------------------------------------------------------


class PhaseStarted(Event, frozen=True, tag=True):
    """An agent began a phase in the context *context_label* (None: the primary one)."""

    context_label: str | None = None


class PhaseEnded(Event, frozen=True, tag=True):
    """An agent's phase ended.

    ``iterations`` counts its model calls, a final-answer call included (and a
    call cancelled in flight); ``stop_reason`` is ``"cancelled"`` when the
    caller of its ``run()`` was cancelled.
    """

    context_label: str | None = None
    stop_reason: StopReason = "done"
    iterations: int = 0


class TurnStarted(Event, frozen=True, tag=True):
    """A model call is about to be made (iteration numbers start at 1)."""

    iteration: int = 0


class TurnEnded(Event, frozen=True, tag=True):
    """A model call returned; *usage* is what the provider reported, *tool_calls*
    how many calls the reply asked for."""

    iteration: int = 0
    usage: Usage = Usage()
    tool_calls: int = 0


class ToolStarted(Event, frozen=True, tag=True):
    """A tool call started; each call that starts ends with one ``ToolEnded``.

    Calls outside the allowlist, over the tool-call budget or over
    ``Limits.max_tool_calls_per_turn``, or with arguments that could not be
    parsed, do not start; a call that the permission policy, the approver or
    a hook refuses does start, and ends with status ``"denied"``.
    """

    tool: str = ""
    call_id: str = ""


class ToolEnded(Event, frozen=True, tag=True):
    """A tool call ended with *status* (a call cut short by the phase's timeout or
    its cancelled caller ends with ``"timeout"``).

    Attributes:
        tool: the tool's name.
        call_id: the call's id.
        status: the result's status.
        duration: seconds on Trio's clock from the call's start (for a call
            that waited for a ``Limits.max_parallel_tools`` slot, from when it
            got one) to its result.
        arguments_preview: the call's arguments as JSON, at most 200 characters
            (a longer text is cut and ends with ``"…"``), the agent's
            ``AgentSpec.env`` values replaced by ``[redacted]``.
        output_preview: the result's content, bounded and redacted the same way.
    """

    tool: str = ""
    call_id: str = ""
    status: ToolStatus = "ok"
    duration: float = 0.0
    arguments_preview: str = ""
    output_preview: str = ""


class ContextTruncated(Event, frozen=True, tag=True):
    """Old turns were left out of one model call to fit the context window.

    ``dropped`` messages, and the estimated size before and after; a tool call
    and its results are left out together.
    """

    context_label: str | None = None
    dropped: int = 0
    tokens_before: int = 0
    tokens_after: int = 0


class Stalled(Event, frozen=True, tag=True):
    """The agent repeated itself; *why* says how. The phase ends with ``stalled``
    after one last call without tools.

    *why* is ``"repeated call name({...})"`` (``Limits.max_identical_calls``
    at 2, the default; ``"repeated call name({...}) three times"`` at 3, and so
    on) or ``"three identical results from name"``
    (``Limits.max_identical_results`` at 3, the default; ``"two identical
    results from name"`` at 2, and so on; numbers past ten are digits).
    """

    why: str = ""


class BudgetExhausted(Event, frozen=True, tag=True):
    """A budget limit refused a model call (the phase ends) or a tool call (it is
    denied); *limit* names it: ``"max_requests"``, ``"max_input_tokens"``,
    ``"max_output_tokens"``, ``"max_total_tokens"``, ``"max_cost_usd"`` or
    ``"max_tool_calls"``."""

    limit: str = ""


class TextDelta(Event, frozen=True, tag=True):
    """A piece of a model's answer as it streams in: only streaming models publish it
    (a provider with ``stream = true``), and only while someone is subscribed."""

    text: str = ""


class PhaseError(Event, frozen=True, tag=True):
    """A phase ended with ``error``: the model call or a hook raised.

    ``error_type`` is the exception's class name, ``error`` its ``str()``; the
    phase's ``PhaseResult`` carries the same two strings.
    """

    error_type: str = ""
    error: str = ""


# -- context actors ----------------------------------------------------------------------


class ContextRead(Message, frozen=True, tag=True):
    """Ask a context actor for its whole history (a tuple of ``ChatMessage``).

    Agents send it once at the start of a phase that continues an existing
    context.
    """


class ContextReadTurns(Message, frozen=True, tag=True):
    """Ask a context actor for its whole history with the time of each turn (a tuple
    of ``Turn``); ``AgentRef.history`` sends it."""


class ContextAppend(Message, frozen=True, tag=True):
    """Tell a context actor to append *messages* to its history.

    Agents send one at the end of each phase with the phase's new turns and
    their times.

    Attributes:
        messages: the turns to append, oldest first.
        timestamps: when each was made (``time.time()``), one per message;
            if their numbers differ, every message gets the time it is appended.
    """

    messages: tuple[ChatMessage, ...] = ()
    timestamps: tuple[float, ...] = ()


class ContextReset(Message, frozen=True, tag=True):
    """Tell a context actor to forget its history (and its times).

    Sent by a phase with ``continue_context=False``.
    """


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
    bool or an [`agentrio.Approval`][agentrio.Approval].

    Attributes:
        tool_call: the call waiting for approval.
        agent: the path of the agent that wants to make it.
        request_id: a number unique within the runtime, repeated in the
            ``ConfirmationReceived``.
    """

    tool_call: ToolCallRequest = ToolCallRequest("")
    agent: str = ""
    request_id: int = 0


class ConfirmationReceived(Event, frozen=True, tag=True):
    """An approver answered (or ``approval_timeout`` passed, which always denies)."""

    tool: str = ""
    request_id: int = 0
    approved: bool = False
    reason: str = ""


class PermissionDenied(Event, frozen=True, tag=True):
    """A tool call was refused: outside the allowlist, or by the permission policy,
    the approver (or its absence, failure or timeout) or the ``pre_tool_use``
    hook. (A call over the tool-call budget publishes ``BudgetExhausted``
    instead.)"""

    tool: str = ""
    reason: str = ""


class SubagentStarted(Event, frozen=True, tag=True):
    """The agent at ``path`` spawned the subagent at ``child``.

    With ``AgentRef.spawn_subagent``, ``AgentRef.map``, ``AgentRef.helper`` or
    an agent tool. (``Runtime.map`` and ``Runtime.helper`` spawn
    agents with no parent, and publish none.)
    """

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

    ``replaced`` messages gave way to one; the summary call's *usage* is
    charged to the budget.

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

    It does not try again in that phase.

    Attributes:
        context_label: the context (None: the primary one).
        error_type: the summary call's exception class name
            (``"ProviderUnavailable"``, ...; ``"ValueError"`` for an answer
            with no text, ``"UsageInvalid"`` for unusable usage),
            ``"BudgetExhausted"`` (no room for the summary call) or
            ``"ContextChanged"`` (the stored history changed while the
            summary was made).
        error: what went wrong.
    """

    context_label: str | None = None
    error_type: str = ""
    error: str = ""


class WorkspaceWriteFailed(Event, frozen=True, tag=True):
    """An agent's ``run_summary.json`` could not be written at the end of a phase;
    the phase's result stands (its ``run()`` returns it all the same).

    The next phase's summary (if it can be written) counts this phase too.

    Attributes:
        file: the file that could not be written.
        error_type: the exception's class name (``"OSError"``,
            ``"PermissionError"``, ``"IsADirectoryError"``, ...);
            ``"TimeoutError"`` for a write that took longer than the agent's
            supervisor's ``shutdown_timeout`` (in real time) and was
            abandoned (its thread left to finish on its own).
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


# -- plans, goals and delegation (#26: planning) ---------------------------------------

PlanningMode = Literal["auto", "on", "off"]
"""When a run is planned (``Planning.mode``, ``run(planning=...)``): ``"on"``
always, ``"off"`` never, ``"auto"`` when the spec's ``Planning.needs_plan``
says the request needs a plan."""

TaskStatus = Literal["pending", "running", "done", "failed", "stopped", "dropped"]
"""Where a task of a plan stands: ``"pending"`` (not begun), ``"running"``,
``"done"``, ``"failed"`` (its step failed, and the plan was revised or gave
up), ``"stopped"`` (its step was cut short by the budget, a stop request, the
run's deadline or a cancelled caller) or ``"dropped"`` (a revision replaced
it, or the plan ended before it)."""


class PlanTask(Message, frozen=True, tag=True):
    """One task of a plan as it stands, in ``TaskUpdated`` and ``PlanningEnded`` events.

    Attributes:
        id: ``"t1"``, ``"t2"``...: numbered in the order the tasks were
            planned, across revisions.
        description: what the task is (at most 1,000 characters).
        status: where it stands (a [`TaskStatus`][agentrio.types.TaskStatus]).
        agent: the delegate it is handed to (``AgentSpec.delegation``), or
            ``None``: the agent's own steps.
    """

    id: str
    description: str
    status: TaskStatus = "pending"
    agent: str | None = None


class PlanningStarted(Event, frozen=True, tag=True):
    """A planned run asks its planner for a plan (``revision`` 0), or for a
    revised one after a step failed (1, 2...); ``request`` is the request's
    first 200 characters."""

    request: str = ""
    revision: int = 0


class PlanningEnded(Event, frozen=True, tag=True):
    """The planner answered: ``tasks`` is the plan as it now stands (done tasks
    first), ``goal`` what it is for; ``stop_reason`` is the planning call's
    (``"done"``, or why there is no plan: the run then ends with it)."""

    revision: int = 0
    goal: str = ""
    tasks: tuple[PlanTask, ...] = ()
    stop_reason: str = "done"


class StepStarted(Event, frozen=True, tag=True):
    """A task of the plan begins as a step: ``number`` of ``total`` (from 1);
    ``agent`` is the delegate that runs it (``None``: the agent's own steps)."""

    task_id: str = ""
    description: str = ""
    number: int = 0
    total: int = 0
    agent: str | None = None


class StepEnded(Event, frozen=True, tag=True):
    """A step ended: ``status`` is its task's (``"done"``, ``"failed"`` or
    ``"stopped"``), ``stop_reason`` its phase's, ``why`` why it failed (``""``
    if it did not)."""

    task_id: str = ""
    status: TaskStatus = "done"
    stop_reason: str = ""
    number: int = 0
    total: int = 0
    why: str = ""


class TaskUpdated(Event, frozen=True, tag=True):
    """The plan's tasks changed: every task, with its status."""

    tasks: tuple[PlanTask, ...] = ()


class GoalExtracted(Event, frozen=True, tag=True):
    """A tracked run's goal (``Planning(goal_tracking=True)``): the plan's, or
    the request itself for a run without a plan; ``criteria`` say when it is met."""

    goal: str = ""
    criteria: tuple[str, ...] = ()


class GoalProgress(Event, frozen=True, tag=True):
    """A step of a tracked run is done: ``completed`` of ``total`` steps
    (``progress`` is their ratio, 0 to 1)."""

    goal: str = ""
    completed: int = 0
    total: int = 0
    progress: float = 0.0


class GoalAchieved(Event, frozen=True, tag=True):
    """A tracked run met its goal: every step done and the final answer given,
    ``seconds`` after the run began (Trio's clock)."""

    goal: str = ""
    total_steps: int = 0
    seconds: float = 0.0


class SubagentProgress(Event, frozen=True, tag=True):
    """A delegated child (``AgentSpec.delegation``) took a step: a model turn
    (``tool`` None) or a tool call; ``summary`` is its ``StepInfo.summary``
    (at most 80 characters). Published between its ``SubagentStarted`` and
    ``SubagentEnded``, with the parent's path."""

    child: str = ""
    step: int = 0
    tool: str | None = None
    summary: str = ""


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

    Its result is ``"denied"``, with the content ``tool '<tool>' was given up
    after <attempts> attempts (a dead letter of the '<lane>' lane); the last
    raised <error_type>: <error>``, which the model sees. (Not to be confused
    with ``DeadLetter``, a message no actor handled.)

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


class PhaseResumed(Event, frozen=True, tag=True):
    """A phase cut short (by a crash of the process, or of its agent) goes on
    from its last completed turn; see [Surviving a crash][surviving-a-crash].

    Attributes:
        phase_id: the phase's id (``run(phase_id=...)``).
        turns: the messages of the phase restored from the checkpoints.
        restart: True when its agent crashed and was restarted in this
            process; False when it is resumed from the store by a new runtime.
    """

    phase_id: str = ""
    turns: int = 0
    restart: bool = False


class ResumedPhaseEnded(Event, frozen=True, tag=True):
    """A phase that a runtime resumed from its store has ended; its result is
    [`Runtime.resumed_result`][agentrio.Runtime.resumed_result]``(phase_id)``.

    Attributes:
        phase_id: the phase's id.
        stop_reason: why it ended (``""`` when its agent crashed or stopped
            first: ``resumed_result`` raises that error).
    """

    phase_id: str = ""
    stop_reason: str = ""


# -- sessions and deferred decisions (#27) -------------------------------------------


class PhaseDeferred(Event, frozen=True, tag=True):
    """A durable phase is parked: its approver deferred a decision, or a tool
    deferred its result (``agentrio.Defer``). Its state is in the checkpoint
    store; it goes on when every call it waits for is decided; see
    [Deferred decisions][deferred-decisions].

    Attributes:
        phase_id: the phase's id.
        waiting: how many of its calls wait for a decision or a result.
    """

    phase_id: str = ""
    waiting: int = 0


class CheckpointTorn(Event, frozen=True, tag=True):
    """The checkpoint store held a torn last record (the last write of a process
    that died), left out when the runtime opened. Its ``path`` is ``""``.

    Attributes:
        source: the file (or table) that holds it.
        offset: where in *source* it starts.
    """

    source: str = ""
    offset: int = 0


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


class Waited(Event, frozen=True, tag=True):
    """An agent's model call waited: for room in its budget, or at its provider.

    Published when the wait ends, with the agent's path, and only when the
    call did wait (a call that finds room at once publishes nothing); a
    wait cut short by a cancellation is not published. The wait began
    *seconds* before the event (a trace file's record time minus *seconds*).

    Attributes:
        what: what the call waited for: ``"budget"`` (calls in flight held
            the room it needs: the budget's queue), and at a provider
            ``"rate_limit"`` (the pause after a 429, its ``Retry-After``),
            ``"retry"`` (the backoff before a retry), ``"concurrency"`` (a
            slot of ``max_concurrent`` or of its lane's cap),
            ``"requests_per_minute"`` or ``"tokens_per_minute"``,
            ``"rate_limit_headers"`` (held until a count resets, the
            server's rate-limit headers having said too little was left).
        seconds: how long it waited.
        provider: the provider's name, for a wait at a provider (``""`` for
            the budget).
    """

    what: str = ""
    seconds: float = 0.0
    provider: str = ""


class RuntimeOpened(Event, frozen=True, tag=True):
    """A runtime opened, with its root budget's limits (None: no limit).

    Published once, before any agent runs, and only if someone listens
    then: a trace file (``open_runtime(trace=...)``) begins with it, so its
    reader knows the budget the run had. Its ``path`` is ``""``.

    Attributes:
        version: agentrio's version.
        max_total_tokens: the root budget's ``max_total_tokens``.
        max_input_tokens: its ``max_input_tokens``.
        max_output_tokens: its ``max_output_tokens``.
        max_requests: its ``max_requests``.
        max_tool_calls: its ``max_tool_calls``.
        max_cost_usd: its ``max_cost_usd``.
    """

    version: str = ""
    max_total_tokens: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_requests: int | None = None
    max_tool_calls: int | None = None
    max_cost_usd: float | None = None


class TraceWriteFailed(Event, frozen=True, tag=True):
    """The trace file (``open_runtime(trace=...)``) could not be written: the trace
    writer stopped writing, and drops (and counts) every event from then on. The
    agents go on as if nothing happened; when the runtime closes, it raises
    [`TraceError`][agentrio.errors.TraceError]. Published once; its ``path`` is ``""``
    (not at all when the write that fails is the last, made as the runtime
    closes: its bus has closed; the ``TraceError`` still comes).

    Attributes:
        file: the trace file.
        error_type: the exception's class name (``"OSError"``, ``"BrokenPipeError"``...).
        errno: the error's symbolic name (``"ENOSPC"``, ``"EIO"``...), ``""`` if it has none.
        error: the operating system's words for it (``"No space left on device"``),
            never the content of an event.
        written: events written before it.
        dropped: events dropped so far (the batch that failed, and what waited).
    """

    file: str = ""
    error_type: str = ""
    errno: str = ""
    error: str = ""
    written: int = 0
    dropped: int = 0


# -- Memory and context providers (#26) ---------------------------------------------------


class MemoryStored(Event, frozen=True, tag=True):
    """An item went into a memory (``AgentSpec(memory=...)``): kept from a tool's
    result by the memory's ``keep`` rule, or stored by ``remember()``.

    Attributes:
        memory: the memory's name (an agent's own memory: the agent's path).
        item_id: the item's number in its memory.
        source: where it came from: the tool's name, or ``"api"``.
        chars: its length, as kept.
        cut: it was longer than ``Memory.max_item_chars`` and was cut.
        evicted: how many items were dropped to make room for it.
    """

    memory: str = ""
    item_id: int = 0
    source: str = ""
    chars: int = 0
    cut: bool = False
    evicted: int = 0


class MemoryRecalled(Event, frozen=True, tag=True):
    """Items of a memory were recalled into a model call's context.

    Attributes:
        memory: the memory's name.
        item_ids: the items given to the model, best first.
        tokens: their estimated size in the call.
    """

    memory: str = ""
    item_ids: tuple[int, ...] = ()
    tokens: int = 0


class MemoriesSearched(Event, frozen=True, tag=True):
    """A memory was searched from the API (``AgentRef.memory.search``).

    Attributes:
        memory: the memory's name.
        found: how many items the search returned.
    """

    memory: str = ""
    found: int = 0


class MemoryCleared(Event, frozen=True, tag=True):
    """A memory was emptied (``clear()``).

    Attributes:
        memory: the memory's name.
        items: how many items it held.
    """

    memory: str = ""
    items: int = 0


class ContextProvided(Event, frozen=True, tag=True):
    """A context provider added text to a model call's context.

    Attributes:
        provider: the provider's name.
        tokens: the estimated size of what it added.
        cut: what it gave was over the allowance left and was cut.
        preview: the first 200 characters of what it added.
    """

    provider: str = ""
    tokens: int = 0
    cut: bool = False
    preview: str = ""


class ContextProviderFailed(Event, frozen=True, tag=True):
    """A context provider was skipped for one model call: it timed out, raised, or
    gave something that is not text. The call is made without it.

    Attributes:
        provider: the provider's name.
        reason: ``"timeout"``, ``"error"`` or ``"not_text"``.
        error_type: the exception's class name (``""`` for a timeout).
        error: what went wrong, at most 200 characters.
    """

    provider: str = ""
    reason: str = ""
    error_type: str = ""
    error: str = ""


# -- #26: tier fallback, skills, security (one block) ----------------------------------------


class TierFellBack(Event, frozen=True, tag=True):
    """A tier without a model (``""`` in ``[tiers]``) was asked for, and the call
    runs on the nearest configured tier below it in ``escalation`` instead.

    Published with the agent's path: when an agent is spawned on such a tier,
    when a run is made on one (``run(model=...)``), and by ``respond()`` for a
    route on one, before its phase.

    Attributes:
        tier: the tier asked for.
        to: the tier the call runs on.
    """

    tier: str = ""
    to: str = ""


class SkillActivated(Event, frozen=True, tag=True):
    """The model activated a skill (the ``activate_skill`` tool); from the next
    model call on, the phase offers and allows only the skill's tools.

    Attributes:
        skill: the skill's name.
        tools: the tools the phase allows now, sorted (the skill's, within the
            agent's, and ``activate_skill``).
    """

    skill: str = ""
    tools: tuple[str, ...] = ()


class TaintBlocked(Event, frozen=True, tag=True):
    """A call to a sensitive tool carried text that came from an untrusted tool's
    result (see ``agentrio.SecurityProvider``).

    Attributes:
        tool: the sensitive tool called.
        call_id: the call's id.
        argument: where in the arguments the tainted text was found
            (``"to"``, ``"body"``, ``"items[2]"``), never the text itself.
        sources: the untrusted tools whose results it came from.
        action: ``"ask"`` (the agent's approver is asked) or ``"deny"``.
    """

    tool: str = ""
    call_id: str = ""
    argument: str = ""
    sources: tuple[str, ...] = ()
    action: str = "ask"


class OutputSanitised(Event, frozen=True, tag=True):
    """A model's answer held text that a rule of the agent's security provider
    redacts (a key, a password); the answer was changed before anyone saw it.

    Attributes:
        rules: the names of the rules that matched, sorted.
        count: how many redactions were made.
    """

    rules: tuple[str, ...] = ()
    count: int = 0
