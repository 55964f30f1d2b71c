"""Skills (#26): SKILL.md folders read (bounded, hostile files refused with ConfigError
naming the file), offered by name and description only, activated by the model with
activate_skill, and narrowing the phase's tools (offered and enforced)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, ChatMessage, ModelReply, SkillRegistry, ToolCallRequest
from agentrio.agents.skills.skill import load_skill, parse_skill
from agentrio.events import PermissionDenied, SkillActivated
from agentrio.testing import FakeRequest, FunctionModel, Reply, open_fake_llm
from agentrio.types import Skill

Recorder = Callable[[agentrio.Runtime], list[agentrio.events.Event]]

PDF = """---
name: pdf
description: "Fill in PDF forms: read a form's fields, then write them."
allowed-tools: read_pdf, write_pdf
license: MIT
metadata:
  version: 2
  owner: forms team
---
# Filling a form

Read the fields with read_pdf first. Never send the form by mail.
"""


@agentrio.tool
async def read_pdf(path: str) -> str:
    """Read a PDF form's fields."""
    return f"{path}: name, date"


@agentrio.tool
async def write_pdf(path: str, fields: str) -> str:
    """Write a PDF form's fields."""
    return "written"


@agentrio.tool
async def send_email(to: str, body: str) -> str:
    """Send an e-mail."""
    return "sent"


def skills_folder(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    (root / "pdf" / "scripts").mkdir(parents=True)
    (root / "pdf" / "SKILL.md").write_text(PDF, encoding="utf-8")
    (root / "pdf" / "scripts" / "fill.py").write_text("print('x')\n")
    (root / "mail").mkdir()
    (root / "mail" / "SKILL.md").write_text(
        "---\nname: mail\ndescription: Write and send e-mails.\nallowed-tools:\n"
        "  - send_email\n---\nBe polite.\n",
        encoding="utf-8",
    )
    (root / "notes").mkdir()  # no SKILL.md: not a skill
    return root


# -- reading skills ------------------------------------------------------------------------


def test_a_skill_folder_is_read(tmp_path: Path) -> None:
    registry = SkillRegistry.from_folder(skills_folder(tmp_path))
    assert [s.name for s in registry] == ["mail", "pdf"]
    pdf = registry.get("pdf")
    assert pdf is not None
    assert pdf.description == "Fill in PDF forms: read a form's fields, then write them."
    assert pdf.tools == ("read_pdf", "write_pdf")
    assert pdf.instructions.startswith("# Filling a form")
    assert pdf.files == ("scripts/fill.py",)
    mail = registry.get("mail")
    assert mail is not None and mail.tools == ("send_email",)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("name: x\n", "must start with front matter"),
        ("---\nname: pdf\ndescription: d\n", "no closing '---'"),
        ("---\ndescription: d\n---\n", "must give a 'name'"),
        ("---\nname: pdf\n---\n", "must give a 'description'"),
        ("---\nname: pdf\nname: pdf\ndescription: d\n---\n", "'name' is given twice"),
        ("---\nname: pdf\n!!! not yaml\ndescription: d\n---\n", "not 'key: value'"),
        ("---\nname: PDF Forms\ndescription: d\n---\n", "lowercase letters"),
        ("---\nname: pdf\ndescription: " + "d" * 1025 + "\n---\n", "more than 1024"),
        ("---\nname: pdf\x00\ndescription: d\n---\n", "NUL"),
        ("---\n" + "a: b\n" * 300 + "---\n", "no closing '---' within 200 lines"),
    ],
)
def test_hostile_front_matter_is_refused_naming_the_file(text: str, match: str) -> None:
    with pytest.raises(agentrio.ConfigError, match=match) as info:
        parse_skill(text, "skills/pdf/SKILL.md")
    assert str(info.value).startswith("skills/pdf/SKILL.md: ")


