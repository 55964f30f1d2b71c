"""The response guard: argument repair, tool calls written in the text, and what an
agent does with calls whose arguments cannot be read (over the fake server)."""

from __future__ import annotations

import json
import string
import time
from collections.abc import Callable

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrio
from agentrio import (
    AgentSpec,
    Limits,
    ModelReply,
    PhaseResult,
    Provider,
    ProviderConfig,
    ToolCallRequest,
    Usage,
)
from agentrio.events import PhaseError
from agentrio.providers.guard import MAX_REPAIR_CHARS, parse_arguments, tool_calls_in_text
from agentrio.providers.provider import Kind
from agentrio.testing import FakeRequest, FakeServerStatistics, Faults, open_fake_llm

# -- parse_arguments ---------------------------------------------------------------------


def test_objects_and_nothing_pass_as_they_are() -> None:
    assert parse_arguments({"a": 1}) == ({"a": 1}, "")
    assert parse_arguments(None) == ({}, "")
    assert parse_arguments("") == ({}, "")
    assert parse_arguments("  \n") == ({}, "")
    assert parse_arguments('{"a": [1, {"b": null}]}') == ({"a": [1, {"b": None}]}, "")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('```json\n{"city": "Paris"}\n```', {"city": "Paris"}),
        ('```\n{"city": "Paris"}\n```', {"city": "Paris"}),
        ('  ```JSON {"n": 1} ```  ', {"n": 1}),
        ('{"a": 1,}', {"a": 1}),
        ('{"a": [1, 2, ], "b": {"c": 3 , } , }', {"a": [1, 2], "b": {"c": 3}}),
        ("{'a': 'x', 'b': [1, 'y']}", {"a": "x", "b": [1, "y"]}),
        ("{'a': 1,}", {"a": 1}),  # what the fake server's malformed_tool_json sends
        ('{a: 1, b_2: "two"}', {"a": 1, "b_2": "two"}),
        ("{key: 'v', other: [1,],}", {"key": "v", "other": [1]}),
        ('```json\n{q: "x", }\n```', {"q": "x"}),
    ],
)
def test_repairs(raw: str, expected: dict[str, object]) -> None:
    assert parse_arguments(raw) == (expected, "")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # The comma inside the string is data, not a trailing comma.
        ('{"pattern": "a,}", }', {"pattern": "a,}"}),
        ("{'a': 'x, ]',}", {"a": "x, ]"}),
        ('{a: "p, q: r"}', {"a": "p, q: r"}),  # "q:" inside the string is not a key
        (r'{"re": "[a-z]+, ]", "s": "say \"hi\", }",}', {"re": "[a-z]+, ]", "s": 'say "hi", }'}),
    ],
)
def test_repairs_never_touch_the_inside_of_strings(raw: str, expected: dict[str, object]) -> None:
    assert parse_arguments(raw) == (expected, "")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("[1, 2]", "not valid JSON"),  # JSON, but not an object
        ("3", "not valid JSON"),
        ("{'a': 'it's'}", "could not be repaired"),
        ("{a: }", "could not be repaired"),
        ("call lookup with key=a", "could not be repaired"),
        ('{"a": 1', "could not be repaired"),
    ],
)
def test_unrepairable_arguments_say_why(raw: str, why: str) -> None:
    value, message = parse_arguments(raw)
    assert value == {}
    assert why in message and raw in message  # the model is shown what it wrote


@pytest.mark.parametrize("raw", [[1, 2], 3, 2.5, True])
def test_arguments_of_another_type(raw: object) -> None:
    value, why = parse_arguments(raw)
    assert value == {} and type(raw).__name__ in why and "JSON object" in why


def test_a_long_raw_text_is_shortened_in_the_message() -> None:
    raw = "{" + "x" * 1000
    _, why = parse_arguments(raw)
    assert why.endswith("...") and len(why) < 300


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    value, why = parse_arguments("[" * 100_000)
    assert value == {} and why


# A few dozen examples each keeps the default suite fast; the strategies are small.
FUZZ = settings(max_examples=60, deadline=None)

# Safety, as properties: a repair gives back exactly what was meant, or an error;
# never different arguments.

