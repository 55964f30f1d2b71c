"""SkillRegistry: an agent's skills, offered by name and description, activated by the model.

The loop sees a registry through ``loop.extensions.Skills``: the spec adds its
``activate_skill`` tool to the agent's tools and its catalogue to the system
prompt (once per spec), and a phase asks it to narrow the phase's tools when
the phase begins (from the context's history) and after each tool turn that
activated a skill. Which skills are active is read from the history itself
(the ``activate_skill`` calls that succeeded): a later phase of the same
context, a phase resumed after a crash, and the model all see the same.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ..._checks import short_repr
from ...errors import ConfigError, InvalidArgument, ToolError
from ...messages import ChatMessage, SkillActivated, ToolResult
from ..tools.tool import Tool
from .skill import MAX_SKILL_BYTES, Skill, load_skill, read_bounded

if TYPE_CHECKING:
    from ..loop.phase import Phase

__all__ = ["ACTIVATE_SKILL", "MAX_SKILLS", "READ_SKILL_FILE", "SkillRegistry"]

ACTIVATE_SKILL = "activate_skill"
"""The name of the tool the model activates a skill with."""
READ_SKILL_FILE = "read_skill_file"
"""The name of the tool the model reads an active skill's files with."""
MAX_FILE_BYTES = 256 * 1024
"""The most bytes of a skill's file that ``read_skill_file`` returns."""
MAX_SKILLS = 256
"""The most skills a registry reads from one folder."""


