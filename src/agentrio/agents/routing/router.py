"""The router: which mode and tier a request should run on.

A router is any callable ``(request) -> Route`` (or an async one).
[`RuleRouter`][agentrio.RuleRouter], the default, decides by rules that need no model call:
the request's shape first (a code block, a list, many lines, several links
or paths), which works in any language and script, then configurable lists
of keywords and tool hints, then its length.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence

import attrs

from ..._checks import check_int
from ...errors import InvalidArgument
from ...providers.tokens import estimate_tokens

__all__ = ["Route", "Router", "RuleRouter", "choose_route"]


@attrs.frozen
class Route:
    """A router's decision for one request.

    Attributes:
        mode: the name of the mode to run it in (``"inline"``, ``"background"``,
            or one the runtime was given).
        tier: the tier to run it on (a tier name of agentrio.toml, or an
            ``"instance:model"`` string); None: the agent's own model.
        reason: why, for the ``Routed`` event and the logs.

    Raises:
        InvalidArgument: *mode* is not a non-empty str, *tier* not a
            non-empty str or None, *reason* not a str.
    """

    mode: str
    tier: str | None = None
    reason: str = ""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.mode, str) or not self.mode:
            raise InvalidArgument(f"Route.mode must be a non-empty str, got {self.mode!r}")
        if self.tier is not None and (not isinstance(self.tier, str) or not self.tier):
            raise InvalidArgument(f"Route.tier must be a non-empty str or None, got {self.tier!r}")
        if not isinstance(self.reason, str):
            raise InvalidArgument(f"Route.reason must be a str, got {self.reason!r}")


Router = Callable[[str], Route | Awaitable[Route]]
"""Any callable that takes the request's text and returns a [`Route`][agentrio.Route] (or awaits
one)."""


async def choose_route(router: Router, request: str) -> Route:
    """What *router* decides for *request*, checked.

    Raises:
        InvalidArgument: the router returned something that is not a Route.
    """
    route = router(request)
    if inspect.isawaitable(route):
        route = await route
    if not isinstance(route, Route):
        raise InvalidArgument(f"the router must return an agentrio.Route, got {route!r}")
    return route


def _words(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidArgument(f"RuleRouter.{name} must be a list of str, got {value!r}")
    words = tuple(value)
    for word in words:
        if not isinstance(word, str) or not word.strip():
            raise InvalidArgument(
                f"RuleRouter.{name} must hold non-empty strings, got {word!r} in {value!r}"
            )
    return words


def _background_keywords(value: object) -> tuple[str, ...]:
    return _words("background_keywords", value)


def _inline_keywords(value: object) -> tuple[str, ...]:
    return _words("inline_keywords", value)


def _tool_hints(value: object) -> tuple[str, ...]:
    return _words("tool_hints", value)


def _pattern(words: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex finding any of *words* (casefolded) in a casefolded text.

    A word that starts (ends) with an ASCII letter or digit must not have one
    right before (after) it, so ``run`` is not found in ``prune``; other
    scripts have no spaces between words, so their words are found anywhere.
    """
    parts = []
    for word in sorted({w.strip().casefold() for w in words}, key=len, reverse=True):
        part = re.escape(word)
        if word[0].isascii() and word[0].isalnum():
            part = r"(?<![a-z0-9])" + part
        if word[-1].isascii() and word[-1].isalnum():
            part += r"(?![a-z0-9])"
        parts.append(part)
    return re.compile("|".join(parts)) if parts else None


# A list item at the start of a line: "1. ", "2) ", a digit (ASCII or full-width)
# with a full-width stop or parenthesis or an ideographic comma, a Chinese
# numeral with an ideographic comma ("一、"), a circled number (U+2460-2473),
# "- ", "* ", "+ ", a bullet (U+2022) or a katakana middle dot (U+30FB).
_LIST_ITEM = re.compile(
    r"^[ \t\u3000]*(?:\d{1,3}(?:[.)][ \t]|[\uff0e\uff09\u3001\u3002])"
    r"|[\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u4e03\u516b\u4e5d\u5341]{1,3}\u3001"
    r"|[\u2460-\u2473]|[-*+\u2022][ \t]|\u30fb)",
    re.M,
)
_FENCE = re.compile(r"```|~~~")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s<>\"'\u3001\u3002\uff09)]+")
_PATH = re.compile(
    r"(?<![\w/:.])(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]*)*"  # /etc/hosts, ./src, ~/notes
    r"|(?<![\w/:.])[\w.-]+(?:[/\\][\w.-]+)+\.\w{1,8}\b"  # src/main.py, docs\a.md
    r"|\b[A-Za-z]:\\[^\s]*"  # C:\Users
)

