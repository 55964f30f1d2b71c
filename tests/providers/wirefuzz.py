"""Fuzzing helpers shared by the wire tests: damaged well-formed answers, any JSON.

Random JSON seldom reaches the fields three levels down, so a wire's tests
first replace (or remove) every field of a well-formed answer in turn, then
let hypothesis damage well-formed answers at random and throw any JSON and
text at the parsers. Either a ModelReply or a BadResponse comes out, nothing
else.
"""

from __future__ import annotations

import json

from hypothesis import settings
from hypothesis import strategies as st

from agentrio import ModelReply
from agentrio.errors import BadResponse
from agentrio.providers.wire import WireFormat

ODD: list[object] = [None, 0, 7, -1, 2.5, True, "", "x", [], [1, "a"], {}, {"k": [None]}]
DELETE = object()


def paths(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """The path of every part of *value* (itself first), as keys and indexes."""
    out = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            out += paths(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += paths(child, (*path, i))
    return out


def replaced(value: object, path: tuple[object, ...], new: object) -> object:
    """A copy of *value* with the part at *path* replaced by *new* (or deleted)."""
    copy = json.loads(json.dumps(value))
    *parent, last = path
    holder = copy
    for key in parent:
        holder = holder[key]
    if new is DELETE:
        if isinstance(holder, dict):
            del holder[last]
    else:
        holder[last] = new
    return copy


def damaged(value: object) -> list[object]:
    """*value* with each of its parts in turn replaced by each ODD value, or deleted."""
    return [replaced(value, path, new) for path in paths(value)[1:] for new in [DELETE, *ODD]]


def accepts(
    wire: WireFormat, provider: str, data: object, text_tools: list[str] | None = None
) -> ModelReply | None:
    """Parse *data*: a ModelReply, or None for a BadResponse; anything else fails."""
    try:
        reply = wire.parse(data, provider, text_tools)
    except BadResponse:
        return None
    assert isinstance(reply, ModelReply)
    return reply


def streams(
    wire: WireFormat, provider: str, lines: list[str], text_tools: list[str] | None = None
) -> ModelReply | None:
    """Feed *lines* and finish: a ModelReply, or None for a BadResponse."""
    pieces: list[str] = []
    parser = wire.stream_parser(provider, pieces.append, text_tools)
    try:
        for line in lines:
            parser.feed(line)
        reply = parser.finish()
    except BadResponse:
        return None
    assert isinstance(reply, ModelReply)
    assert reply.text == "".join(pieces) or (text_tools and reply.tool_calls)
    return reply


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)
FUZZ = settings(max_examples=150, deadline=None)


@st.composite
def damaged_at_random(draw: st.DrawFn, value: object) -> object:
    """*value* with one to three random parts replaced by any JSON, or removed."""
    for _ in range(draw(st.integers(1, 3))):
        places = paths(value)[1:]
        if not places:
            return draw(json_values)
        path = places[draw(st.integers(0, len(places) - 1))]
        value = replaced(value, path, draw(st.just(DELETE) | json_values))
    return value
