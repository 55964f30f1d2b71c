"""The built-in provider instances ``openai``, ``anthropic`` and ``ollama``.

Each is the official endpoint of its wire format, set by the variables its own
SDK or CLI reads: ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``,
``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``, ``OLLAMA_HOST`` (no key).
So ``"openai:gpt-5-mini"`` works with no agentrio.toml; a ``[providers.NAME]``
table of that name replaces the instance (and a table that gives no
``base_url`` takes its kind's, from these variables).

The variables are read when the instance is made, that is when the first
agent naming it is spawned. A variable set to something that cannot be used
is a ``ConfigError`` that names it, never showing its value (a base URL may
hold credentials); the key itself is read and checked by the ``Provider``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

from ..errors import ConfigError
from .provider import Kind, ProviderConfig

__all__ = ["BUILTIN_NAMES", "builtin_provider", "kind_defaults"]


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
BUILTIN_NAMES = tuple(_OFFICIAL)  # the instances' names, which are also their kinds
# Kinds that are another wire of a built-in instance's endpoint (and key).
_SAME_ENDPOINT = {"openai-responses": "openai"}
_OLLAMA_PORT = "11434"


def builtin_provider(name: str, environ: Mapping[str, str] | None = None) -> ProviderConfig | None:
    """The built-in instance *name* as the environment sets it, or None if there is none.

    Args:
        name: ``"openai"``, ``"anthropic"`` or ``"ollama"`` (another name: None).
        environ: where the variables are read (default ``os.environ``).

    Raises:
        ConfigError: its base URL variable is set to something that is not a
            usable URL; the message names the variable, not its value.
    """
    if name not in _OFFICIAL:
        return None
    official = _OFFICIAL[name]
    env = os.environ if environ is None else environ
    try:
        url = _base_url(official, env)
    except ConfigError as exc:
        raise ConfigError(f"provider {name!r}: {exc}") from None
    return ProviderConfig(name=name, kind=official.kind, base_url=url, api_key_env=official.key_env)


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
