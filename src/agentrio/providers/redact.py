"""Keeping credentials out of what is shown: URLs, environment variable names, httpx's log.

A key can reach a provider in four places besides ``api_key``: a base URL's
``user:password@`` or query (``?key=...``), by mistake ``api_key_env``
(which should hold the variable's name), and the ``extra_headers`` and
``extra_body`` of request settings (the provider's, a spec's or a run's).
Everything agentrio shows (reprs, error messages, events) goes through these
helpers.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = [
    "REDACTED",
    "env_name_ok",
    "hide_in_httpx_log",
    "redact_url",
    "settings_secrets",
    "shown_env_name",
    "url_secrets",
]

REDACTED = "[redacted]"

# Pieces of a URL, and values of extra headers and body fields, shorter than
# this are not searched for in error text: a value such as "1" would take
# every digit out of the message, and a key is longer.
MIN_SECRET = 6
# How deep into extra_body's tables and lists its strings are looked for.
_MAX_DEPTH = 32

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# How environment variables are named in practice (OPENAI_API_KEY). Keys are
# almost never written so (they mix cases, or hold '-'), so a name in this form
# is shown in messages and any other valid name is not: it could be a key.
_PLAIN_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


class _Url(NamedTuple):
    scheme: str  # with its "://", or ""
    userinfo: str | None  # None: no "@"
    hostport: str
    path: str
    query: str | None  # None: no "?"
    fragment: str | None  # None: no "#"


def _parts(url: str) -> _Url:
    """*url* cut into its parts, leniently.

    Not urllib or httpx: this must also work on a URL they refuse, to say
    what is wrong with it without showing its credentials.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    rest, hash_, fragment = rest.partition("#")
    rest, mark, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    userinfo, at, hostport = authority.rpartition("@")
    return _Url(
        scheme + sep,
        userinfo if at else None,
        hostport,
        slash + path,
        query if mark else None,
        fragment if hash_ else None,
    )


def redact_url(url: str) -> str:
    """*url* with its ``user:password@``, every query value and its fragment shown as
    ``[redacted]`` (``https://[redacted]@host/v1?key=[redacted]``)."""
    parts = _parts(url)
    shown = parts.scheme + ("" if parts.userinfo is None else f"{REDACTED}@")
    shown += parts.hostport + parts.path
    if parts.query is not None:
        params = (p.partition("=") for p in parts.query.split("&"))
        shown += "?" + "&".join(
            f"{name}={REDACTED}" if eq else (REDACTED if name else "") for name, eq, _ in params
        )
    if parts.fragment is not None:
        shown += f"#{REDACTED}"
    return shown


def url_secrets(url: str) -> list[str]:
    """The pieces of *url* that `redact_url` hides, as they may appear in text
    (raw and percent-decoded), longest first."""
    parts = _parts(url)
    userinfo = parts.userinfo or ""
    pieces = [userinfo, *userinfo.split(":"), parts.fragment or ""]
    for param in (parts.query or "").split("&"):
        name, eq, value = param.partition("=")
        pieces.append(value if eq else name)
    found = set()
    for piece in pieces:
        for form in (piece, urllib.parse.unquote(piece)):
            if len(form) >= MIN_SECRET:
                found.add(form)
    return sorted(found, key=len, reverse=True)


def settings_secrets(
    extra_headers: Mapping[str, str] | None, extra_body: Mapping[str, object] | None
) -> list[str]:
    """What error text must not show of request settings, longest first.

    The values of *extra_headers* and the str values of *extra_body* (in its
    tables and lists too) of at least ``MIN_SECRET`` characters: any may be a
    key. Each as it is and as a server echoing the request may spell it (see
    `_spellings`).
    """
    values = [*(extra_headers or {}).values()]
    stack: list[tuple[object, int]] = [(dict(extra_body or {}), 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            values.append(value)
        elif depth < _MAX_DEPTH and isinstance(value, Mapping):
            stack.extend((item, depth + 1) for item in value.values())
        elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
            stack.extend((item, depth + 1) for item in value)
    found: set[str] = set()
    for value in values:
        if len(value) >= MIN_SECRET:
            found.update(_spellings(value))
    return sorted(found, key=len, reverse=True)


def _spellings(value: str) -> set[str]:
    """*value* as it is, and as an echo of the request's JSON body may spell it:
    in a JSON string (quotes and backslashes escaped, non-ASCII as ``\\u`` escapes
    or not), in a JSON string within a JSON string (the body quoted in an error
    message), and in a Python repr of a JSON string (a stream's error object,
    quoted so). The same for a key made of letters, digits, ``-`` and ``_``."""
    once = json.dumps(value)[1:-1]
    return {
        value,
        once,
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(once)[1:-1],
        repr(once)[1:-1],
    }


def env_name_ok(name: str) -> bool:
    """Is *name* a valid environment variable name (letters, digits, ``_``; no digit first)?"""
    return _ENV_NAME.fullmatch(name) is not None


def shown_env_name(name: str) -> str | None:
    """*name* if it may be shown (``OPENAI_API_KEY``), None if it could be a key."""
    return name if _PLAIN_ENV_NAME.fullmatch(name) else None


class _HttpxLogFilter(logging.Filter):
    """Takes known secrets out of httpx's records (its INFO line holds the whole URL)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: logging reports it, not us
            return True
        if any(secret in message for secret in self.secrets):
            for secret in self.secrets:
                message = message.replace(secret, REDACTED)
            record.msg, record.args = message, ()
        return True


_httpx_filter: _HttpxLogFilter | None = None


def hide_in_httpx_log(secrets: Iterable[str]) -> None:
    """Keep *secrets* out of the ``httpx`` logger's records from now on.

    The filter is installed on first use only, so a process whose URLs hold no
    credentials pays nothing; it runs only for records httpx really logs.
    """
    global _httpx_filter
    new = set(secrets)
    if not new:
        return
    if _httpx_filter is None:
        _httpx_filter = _HttpxLogFilter()
        logging.getLogger("httpx").addFilter(_httpx_filter)
    merged = new.union(_httpx_filter.secrets)
    _httpx_filter.secrets = sorted(merged, key=len, reverse=True)
