"""Test doubles for models: scripted replies, a function of the conversation, and a
fake LLM server speaking the OpenAI, Anthropic and Ollama wire formats."""

import inspect as _inspect
import typing as _typing

from .. import _lazy
from .models import FunctionModel as FunctionModel
from .models import Reply as Reply
from .models import ScriptedModel as ScriptedModel
from .models import ScriptExhausted as ScriptExhausted

__all__ = [
    "FakeLLMServer",
    "FakeRequest",
    "FakeServerStatistics",
    "Faults",
    "FunctionModel",
    "Reply",
    "ReplyHandler",
    "ScriptExhausted",
    "ScriptedModel",
    "open_fake_llm",
    "serve_fake_llm",
]

# The fake LLM server (an HTTP server of three wire formats, about 0.7 MB of
# code), loaded on first use (agentrio/_lazy.py): a test of scripted models
# alone does not load it.
_LAZY = dict.fromkeys(
    (
        "FakeLLMServer",
        "FakeRequest",
        "FakeServerStatistics",
        "Faults",
        "ReplyHandler",
        "open_fake_llm",
        "serve_fake_llm",
    ),
    "agentrio.testing.fake_server",
)
if _typing.TYPE_CHECKING:  # (what type checkers and the reference's generator read)
    from .fake_server import FakeLLMServer as FakeLLMServer
    from .fake_server import FakeRequest as FakeRequest
    from .fake_server import FakeServerStatistics as FakeServerStatistics
    from .fake_server import Faults as Faults
    from .fake_server import ReplyHandler as ReplyHandler
    from .fake_server import open_fake_llm as open_fake_llm
    from .fake_server import serve_fake_llm as serve_fake_llm
else:
    __getattr__, __dir__ = _lazy.lazy_names(__name__, _LAZY)


def _set_public_home() -> None:
    """Reprs, tracebacks, pickles and the reference name these classes and functions
    here, their public home, as agentrio's other public names.

    Their string annotations are resolved first, in the module that defined them
    (``typing.get_type_hints`` and msgspec read them in the one ``__module__`` names).
    """
    for name in __all__:
        if name in _LAZY:
            continue  # (given theirs when they load)
        value = globals()[name]
        if not (_inspect.isclass(value) or _inspect.isfunction(value)):
            continue  # (ReplyHandler: a typing alias)
        if not value.__module__.startswith(__name__ + "."):
            continue  # (Reply: its home is agentrio)
        if _inspect.isclass(value):
            own = _inspect.get_annotations(value)
            if any(isinstance(hint, str) for hint in own.values()):
                hints = _typing.get_type_hints(value, include_extras=True)
                value.__annotations__ = {key: hints[key] for key in own}
        value.__module__ = __name__


_set_public_home()
