"""Workspace: an agent's folder for artifacts, logs, memory and its run summary."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import msgspec

from .errors import InvalidArgument

__all__ = ["Workspace", "agent_workspace", "write_atomic"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

# What a workspace holds besides the subfolders of agents spawned under other
# names than their spec's: an agent's subfolder must not be one of these.
# Compared ignoring case, for the file systems that do.
_RESERVED = frozenset({"artifacts", "logs", "memory", "run_summary.json"})


def write_atomic(path: Path, data: bytes) -> None:
    """Write *data* to *path* so that a reader sees the old file or the new, never half.

    The bytes go to a temporary file in the same folder, are flushed to disk,
    and the file is renamed over *path*.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Workspace:
    """An agent's folder: ``artifacts/``, ``logs/`` and ``memory/``, made on first use.

    Example:

        ws = Workspace("runs/agent-1")
        (ws.artifacts / ws.filename("report: final?.md")).write_text("...")

    A workspace holds ``artifacts/``, ``logs/``, ``memory/``,
    ``run_summary.json``, and the subfolders of agents spawned from the same
    spec under other names than ``spec.name``, each
    ``root/<Workspace.filename(name)>``. An agent whose subfolder would be one
    of the workspace's own entries (compared ignoring case) is refused with
    ``InvalidArgument`` by ``spawn_agent``, and so is an agent whose folder
    (or the workspace itself) exists and is not a folder. A
    ``run_summary.json`` that cannot be written at a phase's end (the disk
    full, the folder made unwritable later) leaves the phase's result as it
    is: a ``WorkspaceWriteFailed`` event says why.

    Attributes:
        root: the folder itself, a ``pathlib.Path`` (made on first use too).

    Raises:
        InvalidArgument: *root* is not a non-empty path.
    """

    __slots__ = ("root",)

    def __init__(self, root: str | os.PathLike[str]) -> None:
        if not isinstance(root, (str, os.PathLike)) or not os.fspath(root):
            raise InvalidArgument(f"workspace must be a non-empty path, got {root!r}")
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def _sub(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def artifacts(self) -> Path:
        """``root/artifacts``, made if missing: for what the agent produces."""
        return self._sub("artifacts")

    @property
    def logs(self) -> Path:
        """``root/logs``, made if missing."""
        return self._sub("logs")

    @property
    def memory(self) -> Path:
        """``root/memory``, made if missing: for what the agent keeps between runs."""
        return self._sub("memory")

    @staticmethod
    def filename(name: str, *, max_length: int = 120) -> str:
        """Make *name* safe as a file name: no separators, no dots in front, bounded length.

        Runs of characters other than letters, digits, ``.``, ``_`` and ``-``
        become one ``_``; leading dots are removed; the result is cut to
        *max_length* characters and stripped of ``_`` at either end; an empty
        result becomes ``"unnamed"``.

        Raises:
            InvalidArgument: *name* is not a str.
        """
        if not isinstance(name, str):
            raise InvalidArgument(f"name must be a str, got {name!r}")
        # Dots and underscores go from the front together: stripping them one
        # kind at a time let ":.." become "..", a way out of the folder.
        safe = _UNSAFE.sub("_", name).lstrip("._")[:max_length].rstrip("_")
        return safe or "unnamed"

    def write_summary(self, summary: dict[str, object]) -> Path:
        """Write *summary* as ``root/run_summary.json`` (indented JSON), atomically, and
        return its path.

        Agents call it after each phase with ``agent``, ``phases``,
        ``stop_reasons`` (phases per stop reason, ``"cancelled"`` included),
        ``input_tokens``, ``output_tokens``, ``total_tokens``, ``requests`` and
        ``tool_calls``; once a call reported cached input, cache writes or
        reasoning, also ``cached_input_tokens``, ``cache_write_tokens``,
        ``reasoning_tokens`` and ``cache_hit_ratio`` (cached input over input).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "run_summary.json"
        write_atomic(path, msgspec.json.format(msgspec.json.encode(summary), indent=2) + b"\n")
        return path


def agent_workspace(root: str | os.PathLike[str], spec_name: str, name: str) -> Workspace:
    """The workspace of an agent spawned as *name* from a spec named *spec_name*
    whose workspace is *root*: *root* itself, or for another name the
    subfolder ``filename(name)``.

    Raises:
        InvalidArgument: that subfolder would be one of *root*'s own entries,
            ``artifacts``, ``logs``, ``memory`` or ``run_summary.json``
            (ignoring case); or the folder (or *root*) exists and is not a
            folder (a file of that name: the run summary could not be written).
    """
    workspace = Workspace(root)
    if name != spec_name:
        folder = Workspace.filename(name)
        if folder.casefold() in _RESERVED:
            raise InvalidArgument(
                f"name {name!r} cannot be spawned in the workspace {str(workspace.root)!r}: "
                f"its subfolder {folder!r} would be one of the workspace's own entries "
                f"{sorted(_RESERVED)} (ignoring case)"
            )
        _check_folder(workspace.root, name)
        workspace = Workspace(workspace.root / folder)
    _check_folder(workspace.root, name)
    return workspace


def _check_folder(path: Path, name: str) -> None:
    if os.path.lexists(path) and not path.is_dir():
        raise InvalidArgument(
            f"agent {name!r} cannot have the workspace {str(path)!r}: it exists and is not a folder"
        )
