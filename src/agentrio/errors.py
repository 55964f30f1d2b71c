"""The one exception tree of agentrio: ``agentrio.errors``, the public home of every exception.

The exceptions code usually catches are at the top level too
(``agentrio.ActorCrashed`` is ``agentrio.errors.ActorCrashed``): ``AgentrioError``,
``InvalidArgument``, ``ConfigError``, ``ActorError``, ``ActorCrashed``,
``ActorStopped``, ``AskTimeout`` and ``ProviderError``, and ``ModelRetry``,
which an output validator raises. The rest are spelled
``agentrio.errors.MailboxFull``.

Misuse of the API (a bug in the calling code) and failures at run time (an
actor crashed, a reply did not come) are separate branches, so that code can
catch the second without hiding the first:

    AgentrioError
    ├── UsageError                  the caller did something wrong
    │   ├── InvalidArgument         a bad value or type (also TypeError, ValueError)
    │   ├── NotAMessage             sent something that is not an agentrio.Message
    │   ├── DuplicateName           a name already taken in that supervisor
    │   ├── UnknownName             lookup of a name nobody holds (also LookupError)
    │   ├── SelfAsk                 an actor asked itself: it would deadlock
    │   ├── RuntimeClosed           spawn on a runtime or supervisor that has stopped
    │   ├── ConfigError             agentrio.toml (or a model string) is wrong: file, key, why
    │   └── PermissionEscalation    a subagent asked for tools its parent does not have
    ├── ProviderError               a model provider failed (after its retries)
    │   ├── RateLimited             429 past the retries; carries retry_after
    │   ├── ProviderUnavailable     connection failures, 5xx, or the circuit breaker is open
    │   ├── BadResponse             unparsable, a stream cut short, or past a size limit
    │   │   └── UsageInvalid        the usage reported is negative, NaN or infinite
    │   ├── AuthError               401 / 403: the key is missing or wrong
    │   └── ContextTooLong          the request is over the model's context window
    ├── HelperTurnsExceeded         a helper used its turns without a final answer
    ├── OutputInvalid               a typed answer failed validation past its retries
    ├── PhaseFailed                 raise_for_error() of a phase ended by another exception
    ├── PlanFailed                  a planned run's step failed past its revisions
    ├── ToolError                   a tool call could not produce a result
    │   ├── ToolArgumentsInvalid    the arguments do not match the tool's schema
    │   └── ToolResultInvalid       the result cannot be encoded as JSON
    ├── TraceError                  a trace file cannot be opened or written, or a bad line
    ├── RemoteError                 an exception of a cluster's host, of a type not rebuilt here
    ├── StoreError                  a checkpoint store cannot be opened, read or written
    │   ├── StoreCorrupt            a damaged record (not the torn tail): source and offset
    │   ├── StoreLocked             another runtime owns the store: names the holder
    │   └── SpecVersionMismatch     an unfinished phase's spec version is not its factory's
    └── ActorError                  something went wrong with an actor at run time
        ├── ActorCrashed            handle() raised; carries the original exception
        ├── ActorStopped            the actor has stopped; the message was not delivered
        ├── AskTimeout              no reply within the timeout (also TimeoutError)
        ├── MailboxFull             send_nowait() on a full mailbox
        ├── HostLost                a cluster's host is gone: the calls waiting on it fail
        └── RestartIntensityExceeded  a supervisor gave up restarting a child
    ModelRetry                      not an error: an output validator refuses an answer with it

``ModelRetry`` stands apart: it is no error but what an output validator of
yours raises to refuse an answer (agentrio never raises it at you).

Errors from the libraries underneath (trio, msgspec, httpx) are translated at
the boundary with ``raise ... from exc``.
"""

from __future__ import annotations

import inspect

__all__ = [
    "ActorCrashed",
    "ActorError",
    "ActorStopped",
    "AgentrioError",
    "AskTimeout",
    "AuthError",
    "BadResponse",
    "ConfigError",
    "ContextTooLong",
    "DuplicateName",
    "HelperTurnsExceeded",
    "HostLost",
    "InvalidArgument",
    "MailboxFull",
    "ModelRetry",
    "NotAMessage",
    "OutputInvalid",
    "PermissionEscalation",
    "PhaseFailed",
    "PlanFailed",
    "ProviderError",
    "ProviderUnavailable",
    "RateLimited",
    "RemoteError",
    "RestartIntensityExceeded",
    "RuntimeClosed",
    "ToolArgumentsInvalid",
    "ToolError",
    "ToolResultInvalid",
    "TraceError",
    "SelfAsk",
    "SpecVersionMismatch",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "UnknownName",
    "UsageError",
    "UsageInvalid",
]


