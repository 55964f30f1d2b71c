"""Test doubles for models: scripted replies, or a function of the conversation."""

from .models import FunctionModel as FunctionModel
from .models import Reply as Reply
from .models import ScriptedModel as ScriptedModel
from .models import ScriptExhausted as ScriptExhausted

__all__ = ["FunctionModel", "Reply", "ScriptExhausted", "ScriptedModel"]
