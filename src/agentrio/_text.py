"""The one rule for text that is not valid Unicode: lone surrogates become U+FFFD.

Text that enters agentrio from outside (a tool's result, a model's answer, an MCP
server's output) can hold lone surrogates: ``os.fsdecode(b"report-\\xff.txt")`` gives
``"report-\\udcff.txt"``, and a JSON ``"\\ud800"`` escape decodes to one. Such a string
cannot be encoded as UTF-8, so it would fail later, far from where it came in: in
the trace writer, on the next request's body, in a checkpoint record. It is made
valid where it enters, once, by `scrub`.
"""

from __future__ import annotations

import copy

import msgspec

from .messages import ModelReply, ToolCallRequest

__all__ = ["PREVIEW_SCAN", "scrub", "scrub_json", "valid_reply"]

PREVIEW_SCAN = 30_000
"""How much of an outside text an event's preview (a couple of hundred characters)
is made from: the env values and secrets over the preview's end are found before
it is cut, and a megabyte of tool result or provider text is never scanned whole."""

_encode = msgspec.json.Encoder().encode


def scrub(text: str) -> str:
    """*text* with each lone surrogate replaced by U+FFFD (REPLACEMENT CHARACTER).

    A high surrogate followed by a low one is joined into the character they spell
    (what a UTF-16 reader would make of it). Valid text is returned as is (the same
    object): ASCII is checked at C speed, the rest by one UTF-8 encode.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def scrub_json(value: object) -> object:
    """*value*, a decoded JSON value, with `scrub` applied to every string in it
    (object keys included).

    Lists and dicts are changed in place (they are the decoder's, just made),
    with an explicit stack: a value nested as deep as a decoder allows costs no
    recursion here. A dict whose key changes keeps its order.
    """
    if isinstance(value, str):
        return scrub(value)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            for i, child in enumerate(item):
                if isinstance(child, str):
                    item[i] = scrub(child)
                elif isinstance(child, (list, dict)):
                    stack.append(child)
        elif isinstance(item, dict):
            keys_changed = False
            for key, child in item.items():
                if isinstance(child, str):
                    item[key] = scrub(child)  # (a value replaced: no key added)
                elif isinstance(child, (list, dict)):
                    stack.append(child)
                keys_changed = keys_changed or (isinstance(key, str) and scrub(key) is not key)
            if keys_changed:
                pairs = [(scrub(k) if isinstance(k, str) else k, v) for k, v in item.items()]
                item.clear()
                item.update(pairs)
    return value


def valid_reply(reply: ModelReply, *, text: bool = True) -> ModelReply:
    """*reply* with `scrub` applied to its text (unless *text* is False: a typed
    answer, which its own check refuses), refusal and tool calls (name, id and
    every string of the arguments); the same object when they are valid already.

    The providers' replies are valid as they are read; a `Model` of the
    application's may give anything, and a lone surrogate in a call's name or
    arguments would fail far from here (the history's encoding, a checkpoint, the
    trace). The common case costs an ``isascii`` and, when it asks for tools, one
    JSON encode of its calls.
    """
    answer, refusal, calls = reply.text, reply.refusal, reply.tool_calls
    if calls:
        try:  # (one encode of every call: the common case, all valid)
            _encode([(c.name, c.id, c.arguments) for c in calls])
            calls = ()
        except UnicodeEncodeError:
            pass
        except (TypeError, msgspec.EncodeError):  # (not JSON: the phase says so, as before)
            calls = ()
    if (not text or answer.isascii()) and refusal.isascii() and not calls:
        return reply  # (the common case: nothing to look at further)
    changed: dict[str, object] = {}
    if text and scrub(answer) is not answer:
        changed["text"] = scrub(answer)
    if scrub(refusal) is not refusal:
        changed["refusal"] = scrub(refusal)
    if calls:
        changed["tool_calls"] = tuple(map(_valid_call, calls))
    return msgspec.structs.replace(reply, **changed) if changed else reply


def _valid_call(call: ToolCallRequest) -> ToolCallRequest:
    try:
        msgspec.json.encode((call.name, call.id, call.arguments))
    except UnicodeEncodeError:
        arguments = scrub_json(copy.deepcopy(call.arguments))
        assert isinstance(arguments, dict)
        return ToolCallRequest(scrub(call.name), arguments, scrub(call.id))
    except (TypeError, msgspec.EncodeError):  # (not JSON: the phase says so, as before)
        pass
    return call
