"""The actor kinds: the core (actors, refs, mailboxes) and, built on it, agents."""
