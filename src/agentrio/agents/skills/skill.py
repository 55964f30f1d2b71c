"""Skills: instructions, the tools they may use and their files, read from ``SKILL.md``.

A skill's folder holds a ``SKILL.md``: front matter between two ``---`` lines
(``name``, ``description``, optionally ``allowed-tools``), then the
instructions, in Markdown. Its other files (scripts, references, templates)
are listed, never read. The front matter is read by a small parser of the
subset of YAML that skills use (``key: value``, quoted strings, ``[a, b]``
lists, ``- item`` lists, ``|`` and ``>`` blocks; nested tables are skipped),
so no YAML library is needed. Everything in the folder is taken as hostile:
sizes are bounded, the text must be UTF-8 without NUL characters, names are
checked, links are not followed; anything else is a ``ConfigError`` that
names the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from ...errors import AgentrioError, ConfigError, InvalidArgument

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_FILES",
    "MAX_SKILL_BYTES",
    "Skill",
    "load_skill",
    "parse_skill",
]

MAX_SKILL_BYTES = 256 * 1024
"""The most bytes a SKILL.md may hold (front matter and instructions)."""
MAX_FRONT_MATTER_LINES = 200
MAX_DESCRIPTION_CHARS = 1024
MAX_FILES = 200
"""The most files of a skill's folder that are listed (the rest are left out)."""
_MAX_DEPTH = 4

_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:(?:\s+(.*)|\s*)$")