_BACKGROUND_KEYWORDS = (
    "draft",
    "research",
    "analyze",
    "analyse",
    "investigate",
    "compare",
    "refactor",
    "implement",
    "write a report",
    "step by step",
    "in detail",
)
_INLINE_KEYWORDS = (
    "what is",
    "what's",
    "who is",
    "when is",
    "where is",
    "how many",
    "show me",
    "define",
)
_TOOL_HINTS = (
    "search",
    "look up",
    "fetch",
    "download",
    "browse",
    "read",
    "write",
    "open",
    "run",
    "execute",
    "query",
    "send",
    "calculate",
)


@attrs.frozen
class RuleRouter:
    """The default router: rules on the request's shape, keywords and length.

    The first rule that matches decides:

    1. a background keyword → ``background``;
    2. a code block (```` ``` ```` or ``~~~``) → ``background``;
    3. at least ``min_list_items`` list items (lines that start with ``1.``,
       ``2)``, a digit (ASCII or full-width) with a full-width full stop or
       parenthesis, ``、`` or ``。`` such as ``1、``, a Chinese numeral with
       ``、`` such as ``一、`` or ``十二、``, a circled number such as ``①``,
       ``-``, ``*``, ``+``, ``•`` or ``・``) → ``background``;
    4. more than ``max_inline_lines`` non-empty lines → ``background``;
    5. at least ``min_references`` links (``scheme://...``) or file paths
       (``/etc/hosts``, ``./src``, ``~/notes``, ``src/main.py``,
       ``C:\\Users``) → ``background``;
    6. at least ``min_tool_hints`` different tool hints → ``background``;
    7. more than ``long_request_tokens`` estimated tokens → ``background``;
    8. an inline keyword → ``inline``, on ``simple_tier``;
    9. fewer than ``short_request_tokens`` estimated tokens → ``inline``, on ``simple_tier``;
    10. otherwise ``inline``, on ``default_tier``.

    A ``background`` route is on ``complex_tier``. The tiers are None by
    default: the agent's own model. Rules 2 to 5, 7 and 9 read the text's
    shape and length, so they work in any language and script: the length
    is [`agentrio.estimate_tokens`][agentrio.estimate_tokens] of the stripped request (ASCII
    characters / 3.5, each other character one token, plus one), so a
    Chinese or Japanese request, which says in one character what English
    says in three or four, is not taken for a short one; the word
    lists (English by default) are matched ignoring case: a word that starts
    (ends) with an ASCII letter or digit must not have one just before
    (after) it, so ASCII words match whole; words of other scripts are found
    anywhere in the text. Empty lists turn rules 1, 6 and 8 off. The same
    fields are the keys of the ``[router]`` table of agentrio.toml
    (``Config.router``); ``tiers()`` returns the tiers the rules name.

    The route's ``reason`` names the rule: ``"background keyword 'draft'"``,
    ``"a code block"``, ``"a list of 3 items"``, ``"5 lines"``, ``"2 links or
    paths"``, ``"tool hints 'read', 'search'"``, ``"61 estimated tokens
    (long_request_tokens: 50)"``, ``"inline keyword 'what is'"``, ``"8
    estimated tokens (short_request_tokens: 20)"``, ``"no rule matched"``.

    Attributes:
        long_request_tokens: longer than this (in estimated tokens) is
            background (50: about 175 English characters, 50 Chinese ones).
        short_request_tokens: shorter than this (in estimated tokens) is a
            simple inline request (20: about 70 English characters).
        max_inline_lines: more non-empty lines than this is background.
        min_list_items: this many list items or more is background.
        min_references: this many links (``scheme://...``) or file paths
            (``/etc/hosts``, ``./src``, ``src/main.py``) or more is background.
        background_keywords: words or phrases that make a request background
            (default: ``"draft"``, ``"research"``, ``"analyze"``,
            ``"analyse"``, ``"investigate"``, ``"compare"``, ``"refactor"``,
            ``"implement"``, ``"write a report"``, ``"step by step"``, ``"in
            detail"``).
        inline_keywords: words or phrases of a quick question, a simple
            inline request (default: ``"what is"``, ``"what's"``, ``"who
            is"``, ``"when is"``, ``"where is"``, ``"how many"``, ``"show
            me"``, ``"define"``).
        tool_hints: words that suggest a tool call; ``min_tool_hints``
            different ones make a request background, several tool calls
            (default: ``"search"``, ``"look up"``, ``"fetch"``,
            ``"download"``, ``"browse"``, ``"read"``, ``"write"``, ``"open"``,
            ``"run"``, ``"execute"``, ``"query"``, ``"send"``,
            ``"calculate"``).
        min_tool_hints: see ``tool_hints``.
        simple_tier: the tier of simple inline requests (None: the agent's model).
        default_tier: the tier of other inline requests.
        complex_tier: the tier of background requests.

    Raises:
        InvalidArgument: a threshold that is not an int (>= 1;
            ``short_request_tokens`` >= 0), a word list that is not a list of
            non-empty strings, a tier that is not a non-empty str or None.
    """

    long_request_tokens: int = 50
    short_request_tokens: int = 20
    max_inline_lines: int = 3
    min_list_items: int = 2
    min_references: int = 2
    background_keywords: tuple[str, ...] = attrs.field(
        default=_BACKGROUND_KEYWORDS, converter=_background_keywords
    )
    inline_keywords: tuple[str, ...] = attrs.field(
        default=_INLINE_KEYWORDS, converter=_inline_keywords
    )
    tool_hints: tuple[str, ...] = attrs.field(default=_TOOL_HINTS, converter=_tool_hints)
    min_tool_hints: int = 2
    simple_tier: str | None = None
    default_tier: str | None = None
    complex_tier: str | None = None
    _compiled: tuple[re.Pattern[str] | None, ...] = attrs.field(
        init=False, default=(), eq=False, hash=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        for name, minimum in (
            ("long_request_tokens", 1),
            ("short_request_tokens", 0),
            ("max_inline_lines", 1),
            ("min_list_items", 1),
            ("min_references", 1),
            ("min_tool_hints", 1),
        ):
            check_int(f"RuleRouter.{name}", getattr(self, name), minimum)
        for name in ("simple_tier", "default_tier", "complex_tier"):
            tier = getattr(self, name)
            if tier is not None and (not isinstance(tier, str) or not tier):
                raise InvalidArgument(
                    f"RuleRouter.{name} must be a non-empty str or None, got {tier!r}"
                )
        compiled = tuple(
            _pattern(words)
            for words in (self.background_keywords, self.tool_hints, self.inline_keywords)
        )
        object.__setattr__(self, "_compiled", compiled)

    def tiers(self) -> tuple[str, ...]:
        """The tiers the rules name (for checking them against a configuration)."""
        named = (self.simple_tier, self.default_tier, self.complex_tier)
        return tuple(t for t in named if t is not None)

    def __call__(self, request: str) -> Route:
        """Route *request*: the first rule that matches decides.

        Raises:
            InvalidArgument: *request* is not a str.
        """
        if not isinstance(request, str):
            raise InvalidArgument(f"request must be a str, got {request!r}")
        text = request.strip()
        folded = text.casefold()
        why = self._background(text, folded)
        if why:
            return Route("background", self.complex_tier, why)
        inline = self._compiled[2]
        found = inline.search(folded) if inline is not None else None
        if found is not None:
            return Route("inline", self.simple_tier, f"inline keyword {found.group()!r}")
        tokens = estimate_tokens(text)
        if tokens < self.short_request_tokens:
            return Route(
                "inline",
                self.simple_tier,
                f"{tokens} estimated tokens (short_request_tokens: {self.short_request_tokens})",
            )
        return Route("inline", self.default_tier, "no rule matched")

    def _background(self, text: str, folded: str) -> str:
        """Why *text* (and its casefolded *folded*) is a background request ("" if it is not)."""
        keywords, hints, _ = self._compiled
        found = keywords.search(folded) if keywords is not None else None
        if found is not None:
            return f"background keyword {found.group()!r}"
        if _FENCE.search(text):
            return "a code block"
        items = len(_LIST_ITEM.findall(text))
        if items >= self.min_list_items:
            return f"a list of {items} items"
        lines = sum(1 for line in text.splitlines() if line.strip())
        if lines > self.max_inline_lines:
            return f"{lines} lines"
        references = len(_URL.findall(text)) + len(_PATH.findall(_URL.sub(" ", text)))
        if references >= self.min_references:
            return f"{references} links or paths"
        if hints is not None:
            named = sorted({m.group() for m in hints.finditer(folded)})
            if len(named) >= self.min_tool_hints:
                return "tool hints " + ", ".join(repr(n) for n in named)
        tokens = estimate_tokens(text)
        if tokens > self.long_request_tokens:
            return f"{tokens} estimated tokens (long_request_tokens: {self.long_request_tokens})"
        return ""
