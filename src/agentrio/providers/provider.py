"""Provider: one model endpoint (one key, one connection pool) shared by every agent using it.

A provider has one request method, [`Provider.complete`][agentrio.Provider.complete]. Around each
attempt it applies, in order: the circuit breaker, the shared 429 pause, the
concurrency and per-minute limits, the whole-request timeout. Connection
errors, timeouts, 429, 5xx, unreadable bodies and cut streams are retried with
exponential backoff and jitter (``Retry-After`` wins when the server sends
it, up to ``max_retry_wait``: beyond it the call fails at once); every
failure reaching the caller is a [`ProviderError`][agentrio.errors.ProviderError]. Answers are
read within limits (``max_response_bytes``, ``max_line_bytes``,
``max_reply_chars``), so a server that never stops sending costs bounded
memory. The API key is only ever put in request headers: it is in no
message, event, ``repr`` or exception, nor are the credentials a base URL holds.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Literal, NamedTuple, NoReturn

import attrs
import msgspec
import trio

from .._log import log_extra
from .._version import __version__
from ..errors import (
    AuthError,
    BadResponse,
    ConfigError,
    ContextTooLong,
    InvalidArgument,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
)
from ..messages import ChatMessage, ContentPart, Lane, ModelReply, ModelSettings, TextPart
from .base import AttemptMeter, OutputSchema, ToolSchema
from .bounded import (
    MAX_LINE_BYTES,
    MAX_REPLY_CHARS,
    MAX_RESPONSE_BYTES,
    Body,
    HttpxBody,
    LineSplitter,
    TooLarge,
    read_body,
    sse_data,
)
from .guard import escapes_surrogate, loads
from .limiter import (
    DEFAULT_LANE,
    CircuitBreaker,
    LaneLimiter,
    RateWindow,
    ServerLimits,
    lane_caps,
    lane_index,
    parse_retry_after,
)
from .openai import MAX_TOKENS_FIELDS, UNREPORTED, OpenAIWire, estimated_usage, header_name_ok
from .overflow import context_overflow, too_long
from .redact import (
    MIN_SECRET,
    env_name_ok,
    hide_in_httpx_log,
    redact_url,
    settings_secrets,
    shown_env_name,
    url_secrets,
)
from .tokens import estimate_tokens, parts_tokens
from .wire import (
    ANTHROPIC_VERSION,
    PartRules,
    StreamParser,
    WireFormat,
    check_parts,
    typed_answer,
)

if TYPE_CHECKING:
    import httpx

    from .transport import ConnectionPool

__all__ = ["DEFAULT_POOL", "Provider", "ProviderConfig", "ProviderModel", "ProviderStatistics"]

DEFAULT_POOL = 32  # connections (and requests in flight) when max_concurrent is not set
MAX_RETRY_WAIT = 60.0  # seconds: the default ceiling on a wait before a retry
_ERROR_BYTES = 64 * 1024  # of an error body: only its start is shown
_DEFAULT_PRIORITY = lane_index(DEFAULT_LANE)
_ENCODER = msgspec.json.Encoder()
_decode = msgspec.json.decode
# Each request, at DEBUG, in the words httpx uses for those it sends.
_http_log = logging.getLogger("agentrio.http")
# Retries, pauses, the breaker opening, calls given up: never the key nor content.
_log = logging.getLogger("agentrio.providers")

Kind = Literal["openai", "anthropic", "ollama", "openai-responses"]


# The wire formats but OpenAI's (whose checks the provider's config uses) are
# imported by the first provider of their kind: a process that uses none of them
# does not load them (about 0.4 MB; tests/test_exports.py checks it).
def _anthropic(config: ProviderConfig) -> WireFormat:
    from .anthropic import AnthropicWire

    return AnthropicWire(config.anthropic_version)


def _ollama(config: ProviderConfig) -> WireFormat:
    from .ollama import OllamaWire

    return OllamaWire()


def _responses(config: ProviderConfig) -> WireFormat:
    from .responses import ResponsesWire

    return ResponsesWire(auth_header=config.auth_header)


_WIRES: dict[str, Callable[[ProviderConfig], WireFormat]] = {
    "openai": lambda config: OpenAIWire(
        config.max_tokens_field,
        auth_header=config.auth_header,
        stream_usage=config.stream_usage,
        send_reasoning=config.send_reasoning,
    ),
    "anthropic": _anthropic,
    "ollama": _ollama,
    "openai-responses": _responses,
}
_PRICES = (
    "usd_per_million_input_tokens",
    "usd_per_million_output_tokens",
    "usd_per_million_cached_input_tokens",
    "usd_per_million_cache_write_tokens",
    "usd_per_million_cache_write_1h_tokens",
)


_POSITIVE = (
    "connect_timeout",
    "read_timeout",
    "timeout",
    "backoff_initial",
    "backoff_max",
    "circuit_failures",
    "circuit_cooldown",
    "max_concurrent",
    "requests_per_minute",
    "tokens_per_minute",
    "context_window",
    "max_response_bytes",
    "max_line_bytes",
    "max_reply_chars",
    "max_retry_wait",
)
_INTEGERS = frozenset(
    (
        "circuit_failures",
        "max_concurrent",
        "requests_per_minute",
        "tokens_per_minute",
        "context_window",
        "max_response_bytes",
        "max_line_bytes",
        "max_reply_chars",
    )
)


def _check_numbers(config: ProviderConfig) -> None:
    for field in _POSITIVE:
        value = getattr(config, field)
        if value is None and field in (
            "max_concurrent",
            "requests_per_minute",
            "tokens_per_minute",
        ):
            continue
        kind = int if field in _INTEGERS else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
            what = "an int" if field in _INTEGERS else "a number"
            raise ConfigError(
                f"provider {config.name!r}: {field} must be {what} > 0, got {value!r}"
            )
    for field in _PRICES:
        price = getattr(config, field)
        if price is None and field in _PRICES[2:]:
            continue
        if (
            isinstance(price, bool)
            or not isinstance(price, (int, float))
            or not math.isfinite(price)
            or price < 0
        ):
            raise ConfigError(
                f"provider {config.name!r}: {field} must be >= 0 and finite, got {price!r}"
            )
    retries = config.max_retries
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(
            f"provider {config.name!r}: max_retries must be an int >= 0, got {retries!r}"
        )


def _check_lane_concurrency(config: ProviderConfig) -> None:
    caps = config.lane_concurrency
    if caps is None:
        return
    where = f"provider {config.name!r}: lane_concurrency"
    if not isinstance(caps, Mapping):
        raise ConfigError(f"{where} must be a table of lane = int, got {caps!r}")
    for lane, cap in caps.items():
        try:
            lane_index(lane, f"{where} key")
        except InvalidArgument as exc:
            raise ConfigError(str(exc)) from None
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ConfigError(f"{where}.{lane} must be an int >= 1, got {cap!r}")


def _check_url(config: ProviderConfig) -> None:
    url = config.base_url
    where = f"provider {config.name!r}: base_url"
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        got = repr(redact_url(url)) if isinstance(url, str) else repr(url)
        raise ConfigError(f"{where} must start with http:// or https://, got {got}")
    import httpx  # here: only a provider's configuration needs it

    try:
        parsed = httpx.URL(url)
        host, port = parsed.host, parsed.port
    except httpx.InvalidURL as exc:
        why = str(exc)
        for secret in url_secrets(url):
            why = why.replace(secret, "[redacted]")
        raise ConfigError(f"{where} is not a valid URL ({why}): {redact_url(url)!r}") from None
    if not host:
        raise ConfigError(f"{where} has no host: {redact_url(url)!r}")
    # (httpx takes any digits, and a sign, as a port: no connection could be made)
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"{where} has a port outside 1-65535: {redact_url(url)!r}")


def _check_key_env(config: ProviderConfig) -> None:
    name = config.api_key_env
    if name is None or name == "":
        return
    if not isinstance(name, str) or not env_name_ok(name):
        # Not echoed: a value that is no variable's name is most likely the key itself.
        raise ConfigError(
            f"provider {config.name!r}: api_key_env must name an environment variable "
            "(letters, digits and '_', not starting with a digit) that holds the key, "
            "not the key itself; the value given is not shown"
        )


def _check_wire_fields(config: ProviderConfig) -> None:
    if config.max_tokens_field not in MAX_TOKENS_FIELDS:
        raise ConfigError(
            f"provider {config.name!r}: max_tokens_field must be one of "
            f"{list(MAX_TOKENS_FIELDS)}, got {config.max_tokens_field!r}"
        )
    if not header_name_ok(config.auth_header):
        raise ConfigError(
            f"provider {config.name!r}: auth_header must be a header's name (such as "
            f"'Authorization' or 'api-key'), got {config.auth_header!r}"
        )
    for flag in ("stream_usage", "send_reasoning"):
        if not isinstance(getattr(config, flag), bool):
            raise ConfigError(
                f"provider {config.name!r}: {flag} must be true or false, "
                f"got {getattr(config, flag)!r}"
            )
    version = config.anthropic_version
    if not isinstance(version, str) or not version or not version.isprintable():
        raise ConfigError(
            f"provider {config.name!r}: anthropic_version must be a non-empty str "
            f"(such as {ANTHROPIC_VERSION!r}), got {version!r}"
        )
    settings = config.settings
    if settings is None:
        return
    if not isinstance(settings, ModelSettings):
        raise ConfigError(
            f"provider {config.name!r}: settings must be an agentrio.ModelSettings or None, "
            f"got {settings!r}"
        )
    try:
        _WIRES[config.kind](config).check_settings(settings)
    except InvalidArgument as exc:
        raise ConfigError(f"provider {config.name!r}: settings: {exc}") from None


# -- the official endpoints (the built-in instances', and a config's without base_url) --


class _Official(NamedTuple):
    kind: Kind
    url_env: str  # the variable that may move the endpoint
    url: str  # the endpoint when it is not set
    key_env: str | None  # the variable that holds the key (None: no key)


# OpenAI's base URL is taken as given, /v1 included: compatible servers put
# their API under different paths, so none is added. Anthropic's may be
# written with /v1 or without (as its SDK writes it): the provider adds it.
_OFFICIAL: dict[str, _Official] = {
    "openai": _Official("openai", "OPENAI_BASE_URL", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "anthropic": _Official(
        "anthropic", "ANTHROPIC_BASE_URL", "https://api.anthropic.com", "ANTHROPIC_API_KEY"
    ),
    # (127.0.0.1, not localhost: the address Ollama listens on by default)
    "ollama": _Official("ollama", "OLLAMA_HOST", "http://127.0.0.1:11434", None),
}
BUILTIN_NAMES = tuple(_OFFICIAL)  # the built-in instances' names, also their kinds
# Kinds that are another wire of a built-in instance's endpoint (and key).
_SAME_ENDPOINT = {"openai-responses": "openai"}
_OLLAMA_PORT = "11434"


def kind_defaults(kind: str, environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """``base_url`` and ``api_key_env`` of *kind*'s official endpoint, as the environment
    sets them (an empty dict for an unknown *kind*: its own checks will say so).

    Args:
        kind: the wire format.
        environ: where the variables are read (default ``os.environ``).

    Raises:
        ConfigError: the base URL variable is set to something that is not a
            usable URL; the message names the variable, not its value.
    """
    official = _OFFICIAL.get(_SAME_ENDPOINT.get(kind, kind)) if isinstance(kind, str) else None
    if official is None:
        return {}
    env = os.environ if environ is None else environ
    return {"base_url": _base_url(official, env), "api_key_env": official.key_env}


def _base_url(official: _Official, environ: Mapping[str, str]) -> str:
    """The endpoint *official*'s variable names (its default when unset), checked."""
    value = environ.get(official.url_env)
    if value is None:
        return official.url
    url = _ollama_url(value) if official.kind == "ollama" and value else value
    why = _unusable(url, official.kind)
    if why:
        raise ConfigError(
            f"the environment variable {official.url_env} {why}; "
            f"unset it to use {official.url}, or set it to a base URL "
            "(its value is not shown)"
        )
    return url