class SkillRegistry:
    """An agent's skills, by name; set as ``AgentSpec(skills=...)``.

    The model is told each skill's name and description (in the system
    prompt) and given one tool, ``activate_skill(name)``. When it activates
    one, the tool's result is the skill's instructions (and the list of its
    files), and from its next model call on, the phase offers and allows
    only the tools the active skills allow (their union, within the agent's
    own tools, and ``activate_skill`` itself): a call to another tool is
    refused with a ``denied`` result. A skill whose ``tools`` is None
    allows all of the agent's tools. A spec takes the registry's tools and
    catalogue when it is first spawned: add every skill before that. See
    [How to give an agent skills][how-to-give-an-agent-skills].

    Example:

        skills = agentrio.SkillRegistry.from_folder("skills")
        spec = agentrio.AgentSpec("clerk", model, tools=[...], skills=skills)

    Raises:
        InvalidArgument: something that is not a ``Skill``, two skills of one name.
    """

    __slots__ = ("_catalogue", "_skills", "_tools")

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self._skills: dict[str, Skill] = {}
        for skill in skills:
            self.add(skill)
        self._catalogue: str | None = None
        self._tools: tuple[Tool, ...] | None = None

    @classmethod
    def from_folder(
        cls, folder: str | os.PathLike[str], *, max_bytes: int = MAX_SKILL_BYTES
    ) -> SkillRegistry:
        """The skills of the subfolders of *folder* that hold a ``SKILL.md``, by name.

        At most `MAX_SKILLS` (256) are read; subfolders without a SKILL.md
        and links are left out.

        Raises:
            ConfigError: *folder* cannot be read, holds more than 256
                skills, or a skill cannot be read (see `load_skill`: the
                message names the file).
        """
        root = Path(folder)
        try:
            entries = sorted(root.iterdir())
        except OSError as exc:
            raise ConfigError(f"{root}: cannot read the skills folder: {exc.strerror}") from None
        found = [e for e in entries if not e.is_symlink() and (e / "SKILL.md").exists()]
        if len(found) > MAX_SKILLS:
            raise ConfigError(f"{root}: holds {len(found)} skills, more than {MAX_SKILLS}")
        return cls(load_skill(e, max_bytes=max_bytes) for e in found)

    def add(self, skill: Skill) -> None:
        """Add *skill*.

        Raises:
            InvalidArgument: not a ``Skill``, or one of that name is there already.
        """
        if not isinstance(skill, Skill):
            raise InvalidArgument(
                f"a SkillRegistry holds agentrio.types.Skill objects, got {skill!r}"
            )
        if skill.name in self._skills:
            raise InvalidArgument(f"two skills are named {skill.name!r}")
        self._skills[skill.name] = skill
        self._catalogue = None
        self._tools = None

    def get(self, name: str) -> Skill | None:
        """The skill called *name*, or None."""
        return self._skills.get(name)

    def __len__(self) -> int:
        return len(self._skills)

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._skills.values())

    def __repr__(self) -> str:
        return f"SkillRegistry({sorted(self._skills)})"

    # -- what the spec takes from it (loop.extensions.Skills) ---------------------------------

    def catalogue(self) -> str:
        """The part of the system prompt that lists the skills (names and descriptions)."""
        if self._catalogue is None:
            lines = [
                f"You have skills. To use one, call {ACTIVATE_SKILL} with its name first; "
                "you are then given its instructions, and may use the tools it allows."
            ]
            lines += [f"- {s.name}: {' '.join(s.description.split())}" for s in self]
            self._catalogue = "\n".join(lines)
        return self._catalogue

    def tools(self) -> tuple[Tool, ...]:
        """The tools the registry adds to an agent's: ``activate_skill``, and
        ``read_skill_file`` when a skill has files."""
        if self._tools is None:
            tools = [Tool(self._activate, name=ACTIVATE_SKILL)]
            if any(s.files and s.folder for s in self):
                tools.append(Tool(self._read, name=READ_SKILL_FILE))
            self._tools = tuple(tools)
        return self._tools

    async def _read(self, skill: str, file: str) -> str:
        """Read one of a skill's files, as its activation lists them.

        Args:
            skill: the skill's name.
            file: the file's path in the skill's folder, as listed.
        """
        found = self._skills.get(skill)
        if found is None or found.folder is None or file not in found.files:
            raise ToolError(f"skill {short_repr(skill)} has no file {short_repr(file)}")
        # (listed when the skill was read, links left out; read again as hostile)
        return await trio.to_thread.run_sync(_read_file, Path(found.folder), file)

    async def _activate(self, name: str) -> str:
        """Activate a skill: get its instructions; from then on, use only the tools it allows.

        Args:
            name: the skill's name, as the list of skills gives it.
        """
        skill = self._skills.get(name)
        if skill is None:
            raise ToolError(
                f"no skill is named {short_repr(name)}; the skills are {sorted(self._skills)}"
            )
        text = skill.instructions or f"Skill {skill.name!r} is active."
        if skill.files and skill.folder:
            text += f"\n\nThe skill's files (read one with {READ_SKILL_FILE}): " + ", ".join(
                skill.files
            )
        return text

    # -- what a phase asks of it ---------------------------------------------------------

    def narrow(self, phase: Phase, results: Sequence[ToolResult] | None) -> None:
        """Narrow *phase*'s tools to what the skills active in its history allow.

        *results*: the tool turn just settled (None: the phase begins). A turn
        that activated no skill changes nothing.
        """
        if results is not None and not any(
            r.name == ACTIVATE_SKILL and r.status == "ok" for r in results
        ):
            return
        active = _active(phase.history)
        if not active:
            return
        from ..loop.phase import phase_tools  # (the loop's own rule for a phase's tools)

        allowed = phase_tools(phase.st, phase.cmd)
        narrowed = self._allowed(active, allowed)
        phase.allowed = narrowed
        if results is not None and phase.bus.active:
            for r in results:
                if r.name == ACTIVATE_SKILL and r.status == "ok":
                    phase.bus.publish(
                        SkillActivated(
                            path=phase.path,
                            skill=str(r.arguments.get("name", "")),
                            tools=tuple(sorted(narrowed)),
                        )
                    )

    def _allowed(self, active: Iterable[str], allowed: frozenset[str]) -> frozenset[str]:
        """The tools of *allowed* that the *active* skills allow (their union)."""
        patterns: set[str] = set()
        for name in active:
            skill = self._skills.get(name)
            if skill is None:
                continue
            if skill.tools is None:
                return allowed
            patterns.update(skill.tools)
        keep = {ACTIVATE_SKILL, READ_SKILL_FILE} & allowed
        keep.update(t for t in allowed if any(fnmatch.fnmatchcase(t, p) for p in patterns))
        return frozenset(keep)


def _read_file(folder: Path, file: str) -> str:
    """*file* of *folder*: inside it, not a link, at most MAX_FILE_BYTES, UTF-8."""
    path = folder / file
    try:
        inside = path.resolve().is_relative_to(folder.resolve())
    except OSError as exc:
        raise ToolError(f"cannot read {file!r}: {exc.strerror}") from None
    if not inside:
        raise ToolError(f"{file!r} is not a regular file of the skill's folder")
    return read_bounded(path, MAX_FILE_BYTES, ToolError, repr(file))


def _active(history: Sequence[ChatMessage]) -> list[str]:
    """The skills activated in *history*: its ``activate_skill`` calls that succeeded."""
    asked: dict[str, str] = {}  # call id -> skill name
    active: list[str] = []
    for message in history:
        if message.role == "assistant":
            for call in message.tool_calls:
                if call.name == ACTIVATE_SKILL:
                    asked[call.id] = str(call.arguments.get("name", ""))
        elif message.role == "tool" and message.name == ACTIVATE_SKILL and not message.is_error:
            name = asked.get(message.tool_call_id or "")
            if name and name not in active:
                active.append(name)
    return active
