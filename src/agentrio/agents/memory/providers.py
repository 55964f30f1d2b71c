"""Context providers: sources that add text to a model call's context before it is made.

``AgentSpec(context_providers=[...])`` takes providers (anything with an async
``provide(query)`` that returns text), or a `ContextProviders` that also sets
the timeout and the token allowance. Before each model call, the providers run
in parallel, each under the timeout; what they give is cut to the allowance
in the order they are listed (what does not fit is cut, or left out), and the
call gets it as one system message after the system prompt. A provider that
times out, raises or gives something other than text is skipped for that call
with a `ContextProviderFailed` event: it never ends the phase.

`FileRetrieval` is a simple one: the files of a folder, cut into chunks,
ranked with BM25 against the query.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import attrs
import trio

from ..._checks import check_int, check_seconds, short_repr
from ..._text import PREVIEW_SCAN, scrub
from ...errors import InvalidArgument
from .scoring import BM25, MemoryItem

__all__ = [
    "ContextProvider",
    "ContextProviders",
    "ContextQuery",
    "FileRetrieval",
    "Provided",
    "gather_context",
    "to_context_providers",
]


@attrs.frozen
class ContextQuery:
    """What a context provider is asked before a model call.

    Attributes:
        text: what the call is about: the phase's user message, and the tool
            results the model has not answered yet (at most 4,000 characters).
        agent: the agent's path.
        max_tokens: the allowance left for this provider (what it gives past
            it is cut).
    """

    text: str
    agent: str
    max_tokens: int


@runtime_checkable
class ContextProvider(Protocol):
    """A source of context: anything with an async ``provide`` (and, best, a ``name``).

    ``provide`` returns the text to add (``""``: nothing this time), or a list
    of texts (joined by blank lines). It runs in a task of its own, under the
    timeout: it may await anything (a database, an HTTP search).
    """

    async def provide(self, query: ContextQuery) -> str | Sequence[str]:
        """The context for *query*."""
        ...


def _check_providers(value: ContextProviders) -> None:
    for p in value.providers:
        if not isinstance(p, ContextProvider):
            raise InvalidArgument(
                "context_providers takes objects with an async provide(query) method, "
                f"got {short_repr(p)}"
            )
    check_seconds("ContextProviders.timeout", value.timeout)
    check_int("ContextProviders.max_tokens", value.max_tokens, 1)


def _to_tuple(providers: Iterable[ContextProvider]) -> tuple[ContextProvider, ...]:
    if isinstance(providers, (str, bytes)) or not isinstance(providers, Iterable):
        raise InvalidArgument(
            f"ContextProviders takes a list of context providers, got {short_repr(providers)}"
        )
    return tuple(providers)


@attrs.frozen
class ContextProviders:
    """Context providers and how they run (``AgentSpec(context_providers=...)``).

    Attributes:
        providers: the providers, in the order their text is given (and cut).
        timeout: the seconds each provider has, per model call.
        max_tokens: the most tokens all of them together may add to a call,
            as the spec's token estimator counts.
    """

    providers: tuple[ContextProvider, ...] = attrs.field(default=(), converter=_to_tuple)
    timeout: float = 5.0
    max_tokens: int = 1000

    def __attrs_post_init__(self) -> None:
        _check_providers(self)


def to_context_providers(value: object) -> ContextProviders | None:
    """*value* (a `ContextProviders`, a list of providers, or None) as a
    `ContextProviders`, or None when there is none."""
    if value is None:
        return None
    if not isinstance(value, ContextProviders):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise InvalidArgument(
                "context_providers must be a list of context providers or an "
                f"agentrio.ContextProviders, got {short_repr(value)}"
            )
        value = ContextProviders(tuple(value))
    return value if value.providers else None


def provider_name(provider: object) -> str:
    """*provider*'s ``name`` if it has a str one, else its class's name."""
    name = getattr(provider, "name", None)
    return name if isinstance(name, str) and name else type(provider).__name__


@attrs.frozen
class Provided:
    """One provider's outcome for one call: its text (cut), or why it was skipped."""

    name: str
    text: str = ""
    tokens: int = 0
    cut: bool = False
    failure: tuple[str, str, str] | None = None  # (reason, error type, error)


def _as_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if (
        isinstance(value, Sequence)
        and not isinstance(value, (bytes, bytearray))
        and all(isinstance(v, str) for v in value)
    ):
        return "\n\n".join(value)
    return None


