"""``python -m agentrio``: the ``agentrio`` command."""

from .cli import main

raise SystemExit(main())
