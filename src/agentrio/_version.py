"""agentrio's version: one string, at the bottom of the layers, so any module may name it."""

__version__ = "0.1.0"
