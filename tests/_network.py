"""The error the tests' network guard raises (tests/conftest.py), in a module of its own.

A test imports it from here, not from ``conftest``: under pytest's default import
mode every conftest.py of a folder that is no package is the module ``conftest``
in turn (tests/ray's, for one), so ``from conftest import ...`` may find another.
"""

from __future__ import annotations


class NetworkBlocked(RuntimeError):
    """A test tried to reach the network beyond loopback (STYLE.md, rule 12).

    Not an ``OSError``, so that no connection-failure handling (retries, "provider
    unavailable") hides it: the test fails with this message.
    """
