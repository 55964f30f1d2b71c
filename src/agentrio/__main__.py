"""``python -m agentrio``: the ``agentrio`` command."""

from .cli import main

if __name__ == "__main__":  # (tests import every module: importing must not run it)
    raise SystemExit(main())
