"""Tools: @tool, schemas from signatures."""
