"""Planning and goals: a typed plan of tasks run as steps, revised when one fails."""