def test_hostile_files_are_refused_naming_the_file(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    (big / "SKILL.md").write_text("---\nname: big\ndescription: d\n---\n" + "x" * 300_000)
    with pytest.raises(agentrio.ConfigError, match=r"big/SKILL.md: is more than 262144 bytes"):
        load_skill(big)
    latin = tmp_path / "latin"
    latin.mkdir()
    (latin / "SKILL.md").write_bytes(b"---\nname: latin\ndescription: caf\xe9\n---\n")
    with pytest.raises(agentrio.ConfigError, match=r"latin/SKILL.md: is not UTF-8"):
        load_skill(latin)
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(big / "SKILL.md", linked / "SKILL.md")
    with pytest.raises(agentrio.ConfigError, match=r"linked/SKILL.md: must be a regular file"):
        load_skill(linked)
    other = tmp_path / "other"
    other.mkdir()
    (other / "SKILL.md").write_text("---\nname: pdf\ndescription: d\n---\n")
    with pytest.raises(agentrio.ConfigError, match=r"its name 'pdf' must be its folder's"):
        load_skill(other)


def test_a_tool_named_activate_skill_is_refused() -> None:
    @agentrio.tool
    async def activate_skill(name: str) -> str:
        """Mine."""
        return name

    registry = SkillRegistry([Skill("pdf", "Forms.")])
    with pytest.raises(agentrio.InvalidArgument, match="the name of a tool of its skills"):
        AgentSpec(
            "a", FunctionModel(lambda m, t: Reply(text="")), tools=[activate_skill], skills=registry
        )


# -- offered, activated, narrowing ---------------------------------------------------------


class FormFiller:
    """Activates pdf, then tries send_email (outside the skill), then read_pdf, then answers.

    Records the tools offered and the system prompt of each call."""

    def __init__(self) -> None:
        self.offered: list[list[str]] = []
        self.system: list[str] = []

    def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
        self.offered.append(sorted(t.name for t in tools))  # type: ignore[attr-defined]
        self.system.append(messages[0].content if messages[0].role == "system" else "")
        done = [m for m in messages if m.role == "tool"]
        script = [
            ToolCallRequest("activate_skill", {"name": "pdf"}),
            ToolCallRequest("send_email", {"to": "x@example.com", "body": "form"}),
            ToolCallRequest("read_pdf", {"path": "form.pdf"}),
        ]
        if len(done) < len(script):
            return Reply(tool_calls=[script[len(done)]])
        return Reply(text=" | ".join(f"{m.name}: {m.content}" for m in done[1:]))


async def test_an_active_skill_narrows_the_tools_offered_and_allowed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    registry = SkillRegistry.from_folder(skills_folder(tmp_path))
    model = FormFiller()
    spec = AgentSpec(
        "clerk",
        FunctionModel(model),
        instructions="You help with forms.",
        tools=[read_pdf, write_pdf, send_email],
        skills=registry,
    )
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("Fill in form.pdf")
        await trio.testing.wait_all_tasks_blocked()
    everything = ["activate_skill", "read_pdf", "read_skill_file", "send_email", "write_pdf"]
    narrowed = ["activate_skill", "read_pdf", "read_skill_file", "write_pdf"]
    assert model.offered == [everything, narrowed, narrowed, narrowed]
    # offered by name and description only: the instructions come with activation
    assert "- pdf: Fill in PDF forms" in model.system[0]
    assert "- mail: Write and send e-mails." in model.system[0]
    assert "Never send the form by mail" not in model.system[0]
    assert model.system[0].startswith("You help with forms.")
    statuses = [(c.name, c.status) for c in result.tool_calls]
    assert statuses == [("activate_skill", "ok"), ("send_email", "denied"), ("read_pdf", "ok")]
    assert "Never send the form by mail" in result.tool_calls[0].content
    assert "scripts/fill.py" in result.tool_calls[0].content
    assert result.tool_calls[1].content == "tool 'send_email' is not allowed here"
    assert [e for e in events if isinstance(e, SkillActivated)] == [
        SkillActivated(path="clerk", skill="pdf", tools=tuple(narrowed))
    ]
    assert any(isinstance(e, PermissionDenied) and e.tool == "send_email" for e in events)


async def test_the_skill_stays_active_in_the_next_phase_of_the_context(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    registry = SkillRegistry.from_folder(skills_folder(tmp_path))
    offered: list[list[str]] = []

    def model(messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
        offered.append(sorted(t.name for t in tools))  # type: ignore[attr-defined]
        if messages[-1].role == "user" and messages[-1].content == "start":
            return Reply(tool_calls=[ToolCallRequest("activate_skill", {"name": "mail"})])
        if messages[-1].content == "send it":
            return Reply(tool_calls=[ToolCallRequest("read_pdf", {"path": "f.pdf"})])
        return Reply(text="ok")

    spec = AgentSpec("clerk", FunctionModel(model), tools=[read_pdf, send_email], skills=registry)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        await agent.run("start")
        later = await agent.run("send it")
    # the second phase starts narrowed
    assert offered[2] == ["activate_skill", "read_skill_file", "send_email"]
    assert [(c.name, c.status) for c in later.tool_calls] == [("read_pdf", "denied")]


async def test_an_unknown_skill_fails_and_narrows_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    registry = SkillRegistry([Skill("pdf", "Forms.", "Do forms.", tools=["read_pdf"])])
    offered: list[int] = []

    def model(messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
        offered.append(len(tools))
        if messages[-1].role == "user":
            return Reply(tool_calls=[ToolCallRequest("activate_skill", {"name": "excel"})])
        return Reply(text=messages[-1].content)

    spec = AgentSpec("a", FunctionModel(model), tools=[read_pdf, send_email], skills=registry)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
    assert result.tool_calls[0].status == "failed"
    assert "no skill is named 'excel'; the skills are ['pdf']" in result.final_text
    assert offered == [3, 3]


async def test_a_skill_narrows_the_tools_sent_over_http(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    def reply(request: FakeRequest) -> ModelReply:
        results = [m for m in request.messages if m.role == "tool"]
        if not results:
            call = ToolCallRequest("activate_skill", {"name": "pdf"})
            return ModelReply(tool_calls=(call,))
        if len(results) == 1:
            call = ToolCallRequest("send_email", {"to": "a@example.com", "body": "b"})
            return ModelReply(tool_calls=(call,))
        return ModelReply(text=results[-1].content)

    registry = SkillRegistry.from_folder(skills_folder(tmp_path))
    async with open_fake_llm(reply) as server:  # real HTTP on 127.0.0.1
        config = agentrio.Config(
            providers={
                "local": agentrio.ProviderConfig(
                    name="local", kind="openai", base_url=server.base_url + "/v1"
                )
            }
        )
        async with agentrio.open_runtime(config=config) as rt:
            spec = AgentSpec(
                "clerk", "local:m", tools=[read_pdf, write_pdf, send_email], skills=registry
            )
            agent = await rt.spawn_agent(spec)
            result = await agent.run("Fill in the form.")
        offered = [sorted(r.tools) for r in server.requests]
    assert offered[0] == [
        "activate_skill",
        "read_pdf",
        "read_skill_file",
        "send_email",
        "write_pdf",
    ]
    assert offered[1:] == [["activate_skill", "read_pdf", "read_skill_file", "write_pdf"]] * 2
    assert result.final_text == "tool 'send_email' is not allowed here"


async def test_a_skills_files_are_read_by_name_and_only_those(tmp_path: Path) -> None:
    # (the real clock: the file is read in a worker thread)
    root = skills_folder(tmp_path)
    (tmp_path / "secret.txt").write_text("not for the model")
    os.symlink(tmp_path / "secret.txt", root / "pdf" / "link.txt")
    registry = SkillRegistry.from_folder(root)
    asked = [
        {"skill": "pdf", "file": "scripts/fill.py"},
        {"skill": "pdf", "file": "../../secret.txt"},
        {"skill": "pdf", "file": "link.txt"},
        {"skill": "mail", "file": "scripts/fill.py"},
    ]

    def model(messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
        done = sum(m.role == "tool" for m in messages)
        if done < len(asked):
            return Reply(tool_calls=[ToolCallRequest("read_skill_file", asked[done])])
        return Reply(text="done")

    spec = AgentSpec("a", FunctionModel(model), tools=[read_pdf], skills=registry)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
    calls = result.tool_calls
    assert (calls[0].status, calls[0].content) == ("ok", "print('x')\n")
    assert [c.status for c in calls[1:]] == ["failed"] * 3
    assert "has no file '../../secret.txt'" in calls[1].content
    assert "has no file 'link.txt'" in calls[2].content  # (links are not listed)
    assert "skill 'mail' has no file" in calls[3].content


def test_a_quoted_scalar_s_escapes_are_read_in_one_pass() -> None:
    skill = parse_skill(
        '---\nname: win\ndescription: "C:\\\\new \\"q\\" a\\nb \\\\t"\n---\nbody\n', "win/SKILL.md"
    )
    assert skill.description == 'C:\\new "q" a\nb \\t'
