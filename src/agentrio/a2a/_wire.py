"""A2A 1.0's JSON-RPC messages, as the client reads them: msgspec Structs, lenient.

Only the fields agentrio reads are declared; the rest of what a peer sends is
skipped unread. Every field has a default, so a peer that leaves one out is
read as the protocol's JSON mapping of protobuf does (an absent field is its
zero value). A value of the wrong type is refused (``msgspec.ValidationError``),
which the client turns into an `A2AToolError`.

The names are protobuf's JSON names (``contextId``, ``artifactUpdate``), from
the snake_case fields by ``rename="camel"``.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

__all__ = [
    "TERMINAL",
    "Artifact",
    "ArtifactUpdate",
    "Card",
    "Envelope",
    "Event",
    "Message",
    "Part",
    "RpcError",
    "Status",
    "StatusUpdate",
    "Task",
]

T = TypeVar("T")

# A task in one of these states has ended (or waits for its user, which agentrio
# does not answer: it ends the call too).
TERMINAL = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)


class Interface(msgspec.Struct, rename="camel", frozen=True):
    url: str = ""
    protocol_binding: str = ""
    protocol_version: str = ""


class Capabilities(msgspec.Struct, rename="camel", frozen=True):
    streaming: bool = False


class Skill(msgspec.Struct, rename="camel", frozen=True):
    id: str = ""
    name: str = ""
    description: str = ""


class Card(msgspec.Struct, rename="camel", frozen=True):
    name: str = ""
    description: str = ""
    version: str = ""
    supported_interfaces: tuple[Interface, ...] = ()
    capabilities: Capabilities = Capabilities()
    skills: tuple[Skill, ...] = ()


class Part(msgspec.Struct, rename="camel", frozen=True):
    text: str | None = None
    data: object = None
    raw: str | None = None
    url: str | None = None
    filename: str = ""
    media_type: str = ""


class Message(msgspec.Struct, rename="camel", frozen=True):
    role: str = ""
    parts: tuple[Part, ...] = ()
    task_id: str = ""
    context_id: str = ""


class Status(msgspec.Struct, rename="camel", frozen=True):
    state: str = ""
    message: Message | None = None


class Artifact(msgspec.Struct, rename="camel", frozen=True):
    artifact_id: str = ""
    name: str = ""
    parts: tuple[Part, ...] = ()


class Task(msgspec.Struct, rename="camel", frozen=True):
    id: str = ""
    context_id: str = ""
    status: Status = Status()
    artifacts: tuple[Artifact, ...] = ()


class StatusUpdate(msgspec.Struct, rename="camel", frozen=True):
    task_id: str = ""
    status: Status = Status()


class ArtifactUpdate(msgspec.Struct, rename="camel", frozen=True):
    task_id: str = ""
    artifact: Artifact = Artifact()
    append: bool = False
    last_chunk: bool = False


class Event(msgspec.Struct, rename="camel", frozen=True):
    """A ``SendMessageResponse`` (a task or a message) or a ``StreamResponse`` (either,
    or an update): one field of four is set."""

    task: Task | None = None
    message: Message | None = None
    status_update: StatusUpdate | None = None
    artifact_update: ArtifactUpdate | None = None


class RpcError(msgspec.Struct, rename="camel", frozen=True):
    code: int = 0
    message: str = ""


class Envelope(msgspec.Struct, Generic[T], frozen=True):
    """A JSON-RPC 2.0 response: a result, or an error."""

    jsonrpc: str = ""
    result: T | None = None
    error: RpcError | None = None
