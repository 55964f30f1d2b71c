"""The package as a user gets it (#23): the LICENSE, the metadata, the version in one
place, the CHANGELOG's release entry, CONTRIBUTING, and the tutorial's install lines.

The tests marked ``wheel`` build from this checkout as a user would (``pip wheel
--no-deps``, ``python -m build --sdist``, ``pip install .``) and install the wheel in a
fresh virtual environment, then run ``agentrio demo`` from it (about a minute; in the
default run and CI). Build isolation takes hatchling, and the fresh venv takes the
dependencies, from the package index pip is configured with; nothing else leaves the
machine (the demo's server is on 127.0.0.1).
"""

from __future__ import annotations

import email.message
import email.parser
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

import agentrio

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PIP_TIMEOUT = 900  # seconds: a build or an install from the index, on a loaded machine
HOME = "https://github.com/agentrio/agentrio"

# What a user reads on the package's page (PyPI shows these beside the description).
URL_NAMES = {"Homepage", "Documentation", "Changelog", "Source", "Issues"}
CLASSIFIERS = {
    "Development Status :: 3 - Alpha",
    "Framework :: Trio",
    "Intended Audience :: Developers",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13",
    "Typing :: Typed",
}


def run(*command: str | Path, cwd: Path) -> str:
    """Run *command*, outside any virtual environment of ours; its stdout, or fail with
    its output shown."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} exited {done.returncode}\n"
        f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    )
    return done.stdout


def fresh_venv(where: Path) -> Path:
    """A new virtual environment with pip and nothing else; its bin folder."""
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / "bin"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built by the tutorial's ``pip wheel --no-deps``."""
    out = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, ".", cwd=ROOT)
    (built,) = out.glob("agentrio-*.whl")
    return built


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist of this checkout, built by ``python -m build --sdist`` (in a venv of its
    own: ``build`` is no dependency of ours)."""
    tools = fresh_venv(tmp_path_factory.mktemp("build-venv"))
    run(tools / "pip", "install", "-q", "build", cwd=ROOT)
    out = tmp_path_factory.mktemp("sdist")
    run(tools / "python", "-m", "build", "--sdist", "--outdir", out, ".", cwd=ROOT)
    (built,) = out.glob("agentrio-*.tar.gz")
    return built


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.BytesParser().parsebytes(archive.read(name))


# -- The repository ------------------------------------------------------------------------


def test_the_license_is_mit_for_the_agentrio_authors() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the agentrio authors\n" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]


def test_the_version_has_one_place() -> None:
    """pyproject.toml reads the version from src/agentrio/_version.py (hatchling's
    version source); it writes none of its own."""
    project = PYPROJECT["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    assert PYPROJECT["tool"]["hatch"]["version"] == {"path": "src/agentrio/_version.py"}
    source = (ROOT / "src/agentrio/_version.py").read_text(encoding="utf-8")
    assert re.findall(r'^__version__ = "(.+)"$', source, re.MULTILINE) == [agentrio.__version__]


def test_the_installed_version_is_agentrio_version() -> None:
    assert agentrio.__version__ == importlib.metadata.version("agentrio")


def test_the_changelog_opens_with_this_version() -> None:
    """The first release entry: the newest heading names the version being made."""
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    first = next(line for line in changelog.splitlines() if line.startswith("## "))
    assert re.match(rf"## {re.escape(agentrio.__version__)}\b", first), first


def test_the_project_urls_share_one_home() -> None:
    urls = PYPROJECT["project"]["urls"]
    assert set(urls) == URL_NAMES
    for name, url in urls.items():
        assert url.startswith(("https://agentrio.github.io/agentrio/", HOME)), (name, url)
    assert urls["Changelog"].endswith("/CHANGELOG.md")


def test_the_package_ships_its_typing_marker() -> None:
    assert (ROOT / "src/agentrio/py.typed").is_file()
    assert "Typing :: Typed" in PYPROJECT["project"]["classifiers"]


def test_contributing_shows_each_step_ci_runs() -> None:
    """Every command .ci/run runs in the checkout's .venv (set-up, ruff, mypy, the docs'
    build, pytest) is in CONTRIBUTING.md as written there, and so is the floors step."""
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    # (At a line's start, after an environment variable, or after '&&'.)
    commands = re.findall(r"(?:^(?:\w+=\S+ )?|&& )(\.venv/bin/[^&\n]+)", ci, re.MULTILINE)
    assert len(commands) >= 6, commands
    for command in commands:
        command = re.sub(r"\s+-q\b", "", command).strip()
        assert command in contributing, command
    assert "python3 .ci/floors.py" in contributing
    assert "bench/agents.py" in contributing


def tutorial_install_commands() -> list[str]:
    tutorial = (ROOT / "docs/tutorial.md").read_text(encoding="utf-8")
    section = tutorial.split("## 1. Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```console\n(.*?)```", section, re.DOTALL)
    return [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def test_the_tutorial_installs_from_a_release_a_checkout_and_a_wheel() -> None:
    """The commands test_the_wheel_and_the_checkout_install_and_run_the_demo runs."""
    assert tutorial_install_commands() == [
        "pip install agentrio",
        "pip install .",
        "pip wheel --no-deps -w dist .",
        "pip install dist/agentrio-*.whl",
        "agentrio demo --agents 10",
    ]


# -- What is built -------------------------------------------------------------------------


@pytest.mark.wheel
def test_the_wheel_carries_the_license_and_the_metadata(wheel: Path) -> None:
    metadata = wheel_metadata(wheel)
    assert metadata["Name"] == "agentrio"
    assert metadata["Version"] == agentrio.__version__
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Author"] == "the agentrio authors"
    assert metadata["Requires-Python"] == ">=3.11"
    assert "trio" in metadata["Keywords"].split(",")
    assert set(metadata.get_all("Classifier") or []) >= CLASSIFIERS
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL") or [])
    assert urls == PYPROJECT["project"]["urls"]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = f"agentrio-{agentrio.__version__}.dist-info"
        license_text = archive.read(f"{dist_info}/licenses/LICENSE")
    assert license_text == (ROOT / "LICENSE").read_bytes()
    assert "agentrio/py.typed" in names
    # The package and its metadata, nothing else (no tests, no docs).
    assert {name.split("/")[0] for name in names} == {"agentrio", dist_info}


@pytest.mark.wheel
def test_the_sdist_carries_the_license_and_what_a_build_needs(sdist: Path) -> None:
    top = f"agentrio-{agentrio.__version__}"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
        license_file = archive.extractfile(f"{top}/LICENSE")
        assert license_file is not None
        assert license_file.read() == (ROOT / "LICENSE").read_bytes()
    for needed in (
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "PKG-INFO",
        "src/agentrio/_version.py",
        "src/agentrio/py.typed",
    ):
        assert f"{top}/{needed}" in names
    assert not any("/.venv/" in name for name in names)


@pytest.mark.wheel
def test_the_wheel_and_the_checkout_install_and_run_the_demo(wheel: Path, tmp_path: Path) -> None:
    """The tutorial's lines: the wheel in a fresh venv (its dependencies from the index),
    then ``pip install .`` from the checkout in its place; each runs the demo."""
    bin_ = fresh_venv(tmp_path / "venv")
    elsewhere = tmp_path / "elsewhere"  # not the checkout: `import agentrio` is the venv's
    elsewhere.mkdir()
    run(bin_ / "pip", "install", wheel, cwd=elsewhere)
    installed = check_installed(bin_, elsewhere)
    assert str(installed["file"]).startswith(str(tmp_path / "venv"))
    assert installed["license_files"] == ["LICENSE"]
    check_demo(bin_, elsewhere)

    run(bin_ / "pip", "uninstall", "-y", "agentrio", cwd=elsewhere)
    run(bin_ / "pip", "install", ".", cwd=ROOT)
    check_installed(bin_, elsewhere)
    check_demo(bin_, elsewhere)


def check_installed(bin_: Path, cwd: Path) -> dict[str, object]:
    """What the venv's agentrio says of itself: the same version everywhere, py.typed."""
    assert run(bin_ / "agentrio", "--version", cwd=cwd).strip() == (
        f"agentrio {agentrio.__version__}"
    )
    probe = (
        "import importlib.metadata as m, importlib.resources as r, json, agentrio\n"
        "files = m.distribution('agentrio').files or []\n"
        "print(json.dumps({'version': agentrio.__version__, 'metadata': m.version('agentrio'),"
        " 'file': agentrio.__file__, 'typed': r.files('agentrio').joinpath('py.typed').is_file(),"
        " 'license_files': [f.name for f in files if 'licenses' in f.parts]}))"
    )
    found: dict[str, object] = json.loads(run(bin_ / "python", "-c", probe, cwd=cwd))
    assert found["version"] == found["metadata"] == agentrio.__version__
    assert found["typed"] is True
    return found


def check_demo(bin_: Path, cwd: Path) -> None:
    report = run(bin_ / "agentrio", "demo", "--agents", "10", cwd=cwd)
    assert re.search(r"^\s*runs\s+10$", report, re.MULTILINE), report
    assert re.search(r"^\s*stop reasons\s+done=10$", report, re.MULTILINE), report
