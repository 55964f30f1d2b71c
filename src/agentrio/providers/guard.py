"""The response guard: repair malformed tool-call arguments, find tool calls in text.

Models (small local ones especially) write tool arguments that are almost
JSON: wrapped in a code fence, with single quotes, trailing commas or bare
keys. Those are repaired when the repair is unambiguous; anything else is left
for the agent to report back to the model as a failed call. Some models write
the call itself into the text as ``{"name": ..., "arguments": ...}``; the
provider can turn that into a real tool call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

from ..messages import ToolCallRequest

__all__ = ["parse_arguments", "tool_calls_in_text"]

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
# Each pattern matches a whole double-quoted string first (group 1) and keeps
# it as it is, so the repairs never touch what is inside a string.
_STRING = r'("(?:[^"\\]|\\.)*")'
_TRAILING_COMMA = re.compile(_STRING + r"|,\s*([}\]])")
_BARE_KEY = re.compile(_STRING + r"|([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:)")
_SINGLE_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def _loads_object(text: str) -> dict[str, object] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _requote(match: re.Match[str]) -> str:
    inner = match.group(1).replace('\\"', '"').replace('"', '\\"').replace("\\'", "'")
    return f'"{inner}"'


def _drop_trailing_commas(text: str) -> str:
    return _TRAILING_COMMA.sub(lambda m: m.group(1) or m.group(2), text)


def _quote_bare_keys(text: str) -> str:
    return _BARE_KEY.sub(lambda m: m.group(1) or f'{m.group(2)}"{m.group(3)}"{m.group(4)}', text)


def parse_arguments(raw: object) -> tuple[dict[str, object], str]:
    """Turn a model's tool arguments into a dict, repairing them when that is safe.

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
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    # Each repair only touches what is outside any double-quoted string; the
    # result must then parse.
    candidates = [text, _drop_trailing_commas(text)]
    if '"' not in text:
        candidates.append(_drop_trailing_commas(_SINGLE_QUOTED.sub(_requote, text)))
    candidates += [_quote_bare_keys(c) for c in list(candidates)]
    for candidate in candidates:
        value = _loads_object(candidate)
        if value is not None:
            return value, ""
    shown = raw if len(raw) <= 200 else raw[:197] + "..."
    return {}, f"the arguments are not valid JSON and could not be repaired: {shown}"


def _json_objects(text: str) -> list[str]:
    """The top-level ``{...}`` spans of *text* (braces balanced, strings respected)."""
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
    ``"arguments"``); the calls are numbered ``text_call_<n>``.
    """
    if "{" not in text or not tools:
        return ()
    calls: list[ToolCallRequest] = []
    for span in _json_objects(text):
        obj = _loads_object(span)
        if obj is None:
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
