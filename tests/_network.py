"""NetworkBlocked, in a module of its own: test files import it by this name, as
``conftest`` may name another directory's conftest (tests/ray's, say) by the time
they are collected."""

from __future__ import annotations


class NetworkBlocked(RuntimeError):
    """A test tried to reach the network beyond loopback (STYLE.md, rule 12).

    Not an ``OSError``, so that no connection-failure handling (retries, "provider
    unavailable") hides it: the test fails with this message.
    """
