"""agentrio._handles: the handles no user constructs, made by every layer the same way."""

from __future__ import annotations

import pytest

import agentrio
from agentrio._handles import NoPublicConstructor, create


class Handle(metaclass=NoPublicConstructor):
    __slots__ = ("args", "kwargs")

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args = args
        self.kwargs = kwargs


def test_a_handle_is_made_by_create_only() -> None:
    with pytest.raises(TypeError, match=r"agentrio\.Handle has no public constructor"):
        Handle(1)
    made = create(Handle, 1, 2, key="value")
    assert type(made) is Handle
    assert (made.args, made.kwargs) == ((1, 2), {"key": "value"})


@pytest.mark.parametrize(
    "cls",
    [
        agentrio.ActorRef,
        agentrio.SupervisorRef,
        agentrio.Runtime,
        agentrio.AgentRef,
        agentrio.Helper,
        agentrio.events.EventStream,
        agentrio.actors.Alarm,
        agentrio.actors.PendingAsk,
        agentrio.types.BackgroundRun,
        agentrio.types.BlockingRuntime,
        agentrio.memory.MemoryHandle,
    ],
)
def test_every_layers_handles_share_the_one_metaclass(cls: type) -> None:
    # (The kernel's, the agent layer's, the runtime's and the host's.)
    assert type(cls) is NoPublicConstructor
    assert not hasattr(cls, "_create")  # the one way to make one is create()
