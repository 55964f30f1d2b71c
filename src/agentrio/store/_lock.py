"""StoreLock: a store has one owner at a time (``fcntl.flock`` on a lock file).

Two runtimes that both resumed one store would both run its unfinished
phases, and a tool not declared idempotent twice: at most once holds only if
one runtime owns the store. The owner holds an exclusive ``flock`` on the
store's lock file from its first ``load`` or ``append`` until ``aclose``; the
kernel releases it when the process dies, even by SIGKILL, so a crash never
leaves a store locked. Within one process a table of the lock files held
(by device and inode) excludes too, whatever the file system does with
``flock`` (NFS emulates it with POSIX locks, which are the process's).

A store in a directory of its own (a ``DirectoryStore``) also holds an exclusive
``flock`` on that directory: a lock file removed while it is held (by a
clean-up script, by hand) would let a second opener make a new one and lock
it, but the directory is still locked. (Where a file system has no
``flock`` on directories, the lock file's alone holds.)

The holder writes ``pid=<pid> host=<host>`` in the lock file; another opener
reads it back to name the holder in its `StoreLocked`. That text comes from
the disk: read bounded, and only digits and the characters of a host name
are kept of it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import stat
import threading
from types import ModuleType

import trio

from .._checks import check_seconds
from ..errors import InvalidArgument, StoreError, StoreLocked

__all__ = ["StoreLock", "check_lock_timeout", "check_store_path", "describe_holder"]

_HOLDER_BYTES = 256  # the most of a lock file read back
_PID = re.compile(rb"pid=(\d{1,10})\b")
_HOST = re.compile(rb"host=([A-Za-z0-9._:-]{1,64})")
_FIRST_WAIT = 0.01  # seconds between attempts, doubled up to _LONGEST_WAIT
_LONGEST_WAIT = 0.5

# The lock files this process holds, by (device, inode), under _HELD_LOCK.
_HELD: set[tuple[int, int]] = set()
_HELD_LOCK = threading.Lock()


def check_store_path(path: str | os.PathLike[str]) -> str:
    """*path* as a str, if a file can have it (no NUL character: the system calls
    would refuse it with an untyped ``ValueError``).

    Raises:
        InvalidArgument: it holds a NUL.
    """
    text = os.fspath(path)
    if "\0" in text:
        raise InvalidArgument(f"a checkpoint store's path holds a NUL character: {text!r}")
    return text


def check_lock_timeout(lock_timeout: object) -> float:
    """*lock_timeout* if it is a number of seconds >= 0 (``math.inf``: wait for ever).

    Raises:
        InvalidArgument: it is not.
    """
    check_seconds("lock_timeout", lock_timeout)
    assert isinstance(lock_timeout, (int, float))
    return float(lock_timeout)


class StoreLock:
    """The exclusive lock of one store, at *path* (its lock file), for *store*
    (the store's path, as errors name it)."""

    __slots__ = ("_dir_fd", "_fd", "_key", "_taking", "directory", "path", "store")

    def __init__(self, path: str, store: str, *, directory: str | None = None) -> None:
        self.path = path
        self.store = store
        self.directory = directory  # locked too, if given (see the module)
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._key: tuple[int, int] | None = None
        self._taking = trio.Lock()  # (the store's tasks that ask at once: one takes it)

    @property
    def held(self) -> bool:
        return self._fd is not None

    async def acquire(self, timeout: float) -> None:
        """Take the lock, waiting up to *timeout* seconds for its holder to let it go
        (each attempt in a worker thread; the wait between them is cancellable).

        Raises:
            StoreLocked: it is still held after *timeout* seconds.
            StoreError: the lock file cannot be opened or locked.
        """
        async with self._taking:
            if self._fd is None:
                await self._take(timeout)

    async def _take(self, timeout: float) -> None:
        fd, key = await trio.to_thread.run_sync(self._open)
        dir_fd: int | None = None
        try:
            if self.directory is not None:
                dir_fd = await trio.to_thread.run_sync(_open_directory, self.directory)
            deadline = trio.current_time() + timeout
            wait = _FIRST_WAIT
            while True:
                holder = await trio.to_thread.run_sync(self._attempt, fd, key, dir_fd)
                if holder is None:
                    break
                left = deadline - trio.current_time()
                if left <= 0:
                    raise self._locked(holder)
                await trio.sleep(min(wait, left))
                wait = min(wait * 2, _LONGEST_WAIT)
        except BaseException:
            os.close(fd)
            if dir_fd is not None:
                os.close(dir_fd)
            raise
        self._fd, self._key, self._dir_fd = fd, key, dir_fd

    def release(self) -> None:
        """Let the lock go (idempotent; never raises)."""
        fd, key, dir_fd = self._fd, self._key, self._dir_fd
        self._fd = self._key = self._dir_fd = None
        if dir_fd is not None:
            with contextlib.suppress(OSError):
                os.close(dir_fd)
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # (still held: nobody reads a half-cleared file)
        if key is not None:
            with _HELD_LOCK:
                _HELD.discard(key)
        with contextlib.suppress(OSError):
            os.close(fd)  # (releases the flock)

    def _open(self) -> tuple[int, tuple[int, int]]:
        """The lock file, opened (made if missing): a regular file, never through a
        symbolic link (its holder's line is written into it)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise StoreError(
                f"cannot lock checkpoint store {self.store!r}: its lock file {self.path!r}: {why}"
            ) from None
        try:
            info = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise StoreError(
                f"cannot lock checkpoint store {self.store!r}: its lock file {self.path!r} "
                "is not a regular file"
            )
        return fd, (info.st_dev, info.st_ino)

    def _attempt(self, fd: int, key: tuple[int, int], dir_fd: int | None) -> str | None:
        """Try once: None if the lock is now held (and the holder's line written),
        else who holds it."""
        try:
            import fcntl  # (here: importing agentrio needs no POSIX system)
        except ImportError:  # pragma: no cover - not a POSIX system
            raise StoreError(
                f"cannot lock checkpoint store {self.store!r}: this system has no flock"
            ) from None
        with _HELD_LOCK:
            if key in _HELD:
                return "this process (another store object on it is open)"
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return _holder(fd)
            except OSError as exc:
                raise StoreError(
                    f"cannot lock checkpoint store {self.store!r}: {exc.strerror}"
                ) from None
            if dir_fd is not None and not _lock_directory(fcntl, dir_fd):
                fcntl.flock(fd, fcntl.LOCK_UN)
                return "an unknown process (the store's lock file was removed while it held it)"
            _HELD.add(key)
        line = f"pid={os.getpid()} host={socket.gethostname()}\n".encode(errors="replace")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)
        except OSError:
            pass  # (the lock is held all the same; another opener names no holder)
        return None

    def _locked(self, holder: str) -> StoreLocked:
        return StoreLocked(
            f"checkpoint store {self.store!r} is in use by another runtime, held by "
            f"{holder} (a store has one owner at a time: wait for it to close, or pass "
            "lock_timeout= to wait)",
            path=self.store,
            holder=holder,
        )


def _open_directory(path: str) -> int | None:
    """*path*, a directory, opened to be locked (None if it cannot be: the lock file's
    lock then holds alone)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def _lock_directory(fcntl: ModuleType, dir_fd: int) -> bool:
    """Lock the directory *dir_fd*; False if another holds it. A file system with
    no ``flock`` on a directory (NFS: it emulates ``flock`` with POSIX locks, which
    need a file open for writing) counts as locked: the lock file's lock holds."""
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says (hostile text: bounded, reduced)."""
    try:
        text = os.pread(fd, _HOLDER_BYTES, 0)
    except OSError:
        text = b""
    return describe_holder(text)


def describe_holder(text: bytes) -> str:
    """Who holds a lock, from its holder's line ``pid=<pid> host=<host>`` (hostile
    text: the first 256 bytes read, only digits and a host name's characters kept)."""
    text = text[:_HOLDER_BYTES]
    pid, host = _PID.search(text), _HOST.search(text)
    if pid is None:
        return "an unknown process"
    who = f"pid {int(pid.group(1))}"
    if host is not None:
        who += f" on host {host.group(1).decode('ascii')!r}"
    return who