def _unusable(url: str, kind: Kind) -> str:
    """Why *url* cannot be a base URL of *kind*, in words ("": it can)."""
    if not url:
        return "is set but empty"
    if not all("!" <= c <= "~" for c in url):
        return "holds whitespace, a control character or a character outside ASCII"
    try:
        ProviderConfig(name="check", kind=kind, base_url=url)
    except ConfigError:
        return "is not a usable URL (http:// or https://, then a host)"
    return ""


def _ollama_url(value: str) -> str:
    """``OLLAMA_HOST`` as Ollama's CLI reads it: ``host``, ``host:port`` or a URL;
    without a scheme it is ``http://``, and without a port too, port 11434."""
    if "://" in value:
        return value
    hostport, slash, path = value.partition("/")
    if hostport.startswith("["):  # [::1] or [::1]:11434
        has_port = "]:" in hostport
    elif hostport.count(":") > 1:  # a bare IPv6 address
        hostport, has_port = f"[{hostport}]", False
    else:
        has_port = ":" in hostport
    if not has_port:
        hostport = f"{hostport}:{_OLLAMA_PORT}"
    return f"http://{hostport}{slash}{path}"


class _NoBaseUrl(str):
    """The default of ``ProviderConfig.base_url``: none was given, so the instance is
    its kind's official endpoint (told apart from any str a caller passes)."""

    __slots__ = ()


_NO_BASE_URL = _NoBaseUrl("")


def _fill_official(config: ProviderConfig) -> None:
    """Give a config made without ``base_url`` its kind's official endpoint (as its
    base URL variable sets it) and, unless it names one, its key variable: what a
    ``[providers.NAME]`` table without ``base_url`` gets."""
    if config.kind not in _WIRES:
        return  # (the kind's own check says so)
    try:
        defaults = kind_defaults(config.kind)
    except ConfigError as exc:
        raise ConfigError(
            f"provider {config.name!r} has no base_url, so it is {config.kind}'s official "
            f"endpoint, but {exc}"
        ) from None
    object.__setattr__(config, "base_url", defaults["base_url"])
    if config.api_key_env is None:
        object.__setattr__(config, "api_key_env", defaults["api_key_env"])


def _url_repr(url: object) -> str:
    return repr(redact_url(url)) if isinstance(url, str) else repr(url)


def _env_repr(name: object) -> str:
    if isinstance(name, str) and name and shown_env_name(name) is None:
        return "'[not shown]'"
    return repr(name)


