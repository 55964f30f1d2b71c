"""Memory and context providers: what is added to a model call before it is made."""