class AgentrioError(Exception):
    """The root of every exception agentrio raises on purpose."""


class UsageError(AgentrioError):
    """The calling code used the API wrongly; fix the call, do not retry it."""


class InvalidArgument(UsageError, TypeError, ValueError):
    """An argument had the wrong type or value; the message names it."""


class NotAMessage(UsageError, TypeError):
    """Something that is not an [`agentrio.Message`][agentrio.Message] was sent to an actor."""


class DuplicateName(UsageError):
    """A name is already taken by a live child of the same supervisor."""


class UnknownName(UsageError, LookupError):
    """No live actor or supervisor holds the name that was looked up."""


class SelfAsk(UsageError):
    """An actor asked itself from inside ``handle``: it could never answer."""


class RuntimeClosed(UsageError):
    """A spawn was attempted on a runtime or supervisor that has stopped."""


class ConfigError(UsageError, ValueError):
    """The configuration (agentrio.toml, a tier, a model string or a ``ProviderConfig``)
    is wrong.

    The message names the file, the key and what was expected.
    """


class PermissionEscalation(UsageError):
    """A subagent (or an agent tool's, a ``map``'s or a session helper's agent) was
    given tools its parent may not use."""


class HelperTurnsExceeded(AgentrioError):
    """A helper reached its ``max_turns`` without a final answer.

    Attributes:
        result: what it did get done (a
            [`agentrio.types.HelperResult`][agentrio.types.HelperResult]).
    """

    def __init__(self, message: str, *, result: object) -> None:
        super().__init__(message)
        self.result = result


class OutputInvalid(AgentrioError):
    """The model's answer did not match the agent's ``output_type``, past its retries.

    A phase is not ended by raising it: a phase of an agent with an
    ``AgentSpec.output_type`` whose answers all failed validation ends with
    ``stop_reason == "error"``, ``error_type == "OutputInvalid"`` and, in
    ``error``, why the last answer was refused; its ``output`` is ``None``.
    See [Typed outputs][typed-outputs].
    """


class PhaseFailed(AgentrioError):
    """A phase ended with ``"error"`` by an exception that is not one of
    ``agentrio.errors`` (a ``ValueError`` of an ``on_step`` hook, a model's own
    exception): what [`PhaseResult.raise_for_error`][agentrio.PhaseResult.raise_for_error]
    raises for it. Its message is ``"<error_type>: <error>"``.

    Attributes:
        error_type: the class name of the exception that ended the phase.
        result: the phase's [`PhaseResult`][agentrio.PhaseResult].
    """

    def __init__(self, message: str, *, error_type: str, result: object) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.result = result


class PlanFailed(AgentrioError):
    """A planned run (``AgentSpec.planning``) gave up: a step failed and the plan
    had been revised ``Planning.max_revisions`` times already.

    A run is not ended by raising it: the run's result has ``stop_reason ==
    "error"``, ``error_type == "PlanFailed"`` and, in ``error``, which task
    failed and why; ``raise_for_error()`` raises it. See [Planning][planning].
    """


def phase_error(error_type: str, error: str, result: object) -> AgentrioError:
    """The exception a phase's result names: its class (*error_type*) if it is one
    of this module's, made with *error*, else a `PhaseFailed`.

    The attributes an error's constructor asks for and the result does not
    hold (a ``ProviderError``'s ``provider`` and ``status``, an
    ``ActorError``'s ``path``...) are None.
    """
    cls = globals().get(error_type) if error_type in __all__ else None
    if not (isinstance(cls, type) and issubclass(cls, AgentrioError)) or cls is PhaseFailed:
        return PhaseFailed(f"{error_type}: {error}", error_type=error_type, result=result)
    try:
        return cls(error)
    except TypeError:  # keyword-only attributes: not in the result
        made = cls.__new__(cls, error)
        Exception.__init__(made, error)
        for name, param in inspect.signature(cls.__init__).parameters.items():
            if param.kind is inspect.Parameter.KEYWORD_ONLY:
                setattr(made, name, None)
        return made