@attrs.frozen
class ProviderConfig:
    """One provider instance, as in a ``[providers.NAME]`` table of agentrio.toml.

    Attributes:
        name: the instance's name (``local`` in ``local:qwen2.5:0.5b``); no ``:``.
        kind: the wire format: ``"openai"`` (chat completions; also vLLM, LM
            Studio, Ollama's ``/v1``), ``"openai-responses"`` (OpenAI's
            Responses API, ``/responses``), ``"anthropic"`` or ``"ollama"``
            (native ``/api/chat``).
        base_url: e.g. ``https://api.openai.com/v1`` (used as given: the
            wire's ``/chat/completions`` or ``/responses`` goes right after it),
            ``https://api.anthropic.com`` (with or without ``/v1``: both reach
            ``/v1/messages``), ``http://127.0.0.1:11434``: it starts with ``http://`` or
            ``https://``, has a host (and a port, if any, from 1 to 65535),
            and is a URL httpx can parse (checked
            here, not at the first request). A ``user:password@`` part and
            query values (``?key=...``) are sent, but shown as
            ``[redacted]`` in ``repr``, errors and httpx's log line. Left
            out, the instance is its kind's official endpoint, as the
            built-in instance of that API is (see [No
            configuration][no-configuration]): ``OPENAI_BASE_URL`` (for
            ``"openai"`` and ``"openai-responses"``), ``ANTHROPIC_BASE_URL``
            or ``OLLAMA_HOST`` if set (a ``ConfigError`` naming the variable
            if it is not a usable URL), else the official URL; and
            ``api_key_env``, unless given, is that API's key variable
            (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``; none for Ollama).
        api_key_env: the name of the environment variable holding the key
            (None: no key is sent, unless ``base_url`` is left out, above;
            never the key itself: letters, digits and ``_``, not starting
            with a digit; another value is refused, and not echoed; a name
            not written in capitals, such as a key made only of letters and
            digits, is not shown in messages or ``repr``).
        connect_timeout: seconds to connect.
        read_timeout: seconds between bytes of the answer.
        timeout: seconds one whole attempt may take.
        max_retries: retries after the first attempt.
        backoff_initial: the first retry's delay; it doubles each retry...
        backoff_max: ...up to this (and up to ``max_retry_wait``); each delay
            is jittered down by up to half. A server's ``Retry-After`` wins.
        circuit_failures: consecutive failures that open the circuit breaker.
        circuit_cooldown: seconds it stays open before a trial request.
        max_concurrent: requests in flight at once, shared by every agent
            using the instance, and the connection pool's size (None:
            ``DEFAULT_POOL``, 32). While they are all taken, or while
            ``requests_per_minute`` or ``tokens_per_minute`` is full,
            requests wait by lane: the next free one goes to the oldest
            request of the highest lane waiting (``interactive`` first).
        lane_concurrency: the most requests of one lane in flight at once,
            by lane name (``{"background": 24}``; None, or a lane not
            named: no cap of its own), so that the lanes above it find room:
            a request at its lane's cap waits even when ``max_concurrent``
            has room. Keys are lanes' names (``"control"`` is
            ``"interactive"``), values ints >= 1.
        requests_per_minute: None: no limit.
        tokens_per_minute: estimated before, settled after each request. None: no limit.
        stream: ask for streamed answers (text deltas become ``TextDelta`` events).
        tool_calls_in_text: turn ``{"name": ..., "arguments": ...}`` written
            in the text into tool calls (None: on for ``ollama`` only).
        context_window: the models' context window in tokens.
        usd_per_million_input_tokens: the price of input tokens (0: unknown);
            every price is finite and >= 0. See [Prices and cost
            budgets][prices-and-cost-budgets].
        usd_per_million_output_tokens: the price of output tokens (reasoning
            tokens included); with prices set, budgets reserve each call's
            worst-case cost.
        usd_per_million_cached_input_tokens: the price of input tokens read
            from the prompt cache (None: the input price).
        usd_per_million_cache_write_tokens: the price of input tokens written
            to the prompt cache (None: the input price). With either cache
            price set, the models' ``pricing`` has four prices.
        usd_per_million_cache_write_1h_tokens: the price of input tokens
            written to Anthropic's 1-hour cache (``ModelSettings.cache="1h"``;
            None: the cache-write price); set, the models' ``pricing`` has five.
        max_response_bytes: the most bytes one response may have, streamed or
            not (default 64 MiB); past it the call fails with ``BadResponse``.
        max_line_bytes: the most bytes one line of a stream (an SSE line, an
            NDJSON line) may have (default 1 MiB).
        max_reply_chars: the most characters of text and tool calls a streamed
            reply may accumulate (default 1 MiB: 1,048,576; a tool call counts
            at least 64). Past any of the three limits the call fails at
            once with a ``BadResponse`` naming the limit, and the connection
            is closed.
        max_retry_wait: the longest wait before a retry, in seconds (default
            60; ``inf``: no ceiling): a ``Retry-After`` beyond it is not waited
            for (a 429 fails at once with ``RateLimited``, whose
            ``retry_after`` holds the server's value, a 5xx with
            ``ProviderUnavailable``), and neither the backoff nor the shared
            429 pause exceeds it, nor a hold for the rate-limit headers.
        rate_limit_headers: hold new calls, before the server answers 429,
            while its rate-limit headers (``x-ratelimit-*``, or
            ``anthropic-ratelimit-*`` for ``kind="anthropic"``) say too
            little is left, until the count resets (``max_retry_wait`` at
            most); see [Rate-limit headers][rate-limit-headers]. Default
            True; False: the headers are not read.
        seed: seeds the jitter, for reproducible tests (None: random).
        max_tokens_field: ``kind="openai"`` only: the request field of the
            output limit, ``"max_completion_tokens"`` (the default; reasoning
            models refuse ``max_tokens``) or ``"max_tokens"`` (for servers
            that know only that one: older vLLM, LM Studio, Ollama's ``/v1``).
        anthropic_version: ``kind="anthropic"`` only: the ``anthropic-version``
            header, a non-empty printable str (default ``"2023-06-01"``).
        auth_header: ``kind="openai"`` and ``"openai-responses"`` only: the
            header that carries the key,
            ``"Authorization"`` (the default, as ``Bearer KEY``) or another
            header's name, which carries the key as it is (Azure OpenAI's
            ``"api-key"``). See [Compatible servers][compatible-servers].
        stream_usage: ``kind="openai"`` only: ask a streamed answer for its
            usage (``stream_options``, default True); False for a server
            that refuses the field. A reply whose server reports no usage is
            charged an estimate (see [Compatible servers][compatible-servers]).
        send_reasoning: ``kind="openai"`` only: send an assistant turn's
            reasoning back, as ``reasoning_content``, with the turn's tool
            calls (default False; DeepSeek's thinking mode needs True).
        settings: request settings for every call of this instance
            ([`ModelSettings`][agentrio.ModelSettings]; a spec's and a run's are laid
            over them; its ``extra_headers`` join the instance's headers).

    Raises:
        ConfigError: a bad field, named in the message; a setting the
            *kind*'s wire format has no place for (``provider 'p': settings:
            ModelSettings.seed is not a setting of the anthropic wire format
            ...``).
    """

    name: str
    kind: Kind
    base_url: str = attrs.field(default=_NO_BASE_URL, repr=_url_repr)
    api_key_env: str | None = attrs.field(default=None, repr=_env_repr)
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    timeout: float = 300.0
    max_retries: int = 3
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    circuit_failures: int = 5
    circuit_cooldown: float = 30.0
    max_concurrent: int | None = None
    lane_concurrency: dict[str, int] | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    stream: bool = False
    tool_calls_in_text: bool | None = None
    context_window: int = 128_000
    usd_per_million_input_tokens: float = 0.0
    usd_per_million_output_tokens: float = 0.0
    max_response_bytes: int = MAX_RESPONSE_BYTES
    max_line_bytes: int = MAX_LINE_BYTES
    max_reply_chars: int = MAX_REPLY_CHARS
    max_retry_wait: float = MAX_RETRY_WAIT
    rate_limit_headers: bool = True
    seed: int | None = None
    usd_per_million_cached_input_tokens: float | None = None
    usd_per_million_cache_write_tokens: float | None = None
    usd_per_million_cache_write_1h_tokens: float | None = None
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    anthropic_version: str = ANTHROPIC_VERSION
    settings: ModelSettings | None = None
    auth_header: str = "Authorization"
    stream_usage: bool = True
    send_reasoning: bool = False

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or ":" in self.name:
            raise ConfigError(
                f"a provider name must be a non-empty str without ':', got {self.name!r}"
            )
        if self.kind not in _WIRES:
            raise ConfigError(
                f"provider {self.name!r}: kind must be one of {sorted(_WIRES)}, got {self.kind!r}"
            )
        if type(self.base_url) is _NoBaseUrl:
            _fill_official(self)
        _check_url(self)
        _check_key_env(self)
        _check_numbers(self)
        if not isinstance(self.rate_limit_headers, bool):
            got = self.rate_limit_headers
            raise ConfigError(
                f"provider {self.name!r}: rate_limit_headers must be a bool, got {got!r}"
            )
        _check_lane_concurrency(self)
        _check_wire_fields(self)


class ProviderStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a provider instance, from
    [`Provider.statistics`][agentrio.Provider.statistics].

    Attributes:
        requests: attempts sent (retries included).
        retries: retries made.
        failures: attempts that failed in a way worth retrying.
        rate_limited: 429 answers.
        breaker: the circuit breaker's state: ``"closed"``, ``"open"`` or
            ``"half_open"``.
        paused_for: seconds left of the shared pause after a 429.
        in_flight: requests in flight now.
        waiting: requests waiting for a slot of ``max_concurrent`` (or of
            their lane's ``lane_concurrency``) now.
    """

    requests: int
    retries: int
    failures: int
    rate_limited: int
    breaker: str
    paused_for: float
    in_flight: int
    waiting: int = 0


class _Retry(Exception):
    """An attempt failed in a way worth retrying."""

    def __init__(self, error: ProviderError, *, retry_after: float | None, failure: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        self.failure = failure  # counts against the circuit breaker


class _Body:
    """A call's JSON request body, built when it is first sent and kept for its retries.

    Not before: a call may wait for a free connection behind thousands of
    others, and each waiting call holding its body made the demo's 10,000
    agents cost more memory than everything else they hold.
    """

    __slots__ = ("_args", "_content", "_wire")

    def __init__(
        self,
        wire: WireFormat,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        max_output_tokens: int,
        stream: bool,
        settings: ModelSettings | None = None,
    ) -> None:
        self._wire = wire
        # (copies of the sequences: the body is what they hold now, not when it is sent)
        self._args: tuple[
            str, tuple[ChatMessage, ...], tuple[ToolSchema, ...], int, bool, ModelSettings | None
        ] = (model, tuple(messages), tuple(tools), max_output_tokens, stream, settings)
        self._content: bytes | None = None

    @property
    def max_output_tokens(self) -> int:
        return self._args[3]

    def content(self) -> bytes:
        """The body, encoded."""
        if self._content is None:
            self._content = _ENCODER.encode(self._wire.body(*self._args))
        return self._content

    def secrets(self) -> list[str]:
        """What its settings' ``extra_headers`` and ``extra_body`` hold that a server
        echoing the request must not get shown (worked out only for an error)."""
        settings = self._args[5]
        if settings is None:
            return []
        return settings_secrets(settings.extra_headers, settings.extra_body)


class _TypedBody(_Body):
    """The body of a call that asks for an answer of a schema (a slot more than
    every other call's)."""

    __slots__ = ("_output",)

    def __init__(
        self,
        output: OutputSchema,
        wire: WireFormat,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        max_output_tokens: int,
        stream: bool,
        settings: ModelSettings | None,
    ) -> None:
        super().__init__(wire, model, messages, tools, max_output_tokens, stream, settings)
        self._output = output

    def content(self) -> bytes:
        if self._content is None:
            self._content = _ENCODER.encode(self._wire.body(*self._args, output=self._output))
        return self._content


class _Received:
    """What one attempt got, to charge it if it fails (kept only for a meter)."""

    __slots__ = ("answered", "cut", "parser", "sent", "status")

    def __init__(self) -> None:
        self.sent = False  # the request went out
        self.status = 0  # the response's status, once it came
        self.answered = False  # a 200 with a JSON body
        self.parser: StreamParser | None = None  # a 200 stream: has its answer begun?
        # Cut short once sent (a timeout, a cancel, the connection lost), not
        # ended by what the server said.
        self.cut = False

    def report(self, meter: AttemptMeter, max_output_tokens: int) -> None:
        """Tell *meter* what the failed attempt used, as far as is known.

        An answer that had begun is charged what it reported or brought. An
        attempt cut short after it was sent, with no error status, is charged
        at least its input (None: the agent's estimate): the server had the
        request and most likely worked on it. An error status, a connection
        that could not be made, or a body that is no answer at all (a
        proxy's HTML page) tells of nothing generated.
        """
        partial = self.parser.partial() if self.parser is not None else None
        if partial is not None:
            meter.failed(*partial)
        elif self.answered:
            # A JSON answer that could not be read: it may have said anything.
            meter.failed(None, max_output_tokens, "")
        elif self.cut and self.status in (0, 200):
            meter.failed(None, 0, "")
        else:
            meter.failed(0, 0, "")


class Provider:
    """A model endpoint: a connection pool, its limits and guards; use it as an async context.

    One key, one connection pool, its limits and guards, shared by every agent
    that uses it. Use it as an async context manager (``async with
    Provider(config) as p:``), or call ``aclose()``. Providers made by the
    runtime from a [`Config`][agentrio.Config] are closed by it.

    Example:

        config = ProviderConfig(name="local", kind="ollama", base_url="http://127.0.0.1:11434")
        async with Provider(config) as local:
            spec = AgentSpec("a", model=local.model("qwen2.5:0.5b"))

    Args:
        config: the instance's settings.
        client: an ``httpx.AsyncClient`` to send every request through (its
            transport, proxies, auth, event hooks and timeouts; an
            ``httpx.MockTransport`` in tests); it is then yours to close.
            Default: the provider's own HTTP/1.1 connection pool (see [The
            HTTP client][the-http-client]), or, when the environment names a
            proxy for ``base_url`` (``HTTP_PROXY``, ``HTTPS_PROXY``,
            ``ALL_PROXY``, less ``NO_PROXY``), an ``httpx.AsyncClient`` the
            provider makes and owns.
        api_key: the key (default: from ``config.api_key_env``). The key is
            only ever put in request headers, never in a message, event,
            ``repr`` or exception.

    Raises:
        ConfigError: *config* is not a ``ProviderConfig``, or
            ``config.api_key_env`` names a variable that is not set, is
            empty, or holds whitespace, a control character or a character
            outside ASCII (the variable is named, its value not shown), or
            (without a *client*) the key cannot be sent as a header value (a
            line break, a NUL, a character outside Latin-1; the value is not
            shown).
    """

    def __init__(
        self,
        config: ProviderConfig,
        *,
        client: httpx.AsyncClient | None = None,
        api_key: str | None = None,
    ) -> None:
        if not isinstance(config, ProviderConfig):
            raise ConfigError(f"config must be an agentrio.ProviderConfig, got {config!r}")
        self.config = config
        if api_key is None and config.api_key_env:
            api_key = _key_from_env(config.name, config.api_key_env)
        self._key = api_key
        # Everything shown is cleaned of these: the key, and the credentials a
        # base URL may hold (which httpx itself logs, as part of the URL).
        hidden = url_secrets(config.base_url)
        hide_in_httpx_log(hidden)
        # (and the values of the configured extra headers: one may be a key of
        # its own, an "api-key" header say, which a server may echo)
        extra = config.settings.extra_headers if config.settings is not None else None
        shown_extra = [v for v in (extra or {}).values() if len(v) >= MIN_SECRET]
        self._secrets = sorted(
            {*hidden, *([api_key] if api_key else []), *shown_extra}, key=len, reverse=True
        )
        self._shown_url = redact_url(config.base_url)
        self._wire = _WIRES[config.kind](config)
        self._headers = {"content-type": "application/json", **self._wire.headers(api_key)}
        if config.settings is not None and config.settings.extra_headers:
            self._headers.update(config.settings.extra_headers)
        self._url = _endpoint(config.base_url, _wire_path(config.kind, config.base_url, self._wire))
        self._owns_client = client is None
        # Requests beyond the pool wait in our limiter, not in a pool's queue:
        # httpcore matches every queued request against every connection each
        # time one frees (measured: 1,000 waiting agents made each request cost
        # ~9 ms of CPU in that scan alone).
        pool = config.max_concurrent or DEFAULT_POOL
        import httpx  # here, not at the top: agents that never talk HTTP don't load it

        self._transport_error = httpx.TransportError
        # Errors before the request could reach the server (nothing to charge).
        self._not_sent = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
        self._decoding_error = httpx.DecodingError
        self._client = client
        self._pool: ConnectionPool | None = None
        if client is None:
            self._own_connections(httpx.URL(self._url), pool)
        text_tools = config.tool_calls_in_text
        self._text_tools = config.kind == "ollama" if text_tools is None else text_tools
        self._breaker = CircuitBreaker(config.circuit_failures, config.circuit_cooldown)
        self._last_failure = ""  # what opened the breaker, for its message
        self._concurrency = LaneLimiter(pool, lane_caps(config.lane_concurrency))
        self._rpm = RateWindow(config.requests_per_minute) if config.requests_per_minute else None
        self._tpm = RateWindow(config.tokens_per_minute) if config.tokens_per_minute else None
        self._paused_until = 0.0
        self._server_limits = (
            ServerLimits(
                "anthropic" if config.kind == "anthropic" else "openai", config.max_retry_wait
            )
            if config.rate_limit_headers
            else None
        )
        self._random = random.Random(config.seed)
        self._requests = self._retries = self._failures = self._rate_limited = self._in_flight = 0

    def _own_connections(self, url: httpx.URL, pool: int) -> None:
        """Make the connection pool: agentrio's own, unless a proxy is to be used."""
        import httpx

        from .transport import ACCEPT_ENCODING, ConnectionPool, env_proxy, origin_of, request_head

        config = self.config
        if env_proxy(url) is not None:
            # Through the proxy the environment names, as httpx reaches it.
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(
                    config.read_timeout, connect=config.connect_timeout, pool=config.timeout
                ),
                limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
            )
            return
        headers = {
            "accept": "*/*",
            "accept-encoding": ACCEPT_ENCODING,
            "user-agent": f"agentrio/{__version__}",
            **self._headers,
        }
        if url.userinfo:  # as httpx does: credentials in the URL are sent as Basic auth
            pair = f"{url.username}:{url.password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        try:
            self._head = request_head("POST", url, headers.items())
        except ValueError as exc:
            raise ConfigError(
                f"provider {config.name!r}: cannot send its headers ({exc}); "
                "check the API key (its value is not shown)"
            ) from None
        self._origin = origin_of(url)
        self._shown_endpoint = redact_url(self._url)
        self._pool = ConnectionPool(max_idle=pool)

    def __repr__(self) -> str:
        return f"<Provider {self.config.name!r} {self.config.kind} {self._shown_url}>"

    @property
    def name(self) -> str:
        """The instance's name."""
        return self.config.name

    def model(self, name: str, *, context_window: int | None = None) -> ProviderModel:
        """A model object for [`AgentSpec`][agentrio.AgentSpec] that calls *name* here.

        Returns:
            A [`ProviderModel`][agentrio.types.ProviderModel]; its *context_window*
            defaults to the config's.

        Raises:
            ConfigError: *name* is not a non-empty str.
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(f"model name must be a non-empty str, got {name!r}")
        return ProviderModel(self, name, context_window or self.config.context_window)

    async def __aenter__(self) -> Provider:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (if this provider made it)."""
        if self._owns_client:
            with trio.CancelScope(shield=True):
                if self._pool is not None:
                    await self._pool.aclose()
                if self._client is not None:
                    await self._client.aclose()

    def check_settings(self, settings: ModelSettings) -> None:
        """Raise InvalidArgument naming the first setting this instance's wire format
        cannot send, or an ``extra_body`` field it refuses (*settings* laid over
        ``config.settings``)."""
        self._wire.check_settings(settings.over(self.config.settings))

    def check_parts(self, parts: Sequence[ContentPart]) -> None:
        """Raise InvalidArgument naming the first of *parts* (a user turn's content
        parts) this instance's wire format cannot take, and the provider."""
        rules: PartRules | None = getattr(self._wire, "parts", None)
        if rules is None:
            if any(not isinstance(p, TextPart) for p in parts):
                raise InvalidArgument(
                    f"provider {self.name!r}: its wire format takes no images or documents"
                )
            return
        try:
            check_parts(rules, parts)
        except InvalidArgument as exc:
            raise InvalidArgument(f"provider {self.name!r}: {exc}") from None

    def statistics(self) -> ProviderStatistics:
        """Requests, retries, failures, 429s, the breaker's state and the shared pause."""
        return ProviderStatistics(
            requests=self._requests,
            retries=self._retries,
            failures=self._failures,
            rate_limited=self._rate_limited,
            breaker=self._breaker.state,
            paused_for=max(0.0, self._paused_until - trio.current_time()),
            in_flight=self._in_flight,
            waiting=self._concurrency.waiting,
        )

    # -- the request method ------------------------------------------------------------

    async def complete(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        on_text: Callable[[str], None] | None = None,
        meter: AttemptMeter | None = None,
        lane: Lane | None = None,
        settings: ModelSettings | None = None,
        output_schema: OutputSchema | None = None,
    ) -> ModelReply:
        """Ask *model* for the next turn of *messages*, retrying what is worth retrying.

        Around each attempt: the circuit breaker, the shared pause after a 429
        (every agent of the instance waits it out, ``max_retry_wait`` at
        most), the concurrency and per-minute limits, and the ``timeout``; the
        answer is read within ``max_response_bytes``, ``max_line_bytes`` and
        ``max_reply_chars``. Connection errors, timeouts, 429, 5xx, unreadable
        bodies and cut streams are retried with backoff. *on_text* is called
        with each piece of a streamed answer.

        With a *meter* (an agent passes one), every attempt that fails after it
        was sent is reported to ``meter.failed``: the usage the server had
        reported for it (Anthropic sends the input in ``message_start``), else
        ``None`` and what was received (an attempt cut short after it was
        sent, by a timeout, a reset or a cancel, with no error status, is
        ``None`` input and 0 output: its input estimate is charged); 0 tokens
        for an attempt that generated nothing (an error status, a connection
        that could not be made, a body that is not an answer). Each retry is
        made only if ``await meter.retry()`` says so; otherwise the attempt's
        error is raised. The reply's usage is the answered attempt's, as the
        server reported it; a server that reported none (some compatible
        servers) is charged an estimate: the input estimate of *messages*
        and that of what arrived, at most *max_output_tokens* (see [A server
        that reports no usage][a-server-that-reports-no-usage]).

        *lane* (an agent passes its phase's; None: ``"query"``) decides who
        goes first while ``max_concurrent`` (and ``lane_concurrency``),
        ``requests_per_minute`` or ``tokens_per_minute`` is full:
        ``interactive``, then ``query``, ``execute``, ``background``, first
        come, first served within a lane; each attempt (a retry too) waits
        anew. See [Lanes: who waits less][lanes-who-waits-less].

        *settings* are laid over the instance's ``config.settings`` and sent
        as the wire format sends them; their ``extra_headers`` join the
        request's headers.

        *output_schema* asks for an answer of that schema: OpenAI's
        ``response_format`` (a strict JSON schema when it has a strict form),
        Ollama's ``format``, or on Anthropic a tool ``final_result`` taking
        it, which the call forces; the reply's ``text`` is then the answer as
        JSON (the tool's input, or ``result`` of a wrapped schema), without
        tool calls if the model called ``final_result``. See [Typed
        outputs][typed-outputs].

        A transport failure's message says its reason, from the exception's
        causes when httpx gives none (a TLS failure: ``[SSL:
        CERTIFICATE_VERIFY_FAILED] certificate verify failed: ...``).

        Raises:
            RateLimited: 429 answers past the retries, or at once a 429 whose
                ``Retry-After`` is beyond ``max_retry_wait``.
            ProviderUnavailable: connection failures, timeouts or 5xx past the
                retries, at once a 5xx whose ``Retry-After`` is beyond
                ``max_retry_wait``, or the circuit breaker is open. For a
                connection failure or a timeout, its ``__cause__`` is the
                ``httpx.TransportError`` subclass raised for it
                (``ConnectError``, ``ConnectTimeout``, ``ReadError``,
                ``ReadTimeout``, ``WriteError``, ``RemoteProtocolError``), on
                the provider's own pool as through a client.
            BadResponse: unreadable answers past the retries (not JSON, the
                wrong shape, a stream cut short, a content coding that cannot
                be undone), or at once (not retried) an answer past one of the
                size limits, which the message names.
            AuthError: 401 or 403 (not retried).
            ProviderError: another 4xx (not retried).
            InvalidArgument: *lane* is not a lane's name (before any
                request), or a setting the wire format cannot send, or a
                ``tool_choice`` naming a tool the call does not offer, or a
                content part of a user turn the wire format cannot take (an
                image URL for Ollama, say; the message names the part and
                the provider; nothing is sent).
        """
        priority = _DEFAULT_PRIORITY if lane is None else lane_index(lane)
        headers = None  # this call's extra headers
        if settings is not None:
            if settings.extra_headers:
                headers = _extra_headers(settings.extra_headers)
            settings = settings.over(self.config.settings)
        else:
            settings = self.config.settings
        stream = self.config.stream
        if output_schema is None:
            body = _Body(self._wire, model, messages, tools, max_output_tokens, stream, settings)
        else:
            body = _TypedBody(
                output_schema,
                self._wire,
                model,
                messages,
                tools,
                max_output_tokens,
                stream,
                settings,
            )
        parts = False
        for m in messages:
            if m.parts:
                parts = True
                break
        if parts:
            # (a part the wire cannot take raises here: nothing is sent)
            try:
                body.content()
            except InvalidArgument as exc:
                raise InvalidArgument(f"provider {self.name!r}: {exc}") from None
        elif headers is not None or settings is not None:
            body.content()  # (a setting the wire cannot send raises here: nothing is sent)
        text_tools = [t.name for t in tools] if self._text_tools else None
        # (For the per-minute window only. The agent's estimator rule, each
        # non-ASCII character a token: CJK text is not under-counted there either.)
        estimate = 0
        if self._tpm is not None:
            estimate = max_output_tokens + sum(estimate_tokens(m.content) for m in messages)
            if parts:
                estimate += sum(parts_tokens(m.parts) for m in messages)
        attempt = 0
        while True:
            if not self._breaker.allow():
                cause = f"; the last: {self._last_failure}" if self._last_failure else ""
                raise ProviderUnavailable(
                    f"provider {self.name!r} is unavailable: its circuit breaker is open "
                    f"after {self.config.circuit_failures} failures in a row{cause}",
                    provider=self.name,
                )
            got = _Received() if meter is not None else None
            try:
                reply = await self._guarded(
                    body,
                    estimate,
                    on_text,
                    text_tools,
                    got=got,
                    priority=priority,
                    headers=headers,
                    meter=meter,
                )
            except _Retry as retry:
                self._failures += 1
                if retry.failure:
                    self._breaker_failure(_why(retry.error, retry.__cause__))
                    self._last_failure = str(retry.error)
                else:
                    self._breaker.release()
                attempt += 1
                if isinstance(retry.error, RateLimited):
                    self._pause(retry, attempt)
                last = attempt > self.config.max_retries
                if got is not None and meter is not None:
                    got.report(meter, max_output_tokens)
                    last = last or not await meter.retry()
                if last:
                    self._gave_up(retry, attempt)
                    raise retry.error from retry.__cause__
                self._retries += 1
                await self._wait_before_retry(retry, attempt, meter)
                continue
            except BaseException as exc:
                self._breaker.release()
                if got is not None and got.sent and meter is not None:
                    if not isinstance(exc, Exception):  # cancelled (mid-answer, or before it)
                        got.cut = True
                    got.report(meter, max_output_tokens)
                raise
            if self._breaker.state != "closed":  # (a property: no clock read when closed)
                _log.info(
                    "provider %r: circuit breaker closed: a request succeeded",
                    self.name,
                    extra=log_extra(),
                )
            self._breaker.success()
            return reply if output_schema is None else typed_answer(reply, output_schema)

    def _pause(self, retry: _Retry, attempt: int) -> None:
        # The pause is the instance's, so every agent using it waits it out;
        # it is set even when this call has no retries left.
        delay = retry.retry_after if retry.retry_after is not None else self._backoff(attempt)
        self._pause_for(delay)

    def _pause_for(self, delay: float) -> None:
        # Never beyond max_retry_wait: one 429 must not hold every agent for a day.
        delay = min(delay, self.config.max_retry_wait)
        now = trio.current_time()
        if self._paused_until <= now:  # one line per pause, not one per 429 within it
            _log.warning(
                "provider %r is rate limiting (HTTP 429): every request of the instance "
                "pauses for %.2f s",
                self.name,
                delay,
                extra=log_extra(),
            )
        self._paused_until = max(self._paused_until, now + delay)

    async def _wait_before_retry(
        self, retry: _Retry, attempt: int, meter: AttemptMeter | None
    ) -> None:
        why = _why(retry.error, retry.__cause__)
        if isinstance(retry.error, RateLimited):
            # _pause() has set the pause, which _guarded() waits out.
            left = max(0.0, self._paused_until - trio.current_time())
            _log.warning(
                "provider %r: attempt %d failed (%s); retry %d of %d after the pause (%.2f s)",
                *(self.name, attempt, why, attempt, self.config.max_retries, left),
                extra=log_extra(),
            )
            return
        delay = retry.retry_after if retry.retry_after is not None else self._backoff(attempt)
        _log.warning(
            "provider %r: attempt %d failed (%s); retry %d of %d in %.2f s",
            *(self.name, attempt, why, attempt, self.config.max_retries, delay),
            extra=log_extra(),
        )
        await trio.sleep(delay)
        self._waited(meter, "retry", delay)

    def _waited(self, meter: AttemptMeter | None, what: str, seconds: float) -> None:
        """Tell the call's meter it waited *seconds* for *what* (called only when it did)."""
        # (A meter made before AttemptMeter.waited existed may not have it.)
        waited = getattr(meter, "waited", None)
        if waited is not None:
            waited(what, seconds, self.name)

    async def _wait_pause(self, meter: AttemptMeter | None) -> None:
        """Wait out the instance's pause after a 429 (it may grow while waited for)."""
        since = trio.current_time()
        while trio.current_time() < self._paused_until:
            await trio.sleep_until(self._paused_until)
        self._waited(meter, "rate_limit", trio.current_time() - since)

    def _breaker_failure(self, why: str) -> None:
        """Count a failure against the breaker; say so if that opens it."""
        was = self._breaker.state
        self._breaker.failure()
        if was != "open" and self._breaker.state == "open":
            after = (
                "its trial request failed"
                if was == "half_open"
                else f"{self._breaker.threshold} failure(s) in a row"
            )
            _log.warning(
                "provider %r: circuit breaker open: %s (the last: %s); no request for %g s",
                *(self.name, after, why, self._breaker.cooldown),
                extra=log_extra(),
            )

    def _gave_up(self, retry: _Retry, attempts: int) -> None:
        _log.warning(
            "provider %r gave up after %d attempt%s (the last: %s)",
            *(self.name, attempts, "" if attempts == 1 else "s"),
            _why(retry.error, retry.__cause__),
            extra=log_extra(),
        )

    def _backoff(self, attempt: int) -> float:
        config = self.config
        cap = min(
            config.backoff_initial * 2.0 ** (attempt - 1), config.backoff_max, config.max_retry_wait
        )
        return float(cap * (0.5 + self._random.random() / 2))

    async def _guarded(
        self,
        body: _Body,
        estimate: int,
        on_text: Callable[[str], None] | None,
        text_tools: list[str] | None,
        *,
        got: _Received | None = None,
        priority: int = 1,
        headers: dict[str, str] | None = None,
        meter: AttemptMeter | None = None,
    ) -> ModelReply:
        # (Each wait is told to the meter only when there was one: a call
        # that finds room everywhere reads the clock once, here, as before.)
        if trio.current_time() < self._paused_until:
            await self._wait_pause(meter)
        waited = await self._concurrency.acquire(priority)
        try:
            if waited is not None:
                self._waited(meter, "concurrency", waited)
            if self._rpm is not None:
                _, waited = await self._rpm.take(1, priority)
                if waited is not None:
                    self._waited(meter, "requests_per_minute", waited)
            entry = None
            if self._tpm is not None:
                entry, waited = await self._tpm.take(estimate, priority)
                if waited is not None:
                    self._waited(meter, "tokens_per_minute", waited)
            limits = self._server_limits
            if limits is not None and limits.seen:
                waited = await limits.wait(body.max_output_tokens)
                if waited is not None:
                    self._waited(meter, "rate_limit_headers", waited)
            self._requests += 1
            self._in_flight += 1
            if got is not None:
                got.sent = True
            try:
                reply = await self._attempt(body, on_text, text_tools, got=got, headers=headers)
            finally:
                self._in_flight -= 1
            if reply.usage is UNREPORTED:  # charged an estimate, not nothing
                _, messages, _, max_output_tokens, *_ = body._args
                reply = estimated_usage(reply, messages, max_output_tokens)
            if entry is not None and self._tpm is not None:
                self._tpm.adjust(entry, reply.usage.input_tokens + reply.usage.output_tokens)
            return reply
        finally:
            self._concurrency.release(priority)

    async def _attempt(
        self,
        body: _Body,
        on_text: Callable[[str], None] | None,
        text_tools: list[str] | None,
        *,
        got: _Received | None = None,
        headers: dict[str, str] | None = None,
    ) -> ModelReply:
        with trio.move_on_after(self.config.timeout):
            try:
                if self.config.stream:
                    return await self._streamed(body, on_text, text_tools, got=got, headers=headers)
                return await self._whole(body, text_tools, got=got, headers=headers)
            except self._transport_error as exc:
                _scrub(exc)
                if got is not None and not isinstance(exc, self._not_sent):
                    got.cut = True
                raise _Retry(
                    ProviderUnavailable(
                        f"provider {self.name!r}: {type(exc).__name__} talking to "
                        f"{self._shown_url}: {self._redact(_reason(exc), body)}",
                        provider=self.name,
                    ),
                    retry_after=None,
                    failure=True,
                ) from exc
            except TooLarge as exc:
                # Not retried: a server sending without end would only do it again.
                self._not_retried("an answer past a size limit", failure=True)
                raise self._bad(f"{exc}; the connection was dropped") from None
            except self._decoding_error as exc:
                bad = self._bad(f"its content coding could not be undone ({exc})")
                raise _Retry(bad, retry_after=None, failure=True) from exc
            except BadResponse as exc:
                if got is not None and isinstance(exc.__cause__, self._transport_error):
                    got.cut = True  # a stream whose connection was lost
                # Chained to what caused *exc*, not to *exc*: the error that
                # finally reaches the caller must not be its own __cause__.
                raise _Retry(exc, retry_after=None, failure=True) from exc.__cause__
        if got is not None:
            got.cut = True
        raise _Retry(
            ProviderUnavailable(
                f"provider {self.name!r}: no answer within {self.config.timeout} s",
                provider=self.name,
            ),
            retry_after=None,
            failure=True,
        )

    async def _send(
        self, body: _Body, got: _Received | None, headers: dict[str, str] | None = None
    ) -> Body:
        """Send *body* (with this call's extra *headers*); the response's body is left
        to read, within the limits."""
        if self._pool is not None:
            response, status, retry_after = await self._post(body.content(), headers)
        else:
            response, status, retry_after = await self._post_through_client(body.content(), headers)
        if got is not None:
            got.status = status
        if status == 200:
            return response
        try:
            # Only the start of an error body is shown: no need to read more.
            text = await read_body(response, _ERROR_BYTES, cut=True)
        finally:
            await response.aclose()
        self._check(status, retry_after, text.decode("utf-8", "replace"), body)
        raise AssertionError("unreachable: _check raises for a status other than 200")

    async def _post(
        self, content: bytes, headers: dict[str, str] | None
    ) -> tuple[Body, int, str | None]:
        """Post on the provider's own pool: the answer, its status and Retry-After."""
        assert self._pool is not None
        config = self.config
        start = time.perf_counter()
        answer = await self._pool.request(
            self._origin,
            self._head,
            content,
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            extra=_header_lines(headers) if headers else b"",
        )
        if _http_log.isEnabledFor(logging.DEBUG):
            line = f"HTTP/1.1 {answer.status_code} {answer.reason.decode('latin-1')}"
            _log_request(self._shown_endpoint, line, len(content), start)
        if self._server_limits is not None:
            self._server_limits.read(answer.header)
        if answer.status_code == 200:
            return answer, 200, None
        after = answer.header(b"retry-after")
        return answer, answer.status_code, None if after is None else after.decode("latin-1")

    async def _post_through_client(
        self, content: bytes, headers: dict[str, str] | None
    ) -> tuple[Body, int, str | None]:
        """Post through the httpx client: the answer, its status and Retry-After."""
        client = self._client
        assert client is not None
        sent_headers = {**self._headers, **headers} if headers else self._headers
        request = client.build_request("POST", self._url, content=content, headers=sent_headers)
        start = time.perf_counter()
        sent = await client.send(request, stream=True)
        if _http_log.isEnabledFor(logging.DEBUG):
            line = f"{sent.http_version} {sent.status_code} {sent.reason_phrase}"
            _log_request(redact_url(self._url), line, len(content), start)
        if self._server_limits is not None:
            self._server_limits.read(lambda name: sent.headers.get(name.decode("latin-1")))
        return HttpxBody(sent), sent.status_code, sent.headers.get("retry-after")

    async def _whole(
        self,
        body: _Body,
        text_tools: list[str] | None,
        *,
        got: _Received | None = None,
        headers: dict[str, str] | None = None,
    ) -> ModelReply:
        response = await self._send(body, got, headers)
        try:
            content = await read_body(response, self.config.max_response_bytes)
        finally:
            await response.aclose()
        data = self._json(content)
        if got is not None:
            got.answered = True
        try:
            return self._wire.parse(data, self.name, text_tools)
        except (BadResponse, ContextTooLong) as exc:
            # (They may quote the server's error, which may echo the key, or the
            # values of a run's settings: a failed Responses answer is quoted.)
            exc.args = (self._redact(str(exc), body),)
            raise

    def _json(self, content: bytes) -> object:
        """A whole answer's body read as JSON, or BadResponse (its bytes never quoted)."""
        try:
            return _decode(content)
        except UnicodeDecodeError as exc:
            raise self._bad(f"the body is not UTF-8 (an invalid byte at {exc.start})") from None
        except (msgspec.DecodeError, RecursionError):  # RecursionError: nested too deep
            if not escapes_surrogate(content):
                raise self._bad("the body is not JSON") from None
        # msgspec refuses the escape of a lone surrogate ("\ud800"); the stdlib reads
        # it, and `loads` makes it U+FFFD, as in a stream.
        try:
            return loads(content)
        except (ValueError, RecursionError):
            raise self._bad("the body is not JSON") from None

    async def _streamed(
        self,
        body: _Body,
        on_text: Callable[[str], None] | None,
        text_tools: list[str] | None,
        *,
        got: _Received | None = None,
        headers: dict[str, str] | None = None,
    ) -> ModelReply:
        response = await self._send(body, got, headers)
        try:
            parser = self._wire.stream_parser(
                self.name, on_text, text_tools, max_reply_chars=self.config.max_reply_chars
            )
            if got is not None:
                got.parser = parser
            await self._read_stream(response, parser)
            return parser.finish()
        except (BadResponse, ContextTooLong) as exc:
            # The parsers quote the server's text (an error event, a chunk that
            # is not JSON), which may echo the key.
            exc.args = (self._redact(str(exc), body),)
            raise
        finally:
            await response.aclose()

    async def _read_stream(self, response: Body, parser: StreamParser) -> None:
        config = self.config
        lines = LineSplitter(config.max_line_bytes, config.max_response_bytes)
        feed = parser.feed
        # SSE: an event's data lines are joined and fed as one, at the event's end.
        data: list[str] | None = [] if self._wire.stream_format == "sse" else None
        try:
            while chunk := await response.receive():
                split = lines.split(chunk)
                for line in split if data is None else sse_data(split, data):
                    feed(line)
            last = lines.close()
            for line in last if data is None else sse_data([*last, ""], data):
                feed(line)
        except self._transport_error as exc:
            # The answer had begun: losing the connection now cuts the stream short.
            _scrub(exc)
            raise self._bad(f"the stream was cut short ({type(exc).__name__})") from exc
        except UnicodeDecodeError:  # (from the line splitter: its bytes never quoted)
            raise self._bad("the stream is not UTF-8") from None
        except Exception:
            await response.aclose()
            raise

    def _bad(self, what: str) -> BadResponse:
        return BadResponse(
            f"provider {self.name!r} sent a bad response: {what}", provider=self.name
        )

    def _redact(self, text: str, body: _Body | None = None) -> str:
        """*text* (a server's, which may echo the request) cut to 300 characters,
        without the key, the base URL's credentials, nor the values of the
        extra headers and body fields of *body*'s settings (a run's too)."""
        secrets = self._secrets
        if body is not None and (extra := body.secrets()):
            secrets = sorted({*secrets, *extra}, key=len, reverse=True)
        for secret in secrets:  # longest first: one may hold another
            text = text.replace(secret, "[redacted]")
        return text[:300]

    def _check(
        self, status: int, retry_after: str | None, text: str, body: _Body | None = None
    ) -> None:
        if status == 200:
            return
        if status not in (401, 403, 429) and (overflow := context_overflow(text)) is not None:
            raise too_long(self.name, self._redact(text, body), overflow, status)  # (not retried)
        text = self._redact(text, body)  # (what the messages below quote)
        after = parse_retry_after(retry_after)
        if status == 429:
            self._rate_limited += 1
            if after is not None and after > self.config.max_retry_wait:
                self._not_retried(f"HTTP 429, Retry-After {after:g} s", failure=False)
                self._pause_for(after)  # the others still hold off, as long as they may
                raise RateLimited(
                    f"provider {self.name!r} is rate limiting (HTTP 429) and "
                    f"{self._too_long(after)}",
                    provider=self.name,
                    retry_after=after,
                )
            raise _Retry(
                RateLimited(
                    f"provider {self.name!r} is rate limiting (HTTP 429)",
                    provider=self.name,
                    retry_after=after,
                ),
                retry_after=after,
                failure=False,
            )
        if status in (401, 403):
            env = self.config.api_key_env
            shown = (shown_env_name(env) or "the variable named by api_key_env") if env else None
            raise AuthError(
                f"provider {self.name!r} refused the credentials (HTTP {status}); "
                f"check {shown or 'the API key'}; the server said: {text}",
                provider=self.name,
                status=status,
            )
        if status >= 500:
            if after is not None and after > self.config.max_retry_wait:
                self._not_retried(f"HTTP {status}, Retry-After {after:g} s", failure=True)
                raise ProviderUnavailable(
                    f"provider {self.name!r} failed (HTTP {status}) and "
                    f"{self._too_long(after)}: {text}",
                    provider=self.name,
                    status=status,
                )
            raise _Retry(
                ProviderUnavailable(
                    f"provider {self.name!r} failed (HTTP {status}): {text}",
                    provider=self.name,
                    status=status,
                ),
                retry_after=after,
                failure=True,
            )
        self._reject(status, text)

    def _too_long(self, after: float) -> str:
        return (
            f"asks to wait {after:g} s (Retry-After), more than max_retry_wait "
            f"({self.config.max_retry_wait:g} s): not waited for"
        )

    def _not_retried(self, why: str, *, failure: bool) -> None:
        """Count a failed attempt that fails the call at once (no retry is worth it)."""
        _log.warning(
            "provider %r gave up at once: %s, not retried", self.name, why, extra=log_extra()
        )
        self._failures += 1
        if failure:  # counts against the circuit breaker
            self._breaker_failure(why)

    def _reject(self, status: int, text: str) -> NoReturn:
        raise ProviderError(
            f"provider {self.name!r} rejected the request (HTTP {status}): {text}",
            provider=self.name,
            status=status,
        )


def _key_from_env(provider: str, variable: str) -> str:
    """The key in the environment variable *variable*, checked: a ConfigError naming
    the variable (never showing its value) if it is unset, empty, or holds what no
    key holds (whitespace, a control character, a character outside ASCII)."""
    key = os.environ.get(variable)
    if key and all("!" <= c <= "~" for c in key):
        return key
    shown = shown_env_name(variable)
    named = "named by api_key_env" if shown is None else f"{shown!r} (api_key_env)"
    why = (
        "is not set (or is empty)"
        if not key
        else "holds whitespace, a control character or a character outside ASCII, "
        "which no API key holds (its value is not shown)"
    )
    raise ConfigError(f"provider {provider!r}: the environment variable {named} {why}")


def _wire_path(kind: str, base_url: str, wire: WireFormat) -> str:
    """The wire's path, after *base_url*. An Anthropic base URL may end with ``/v1``
    (agentrio's own examples) or not (the Anthropic SDK's, https://api.anthropic.com):
    both reach ``/v1/messages``."""
    if kind != "anthropic":
        return wire.path
    import urllib.parse

    if urllib.parse.urlsplit(base_url).path.rstrip("/").endswith("/v1"):
        return wire.path
    return "/v1" + wire.path


def _endpoint(base_url: str, path: str) -> str:
    """*base_url* with the wire's *path* appended to its path (before any query)."""
    cut = min((i for i in (base_url.find("?"), base_url.find("#")) if i >= 0), default=None)
    if cut is None:
        return base_url.rstrip("/") + path
    return base_url[:cut].rstrip("/") + path + base_url[cut:]


def _log_request(endpoint: str, line: str, sent: int, start: float) -> None:
    """The DEBUG line of one request: where (credentials hidden), its answer's
    status line, the bytes sent and how long the answer's head took."""
    took = (time.perf_counter() - start) * 1000
    _http_log.debug(
        'HTTP Request: POST %s "%s" (%d bytes sent, head in %.1f ms)',
        endpoint,
        line,
        sent,
        took,
        extra=log_extra(),
    )


def _why(error: ProviderError | str, cause: BaseException | None = None) -> str:
    """A failure in a few words for the log: its status, or the type of its *cause*
    or of itself; never the server's text (which may echo the request)."""
    if isinstance(error, str):
        return error
    if error.status is not None:
        return f"HTTP {error.status}"
    if cause is not None and not isinstance(cause, ProviderError):
        return type(cause).__name__
    if isinstance(error, ProviderUnavailable):
        return "no answer within the timeout"  # the only one raised without either
    return type(error).__name__


def _reason(exc: BaseException) -> str:
    """What *exc* says, or the first of its causes that says something: a TLS
    failure reaches httpx as an error with no text, its reason in the cause."""
    seen: BaseException | None = exc
    for _ in range(8):  # (a bounded walk: a chain may loop)
        if seen is None:
            break
        if str(seen):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return str(exc)


_PLAIN_HEADERS = frozenset(
    ("host", "accept", "accept-encoding", "connection", "content-type", "content-length")
)


def _scrub(exc: BaseException) -> None:
    """Take the credentials out of the request an httpx error holds (it stays in the
    cause chain for debugging; httpx hides Authorization in reprs, not x-api-key
    nor an extra header)."""
    try:
        request = exc.request  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return
    # Every header but those that cannot hold a credential: an extra header of
    # the settings may be a key too.
    for header in [h for h in request.headers if h.lower() not in _PLAIN_HEADERS]:
        request.headers.pop(header, None)


class ProviderModel:
    """A model behind a [`Provider`][agentrio.Provider]: what [`AgentSpec`][agentrio.AgentSpec]
    takes as ``model``.

    Attributes:
        provider: the instance it calls.
        name: the model's name at that provider.
        context_window: its context window in tokens.
        pricing: USD per token from the instance's prices:
            ``(input, output)``, or ``(input, output, cached_input,
            cache_write)`` when a cache price is set (and ``cache_write_1h``
            after them when its price is); None without prices.
    """

    __slots__ = ("context_window", "name", "pricing", "provider")

    def __init__(self, provider: Provider, name: str, context_window: int) -> None:
        self.provider = provider
        self.name = name
        self.context_window = context_window
        self.pricing = _pricing(provider.config)

    def __repr__(self) -> str:
        return f"<ProviderModel {self.provider.name}:{self.name}>"

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        on_text: Callable[[str], None] | None = None,
        meter: AttemptMeter | None = None,
        lane: Lane | None = None,
        settings: ModelSettings | None = None,
        output_schema: OutputSchema | None = None,
    ) -> ModelReply:
        """One model call through the provider: [`Provider.complete`][agentrio.Provider.complete],
        whose errors it raises (which end the phase with ``"error"``)."""
        return await self.provider.complete(
            self.name,
            messages,
            tools,
            max_output_tokens=max_output_tokens,
            on_text=on_text,
            meter=meter,
            lane=lane,
            settings=settings,
            output_schema=output_schema,
        )

    def check_settings(self, settings: ModelSettings) -> None:
        """Raise InvalidArgument naming a setting the provider's wire format cannot send."""
        self.provider.check_settings(settings)

    @property
    def needs_tools_for_tool_turns(self) -> bool:
        """Does the provider's API refuse a call whose history holds tool calls or
        results unless the call defines tools (Anthropic's does)? An agent then
        offers a call that may call no tool (the final answer's, or a phase's
        with ``tool_names=[]``) the tools, with ``tool_choice="none"``."""
        return bool(getattr(self.provider._wire, "needs_tools_for_tool_turns", False))

    def check_parts(self, parts: Sequence[ContentPart]) -> None:
        """Raise InvalidArgument naming a content part the provider's wire format
        cannot take (see [`Provider.check_parts`][agentrio.Provider.check_parts])."""
        self.provider.check_parts(parts)


def _extra_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A call's ``extra_headers``, checked as header lines (InvalidArgument if not)."""
    extra = dict(headers)
    try:
        _header_lines(extra)
    except ValueError as exc:
        raise InvalidArgument(f"settings.extra_headers: {exc}") from None
    return extra


def _header_lines(headers: dict[str, str]) -> bytes:
    from .transport import header_lines

    return header_lines(headers.items())


def _pricing(config: ProviderConfig) -> tuple[float, ...] | None:
    """The instance's prices per token, for its models' ``pricing``."""
    prices = [config.usd_per_million_input_tokens, config.usd_per_million_output_tokens]
    cached, written = (
        config.usd_per_million_cached_input_tokens,
        config.usd_per_million_cache_write_tokens,
    )
    written_1h = config.usd_per_million_cache_write_1h_tokens
    if cached is not None or written is not None or written_1h is not None:
        prices += [
            prices[0] if cached is None else cached,
            prices[0] if written is None else written,
        ]
    if written_1h is not None:
        prices.append(written_1h)
    if not any(prices):
        return None
    return tuple(price / 1e6 for price in prices)
