"""The response guard: repair malformed tool-call arguments, find tool calls in text.

Models (small local ones especially) write tool arguments that are almost
JSON: wrapped in a code fence, with single quotes, trailing commas or bare
keys. Those are repaired when the repair is unambiguous; anything else is left
for the agent to report back to the model as a failed call. Some models write
the call itself into the text as ``{"name": ..., "arguments": ...}``; the
provider can turn that into a real tool call.

Everything here runs in time linear in its input: the text is the model's, and
a guard that backtracks on it (a regex did, on a code fence full of newlines)
blocks the Trio loop and every agent on it. So the repairs are single-pass
scanners, never a regex, and each character is looked at a bounded number of
times. Linear is not free, though (the scanners are Python): arguments longer
than ``MAX_REPAIR_CHARS`` are only parsed as they are, never repaired, and a
text that long is not searched for tool calls.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Collection

from .._text import scrub_json
from ..messages import ToolCallRequest

__all__ = [
    "MAX_REPAIR_CHARS",
    "escapes_surrogate",
    "loads",
    "parse_arguments",
    "tool_calls_in_text",
]

# The longest arguments that are repaired, and text searched for tool calls
# (256 KiB): past it only a strict JSON parse is made. (The repairs and the
# search cost about 1-3 microseconds a character, in the Trio loop.)
MAX_REPAIR_CHARS = 256 * 1024

_FENCE = "```"
_TAG = frozenset(string.ascii_letters + string.digits + "_-")  # ```json, ```JSON, ```py-3
_KEY_START = frozenset(string.ascii_letters + "_")
_KEY = frozenset(string.ascii_letters + string.digits + "_")
_CLOSERS = frozenset("}]")


# A JSON escape of a surrogate (\ud800 to \udfff), which json.loads may turn into
# a lone one. (A backslash escaped before "ud8..." matches too: a walk for nothing.)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def escapes_surrogate(text: str | bytes) -> bool:
    """Does the JSON *text* hold the escape of a surrogate (``\\ud800``...)?"""
    if isinstance(text, str):
        # (A stream's every line is asked: most hold no backslash, found at C speed.)
        return "\\" in text and _SURROGATE_ESCAPE.search(text) is not None
    return _SURROGATE_ESCAPE_BYTES.search(text) is not None


def loads(text: str | bytes) -> object:
    """*text* read as JSON (``json.loads``), with no lone surrogate in any string of it.

    A JSON ``"\\ud800"`` escape decodes to a lone surrogate, which no UTF-8
    encoder takes: the strings of a value whose text holds such an escape are
    scrubbed (`agentrio._text.scrub`); a text without one costs a search for it.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``; ``UnicodeDecodeError``
            for bytes that are not UTF-8).
        RecursionError: nested too deeply.
    """
    value = json.loads(text)
    return scrub_json(value) if escapes_surrogate(text) else value


def _loads_object(text: str) -> dict[str, object] | None:
    # (json's C scanner is linear, and it gives up on deep nesting with a
    # RecursionError at the interpreter's recursion limit, soon enough.)
    try:
        value = loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _string_end(text: str, start: int, quote: str) -> int:
    """The index just past the string that opens at ``text[start]``, or -1 if it never closes.

    A backslash escapes the character after it, whatever it is.
    """
    i = start + 1
    close = text.find(quote, i)
    while close >= 0:
        slash = text.find("\\", i, close)
        if slash < 0:
            return close + 1
        i = slash + 2
        if i > close:  # the backslash escaped this quote: look for the next one
            close = text.find(quote, i)
        # (else *close* is still the first quote from i on: never searched twice)
    return -1


def _split_strings(text: str, quote: str) -> list[str]:
    """*text* in pieces: the even ones outside strings, the odd ones whole quoted strings.

    A string never closed runs to the end of *text* (one odd piece); the
    repairs leave it as it is, and the result does not parse.
    """
    pieces: list[str] = []
    i = 0
    start = text.find(quote)
    while start >= 0:
        end = _string_end(text, start, quote)
        if end < 0:
            pieces += (text[i:start], text[start:])
            i = len(text)
            break
        pieces += (text[i:start], text[start:end])
        i = end
        start = text.find(quote, i)
    pieces.append(text[i:])
    return pieces


def _outside_strings(text: str, repair: Callable[[str], str]) -> str:
    """*text* with *repair* applied to each stretch outside double-quoted strings."""
    if '"' not in text:
        return repair(text)
    pieces = _split_strings(text, '"')
    pieces[::2] = [repair(p) for p in pieces[::2]]
    return "".join(pieces)


def _skip_space(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    return i


def _unfence(text: str) -> str:
    """The inside of a code fence (with its tag, ```json, dropped), or *text* as it is."""
    end = len(text) - len(_FENCE)
    if end < len(_FENCE) or not (text.startswith(_FENCE) and text.endswith(_FENCE)):
        return text
    i = len(_FENCE)
    while i < end and text[i] in _TAG:
        i += 1
    return text[i:end].strip()


def _no_trailing_commas(text: str) -> str:
    """A stretch outside strings with each ``,`` before ``}`` or ``]`` dropped (and its spaces)."""
    out: list[str] = []
    done = 0
    comma = text.find(",")
    while comma >= 0:
        after = _skip_space(text, comma + 1)
        if after < len(text) and text[after] in _CLOSERS:
            out.append(text[done:comma])
            done = after
        # (the spaces skipped are not searched again: no comma among them)
        comma = text.find(",", after)
    out.append(text[done:])
    return "".join(out)


def _quoted_bare_keys(text: str) -> str:
    """A stretch outside strings with each bare key after ``{`` or ``,`` quoted."""
    out: list[str] = []
    done, i, n = 0, 0, len(text)
    while i < n:
        if text[i] not in "{,":
            i += 1
            continue
        key = _skip_space(text, i + 1)
        end = key
        if end < n and text[end] in _KEY_START:
            end += 1
            while end < n and text[end] in _KEY:
                end += 1
        colon = _skip_space(text, end)
        if end > key and colon < n and text[colon] == ":":
            out += (text[done:key], '"', text[key:end], '"')
            done = end
            i = colon + 1
        else:
            # What was skipped (spaces, a word) holds no { or ,: each character
            # is looked at twice at most.
            i += 1
    out.append(text[done:])
    return "".join(out)


def _double_quoted(text: str) -> str:
    """*text* (with no ``"`` in it) with each single-quoted string double-quoted."""
    out: list[str] = []
    done = 0
    start = text.find("'")
    while start >= 0:
        end = _string_end(text, start, "'")
        if end < 0:
            break  # never closed: left as it is (and the result does not parse)
        out += (text[done:start], '"', text[start + 1 : end - 1].replace("\\'", "'"), '"')
        done = end
        start = text.find("'", end)
    out.append(text[done:])
    return "".join(out)


def _drop_trailing_commas(text: str) -> str:
    return _outside_strings(text, _no_trailing_commas)


def _quote_bare_keys(text: str) -> str:
    return _outside_strings(text, _quoted_bare_keys)


def parse_arguments(raw: object) -> tuple[dict[str, object], str]:
    """Turn a model's tool arguments into a dict, repairing them when that is safe.

    Runs in time linear in the length of *raw*, whatever it holds.

    Args:
        raw: a dict (taken as it is), a JSON string, or ``None``/``""`` (no arguments).

    Returns:
        ``(arguments, "")`` on success, or ``({}, why)`` when the arguments
        cannot be understood; *why* is meant for the model.
    """
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}, ""
    if raw is None:
        return {}, ""
    if not isinstance(raw, str):
        return {}, f"the arguments must be a JSON object, got {type(raw).__name__}"
    text = raw.strip()
    if not text:
        return {}, ""
    value = _loads_object(text)
    if value is not None:
        return value, ""
    shown = raw if len(raw) <= 200 else raw[:197] + "..."
    if len(text) > MAX_REPAIR_CHARS:
        return {}, (
            f"the arguments are not valid JSON, and at {len(text):,} characters too long "
            f"to repair (at most {MAX_REPAIR_CHARS:,} are): {shown}"
        )
    value = _repaired(_unfence(text), tried=text)
    if value is not None:
        return value, ""
    return {}, f"the arguments are not valid JSON and could not be repaired: {shown}"


def _repaired(text: str, *, tried: str) -> dict[str, object] | None:
    """*text* as a JSON object after the repairs, or None; *tried* failed to parse already.

    Each repair only touches what is outside any double-quoted string; the
    result must then parse. (A fixed number of linear passes; a repair that
    has nothing to do, or a candidate met before, costs no parse.)
    """
    candidates = [text]
    if "," in text:
        candidates.append(_drop_trailing_commas(text))
    if '"' not in text and "'" in text:
        candidates.append(_drop_trailing_commas(_double_quoted(text)))
    if ":" in text:
        candidates += [_quote_bare_keys(c) for c in list(candidates)]
    seen = {tried}
    for candidate in candidates:
        if candidate in seen:
            continue
        seen.add(candidate)
        value = _loads_object(candidate)
        if value is not None:
            return value
    return None


def _json_objects(text: str) -> list[str]:
    """The top-level ``{...}`` spans of *text* (braces balanced, strings respected).

    One pass; the spans do not overlap, so parsing each of them is linear in
    *text* overall.
    """
    spans: list[str] = []
    depth, start, in_string, escaped = 0, -1, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = depth > 0
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def tool_calls_in_text(text: str, tools: Collection[str]) -> tuple[ToolCallRequest, ...]:
    """Find tool calls a model wrote as JSON in its text: ``{"name": ..., "arguments": ...}``.

    Only objects naming one of *tools* count (``"parameters"`` is accepted for
    ``"arguments"``); the calls are numbered ``text_call_<n>``. Runs in time
    linear in the length of *text*; a text longer than ``MAX_REPAIR_CHARS``
    is not searched (no calls).
    """
    if "{" not in text or not tools or len(text) > MAX_REPAIR_CHARS:
        return ()
    calls: list[ToolCallRequest] = []
    for span in _json_objects(text):
        if ":" not in span or ("name" not in span and "\\u" not in span):
            continue  # (cheap: no "name" key, unless written with \u escapes; no key at all)
        obj, why = parse_arguments(span)
        if why:
            continue
        name = obj.get("name")
        if not isinstance(name, str) or name not in tools:
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        arguments, why = parse_arguments(args)
        calls.append(ToolCallRequest(name, arguments, id=f"text_call_{len(calls) + 1}", error=why))
    return tuple(calls)