def fit(text: str, most: int, estimate: object) -> tuple[str, int, bool]:
    """*text* cut to at most *most* tokens by *estimate*: (text, tokens, cut)."""
    assert callable(estimate)
    # Cut to a size an estimate can take first: a hostile provider may give megabytes.
    cut = False
    if len(text) > most * 8:
        text, cut = text[: most * 8], True
    tokens = int(estimate(text))
    while tokens > most and text:
        text = text[: max(0, len(text) * most // max(tokens, 1) - 1)]
        tokens, cut = int(estimate(text + "…")), True
    if cut and text:
        text += "…"
    return text, tokens, cut


async def _run_one(
    provider: ContextProvider, query: ContextQuery, timeout: float, out: list[Provided], i: int
) -> None:
    most = query.max_tokens * 8 + 1  # (more than fit() keeps of it)
    name = provider_name(provider)
    try:
        with trio.move_on_after(timeout) as scope:
            value = await provider.provide(query)
    except Exception as exc:
        error = scrub(str(exc)[:PREVIEW_SCAN])  # (cut to 200 once its secrets are hidden)
        out[i] = Provided(name, failure=("error", type(exc).__name__, error))
        return
    if scope.cancelled_caught:
        out[i] = Provided(name, failure=("timeout", "", f"no answer in {timeout:g} s"))
        return
    text = _as_text(value)
    if text is None:
        why = f"provide() returned {type(value).__name__}, not text"
        out[i] = Provided(name, failure=("not_text", "TypeError", why))
        return
    # (cut before anything reads it whole: a hostile provider may give megabytes)
    out[i] = Provided(name, scrub(text[:most]).strip())


async def gather_context(
    providers: ContextProviders, text: str, agent: str, estimate: object
) -> list[Provided]:
    """Run *providers* in parallel for the query *text*; each one's outcome, in order,
    its text cut to what is left of the allowance."""
    query = ContextQuery(text, agent, providers.max_tokens)
    out: list[Provided] = [Provided("")] * len(providers.providers)
    async with trio.open_nursery() as nursery:
        for i, provider in enumerate(providers.providers):
            nursery.start_soon(_run_one, provider, query, providers.timeout, out, i)
    left = providers.max_tokens
    for i, got in enumerate(out):
        if got.failure is not None or not got.text:
            continue
        text, tokens, cut = fit(got.text, left, estimate) if left > 0 else ("", 0, True)
        out[i] = Provided(got.name, text, tokens, cut)
        left -= tokens
    return out


class FileRetrieval:
    """A context provider over the text files of a folder: each file cut into chunks
    of about ``chunk_chars`` characters, the best ``top`` chunks for the query
    (BM25) given with their file's name.

    The files are read once, when the provider is made (each at most
    ``max_file_bytes``; others, files that are not UTF-8, and links to files or
    folders, which may point outside *folder*, are left out).

    Args:
        folder: the folder (searched recursively for *patterns*).
        patterns: which files: globs (``"*.md"`` and ``"*.txt"`` by default); a
            file that matches any of them is read.
        top: how many chunks to give.
        chunk_chars: the size of a chunk.
        max_file_bytes: larger files are left out.
        name: the provider's name in events.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        patterns: Sequence[str] = ("*.md", "*.txt"),
        top: int = 3,
        chunk_chars: int = 800,
        max_file_bytes: int = 1_000_000,
        name: str = "files",
    ) -> None:
        self.name = name
        self.top = check_int("FileRetrieval.top", top, 1)
        check_int("FileRetrieval.chunk_chars", chunk_chars, 1)
        root = pathlib.Path(folder)
        if not root.is_dir():
            raise InvalidArgument(f"FileRetrieval: {os.fspath(folder)!r} is not a folder")
        self._chunks: list[tuple[str, str]] = []  # (file, chunk)
        self._index = BM25()
        for path in sorted({p for pattern in patterns for p in root.rglob(pattern)}):
            self._read(root, path, chunk_chars, max_file_bytes)

    def _read(self, root: pathlib.Path, path: pathlib.Path, size: int, most: int) -> None:
        try:
            # (a link, or a file under a linked folder, may point anywhere: left out)
            if path.is_symlink() or not path.resolve().is_relative_to(root.resolve()):
                return
            if not path.is_file() or path.stat().st_size > most:
                return
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return
        rel = path.relative_to(root).as_posix()
        for start in range(0, len(text), size):
            chunk = text[start : start + size].strip()
            if chunk:
                self._chunks.append((rel, chunk))
                self._index.add(MemoryItem(len(self._chunks), chunk))

    async def provide(self, query: ContextQuery) -> list[str]:
        """The best chunks for *query*, each as ``"[file] chunk"``."""
        await trio.lowlevel.checkpoint()
        best = self._index.top(query.text, self.top)
        return [f"[{self._chunks[i - 1][0]}] {self._chunks[i - 1][1]}" for _, i in best]