def _to_tools(value: Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise InvalidArgument(f"Skill.tools must be a list of tool names or None, got {value!r}")
    tools = tuple(value)
    for name in tools:
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument(f"Skill.tools must hold non-empty strings, got {name!r}")
    return tools


@attrs.frozen
class Skill:
    """One skill: what the model is told when it activates it, and what it may use.

    Made by hand, or read from a folder with `agentrio.types.load_skill` (a registry
    reads many: [`SkillRegistry.from_folder`][agentrio.SkillRegistry.from_folder]).

    Attributes:
        name: how the model names it: lowercase letters, digits and ``-``,
            at most 64 characters, not starting or ending with ``-``.
        description: what it is for (at most 1,024 characters): all the
            model sees of it until it activates it.
        instructions: what the model is told once it activates it.
        tools: the agent's tools it may use while it is active: names or
            globs (``"read_*"``); None: all of the agent's (no narrowing);
            ``()``: none.
        files: its folder's other files, relative paths (``scripts/fill.py``).
        folder: its folder (None for a skill made in code).

    Raises:
        InvalidArgument: a bad name, a description too long or empty, a
            field of the wrong type.
    """

    name: str
    description: str
    instructions: str = ""
    tools: tuple[str, ...] | None = attrs.field(default=None, converter=_to_tools)
    files: tuple[str, ...] = ()
    folder: str | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidArgument(
                f"Skill.name must be lowercase letters, digits and '-' (at most 64, not "
                f"starting or ending with '-'), got {self.name!r}"
            )
        if not isinstance(self.description, str) or not self.description.strip():
            raise InvalidArgument(f"skill {self.name!r}: its description must be a non-empty str")
        if len(self.description) > MAX_DESCRIPTION_CHARS:
            raise InvalidArgument(
                f"skill {self.name!r}: its description is {len(self.description)} characters, "
                f"more than {MAX_DESCRIPTION_CHARS}"
            )
        if not isinstance(self.instructions, str):
            raise InvalidArgument(f"skill {self.name!r}: its instructions must be a str")
        object.__setattr__(self, "files", tuple(self.files))


# -- the front matter --------------------------------------------------------------------


_ESCAPE = re.compile(r"\\(.)")  # a quoted scalar's escapes: \n, \", \\ (one pass)


def _unescape(match: re.Match[str]) -> str:
    char = match[1]
    return "\n" if char == "n" else char if char in '"\\' else match[0]


def _scalar(text: str) -> str:
    """A YAML scalar as skills write one: quoted (``"a: b"``, ``'it''s'``) or plain."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        body = text[1:-1]
        return _ESCAPE.sub(_unescape, body)
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if " #" in text:  # a comment after a plain scalar
        text = text[: text.index(" #")].rstrip()
    return text


def _flow_list(text: str) -> list[str]:
    """``[a, "b c", d]`` as a list of strings (no nesting)."""
    inner = text.strip()[1:-1]
    return [_scalar(item) for item in inner.split(",") if item.strip()]


def _block(lines: list[str], folded: bool) -> str:
    """The lines of a ``|`` (kept) or ``>`` (folded) block, dedented."""
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents) if indents else 0
    body = [line[cut:] for line in lines]
    if folded:
        return " ".join(line.strip() for line in body if line.strip())
    return "\n".join(body).strip("\n")


def parse_front_matter(lines: Sequence[str], where: str) -> dict[str, str | list[str]]:
    """The top-level keys of the front matter *lines*; nested tables are skipped.

    Raises:
        ConfigError: a line that is not ``key: value``, an indented block,
            or a list item; a key given twice. The message names *where*.
    """
    found: dict[str, str | list[str]] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _KEY.match(line)
        if match is None:
            raise ConfigError(f"{where}: front matter line {i + 1} is not 'key: value': {line!r}")
        key, value = match.group(1), (match.group(2) or "").strip()
        if key in found:
            raise ConfigError(f"{where}: front matter key {key!r} is given twice")
        nested = []  # the indented lines (or list items) under the key
        while i < len(lines) and (
            not lines[i].strip() or lines[i][:1] in (" ", "\t") or lines[i].startswith("- ")
        ):
            nested.append(lines[i])
            i += 1
        if value in ("|", ">", "|-", ">-", "|+", ">+"):
            found[key] = _block(nested, value.startswith(">"))
        elif value.startswith("[") and value.endswith("]"):
            found[key] = _flow_list(value)
        elif value:
            found[key] = _scalar(value)
        else:
            items = [n.strip() for n in nested if n.strip()]
            if items and all(item.startswith("- ") or item == "-" for item in items):
                found[key] = [_scalar(item[1:]) for item in items]
            elif not items:
                found[key] = ""
            # (else a nested table, as "metadata:" holds: not read)
    return found


def _tool_names(value: str | list[str]) -> tuple[str, ...]:
    """``allowed-tools`` as names: a list, or one string split at commas and spaces."""
    names = value if isinstance(value, list) else re.split(r"[,\s]+", value)
    return tuple(n.strip() for n in names if n.strip())


def parse_skill(text: str, where: str, folder: str | None = None) -> Skill:
    """The skill a SKILL.md's *text* describes.

    Raises:
        ConfigError: no front matter, a bad or missing ``name`` or
            ``description``, a NUL character, too big; the message names *where*.
    """
    if "\x00" in text:
        raise ConfigError(f"{where}: holds a NUL character")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise ConfigError(f"{where}: must start with front matter ('---' on the first line)")
    end = next(
        (
            n
            for n, line in enumerate(lines[1 : MAX_FRONT_MATTER_LINES + 2], 1)
            if line.strip() == "---"
        ),
        None,
    )
    if end is None:
        raise ConfigError(
            f"{where}: the front matter has no closing '---' within {MAX_FRONT_MATTER_LINES} lines"
        )
    keys = parse_front_matter([line.rstrip("\r") for line in lines[1:end]], where)
    name, description = keys.get("name"), keys.get("description")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: the front matter must give a 'name'")
    if not isinstance(description, str) or not description:
        raise ConfigError(f"{where}: the front matter must give a 'description'")
    allowed = keys.get("allowed-tools", keys.get("allowed_tools"))
    tools = None if allowed is None else _tool_names(allowed)
    instructions = "\n".join(lines[end + 1 :]).strip()
    try:
        return Skill(name, description, instructions, tools, folder=folder)
    except InvalidArgument as exc:
        raise ConfigError(f"{where}: {exc}") from None


# -- a skill's folder --------------------------------------------------------------------


def read_bounded(
    file: Path, limit: int, error: type[AgentrioError] = ConfigError, name: str | None = None
) -> str:
    """*file*'s text: at most *limit* bytes of UTF-8, not a link, not a special file;
    else *error*, naming the file as *name* (its path if None)."""
    label = str(file) if name is None else name
    try:
        if file.is_symlink() or not file.is_file():
            raise error(f"{label}: must be a regular file (not a link)")
        with open(file, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise error(f"{label}: cannot read it: {exc.strerror}") from None
    if len(data) > limit:
        raise error(f"{label}: is more than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{label}: is not UTF-8 (byte {exc.start})") from None


def _files(folder: Path) -> tuple[str, ...]:
    """The folder's files but SKILL.md, relative, sorted: at most MAX_FILES, links left out."""
    found: list[str] = []
    for root, dirs, names in os.walk(folder):  # (os.walk does not follow links to folders)
        depth = len(Path(root).relative_to(folder).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and depth < _MAX_DEPTH)
        for name in sorted(names):
            path = Path(root) / name
            if name.startswith(".") or path.is_symlink() or (depth == 0 and name == "SKILL.md"):
                continue
            found.append(path.relative_to(folder).as_posix())
            if len(found) >= MAX_FILES:
                return tuple(found)
    return tuple(found)


def load_skill(folder: str | os.PathLike[str], *, max_bytes: int = MAX_SKILL_BYTES) -> Skill:
    """The skill of *folder* (its ``SKILL.md``), with its other files listed.

    The skill's ``name`` must be the folder's name, as the convention has it.

    Raises:
        ConfigError: no readable SKILL.md, more than *max_bytes*, not UTF-8,
            a link, bad front matter, a name that is not the folder's; the
            message names the file.
    """
    root = Path(folder)
    file = root / "SKILL.md"
    skill = parse_skill(read_bounded(file, max_bytes), str(file), folder=str(root))
    if skill.name != root.name:
        raise ConfigError(
            f"{file}: its name {skill.name!r} must be its folder's name {root.name!r}"
        )
    return attrs.evolve(skill, files=_files(root))
