"""Prompt slots: the parts of an agent's system prompt its user writes, and the order
they are put in, with agentrio's own parts after them.

The system prompt is built once per spec (``_SpecInfo``), from, in order: the
slots' ``role``, the spec's ``instructions``, the slots' ``guidelines``,
``style`` and ``extra``, and then what agentrio adds to it (today: the
catalogue of the agent's skills, when it has some). Empty parts are left
out; the parts are separated by a blank line. A user's slot never replaces
agentrio's parts, and agentrio's other instructions do not live in the
system prompt at all: the continuation and final-answer prompts and a
refused answer's reason are user turns of the phase, a typed answer's
schema and the tools are sent beside the messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ...errors import InvalidArgument

__all__ = ["PromptSlots", "system_prompt"]


@attrs.frozen
class PromptSlots:
    """The parts of an agent's system prompt that its user sets, each optional.

    Set as ``AgentSpec(prompt=PromptSlots(...))``. The system prompt is, in
    this order, each part that is not empty, separated by a blank line:
    ``role``, the spec's ``instructions``, ``guidelines``, ``style``,
    ``extra``, then agentrio's own parts (the catalogue of the agent's
    skills). agentrio adds no headings: each slot is put in as written, so
    it can be in the user's language. Two specs that share a role but not
    their guidelines share one ``PromptSlots`` laid over with
    ``attrs.evolve(slots, guidelines=...)``. See [Prompt
    slots][prompt-slots].

    Attributes:
        role: who the agent is (``"You are the support agent of a bike shop."``).
        guidelines: rules it follows (``"Never promise a delivery date."``).
        style: how it answers (``"Two sentences at most, no lists."``).
        extra: anything else, put last of the user's parts.

    Raises:
        InvalidArgument: a slot that is not a str.
    """

    role: str = ""
    guidelines: str = ""
    style: str = ""
    extra: str = ""

    def __attrs_post_init__(self) -> None:
        for name in ("role", "guidelines", "style", "extra"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidArgument(f"PromptSlots.{name} must be a str, got {value!r}")


def system_prompt(instructions: str, slots: PromptSlots | None, own: Sequence[str] = ()) -> str:
    """The system prompt of *instructions* and *slots*, with agentrio's *own* parts last."""
    if slots is None and not own:
        return instructions  # (as written: the common case)
    if slots is None:
        parts: list[str] = [instructions]
    else:
        parts = [slots.role, instructions, slots.guidelines, slots.style, slots.extra]
    parts.extend(own)
    return "\n\n".join(p.strip("\n") for p in parts if p.strip())