class ModelRetry(Exception):
    """Raised by an output validator to refuse the answer and ask the model again.

    Not an [`AgentrioError`][agentrio.errors.AgentrioError]: agentrio never
    raises it at you. Its message is what the model is told of why its answer
    was refused (cut at 300 characters), in a user turn of the
    conversation; past the spec's ``output_retries`` the phase ends with
    ``"error"`` and [`OutputInvalid`][agentrio.errors.OutputInvalid], which
    names the last reason. See [Typed outputs][typed-outputs].

    Example:

        def in_the_past(movie: Movie) -> None:
            if movie.year > 2025:
                raise agentrio.ModelRetry(f"{movie.year} is in the future")

        spec = AgentSpec("critic", model, output_type=Movie, output_validators=[in_the_past])

    Args:
        message: why the answer was refused, for the model.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ToolError(AgentrioError):
    """A tool call could not produce a result; raised by ``Tool.validate`` and
    ``Tool.call``. Inside a phase it never escapes: the model sees a ``failed``
    result instead."""


class ToolArgumentsInvalid(ToolError, ValueError):
    """The arguments do not match the tool's schema (the tool did not run)."""


class ToolResultInvalid(ToolError, TypeError):
    """The tool returned something that cannot be encoded as JSON."""


class ProviderError(AgentrioError):
    """A model provider failed after its retries; the agent ends the phase with ``error``.

    It reaches your code only when you call a provider yourself.

    Attributes:
        provider: the name of the provider instance.
        status: the HTTP status, if a response came.
    """

    def __init__(self, message: str, *, provider: str, status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class RateLimited(ProviderError):
    """The provider kept answering 429 past the retries, or asked to wait longer
    than the provider's ``max_retry_wait`` (then the call fails at once).

    Attributes:
        retry_after: the seconds it asked to wait, if it said (the server's
            value, even beyond the ceiling).
    """

    def __init__(
        self, message: str, *, provider: str, status: int | None = 429, retry_after: float | None
    ) -> None:
        super().__init__(message, provider=provider, status=status)
        self.retry_after = retry_after


class ProviderUnavailable(ProviderError):
    """Connections failed, attempts timed out, 5xx answers kept coming, or the circuit
    breaker is open."""


class BadResponse(ProviderError):
    """The response could not be understood: not JSON, the wrong shape, or a cut stream;
    or it passed a size limit (``max_response_bytes``, ``max_line_bytes``,
    ``max_reply_chars``), which the message names (``... larger than
    max_response_bytes (67108864 bytes); the connection was dropped``): that
    one at once, not retried."""


class UsageInvalid(BadResponse):
    """A model reported usage the budget cannot charge: a ``ModelReply.usage`` that
    is not a ``Usage`` (``None``, a tuple, a dict), a token count that is not an
    int >= 0, or a cost that is negative, NaN or infinite (from a
    ``ModelReply``, or through an ``AttemptMeter``).

    The phase ends with ``error`` (its ``PhaseError`` has
    ``error_type="UsageInvalid"``) and the call's reservation is charged as
    spent, never refunded. Its ``provider`` is the provider's name for a
    ``ProviderModel``, else the model's class name. (A provider's wire formats
    read a malformed count in an HTTP answer as 0, so this comes from model
    objects.)
    """


class AuthError(ProviderError):
    """401 or 403: the API key is missing or wrong (never retried)."""


class ContextTooLong(ProviderError):
    """The request is over the model's context window, as the server said: OpenAI's
    ``context_length_exceeded``, Anthropic's "prompt is too long", or the like
    text of a compatible server (vLLM, llama.cpp, Ollama, LM Studio,
    OpenRouter, Gemini). Never retried: the same request would fail again.

    In an agent's phase with ``AgentSpec.compaction``, the history is compacted
    (what it keeps sized to *limit*, when the server said it) and the call made
    once more; otherwise (or if it is still too long) the phase ends with
    ``"error"`` and ``error_type == "ContextTooLong"``.

    Attributes:
        limit: the context window in tokens, if the server said (else None).
        requested: the tokens the request came to as the server counted them
            (its input, or its input and the output asked for, whichever the
            server reported), if it said (else None).
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = 400,
        limit: int | None = None,
        requested: int | None = None,
    ) -> None:
        super().__init__(message, provider=provider, status=status)
        self.limit = limit
        self.requested = requested


class TraceError(AgentrioError):
    """A trace file could not be opened or written, or a line of it is not a trace
    record (or is longer than ``max_line_bytes``); the message names the file (and
    the line), never a line's or an event's content.

    A trace file that could not be written is raised by ``open_runtime`` when its
    block ends normally, after every phase ended as it would have (the agents never
    see it); a [`TraceWriteFailed`][agentrio.events.TraceWriteFailed] event said so
    when it happened."""


class RemoteError(AgentrioError):
    """An exception raised on a host of an ``agentrio.ray`` cluster, of a class this
    process does not rebuild (agentrio's own errors are rebuilt as themselves).

    Attributes:
        error_type: the class name of the exception raised there.
        host: the index of the host it was raised on.
    """

    def __init__(self, message: str, *, error_type: str, host: int) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.host = host


class StoreError(AgentrioError):
    """A checkpoint store could not be opened, read or written; the message names
    the store's file (never a record's content)."""


class StoreCorrupt(StoreError):
    """A record of a checkpoint store is damaged or of an unknown type, somewhere
    other than a torn last record (which is left out, not raised).

    Attributes:
        source: the file (or table) holding it.
        offset: where in *source* it starts (a byte offset, or a row id).
    """

    def __init__(self, message: str, *, source: str, offset: int) -> None:
        super().__init__(message)
        self.source = source
        self.offset = offset


class StoreLocked(StoreError):
    """A checkpoint store is owned by another runtime (of this process or another):
    a store has one owner at a time, so that no phase is resumed, nor any tool run,
    by two runtimes at once.

    Attributes:
        path: the store's path (its directory, its database file, or a
            ``PostgresStore``'s ``path``).
        holder: who holds it, as its lock file (or table) says (``"pid 4242 on host
            'build-7'"``), or ``"an unknown process"``; read back bounded and
            reduced to safe characters.
    """

    def __init__(self, message: str, *, path: str, holder: str) -> None:
        super().__init__(message)
        self.path = path
        self.holder = holder


class SpecVersionMismatch(StoreError):
    """A checkpoint store holds an unfinished phase begun under another version of
    its spec than the one its registered factory makes now (``AgentSpec.version``),
    and that spec gives no ``migrate`` function: the phase is not resumed under
    code it was not written for. Raised by ``open_runtime`` as it opens the store.

    Attributes:
        spec: the spec's registered name.
        phase_id: the phase's id.
        recorded: the version the phase began under (None: none was set).
        current: the version the factory's spec has now (None: none).
    """

    def __init__(
        self,
        message: str,
        *,
        spec: str,
        phase_id: str,
        recorded: str | None,
        current: str | None,
    ) -> None:
        super().__init__(message)
        self.spec = spec
        self.phase_id = phase_id
        self.recorded = recorded
        self.current = current


class ActorError(AgentrioError):
    """Something went wrong with an actor at run time.

    Attributes:
        path: the path of the actor concerned (``"workers/w1"``).
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class ActorCrashed(ActorError):
    """The actor's ``handle`` raised while serving the asked message.

    Attributes:
        cause: the exception the actor raised (also ``__cause__``).
    """

    def __init__(self, message: str, *, path: str, cause: BaseException) -> None:
        super().__init__(message, path=path)
        self.cause = cause
        self.__cause__ = cause


class ActorStopped(ActorError):
    """The actor has stopped (or is stopping), so the message was not delivered.

    Attributes:
        reason: why it stopped: ``"stopped"``, ``"cancelled"`` or ``"crashed"``.
    """

    def __init__(self, message: str, *, path: str, reason: str) -> None:
        super().__init__(message, path=path)
        self.reason = reason


class AskTimeout(ActorError, TimeoutError):
    """No reply arrived within the ``timeout`` given to ``ask``."""


class MailboxFull(ActorError):
    """``send_nowait`` found the actor's bounded mailbox full."""


class HostLost(ActorError):
    """A host of an ``agentrio.ray`` cluster is gone (its Ray actor died, or a
    batch to it could not be delivered): what waited on it fails with this.

    Attributes:
        path: the path of the agent or actor whose call was lost (``""`` when
            the call was the host's own).
        host: the index of the host.
    """

    def __init__(self, message: str, *, path: str, host: int) -> None:
        super().__init__(message, path=path)
        self.host = host


class RestartIntensityExceeded(ActorError):
    """A supervisor saw more restarts within its period than it allows, and failed.

    Attributes:
        path: the supervisor.
        child: the path of the child whose crash went over the limit.
        cause: that child's exception (also ``__cause__``).
    """

    def __init__(self, message: str, *, path: str, child: str, cause: BaseException) -> None:
        super().__init__(message, path=path)
        self.child = child
        self.cause = cause
        self.__cause__ = cause
