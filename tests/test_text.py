"""agentrio._text.scrub: lone surrogates become U+FFFD, valid text is untouched; and
the rule where text enters an agent: a tool's result, the caller's prompt (over each
wire of the fake server, for a plain agent, a traced one and durable ones)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import agentrio
from agentrio import AgentSpec, ChatMessage, Provider, ProviderConfig, ToolCallRequest
from agentrio._text import scrub, scrub_json
from agentrio.events import ToolEnded
from agentrio.store import DirectoryStore, MemoryStore
from agentrio.testing import FakeRequest, Reply, open_fake_llm
from agentrio.tracing import read_trace

Kind = Literal["openai", "anthropic", "ollama"]
BASE = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}
# What os.listdir gives for a file whose name is not UTF-8.
NAME = os.fsdecode(b"report-\xff.txt")
SCRUBBED = "report-\ufffd.txt"


def test_a_file_name_that_is_not_utf8_becomes_encodable() -> None:
    name = os.fsdecode(b"report-\xff.txt")
    assert scrub(name) == "report-\ufffd.txt"
    scrub(name).encode("utf-8")


def test_lone_high_and_low_surrogates_are_replaced() -> None:
    assert scrub("a\ud800b") == "a\ufffdb"
    assert scrub("a\udfffb") == "a\ufffdb"
    assert scrub("\udc80\udc80") == "\ufffd\ufffd"


def test_a_surrogate_pair_is_joined_into_its_character() -> None:
    assert scrub("x\ud83d\ude00y") == "x\U0001f600y"


def test_valid_text_is_returned_as_the_same_object() -> None:
    for text in ("", "plain ascii", "h\u00e9llo \U0001f600"):
        assert scrub(text) is text


@given(st.text())
def test_valid_text_is_unchanged(text: str) -> None:
    assert scrub(text) == text


@given(st.lists(st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr))).map("".join))
def test_every_string_comes_out_encodable(text: str) -> None:
    scrub(text).encode("utf-8")


def test_scrub_json_scrubs_every_string_keys_included_in_place() -> None:
    value = {"k\udcff": ["x\ud800", {"deep": "\udfff"}], "n": 1, "ok": "fine"}
    keys_before = list(value)
    assert scrub_json(value) is value
    assert value == {"k\ufffd": ["x\ufffd", {"deep": "\ufffd"}], "n": 1, "ok": "fine"}
    assert len(value) == len(keys_before)  # (the key replaced, its place kept)
    assert scrub_json("a\udcff") == "a\ufffd"
    assert scrub_json(3) == 3


def test_scrub_json_takes_a_value_nested_deeper_than_the_recursion_limit() -> None:
    deep: object = ["\ud800"]
    for _ in range(5000):
        deep = [deep]
    inner = scrub_json(deep)
    while isinstance(inner, list):
        (inner,) = inner
    assert inner == "\ufffd"


# -- where text enters an agent ------------------------------------------------------


@agentrio.tool
async def listing() -> str:
    """The files of the folder (one whose name is not UTF-8)."""
    await trio.lowlevel.checkpoint()
    return NAME


@agentrio.tool
async def names() -> list[str]:
    """The same, as a JSON list."""
    await trio.lowlevel.checkpoint()
    return [NAME, "plain.txt"]


@agentrio.tool
async def opener() -> str:
    """Open the file: fails, its name in the error."""
    await trio.lowlevel.checkpoint()
    raise ValueError(f"cannot read {NAME}")


def _two_phases(tool: str) -> Callable[[FakeRequest], Reply]:
    """A model that calls *tool* once in each phase, then answers with what it saw."""

    def reply(request: FakeRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user":
            return Reply(tool_calls=(ToolCallRequest(tool, {}, id=f"c{len(request.messages)}"),))
        return Reply(text=f"saw {last.content}")

    return reply


def _provider(server: agentrio.testing.FakeLLMServer, kind: Kind, stream: bool) -> Provider:
    config = ProviderConfig(
        name="p", kind=kind, base_url=server.base_url + BASE[kind], stream=stream, max_retries=0
    )
    return Provider(config)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
async def test_a_tool_result_not_utf8_poisons_no_phase_on_any_wire(
    kind: Kind, stream: bool, tmp_path: Path
) -> None:
    trace = tmp_path / "run.jsonl"
    async with open_fake_llm(_two_phases("listing")) as server:
        async with _provider(server, kind, stream) as p, agentrio.open_runtime(trace=trace) as rt:
            agent = await rt.spawn_agent(AgentSpec("a", p.model("m"), tools=[listing]))
            first = await agent.run("list the folder")
            second = await agent.run("and again")
        sent = server.requests[-1].messages
    for result in (first, second):
        assert (result.stop_reason, result.error) == ("done", "")
        assert result.final_text == f"saw {SCRUBBED}"
        assert [c.content for c in result.tool_calls] == [SCRUBBED]
    # The second phase's last request carried both phases' results, as valid text.
    assert [m.content for m in sent if m.role == "tool"] == [SCRUBBED, SCRUBBED]
    ended = [r.e for r in read_trace(trace) if isinstance(r.e, ToolEnded)]
    assert [e.output_preview for e in ended] == [SCRUBBED, SCRUBBED]


@pytest.mark.parametrize(
    ("tool", "content"),
    [
        (names, msgspec.json.encode([SCRUBBED, "plain.txt"]).decode()),
        (opener, f"tool 'opener' raised ValueError: cannot read {SCRUBBED}"),
    ],
)
async def test_a_json_result_or_an_error_message_not_utf8_is_scrubbed(
    tool: agentrio.Tool, content: str
) -> None:
    async with (
        open_fake_llm(_two_phases(tool.name)) as server,
        _provider(server, "openai", False) as p,
        agentrio.open_runtime() as rt,
    ):
        agent = await rt.spawn_agent(AgentSpec("a", p.model("m"), tools=[tool]))
        result = await agent.run("go")
    assert result.stop_reason == "done"
    assert [c.content for c in result.tool_calls] == [content]


def _durable(model: agentrio.types.Model) -> Callable[[], AgentSpec[str]]:
    def make() -> AgentSpec[str]:
        return AgentSpec("worker", model, tools=[listing])

    return make


@pytest.mark.parametrize("where", ["memory", "directory"])
async def test_a_durable_agent_records_a_tool_result_not_utf8(where: str, tmp_path: Path) -> None:
    memory = MemoryStore()

    def store() -> object:  # (a runtime closes its store: a new one for each life)
        return memory if where == "memory" else DirectoryStore(tmp_path / "ckpt")

    async with (
        open_fake_llm(_two_phases("listing")) as server,
        _provider(server, "openai", True) as p,
    ):
        make = _durable(p.model("m"))
        async with agentrio.open_runtime(store=store(), specs={"worker": make}) as rt:  # type: ignore[arg-type]
            agent = await rt.spawn_agent(make(), name="w1")
            first = await agent.run("list", phase_id="p1")
            second = await agent.run("again", phase_id="p2")
        # A second life reads the records back, and finds both phases ended.
        async with agentrio.open_runtime(store=store(), specs={"worker": make}) as rt:  # type: ignore[arg-type]
            assert rt.resumed == ()
            kept = await rt.resumed_result("p2")
    for result in (first, second, kept):
        assert (result.stop_reason, result.final_text) == ("done", f"saw {SCRUBBED}")


@pytest.mark.parametrize("parts", [False, True])
async def test_a_prompt_or_instructions_not_utf8_are_scrubbed(parts: bool) -> None:
    prompt = f"summarise {NAME}"
    async with open_fake_llm([Reply(text="one"), Reply(text="two")]) as server:
        async with _provider(server, "openai", False) as p, agentrio.open_runtime() as rt:
            spec = AgentSpec("a", p.model("m"), instructions=f"You read {NAME}.")
            agent = await rt.spawn_agent(spec)
            first = await agent.run([prompt] if parts else prompt)
            second = await agent.run("and then?")
        sent = server.requests[-1].messages
    assert (first.stop_reason, second.stop_reason) == ("done", "done")
    assert sent[:2] == [
        ChatMessage("system", f"You read {SCRUBBED}."),
        ChatMessage("user", f"summarise {SCRUBBED}"),
    ]


# -- a Model of the application's: its replies are made valid where they enter ----------


@agentrio.tool
async def echo(key: str) -> str:
    """Echo the key."""
    await trio.lowlevel.checkpoint()
    return f"got {key}"


@pytest.mark.parametrize(
    "call",
    [
        ToolCallRequest("echo", {"key": NAME}, id="c1"),  # a value
        ToolCallRequest("echo", {NAME: "x"}, id="c1"),  # a key
        ToolCallRequest("echo" + NAME, {}, id="c1"),  # the name
        ToolCallRequest("echo", {"key": "a"}, id="c" + NAME),  # the id
    ],
    ids=["value", "key", "name", "id"],
)
async def test_a_models_tool_call_not_utf8_poisons_no_phase(
    call: ToolCallRequest, tmp_path: Path
) -> None:
    from agentrio.testing import ScriptedModel

    model = ScriptedModel(
        [Reply(tool_calls=(call,)), Reply(text="fin " + NAME), Reply(text="again")]
    )
    spec = AgentSpec("w", model, tools=[echo])
    trace = tmp_path / "t.jsonl"
    async with agentrio.open_runtime(trace=trace) as rt:
        agent = await rt.spawn_agent(spec)
        first = await agent.run("go")
        second = await agent.run("again")
    assert (first.stop_reason, second.stop_reason) == ("done", "done")
    assert first.final_text == "fin " + SCRUBBED
    (made,) = first.tool_calls
    for text in (made.name, made.id, msgspec.json.encode(made.arguments).decode()):
        text.encode("utf-8")
    assert list(read_trace(trace))  # (written whole, and read back)


def test_a_valid_reply_is_returned_as_is() -> None:
    from agentrio._text import valid_reply

    reply = Reply(text="h\u00e9", tool_calls=(ToolCallRequest("t", {"k": ["\u00e9"]}),))
    assert valid_reply(reply) is reply
