"""Test doubles for models: scripted replies, a function of the conversation, and a
fake LLM server speaking the OpenAI, Anthropic and Ollama wire formats."""

from .fake_server import FakeLLMServer as FakeLLMServer
from .fake_server import FakeRequest as FakeRequest
from .fake_server import FakeServerStatistics as FakeServerStatistics
from .fake_server import Faults as Faults
from .fake_server import ReplyHandler as ReplyHandler
from .fake_server import open_fake_llm as open_fake_llm
from .fake_server import serve_fake_llm as serve_fake_llm
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
