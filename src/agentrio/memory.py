"""Memory and context providers: what a model call is given before it is made (#26).

An agent remembers with ``AgentSpec(memory=agentrio.memory.Memory(...))`` and
is given context by ``AgentSpec(context_providers=[...])``:

    import agentrio
    from agentrio.memory import FileRetrieval, Memory

    spec = agentrio.AgentSpec(
        name="helper",
        model="fast",
        memory=Memory(max_items=500),
        context_providers=[FileRetrieval("docs/")],
    )

This module is their one public home. See the how-tos [Memory][agent-memory]
and [Context providers][context-providers].
"""

from .agents.loop.recall import MemoryHandle
from .agents.memory.memory import Memory, keep_ok_results
from .agents.memory.providers import (
    ContextProvider,
    ContextProviders,
    ContextQuery,
    FileRetrieval,
)
from .agents.memory.scoring import BM25, Embeddings, MemoryItem, Scorer

__all__ = [
    # memory
    "Memory",
    "MemoryItem",
    "MemoryHandle",
    "keep_ok_results",
    # scorers
    "Scorer",
    "BM25",
    "Embeddings",
    # context providers
    "ContextProvider",
    "ContextProviders",
    "ContextQuery",
    "FileRetrieval",
]
