"""Output sanitisation: rules that redact secrets and credentials from a model's answers.

A rule is a name and a regular expression; each match is replaced by
``[redacted:<name>]`` (or the rule's own replacement). The default rules,
`SECRET_RULES`, find the credentials that most often leak: provider API keys,
cloud and forge tokens, private keys, JSON web tokens, bearer tokens, and
``password=...``-style assignments. Add your own (an account number's shape,
an internal host name) or replace them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import attrs

from ...errors import InvalidArgument

__all__ = ["SECRET_RULES", "Redaction", "Sanitiser"]

# The most characters of one answer that are searched: past them, the rest is
# cut and replaced by a note (an answer that long is not one a user reads).
MAX_SANITISED_CHARS = 1_000_000
# How far on either side of that cut a secret running over it is looked for (the
# longest default rule, a private key block, is 20,000 characters and its markers).
_CUT_WINDOW = 21_000
_CUT_NOTE = "\n[cut: the answer was too long to check]"


def _pattern(value: str | re.Pattern[str]) -> re.Pattern[str]:
    if isinstance(value, re.Pattern):
        return value
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"Redaction.pattern must be a regex (str or compiled), got {value!r}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise InvalidArgument(f"Redaction.pattern {value!r} is not a valid regex: {exc}") from None


@attrs.frozen
class Redaction:
    """One rule of a [`Sanitiser`][agentrio.types.Sanitiser]: what it finds, and what replaces it.

    Attributes:
        name: the rule's name, shown in ``OutputSanitised`` events and in
            the default replacement.
        pattern: a regular expression (a str is compiled); each match is
            replaced. Write it so it cannot backtrack for long on hostile
            text (no nested quantifiers).
        replacement: what replaces a match (default ``"[redacted:<name>]"``);
            ``\\1`` and the like refer to the pattern's groups.

    Raises:
        InvalidArgument: an empty name, a pattern that does not compile.
    """

    name: str
    pattern: re.Pattern[str] = attrs.field(converter=_pattern)
    replacement: str = ""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgument(f"Redaction.name must be a non-empty str, got {self.name!r}")
        if not self.replacement:
            object.__setattr__(self, "replacement", f"[redacted:{self.name}]")


def _led(literal: str, rest: str) -> str:
    """*literal* (a key's prefix) not right after a letter, digit or ``_``, then *rest*.

    The check comes after the literal, not as a ``\\b`` before it: a pattern
    that starts with its literal is searched for by that literal, ten to thirty
    times faster on an answer that holds none.
    """
    return f"{literal}(?<![A-Za-z0-9_]{literal}){rest}"


SECRET_RULES: tuple[Redaction, ...] = (
    Redaction(
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]{0,20000}?"
        r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    ),
    Redaction("anthropic_key", _led("sk-ant-", r"[A-Za-z0-9_-]{20,}")),
    Redaction("openai_key", _led("sk-", r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}")),
    Redaction("aws_access_key", _led("(?:AKIA|ASIA)", r"[0-9A-Z]{16}(?![0-9A-Za-z])")),
    Redaction("github_token", _led("gh", r"(?:[pousr]_[A-Za-z0-9]{36,}|_pat_[A-Za-z0-9_]{22,})")),
    Redaction("gitlab_token", _led("glpat-", r"[A-Za-z0-9_-]{20,}")),
    Redaction("slack_token", _led("xox", r"[abposr]-[A-Za-z0-9-]{10,}")),
    Redaction("google_api_key", _led("AIza", r"[0-9A-Za-z_-]{35}")),
    Redaction("stripe_key", _led("sk_", r"(?:live|test)_[A-Za-z0-9]{16,}")),
    Redaction("stripe_key", _led("rk_", r"(?:live|test)_[A-Za-z0-9]{16,}")),
    Redaction("jwt", _led("eyJ", r"[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    Redaction(
        "bearer_token",
        # (its letters as classes, not (?i): a pattern led by them is searched faster)
        r"([Bb][Ee][Aa][Rr][Ee][Rr](?<![A-Za-z0-9_]......)\s+)[A-Za-z0-9._~+/-]{16,}=*",
        r"\1[redacted:bearer_token]",
    ),
    Redaction(
        "password",
        r"(?i)(?<![a-z0-9_])((?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token"
        r"|client[_-]?secret)\s*[:=]\s*[\"']?)[^\s\"',;]{4,}",
        r"\1[redacted:password]",
    ),
)
"""The default rules: API keys (OpenAI, Anthropic, Google, Stripe), AWS access keys,
GitHub, GitLab and Slack tokens, private keys, JSON web tokens, bearer tokens, and
``password``/``secret``/``api_key``/``access_token``/``client_secret`` assignments."""


def _to_rules(value: Iterable[Redaction]) -> tuple[Redaction, ...]:
    if isinstance(value, (str, bytes)):
        raise InvalidArgument(f"Sanitiser.rules must be a list of Redaction, got {value!r}")
    rules = tuple(value)
    for rule in rules:
        if not isinstance(rule, Redaction):
            raise InvalidArgument(
                f"Sanitiser.rules must hold agentrio.types.Redaction, got {rule!r}"
            )
    return rules


@attrs.frozen
class Sanitiser:
    """A rule set that redacts what must not reach a user from a model's answers.

    Part of a [`SecurityProvider`][agentrio.SecurityProvider]; the rules
    run in order, each on the text the rules before it left. Add your own:
    ``Sanitiser(rules=[*agentrio.types.SECRET_RULES, Redaction("iban", r"\\bDE\\d{20}\\b")])``.

    Attributes:
        rules: the [`Redaction`][agentrio.types.Redaction] rules (default:
            [`SECRET_RULES`][agentrio.types.SECRET_RULES]).
    """

    rules: tuple[Redaction, ...] = attrs.field(default=SECRET_RULES, converter=_to_rules)

    def sanitise(self, text: str) -> tuple[str, tuple[str, ...], int]:
        """*text* with every match redacted; the rules that matched, and how often."""
        if len(text) > MAX_SANITISED_CHARS:
            text = text[: self._cut_at(text)] + _CUT_NOTE
        matched: list[str] = []
        total = 0
        for rule in self.rules:
            text, count = rule.pattern.subn(rule.replacement, text)
            if count:
                matched.append(rule.name)
                total += count
        return text, tuple(sorted(set(matched))), total

    def _cut_at(self, text: str) -> int:
        """Where to cut a *text* too long to search: at `MAX_SANITISED_CHARS`, or
        before a match of a rule that runs over that point (so no secret's head is
        left behind, too short for its rule to find)."""
        low = MAX_SANITISED_CHARS - _CUT_WINDOW
        spans = [
            m.span()
            for rule in self.rules
            for m in rule.pattern.finditer(text, low, MAX_SANITISED_CHARS + _CUT_WINDOW)
        ]
        cut = MAX_SANITISED_CHARS
        moved = True
        while moved:
            moved = False
            for start, end in spans:
                if start < cut < end:
                    cut, moved = start, True
        return cut


def check_globs(name: str, value: Sequence[str]) -> tuple[str, ...]:
    """*value*, a list of tool names or globs, as a tuple (InvalidArgument if it is not one)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidArgument(
            f"SecurityProvider.{name} must be a list of tool names, got {value!r}"
        )
    for glob in value:
        if not isinstance(glob, str) or not glob:
            raise InvalidArgument(
                f"SecurityProvider.{name} must hold non-empty strings, got {glob!r}"
            )
    return tuple(value)
