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

from ..errors import ConfigError
from .provider import _OFFICIAL, BUILTIN_NAMES, ProviderConfig, _base_url, kind_defaults

__all__ = ["BUILTIN_NAMES", "builtin_provider", "kind_defaults"]


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
