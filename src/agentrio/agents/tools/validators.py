"""Output validators: functions of a spec that may refuse a parsed answer, and why.

A validator is ``fn(value)``, plain or async, given the phase's answer as
parsed (a typed spec's value, else its text). It accepts the answer by
returning (what it returns is not used), and refuses it by raising
`ModelRetry` with a reason the model is told; the model answers again,
within the spec's ``output_retries`` (the same count as answers that did not
parse). Anything else it raises ends the phase with ``"error"``, as a
raising ``on_step`` hook does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from ..._text import scrub
from ...errors import InvalidArgument, ModelRetry

__all__ = ["OutputValidator", "refusal", "to_validators"]

OutputValidator: TypeAlias = Callable[[Any], object]
"""``fn(value) -> object`` (or async): raises ``ModelRetry`` to refuse *value*."""


def to_validators(value: object) -> tuple[OutputValidator, ...]:
    """``AgentSpec.output_validators`` as a tuple of callables (InvalidArgument if not)."""
    if callable(value):
        value = (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgument(
            f"AgentSpec.output_validators must be a list of functions, got {value!r}"
        )
    for fn in value:
        if not callable(fn):
            raise InvalidArgument(
                f"AgentSpec.output_validators must be a list of functions, got {fn!r} in it"
            )
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # (a builtin without one: called as it is)
            continue
        try:
            signature.bind(None)
        except TypeError:
            # pydantic-ai's fn(ctx, value) would fail at every answer, ending the
            # phase with a TypeError: said here, when the spec is made.
            raise InvalidArgument(
                f"AgentSpec.output_validators: {fn!r} cannot be called with one "
                f"argument, the answer (its parameters: {signature})"
            ) from None
    return tuple(value)


async def refusal(validators: tuple[OutputValidator, ...], value: object) -> str | None:
    """Run *validators* on *value*, in order: None if all accept it, else the first
    refusal's reason (scrubbed; may be ``""``). What else they raise goes on up."""
    for fn in validators:
        try:
            outcome = fn(value)
            if inspect.isawaitable(outcome):
                await outcome
        except ModelRetry as exc:
            return scrub(str(exc))
    return None