_keys = st.builds(
    str.__add__,
    st.sampled_from(string.ascii_letters + "_"),
    st.text(string.ascii_letters + string.digits + "_", max_size=6),
)
_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=12)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=8,
)
_objects = st.dictionaries(_keys, _values, max_size=4)


def _trailing_commas(value: object) -> str:
    if isinstance(value, dict):
        inner = "".join(f"{json.dumps(k)}: {_trailing_commas(v)}, " for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + "".join(f"{_trailing_commas(v)},\n" for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _bare_keys(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_bare_keys(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_bare_keys(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


@FUZZ
@given(_objects)
def test_trailing_commas_are_always_repaired_exactly(args: dict[str, object]) -> None:
    assert parse_arguments(_trailing_commas(args)) == (args, "")


@FUZZ
@given(_objects)
def test_bare_keys_are_always_repaired_exactly(args: dict[str, object]) -> None:
    assert parse_arguments(_bare_keys(args)) == (args, "")


@FUZZ
@given(_objects, st.sampled_from(["json", "JSON", ""]))
def test_fenced_arguments_are_always_repaired_exactly(args: dict[str, object], tag: str) -> None:
    raw = f"```{tag}\n{json.dumps(args, indent=1)}\n```"
    assert parse_arguments(raw) == (args, "")


_plain = st.text(string.ascii_letters + string.digits + " ,:{}[]-_.", max_size=10)
_plain_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _plain,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=8,
)


@FUZZ
@given(st.dictionaries(_keys, _plain_values, max_size=4))
def test_single_quotes_are_repaired_exactly(args: dict[str, object]) -> None:
    # The fake server's malformed_tool_json: every " becomes ' and a comma is added.
    raw = json.dumps(args).replace('"', "'")
    raw = raw[:-1] + ",}"
    assert parse_arguments(raw) == (args, "")


@FUZZ
@given(_objects, st.sampled_from([_trailing_commas, _bare_keys]), st.integers(0, 50))
def test_a_damaged_text_never_parses_as_other_arguments(
    args: dict[str, object], damage: Callable[[object], str], cut: int
) -> None:
    raw = damage(args)
    raw = raw[: max(0, len(raw) - cut)]  # cut short: beyond repair, unless cut by nothing
    value, why = parse_arguments(raw)
    if not why:
        # Never a guess: the whole arguments, or none for an empty text.
        assert value == args or (value == {} and not raw.strip())


@FUZZ
@given(st.text(max_size=200) | st.binary(max_size=100).map(lambda b: b.decode("latin-1")))
def test_any_text_gives_arguments_or_a_reason(raw: str) -> None:
    value, why = parse_arguments(raw)
    assert isinstance(value, dict) and isinstance(why, str)
    assert not (value and why)


# -- tool calls written in the text -------------------------------------------------------


def test_a_call_in_prose_is_found() -> None:
    text = 'Let me look.\n{"name": "lookup", "arguments": {"key": "a"}}\nThanks.'
    (call,) = tool_calls_in_text(text, {"lookup"})
    assert call == ToolCallRequest("lookup", {"key": "a"}, id="text_call_1")


def test_calls_in_text_variants() -> None:
    text = (
        '```json\n{"name": "a", "parameters": {"x": 1}}\n```'  # "parameters" for "arguments"
        ' and {"name": "b", "arguments": "{\\"y\\": 2}"}'  # arguments as a JSON string
        ' and {"name": "c", "arguments": {"z": "}{"}}'  # braces inside strings
        ' and {"name": "unknown", "arguments": {}}'  # not one of the tools: ignored
        " and {'name': 'a', 'arguments': {'w': 3,},}"  # repaired
        ' and {"name": "b"}'  # no arguments
    )
    calls = tool_calls_in_text(text, ["a", "b", "c"])
    assert [(c.name, c.arguments, c.id) for c in calls] == [
        ("a", {"x": 1}, "text_call_1"),
        ("b", {"y": 2}, "text_call_2"),
        ("c", {"z": "}{"}, "text_call_3"),
        ("a", {"w": 3}, "text_call_4"),
        ("b", {}, "text_call_5"),
    ]


def test_calls_in_text_with_bad_arguments_carry_the_error() -> None:
    (call,) = tool_calls_in_text('{"name": "a", "arguments": "x = 1"}', {"a"})
    assert call.arguments == {} and "could not be repaired" in call.error


@pytest.mark.parametrize(
    ("text", "tools"),
    [
        ("no braces at all", {"a"}),
        ('{"name": "a", "arguments": {}}', set()),
        ('{"name": 3, "arguments": {}}', {"a"}),
        ("{not json at all}", {"a"}),
        ('{"name": "a"', {"a"}),  # never closed
        ('"{\\"name\\": \\"a\\"}"', {"a"}),  # inside a top-level string: not an object
    ],
)
def test_no_calls_in_text(text: str, tools: set[str]) -> None:
    assert tool_calls_in_text(text, tools) == ()


# Any text, and text around a real call (random text alone never holds one).
_texts = st.text(max_size=300) | st.builds(
    lambda before, name, after: before + json.dumps({"name": name, "arguments": {}}) + after,
    st.text(max_size=20),
    st.sampled_from(["a", "b", "lookup", "zz"]),
    st.text(max_size=20),
)


@FUZZ
@given(_texts, st.sets(st.sampled_from(["a", "b", "lookup"])))
def test_any_text_gives_calls_or_none(text: str, tools: set[str]) -> None:
    for call in tool_calls_in_text(text, tools):
        assert call.name in tools and isinstance(call.arguments, dict)


# -- linear time on any text --------------------------------------------------------------
#
# The text is the model's: a guard that backtracks on it blocks the Trio loop and
# every agent on it (a code fence full of newlines once took seconds at 1 KB). Each
# input is tried at 1, 2, 4, ... 64 KB; each size must take well under a second (the
# issue's bound; measured in CPU time so that a busy machine does not count, and
# 64 KB takes well under 0.1 s). A backtracking guard fails at the first size it
# cannot manage, in seconds, rather than hanging the suite.

SIZES = [1024 << k for k in range(7)]  # 1 KB .. 64 KB
BOUND_S = 1.0

ADVERSARIAL = [
    ("```", "\n", "x"),  # a fence never closed, newlines after it
    ("```json", "\n", "```"),
    ("```", " \n", "```"),
    ("", "{", ""),
    ("", "[", ""),
    ("", "{[", ""),
    ("{", '"', ""),  # unclosed strings
    ("{", '{"', ""),
    ("{'", "\\'", ""),  # escaped quotes in a single-quoted string never closed
    ("{", "'", ""),
    ("{", "\\", ""),
    ("{", ",", ""),
    ("{", ",\n", "}"),
    ("{", "{a ", ""),  # bare keys that are never followed by a colon
    ("{", ", a\n", ""),
    ("", "{a}", ""),  # many objects in the text, none of them JSON
    ("", "{'name': 'a', 'arguments': {k: 1,},}", ""),  # many calls, each repaired
]


def _cpu_seconds(fn: Callable[..., object], *args: object) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def _assert_linear(before: str, unit: str, after: str) -> None:
    for size in SIZES:
        text = before + unit * (size // len(unit)) + after
        took = _cpu_seconds(parse_arguments, text)
        assert took < BOUND_S, f"parse_arguments took {took:.2f} s on {len(text)} chars"
        took = _cpu_seconds(tool_calls_in_text, text, {"a"})
        assert took < BOUND_S, f"tool_calls_in_text took {took:.2f} s on {len(text)} chars"


@pytest.mark.parametrize(("before", "unit", "after"), ADVERSARIAL)
def test_adversarial_text_takes_linear_time(before: str, unit: str, after: str) -> None:
    _assert_linear(before, unit, after)


def test_many_calls_in_a_long_text_are_all_found() -> None:
    unit = 'say {"name": "a", "arguments": {"k": 1}} '
    text = unit * (SIZES[-1] // len(unit))
    calls = tool_calls_in_text(text, {"a"})
    assert len(calls) == SIZES[-1] // len(unit)
    assert calls[-1] == ToolCallRequest("a", {"k": 1}, id=f"text_call_{len(calls)}")


MIB = 1 << 20  # a reply may be this long (ProviderConfig.max_reply_chars)


@pytest.mark.parametrize(
    ("before", "unit", "after"),
    [*ADVERSARIAL, ("", "}\n'{name", ""), ("", "'", ""), ("{", "'", "")],
)
def test_a_mebibyte_of_adversarial_text_takes_little_time(
    before: str, unit: str, after: str
) -> None:
    # Linear, but about 2.8 microseconds a character: "}\n'{name" * 131,072 took
    # 2.9 s in tool_calls_in_text, and "'" * 1 MiB 2 s in parse_arguments.
    text = before + unit * (MIB // len(unit)) + after
    took = _cpu_seconds(parse_arguments, text)
    assert took < BOUND_S, f"parse_arguments took {took:.2f} s on {len(text)} chars"
    took = _cpu_seconds(tool_calls_in_text, text, {"a"})
    assert took < BOUND_S, f"tool_calls_in_text took {took:.2f} s on {len(text)} chars"


def test_arguments_past_the_cap_are_parsed_but_not_repaired() -> None:
    pad = "x" * MAX_REPAIR_CHARS
    assert parse_arguments(f'{{"a": "{pad}"}}') == ({"a": pad}, "")  # valid JSON: as it is
    # just under the cap: repaired
    short = "y" * (MAX_REPAIR_CHARS - 20)
    assert parse_arguments(f"{{'a': '{short}',}}") == ({"a": short}, "")
    value, why = parse_arguments(f"{{'a': '{pad}',}}")
    assert value == {}
    assert why.startswith(
        f"the arguments are not valid JSON, and at {MAX_REPAIR_CHARS + 10:,} characters too "
        f"long to repair (at most {MAX_REPAIR_CHARS:,} are): {{'a': 'xxx"
    )
    assert why.endswith("...") and len(why) < 400


def test_a_text_past_the_cap_is_not_searched_for_calls() -> None:
    call = '{"name": "a", "arguments": {"k": 1}}'
    under = call + " " * (MAX_REPAIR_CHARS - len(call))
    assert tool_calls_in_text(under, {"a"}) == (ToolCallRequest("a", {"k": 1}, id="text_call_1"),)
    assert tool_calls_in_text(under + " ", {"a"}) == ()


_pieces = st.sampled_from(
    ["```", "```json", "\n", " ", "{", "}", "[", "]", '"', "'", "\\", ",", ":", "k", "name", '"a"']
)
_units = st.lists(_pieces, min_size=1, max_size=6).map("".join)


@settings(max_examples=15, deadline=None)
@given(_units, _units, _units)
def test_any_repeated_text_takes_linear_time(before: str, unit: str, after: str) -> None:
    _assert_linear(before, unit, after)
    text = before + unit * (SIZES[-1] // len(unit)) + after
    value, why = parse_arguments(text)
    assert isinstance(value, dict) and isinstance(why, str) and not (value and why)


# -- with an agent, over the fake server ------------------------------------------------

BASE = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    return f"value of {key}"


@attrs.frozen
class Run:
    result: PhaseResult
    server: FakeServerStatistics
    events: list[agentrio.events.Event]


async def run_agent(
    model: Callable[[FakeRequest], ModelReply],
    *,
    kind: Kind = "openai",
    faults: Faults | None = None,
    limits: Limits | None = None,
    **options: object,
) -> Run:
    """One phase of an agent with the lookup tool, on *kind* against a fake server."""
    async with open_fake_llm(model, faults=faults or Faults()) as server:
        config = ProviderConfig(
            name="p",
            kind=kind,
            base_url=server.base_url + BASE[kind],
            max_retries=0,
            **options,  # type: ignore[arg-type]
        )
        async with Provider(config) as provider, agentrio.open_runtime() as rt:
            stream = rt.events(capacity=10_000)
            spec = AgentSpec("a", provider.model("m"), tools=[lookup], limits=limits or Limits())
            result = await (await rt.spawn_agent(spec)).run("go")
        # The runtime has closed: the stream holds every event, then ends.
        events = [e async for e in stream]
        return Run(result, server.statistics(), events)


def tool_turns(request: FakeRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


@pytest.mark.parametrize(("kind", "executes"), [("ollama", True), ("openai", False)])
async def test_calls_in_text_follow_the_provider_default(kind: Kind, executes: bool) -> None:
    def model(request: FakeRequest) -> ModelReply:
        if tool_turns(request):
            return ModelReply(text="found it", usage=Usage(5, 2))
        return ModelReply(
            text='I will call {"name": "lookup", "arguments": {"key": "k1"}}', usage=Usage(5, 9)
        )

    result = (await run_agent(model, kind=kind)).result
    if executes:
        assert result.stop_reason == "done" and result.final_text == "found it"
        (call,) = result.tool_calls
        assert (call.name, call.arguments, call.status) == ("lookup", {"key": "k1"}, "ok")
        assert call.content == "value of k1"
    else:
        assert result.stop_reason == "done" and result.tool_calls == ()
        assert result.final_text.startswith("I will call")


async def test_calls_in_text_can_be_turned_on_for_any_provider() -> None:
    def model(request: FakeRequest) -> ModelReply:
        if tool_turns(request):
            return ModelReply(text="ok")
        return ModelReply(text='{"name": "lookup", "arguments": {"key": "z"}}')

    run = await run_agent(model, kind="anthropic", tool_calls_in_text=True)
    assert [c.content for c in run.result.tool_calls] == ["value of z"]


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
async def test_malformed_tool_json_is_repaired_when_safe(kind: Kind) -> None:
    def model(request: FakeRequest) -> ModelReply:
        if tool_turns(request):
            return ModelReply(text="done")
        return ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": "paris"}),))

    run = await run_agent(model, kind=kind, faults=Faults(malformed_tool_json=1.0))
    assert run.server.faults["malformed_tool_json"] == 1
    assert run.result.stop_reason == "done"
    assert [(c.arguments, c.status) for c in run.result.tool_calls] == [({"key": "paris"}, "ok")]


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
async def test_unrepairable_arguments_go_back_to_the_model_then_end_the_phase(kind: Kind) -> None:
    seen: list[list[str]] = []

    def model(request: FakeRequest) -> ModelReply:
        seen.append(tool_turns(request))
        # An apostrophe in a value: once every " is a ', no repair is safe.
        n = len(seen)
        return ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": f"it's {n}"}),))

    run = await run_agent(model, kind=kind, faults=Faults(malformed_tool_json=1.0))
    # Limits.max_parse_retries defaults to 2: two turns in a row, then the phase ends.
    assert run.result.stop_reason == "error"
    assert len(seen) == 2
    assert seen[0] == []
    (failed,) = seen[1]
    assert "was not run" in failed and "could not be repaired" in failed
    assert [c.status for c in run.result.tool_calls] == ["failed", "failed"]
    (error,) = [e for e in run.events if isinstance(e, PhaseError)]
    assert "could not be parsed 2 turns in a row" in error.error


async def test_max_parse_retries_is_honoured_beyond_two() -> None:
    # Each failed call has no readable arguments, so two of them look like the
    # same call twice: the phase must still end on the parse limit, not as a stall.
    turns: list[int] = []

    def model(request: FakeRequest) -> ModelReply:
        turns.append(len(turns) + 1)
        return ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": f"it's {len(turns)}"}),))

    run = await run_agent(
        model, faults=Faults(malformed_tool_json=1.0), limits=Limits(max_parse_retries=4)
    )
    assert run.result.stop_reason == "error"
    assert turns == [1, 2, 3, 4]


async def test_a_readable_turn_resets_the_parse_failures() -> None:
    # Turns 1 and 3 cannot be repaired, turns 2 and 4 can: never two in a row.
    keys = ["it's 1", "two", "it's 3", "four"]

    def model(request: FakeRequest) -> ModelReply:
        n = len(tool_turns(request))
        if n == len(keys):
            return ModelReply(text="all done")
        return ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": keys[n]}),))

    result = (await run_agent(model, faults=Faults(malformed_tool_json=1.0))).result
    assert result.stop_reason == "done" and result.final_text == "all done"
    assert [c.status for c in result.tool_calls] == ["failed", "ok", "failed", "ok"]
