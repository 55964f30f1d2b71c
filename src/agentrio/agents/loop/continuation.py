"""Continuation: telling a reply that reads as an intermediate step from a final answer.

A model sometimes ends a turn without a tool call while it is still working
("Let me check the logs."). With ``Limits.max_continuation_turns`` set, the
phase then adds `CONTINUATION_PROMPT` as a user turn and goes on,
instead of ending ``done`` on a reply that answers nothing. Whether a reply
reads so is the spec's ``continuation_detector``; [`looks_unfinished`][agentrio.looks_unfinished] is
the default.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

__all__ = ["CONTINUATION_PROMPT", "ContinuationDetector", "looks_unfinished"]

# (text of a reply without tool calls) -> does it read as unfinished?
ContinuationDetector = Callable[[str], bool | Awaitable[bool]]

CONTINUATION_PROMPT = (
    "You stopped before finishing. Continue with the next step now, calling tools if "
    "you need them. If the task is complete, give your final answer."
)

# What an agent announces it will do next (not "be", "keep", "leave", "stop"...).
_ACTIONS = "|".join(
    (
        r"start|begin|continue|proceed|go\ ahead|read|check|look|search|run|rerun|retry|open",
        r"fetch|call|try|inspect|examine|review|update|fix|write|create|analy[sz]e",
        r"investigate|test|verify|query|find|list|install|implement|edit|modify|compute",
        r"calculate|gather|collect|explore|scan|compare|build|download|load|parse|use",
        r"summari[sz]e|draft|prepare|work|dig|trace|debug|refactor|add|remove|delete|move",
    )
)
# What is said to the reader, not done: "Let me point out ...", "I need to note ...".
_REMARKS = (
    r"know|be|say|hear|point\ out|note|stop|mention|stress|emphasi[sz]e|remind|warn"
    r"|apologi[sz]e|repeat|reiterate|add\ that|clarify\ that|admit|confess"
    r"|thank|recommend|suggest|congratulate"
    # (a question put to the reader: "I need to check with you before deleting it.")
    r"|(?:check|confirm|verify)\ (?:this\ |that\ |it\ )?with\ you"
)
# Words that may come between "Let me" and a remark ("Let me also note ...").
_SOFTENERS = r"(?:(?:also|just|briefly|quickly|again|finally|simply|only)\s+)?"
# A last sentence that announces what the model is about to do, after an
# optional lead-in ("OK, ", "Now ", "To do this, "). Narrow on purpose: a false
# positive costs a model call, and final answers end with "Let me know if ...",
# "I'll be here ...", "Let's hope ...", "I'll open a PR with these changes.",
# "I need to point out that ..." and the like, which must not match. "Let me
# ..." (but a remark to the reader), and "I need to <action>" / "I'm going to
# <action>" announce the next step whatever the lead-in:
_ANNOUNCES = re.compile(
    r"""
    ^(?:[\w' ]{1,30},\s*)?(?:(?:now|next|first|then|so)\s+)?
    (?:
        let\ me\s+(?!SOFTENERS(?:REMARKS)\b)
      | i(?:\ am\ going\ to|'m\ going\ to|\ am\ about\ to|'m\ about\ to)\s+
        (?:now|next|first|then|ACTIONS)\b
      | i\ (?:still\ |also\ )?need\ to\s+(?:(?:now|next|first|then|also)\s+)?
        (?!(?:REMARKS)\b)(?:ACTIONS)\b
    )
    """.replace("ACTIONS", _ACTIONS)
    .replace("SOFTENERS", _SOFTENERS)
    .replace("REMARKS", _REMARKS),
    re.IGNORECASE | re.VERBOSE,
)
# "Let's ..." and "I'll ..." also state plans and commitments ("Let's go with
# option B.", "I'll add it to the list."): they announce a step of this reply
# only with a word of sequence ("Next, I'll ...", "To do this, let's ...",
# "I'll now ...") or a verb of going on ("I'll continue with ...", "Let's start").
_PLANS = re.compile(
    r"""
    ^(?:
        (?:first|next|now|then|after\ that|to\ (?!be\b)[\w' ]{1,25}),?\s+
        (?:let's|i'll|i\ will)\s+(?:(?:now|next|first|then)\s+)?(?:ACTIONS)\b
      | (?:[\w' ]{1,30},\s*)?(?:let's|i'll|i\ will)\s+
        (?:(?:now|next|first|then)\s+\w|(?:start|begin|continue|proceed|go\ ahead|get\ started)\b)
    )
    """.replace("ACTIONS", _ACTIONS),
    re.IGNORECASE | re.VERBOSE,
)
# A step put off to another time is not this reply's next step.
_LATER = re.compile(
    r"\b(?:next\ (?:time|week|month|year)|later|tomorrow|soon|some\ other\ time)\b",
    re.IGNORECASE | re.VERBOSE,
)
# A letter's sign-off ends with a comma but ends the reply.
_SIGN_OFF = re.compile(
    r"^(?:(?:best|kind|warm|warmest)\ (?:regards|wishes)|regards|best|thanks|thank\ you"
    r"|many\ thanks|cheers|sincerely|yours(?:\ (?:truly|sincerely))?|all\ the\ best"
    r"|take\ care),$",
    re.IGNORECASE | re.VERBOSE,
)
# Before a trailing "...": a sentence cut off ("... and then...") or a progress
# note ("Working on it...", "Searching..."), not a complete sentence ("The answer
# is 7...").
_CUT_OFF = re.compile(
    r"\b(?:and|or|but|the|a|an|to|of|with|then|so|because|which|that|for|in|on|at|by)$",
    re.IGNORECASE,
)
_PROGRESS = re.compile(r"^(?!(?:no|some|any|every)thing\b|during\b)\w+ing\b", re.IGNORECASE)
# An offer or a condition is said to the user, not announced: "If you want, I'll ...".
_TO_THE_USER = re.compile(r"^if\b|\bif you\b", re.IGNORECASE)
# Where the last sentence starts: after the last ., ! or ? followed by a space.
_SENTENCE_END = re.compile(r"[.!?]\s+")
# Markdown a line may start with: list bullets, numbers, quotes, emphasis.
_LINE_MARKUP = re.compile(r"^(?:[-*+>]\s+|\d+[.)]\s+|[*_]{1,3})+")


def _last_sentence(text: str) -> str:
    line = text.rsplit("\n", 1)[-1].strip()
    pieces = _SENTENCE_END.split(line)
    return _LINE_MARKUP.sub("", pieces[-1]).replace("\u2019", "'")


def looks_unfinished(text: str) -> bool:
    """Does *text*, a reply without tool calls, read as an intermediate step?

    The default ``AgentSpec.continuation_detector``. English heuristics on the
    end of the reply, narrow on purpose so that final answers pass (a miss
    only ends the phase as it would have ended anyway). True when:

    - it is empty (or only whitespace);
    - it ends with ``:`` or ``,`` (a list or a step that never came: "Here
      are the steps:", "Step 2:"), but not a sign-off line ("Regards,",
      "Best,", "Thanks,", "Cheers,");
    - it ends with ``...`` or ``…`` where the text before it is cut off ("I
      read a.py and...") or a progress note ("Working on it...",
      "Searching…"), not a complete sentence ("The answer is 7...");
    - it leaves a code block (```` ``` ````) open;
    - its last sentence announces the next step of this reply: "Let me
      ..." ("Let me check the logs."), "I need to", "I'm going to" or
      "I'm about to" with an action ("I need to check the defaults.",
      "I'm going to read the file."); and
      "Let's ..." / "I'll ..." / "I will ..." only with a word of sequence
      ("I'll now run the tests.", "Next, I will update the README.", "To do
      this, let's read the config.") or a verb of going on ("I'll continue
      with the next file.", "Let's start with the parser.").

    False otherwise, in particular for a plan or commitment without such a
    word ("Let's go with option B.", "I'll add it to the list.", "I'll open
    a PR with these changes."), for a last sentence that puts the step off
    ("next time", "later", "tomorrow", "soon"), that is a question, an offer
    or a condition ("If you want, I'll ..."), that holds a colon ("Let me
    sum up: ..."), that is a remark to the reader ("Let me point out ...",
    "I need to stop here because ...", "I need to note ...", "Let me also
    note ...", "Let me thank you ...", "Let me recommend ..."), or that starts
    "Let me know", "Let me be", "Let's hope", "I'll be", "I'll keep", "I need
    to know". Combine it with your own rules
    in a detector of your own:

        def detector(text: str) -> bool:
            return agentrio.looks_unfinished(text) or text.startswith("TODO")

    Args:
        text: the reply's text.

    Returns:
        True if the phase should be told to continue.
    """
    end = text.rstrip()
    if not end:
        return True
    if end.count("```") % 2:
        return True
    if end.endswith(","):
        return _SIGN_OFF.match(end.rsplit("\n", 1)[-1].strip()) is None
    if end.endswith(":"):
        return True
    if end.endswith(("...", "\u2026")):
        return _trails_off(end)
    if end.endswith("?"):
        return False
    last = _last_sentence(end)
    if ":" in last or _TO_THE_USER.search(last) or _LATER.search(last):
        # (a colon inside it: the announced part came, "Let me sum up: ...")
        return False
    return _ANNOUNCES.match(last) is not None or _PLANS.match(last) is not None


def _trails_off(end: str) -> bool:
    """Does *end*, ending with an ellipsis, stop mid-way (not after a complete sentence)?"""
    last = _last_sentence(end.rstrip(".\u2026").rstrip())
    if not last:
        return True
    return bool(
        _CUT_OFF.search(last)
        or _PROGRESS.match(last)
        or _ANNOUNCES.match(last)
        or _PLANS.match(last)
    )
