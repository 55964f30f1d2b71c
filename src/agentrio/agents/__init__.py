"""The agent layer, in rooms (loop, budgets, tools, routing, composition...)."""
