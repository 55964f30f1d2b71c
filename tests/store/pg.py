"""A real PostgreSQL server for the tests of PostgresStore, started by the tests.

``initdb`` into a temporary directory and ``pg_ctl start`` on a free port of
127.0.0.1 (its unix socket in that directory too), as an unprivileged user when
the tests run as root (PostgreSQL refuses to run as root: ``runuser -u nobody``);
stopped at the end of the session. The server's binaries are Debian's
(``/usr/lib/postgresql/*/bin``, installed by ``.ci/run``) or on the PATH.

Without them the tests are skipped, unless CI could have installed them: under
``CI=true`` on a machine with apt-get they fail, so they never go silently unrun.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

USER = "agentrio"
PASSWORD = "pg-secret-7f3a"  # (the tests check it is in no message)
DSN: str | None = None  # set by the session's server (see postgres_dsn)


def server_binaries() -> Path | None:
    """The directory of ``initdb``, ``pg_ctl`` and ``postgres``, if there is one."""
    for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(directory, "initdb"), os.X_OK):
            return Path(directory)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb is not None else None


def require_server() -> Path:
    """The server's binaries; skip the calling test without them, unless CI could
    have installed them: then fail."""
    found = server_binaries()
    if found is not None:
        return found
    _missing("no PostgreSQL server binaries")


def require_psycopg() -> ModuleType:
    """psycopg, imported (it needs the system's libpq, which the server's packages
    bring); without it, skip the calling module as ``require_server`` does."""
    try:
        import psycopg
    except ImportError as exc:
        _missing(f"psycopg cannot be imported ({exc})")
    return psycopg


def _missing(what: str) -> NoReturn:
    if os.environ.get("CI") == "true" and shutil.which("apt-get") is not None:
        pytest.fail(
            f"{what} under CI=true on a machine with apt-get: .ci/run installs the "
            "server (apt-get install postgresql)"
        )
    pytest.skip(f"{what} (and no apt-get to install them under CI)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A DSN (with its password) of a fresh server on 127.0.0.1, for the session."""
    global DSN
    binaries = require_server()
    root = Path(tempfile.mkdtemp(prefix="agentrio-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "nobody", "--"]
        os.chown(root, pwd.getpwnam("nobody").pw_uid, -1)  # (the server writes there)
    (root / "pw").write_text(PASSWORD)
    os.chmod(root / "pw", 0o644)
    data = root / "data"
    port = _free_port()

    def run(*args: str) -> None:
        done = subprocess.run(
            [*as_user, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            log = root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            pytest.fail(f"{args[0]} failed: {done.stdout}{done.stderr}{tail}")

    try:
        run(
            str(binaries / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={root / 'pw'}",
            "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-o", options,
            "-w", "-t", "60", "start")  # fmt: skip
        DSN = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"
        yield DSN
    finally:
        DSN = None
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                 "stop"], capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
