"""Compaction's settings: `Compaction` (``AgentSpec.compaction``: when an agent's older
turns are replaced by a summary, and by which model) and `Summariser` (those settings
with the summary model resolved for one agent, at spawn). The compaction itself is
compaction.py's."""

from __future__ import annotations

import math

import attrs

from ..._checks import check_int
from ...errors import InvalidArgument
from ...providers.base import Model, Prices, check_model, split_model

__all__ = ["COMPACTION_PROMPT", "SUMMARY_PREFIX", "Compaction", "Summariser"]

COMPACTION_PROMPT = (
    "The conversation below has grown too long for the assistant's context window. "
    "Write a summary of it that lets the assistant carry on from the summary alone. "
    "Keep the user's goals and constraints, the decisions taken and why, the facts "
    "found (names, numbers, file paths, identifiers, what each tool call returned that "
    "still matters), the errors met and how they were handled, and what is left to do. "
    "Leave out greetings, repetition and anything that no longer matters. Write in "
    "plain prose or short lists, and answer with the summary only."
)
"""The default ``Compaction.prompt``: the summary model's system prompt."""

SUMMARY_PREFIX = "Summary of the earlier conversation (compacted to fit the context window):\n\n"
"""What the summary message (a user message) starts with, before the summary itself."""


def _check_threshold(value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or math.isnan(value)
        or not 0 < value <= 1
    ):
        raise InvalidArgument(f"Compaction.threshold must be in (0, 1], got {value!r}")


@attrs.frozen
class Compaction:
    """When and how an agent's contexts are compacted (``AgentSpec.compaction``).

    Before each model call of a phase, if the history's estimate is over
    ``int(model.context_window * threshold)``, the turns between the first
    user message and the newest ones are sent to the summary model and
    replaced by one user message: ``"Summary of the earlier conversation
    (compacted to fit the context window):\\n\\n"`` and its answer. The rules,
    with an example: [Compaction][compaction-summaries-of-older-turns].

    The summary call asks for at most ``Limits.max_output_tokens``, offers no
    tools, and is reserved, charged and counted like a model call of the
    phase (not as an iteration). A ``ContextCompacted`` event reports each
    compaction; a failed one (the call raised or gave no text, no room in
    the budget, the context changed meanwhile) publishes
    ``CompactionFailed``, replaces nothing, and the phase goes on with the
    view truncated; it does not try again in that phase, nor after a
    compaction that left the history still over the threshold.

    Example:

        spec = agentrio.AgentSpec(
            name="reader",
            model="smart",
            compaction=agentrio.Compaction(threshold=0.8, keep_recent=4),
        )

    Attributes:
        threshold: the share of the model's context window (0 to 1, 1
            included) the history's estimate may reach; past it, the next
            model call is preceded by a compaction. Truncation of each
            call's view starts past ``Limits.context_fill`` (default 0.75),
            so set ``context_fill`` above the threshold to compact before
            truncating.
        model: the model that writes the summary: a model object, a tier name
            or an ``"instance:model"`` string (resolved when the agent is
            spawned); ``None``, the ``fast`` tier of the runtime's
            configuration if it has one, else the agent's own model.
        keep_recent: the newest turns kept as they are (>= 1: at most this
            many, no more than fit in half the threshold's tokens, and always
            the newest one). A turn is a user message, an assistant message
            without tool calls, or one with tool calls together with their
            results (never split). The system prompt, the first user message
            and the current phase's own are always kept (when the last lies
            among the older turns, the part before it or the part after it
            is summarised, whichever holds more tokens).
        prompt: the summary model's system prompt (a non-empty str); the
            replaced turns follow it as one user message, a transcript.

    Raises:
        InvalidArgument: a field out of range or of the wrong type, named in
            the message.
        ConfigError: *model* is a string with a colon that is not a valid
            ``"instance:model"``.
    """

    threshold: float = 0.8
    model: Model | str | None = None
    keep_recent: int = 4
    prompt: str = COMPACTION_PROMPT

    def __attrs_post_init__(self) -> None:
        _check_threshold(self.threshold)
        model = self.model
        if isinstance(model, str):
            if not model:
                raise InvalidArgument("Compaction.model must not be empty")
            if ":" in model:
                split_model(model)
        elif model is not None:
            check_model(model, "Compaction.model")
        check_int("Compaction.keep_recent", self.keep_recent, 1)
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise InvalidArgument(f"Compaction.prompt must be a non-empty str, got {self.prompt!r}")


class Summariser:
    """An agent's compaction settings with its summary model resolved (at spawn).

    Attributes:
        settings: the spec's [`Compaction`][agentrio.Compaction].
        model: the summary model, or None for the agent's own (current) model.
        metered: whether ``model.complete`` takes ``meter``.
        pricing: ``model``'s pricing, or None.
        laned: whether ``model.complete`` takes ``lane`` (the summary call is
            then made in the phase's lane, like the agent's own calls).
    """

    __slots__ = ("laned", "metered", "model", "pricing", "settings")

    def __init__(
        self,
        settings: Compaction,
        model: Model | None,
        metered: bool,
        pricing: Prices | None,
        laned: bool = False,
    ) -> None:
        self.settings = settings
        self.model = model
        self.metered = metered
        self.pricing = pricing
        self.laned = laned
