"""The one rule for text that is not valid Unicode: lone surrogates become U+FFFD.

Text that enters agentrio from outside (a tool's result, a model's answer, an MCP
server's output) can hold lone surrogates: ``os.fsdecode(b"report-\\xff.txt")`` gives
``"report-\\udcff.txt"``, and a JSON ``"\\ud800"`` escape decodes to one. Such a string
cannot be encoded as UTF-8, so it would fail later, far from where it came in: in
the trace writer, on the next request's body, in a checkpoint record. It is made
valid where it enters, once, by `scrub`.
"""

from __future__ import annotations

__all__ = ["scrub", "scrub_json"]


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
