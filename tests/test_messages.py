"""Every message and event type round-trips through msgpack and JSON.

The catalogue is discovered, not listed: every subclass of ``agentrio.Message``
defined in the package is found by walking ``__subclasses__()`` after importing
every agentrio module, and a sample instance is built from the struct's field
types with ``msgspec.inspect``. Message types added later are covered without
touching this file; a field type the sampler cannot build fails loudly.
"""

from __future__ import annotations

import ast
import datetime
import decimal
import enum
import importlib
import inspect
import json
import pkgutil
import re
import uuid
from typing import Annotated, Any, Literal, Union

import msgspec
import msgspec.inspect as mi
import pytest

import agentrio
import agentrio.messages
import agentrio.types
from agentrio import InvalidArgument
from agentrio.testing import ScriptedModel

CORE_MESSAGES = {
    agentrio.Message,
    agentrio.events.Event,
    agentrio.events.ActorStarted,
    agentrio.events.ActorExited,
    agentrio.events.ActorFailed,
    agentrio.events.ActorRestarted,
    agentrio.events.DeadLetter,
    agentrio.events.SupervisorEscalated,
    agentrio.events.EventsLost,
}


def _import_all_agentrio_modules() -> None:
    for info in pkgutil.walk_packages(agentrio.__path__, prefix="agentrio."):
        importlib.import_module(info.name)


def message_classes() -> list[type[agentrio.Message]]:
    """Every Message subclass defined in agentrio (tests' own subclasses excluded)."""
    _import_all_agentrio_modules()
    seen: set[type[agentrio.Message]] = set()
    stack: list[type[agentrio.Message]] = [agentrio.Message]
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
    ours = (c for c in seen if c.__module__.split(".")[0] == "agentrio")
    return sorted(ours, key=lambda c: f"{c.__module__}.{c.__qualname__}")


# -- a sample value for any msgspec type -------------------------------------------


def _sample_int(t: mi.IntType) -> int:
    value = 7
    if t.ge is not None:
        value = max(value, t.ge)
    if t.gt is not None:
        value = max(value, t.gt + 1)
    if t.le is not None:
        value = min(value, t.le)
    if t.lt is not None:
        value = min(value, t.lt - 1)
    if t.multiple_of:
        value -= value % t.multiple_of
    return value


def _sample_float(t: mi.FloatType) -> float:
    value = 1.5
    if t.ge is not None:
        value = max(value, t.ge)
    if t.gt is not None:
        value = max(value, t.gt + 0.5)
    if t.le is not None:
        value = min(value, t.le)
    if t.lt is not None:
        value = min(value, t.lt - 0.5)
    if t.multiple_of:
        value = t.multiple_of * max(1, round(value / t.multiple_of))
    return value


def _sample_str(t: mi.StrType, hint: str) -> str:
    if t.pattern is not None:
        pytest.fail(f"sample(): add a value for the str pattern {t.pattern!r} ({hint})")
    value = f"sample-{hint}"
    if t.max_length is not None:
        value = value[: t.max_length]
    if t.min_length is not None and len(value) < t.min_length:
        value = value.ljust(t.min_length, "x")
    return value


# Parts whose fields check each other (data or url; bytes of their media type).
VALID_SAMPLES: dict[type, msgspec.Struct] = {
    agentrio.ImagePart: agentrio.ImagePart(data=b"\x89PNG\r\n\x1a\nsample", media_type="image/png"),
    agentrio.DocumentPart: agentrio.DocumentPart(
        data=b"%PDF-1.7 sample", media_type="application/pdf", name="sample.pdf"
    ),
}


def _sample_struct(t: mi.StructType, hint: str) -> msgspec.Struct:
    if t.cls in VALID_SAMPLES:
        return VALID_SAMPLES[t.cls]
    kwargs = {f.name: sample(f.type, f"{hint}.{f.name}") for f in t.fields}
    if t.cls is agentrio.ModelSettings:  # (a server tool's type and name are checked)
        kwargs["server_tools"] = ({"type": "web_search_20250305", "name": "web_search"},)
    return t.cls(**kwargs)


def sample(t: mi.Type, hint: str = "value") -> Any:
    """A value of msgspec type *t*, chosen to differ from the usual defaults."""
    simple: dict[type[mi.Type], Any] = {
        mi.NoneType: None,
        mi.BoolType: True,
        mi.AnyType: f"any-{hint}",
        mi.BytesType: b"\x00sample",
        mi.ByteArrayType: bytearray(b"sample"),
        mi.DateTimeType: datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
        mi.DateType: datetime.date(2024, 5, 6),
        mi.TimeType: datetime.time(7, 8, 9),
        mi.TimeDeltaType: datetime.timedelta(seconds=90),
        mi.UUIDType: uuid.UUID(int=12345),
        mi.DecimalType: decimal.Decimal("1.25"),
    }
    if isinstance(t, mi.CustomType) and t.cls is object:
        t = mi.AnyType()  # msgspec decodes a field typed `object` like `Any`
    if type(t) in simple:
        if isinstance(t, mi.DateTimeType) and t.tz is False:
            return datetime.datetime(2024, 5, 6, 7, 8, 9)
        return simple[type(t)]
    if isinstance(t, mi.IntType):
        return _sample_int(t)
    if isinstance(t, mi.FloatType):
        return _sample_float(t)
    if isinstance(t, mi.StrType):
        return _sample_str(t, hint)
    if isinstance(t, mi.LiteralType):
        return t.values[-1]
    if isinstance(t, mi.EnumType):
        return list(t.cls)[-1]
    if isinstance(t, mi.ListType):
        return [sample(t.item_type, hint)]
    if isinstance(t, mi.VarTupleType):
        return (sample(t.item_type, hint),)
    if isinstance(t, mi.SetType):
        return {sample(t.item_type, hint)}
    if isinstance(t, mi.FrozenSetType):
        return frozenset({sample(t.item_type, hint)})
    if isinstance(t, mi.TupleType):
        return tuple(sample(item, f"{hint}[{i}]") for i, item in enumerate(t.item_types))
    if isinstance(t, mi.DictType):
        return {sample(t.key_type, f"{hint}.key"): sample(t.value_type, hint)}
    if isinstance(t, mi.StructType):
        return _sample_struct(t, hint)
    if isinstance(t, mi.UnionType):
        non_none = [u for u in t.types if not isinstance(u, mi.NoneType)]
        return sample(non_none[0] if non_none else t.types[0], hint)
    if isinstance(t, (mi.DataclassType, mi.TypedDictType, mi.NamedTupleType)):
        kwargs = {f.name: sample(f.type, f"{hint}.{f.name}") for f in t.fields}
        return t.cls(**kwargs)
    pytest.fail(f"sample(): no sample for msgspec type {t!r} at {hint}; extend sample()")


def sample_message(cls: type[agentrio.Message]) -> agentrio.Message:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    msg = _sample_struct(info, cls.__name__)
    assert isinstance(msg, cls)
    return msg


MESSAGES = message_classes()


def _ids(cls: type) -> str:
    return cls.__qualname__


# -- discovery -------------------------------------------------------------------


def test_discovery_finds_the_core_catalogue() -> None:
    assert set(MESSAGES) >= CORE_MESSAGES


def test_discovery_ignores_messages_defined_outside_agentrio() -> None:
    class Outsider(agentrio.Message):
        x: int

    assert Outsider in agentrio.Message.__subclasses__()
    assert Outsider not in message_classes()


# -- round trips -----------------------------------------------------------------


@pytest.mark.parametrize("cls", MESSAGES, ids=_ids)
def test_msgpack_round_trip(cls: type[agentrio.Message]) -> None:
    msg = sample_message(cls)
    decoder = msgspec.msgpack.Decoder(cls)
    out = decoder.decode(msgspec.msgpack.encode(msg))
    assert type(out) is cls
    assert out == msg


@pytest.mark.parametrize("cls", MESSAGES, ids=_ids)
def test_json_round_trip_and_tag(cls: type[agentrio.Message]) -> None:
    msg = sample_message(cls)
    data = msgspec.json.encode(msg)
    assert json.loads(data)["type"] == cls.__name__
    out = msgspec.json.Decoder(cls).decode(data)
    assert type(out) is cls
    assert out == msg


def test_the_whole_catalogue_is_one_tagged_union() -> None:
    union = Union[tuple(MESSAGES)]  # noqa: UP007 - a runtime-built union
    json_decoder = msgspec.json.Decoder(union)
    msgpack_decoder = msgspec.msgpack.Decoder(union)
    for cls in MESSAGES:
        msg = sample_message(cls)
        assert json_decoder.decode(msgspec.json.encode(msg)) == msg
        out = msgpack_decoder.decode(msgspec.msgpack.encode(msg))
        assert type(out) is cls
        assert out == msg


@pytest.mark.parametrize("cls", MESSAGES, ids=_ids)
def test_frozen_and_tagged_with_class_name(cls: type[agentrio.Message]) -> None:
    config = cls.__struct_config__
    assert config.frozen
    assert config.tag == cls.__name__
    assert config.tag_field == "type"
    msg = sample_message(cls)
    fields = msgspec.structs.fields(cls)
    if fields:
        with pytest.raises(AttributeError):
            setattr(msg, fields[0].name, sample(mi.type_info(fields[0].type)))


@pytest.mark.parametrize("cls", MESSAGES, ids=_ids)
def test_only_required_fields_decode_with_defaults(cls: type[agentrio.Message]) -> None:
    """Schema evolution: an old sender that knows only the required fields still works."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    required = {f.encode_name: sample(f.type, f.name) for f in info.fields if f.required}
    data = msgspec.json.encode({"type": cls.__name__, **required})
    if cls in VALID_SAMPLES:
        # A part needs one of two optional fields (data or url): none is no part.
        with pytest.raises(msgspec.ValidationError, match="exactly one of data"):
            msgspec.json.decode(data, type=cls)
        return
    out = msgspec.json.decode(data, type=cls)
    for f in info.fields:
        if f.required:
            assert getattr(out, f.name) == required[f.encode_name]
        elif f.default is not msgspec.NODEFAULT:
            assert getattr(out, f.name) == f.default
        else:
            assert getattr(out, f.name) == f.default_factory()


def test_every_event_has_a_path() -> None:
    events = [c for c in MESSAGES if issubclass(c, agentrio.events.Event)]
    assert len(events) >= 7
    for cls in events:
        assert "path" in {f.name for f in msgspec.structs.fields(cls)}


# -- the sampler itself, on a message with every kind of field ----------------------


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Inner(msgspec.Struct, frozen=True):
    a: int
    b: list[str]


class Kitchen(agentrio.Message, frozen=True, tag=True):
    i: int
    f: float
    s: str
    flag: bool
    raw: bytes
    mode: Literal["x", "y"]
    colour: Colour
    maybe: int | None
    items: list[float]
    pair: tuple[int, str]
    table: dict[str, Inner]
    labels: frozenset[str]
    when: datetime.datetime
    ident: uuid.UUID
    anything: Any = None
    bounded: Annotated[int, msgspec.Meta(ge=10, lt=20)] = 15
    short: Annotated[str, msgspec.Meta(max_length=4)] = ""


def test_sampler_builds_every_kind_of_field_and_it_round_trips() -> None:
    msg = sample_message(Kitchen)
    assert msg.mode == "y"
    assert msg.colour is Colour.BLUE
    assert msg.maybe == 7
    assert msg.bounded == 10
    assert msg.short == "samp"
    assert isinstance(msg.table["sample-Kitchen.table.key"], Inner)
    for module in (msgspec.json, msgspec.msgpack):
        assert module.decode(module.encode(msg), type=Kitchen) == msg


def test_user_messages_subclass_message_and_round_trip() -> None:
    class Greet(agentrio.Message):
        who: str
        times: int = 1

    msg = Greet(who="world", times=3)
    assert isinstance(msg, agentrio.Message)
    assert msgspec.json.decode(msgspec.json.encode(msg), type=Greet) == msg
    assert json.loads(msgspec.json.encode(msg))["type"] == "Greet"
    with pytest.raises(AttributeError):
        msg.who = "me"  # type: ignore[misc]


# -- ModelSettings -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"temperature": -0.1}, "temperature must be a number >= 0"),
        ({"temperature": float("nan")}, "temperature must be a number >= 0"),
        ({"temperature": True}, "temperature must be a number >= 0"),
        ({"top_p": 1.5}, "top_p must be a number from 0 to 1"),
        ({"stop": "END"}, "stop must be a list of str"),
        ({"stop": ["ok", ""]}, "stop must be a list of non-empty str"),
        ({"seed": 1.5}, "seed must be an int"),
        ({"tool_choice": ""}, "tool_choice must be"),
        ({"parallel_tool_calls": 1}, "parallel_tool_calls must be a bool"),
        ({"options": {1: 2}}, "options must be a table"),
        ({"options": {"num_predict": 5}}, "options must not set num_predict"),
        ({"keep_alive": [5]}, "keep_alive must be a duration"),
        ({"cache_control": "ephemeral"}, "cache_control must be a table"),
        ({"extra_headers": {"x": 1}}, r"extra_headers\['x'\] must be a str, got an int"),
        ({"extra_body": ["x"]}, "extra_body must be a table"),
    ],
)
def test_model_settings_are_checked(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(agentrio.InvalidArgument, match="ModelSettings." + message):
        agentrio.ModelSettings(**fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"extra_headers": {"X-Token": "sk-SECRET", "Authorization": 5}},
        {"extra_headers": {"Authorization": ["Bearer sk-SECRET"]}},
        {"extra_headers": {"Authorization": "Bearer sk-SECRET\r\nX: y"}},
        {"extra_headers": "Bearer sk-SECRET"},
        {"extra_body": ["sk-SECRET"]},
    ],
)
def test_bad_model_settings_tables_never_show_their_values(fields: dict[str, Any]) -> None:
    # (extra_headers and extra_body may hold keys: a bad one is described, not shown)
    with pytest.raises(agentrio.InvalidArgument) as info:
        agentrio.ModelSettings(**fields)
    assert "sk-SECRET" not in str(info.value)


def test_model_settings_repr_shows_table_keys_not_values() -> None:
    settings = agentrio.ModelSettings(
        temperature=0.5,
        extra_headers={"Authorization": "Bearer sk-SECRET"},
        extra_body={"token": "sk-SECRET"},
    )
    shown = repr(settings)
    assert "sk-SECRET" not in shown
    assert shown == (
        "ModelSettings(temperature=0.5, extra_headers={'Authorization': ...}, "
        "extra_body={'token': ...})"
    )
    spec = agentrio.AgentSpec("a", model=ScriptedModel([]), settings=settings)
    assert "sk-SECRET" not in repr(spec)


def test_model_settings_lay_over_each_other() -> None:
    base = agentrio.ModelSettings(
        temperature=0.1, seed=1, options={"num_ctx": 1, "top_k": 5}, extra_headers={"a": "1"}
    )
    top = agentrio.ModelSettings(
        temperature=0.9, stop=["x"], options={"num_ctx": 2}, extra_headers={"b": "2"}
    )
    assert top.over(base) == agentrio.ModelSettings(
        temperature=0.9,
        seed=1,
        stop=("x",),
        options={"num_ctx": 2, "top_k": 5},
        extra_headers={"a": "1", "b": "2"},
    )
    assert top.over(None) is top
    assert base.fields_set() == ["temperature", "seed", "options", "extra_headers"]
    # Unknown fields are refused when decoded, and the set ones alone are encoded.
    with pytest.raises(msgspec.ValidationError, match="unknown field `temprature`"):
        msgspec.json.decode(b'{"temprature": 1}', type=agentrio.ModelSettings)
    assert msgspec.json.encode(agentrio.ModelSettings(seed=1)) == b'{"seed":1}'


# -- content parts ---------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: agentrio.ImagePart(), "exactly one of data"),
        (
            lambda: agentrio.ImagePart(data=PNG, url="https://x.com/a.png", media_type="image/png"),
            "exactly one of data",
        ),
        (lambda: agentrio.ImagePart(data=PNG), "media_type is required with data"),
        (lambda: agentrio.ImagePart(data=b"", media_type="image/png"), "data is empty"),
        (lambda: agentrio.ImagePart(data="abc", media_type="image/png"), "data must be bytes"),
        (lambda: agentrio.ImagePart(data=PNG, media_type="image/bmp"), "media_type must be one of"),
        (
            lambda: agentrio.ImagePart(data=PNG, media_type="image/jpeg"),
            "data is not image/jpeg data (media_type='image/jpeg'); they look like image/png",
        ),
        (lambda: agentrio.ImagePart(url="file:///etc/passwd"), "got a file: URL"),
        (lambda: agentrio.ImagePart(url="data:image/png;base64,AAAA"), "got a data: URL"),
        (lambda: agentrio.ImagePart(url="//host/a.png"), "got no scheme"),
        (lambda: agentrio.ImagePart(url="https:///a.png"), "with a host"),
        (lambda: agentrio.ImagePart(url="https://x.com/" + "a" * 9000), "at most 8192"),
        (lambda: agentrio.ImagePart(url="https://x.com/a\nb"), "printable"),
        (lambda: agentrio.DocumentPart(data=b"not a pdf"), "data is not application/pdf data"),
        (
            lambda: agentrio.DocumentPart(data=b"\xff\xfe", media_type="text/plain"),
            "data is not UTF-8 text",
        ),
        (lambda: agentrio.DocumentPart(data=b"%PDF-", name="a\nb"), "name must be"),
        (lambda: agentrio.types.TextPart(3), "text must be a str"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_part_is_refused_with_what_was_expected(make: Any, says: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(says)):
        make()


def test_a_part_too_large_is_refused_without_its_bytes_in_the_message() -> None:
    from agentrio.messages import MAX_PART_BYTES

    data = PNG + bytes(MAX_PART_BYTES)
    with pytest.raises(InvalidArgument) as caught:
        agentrio.ImagePart(data=data, media_type="image/png")
    assert str(caught.value) == (
        f"ImagePart: data is {len(data)} bytes, more than MAX_PART_BYTES ({MAX_PART_BYTES})"
    )


def test_a_part_decoded_is_checked_as_one_made() -> None:
    data = msgspec.json.encode({"type": "ImagePart", "url": "file:///etc/passwd"})
    with pytest.raises(msgspec.ValidationError, match="file: URL"):
        msgspec.json.decode(data, type=agentrio.ImagePart)


def test_a_parts_repr_shows_neither_its_bytes_nor_its_urls_secrets() -> None:
    image = agentrio.ImagePart(data=PNG, media_type="image/png")
    linked = agentrio.ImagePart(url="https://user:pw@cdn.example.com/a/SECRET.png?sig=SECRET")
    doc = agentrio.DocumentPart(data=bytearray(b"%PDF-1.7"), name="r.pdf")
    assert repr(image) == "ImagePart(data=<16 bytes>, media_type='image/png')"
    assert repr(linked) == "ImagePart(url='https://cdn.example.com/…', media_type='')"
    assert repr(doc) == "DocumentPart(data=<8 bytes>, media_type='application/pdf', name='r.pdf')"
    assert doc.data == b"%PDF-1.7" and isinstance(doc.data, bytes)  # (a bytearray is copied)


def test_a_chat_message_with_parts_round_trips() -> None:
    msg = agentrio.ChatMessage(
        "user",
        "look",
        parts=(
            agentrio.types.TextPart("look"),
            agentrio.ImagePart(data=PNG, media_type="image/png"),
            agentrio.DocumentPart(url="https://x.com/a.pdf"),
        ),
    )
    for codec in (msgspec.json, msgspec.msgpack):
        assert codec.decode(codec.encode(msg), type=agentrio.ChatMessage) == msg


# -- sequences where tuples are stored (#21) ------------------------------------------


def test_lists_given_to_a_reply_or_a_chat_message_are_stored_as_tuples() -> None:
    call = agentrio.ToolCallRequest("lookup", {"key": "a"})
    thought = agentrio.types.ThinkingBlock("hm", "sig")
    reply = agentrio.ModelReply(tool_calls=[call], thinking=[thought])
    assert reply.tool_calls == (call,) and reply.thinking == (thought,)
    assert reply == agentrio.ModelReply(tool_calls=(call,), thinking=(thought,))
    part = agentrio.types.TextPart("hi")
    turn = agentrio.ChatMessage("user", "hi", tool_calls=[call], thinking=[thought], parts=[part])
    assert (turn.tool_calls, turn.thinking, turn.parts) == ((call,), (thought,), (part,))
    # ...and what is made from a list encodes and decodes as what is made from a tuple.
    decoded = msgspec.json.decode(msgspec.json.encode(reply), type=agentrio.ModelReply)
    assert decoded == reply and type(decoded.tool_calls) is tuple


@pytest.mark.parametrize("value", ["lookup", b"x", 3, {"a": 1}])
def test_a_reply_tool_calls_that_are_no_sequence_are_refused(value: object) -> None:
    with pytest.raises(InvalidArgument, match=r"ModelReply\.tool_calls must be a list or tuple"):
        agentrio.ModelReply(tool_calls=value)  # type: ignore[arg-type]


def _checked_init(cls: type[agentrio.Message]) -> list[str]:
    """The parameters of the ``__init__`` that *cls* shows type checkers only."""
    module = ast.parse(inspect.getsource(agentrio.messages))  # (where both are defined)
    (body,) = [n for n in module.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    for node in ast.walk(body):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return [arg.arg for arg in node.args.args[1:]]
    raise AssertionError(f"{cls.__name__} shows type checkers no __init__")


@pytest.mark.parametrize("cls", [agentrio.ModelReply, agentrio.ChatMessage])
def test_the_init_type_checkers_see_lists_every_field(cls: type[agentrio.Message]) -> None:
    assert _checked_init(cls) == list(cls.__struct_fields__)


# -- PhaseResult.raise_for_error ----------------------------------------------------------


def test_raise_for_error_returns_a_result_that_did_not_end_in_error() -> None:
    for reason in ("done", "timeout", "max_iterations", "cancelled"):
        result = agentrio.PhaseResult[str]("text", (), reason)  # type: ignore[arg-type]
        assert result.raise_for_error() is result


def test_raise_for_error_raises_the_typed_error_it_names() -> None:
    result = agentrio.PhaseResult[str]("", (), "error", "OutputInvalid", "the last: bad")
    with pytest.raises(agentrio.errors.OutputInvalid, match=r"^the last: bad$"):
        result.raise_for_error()
    # An error whose constructor takes more than the message: what the result
    # does not hold is None.
    result = agentrio.PhaseResult[str]("", (), "error", "RateLimited", "HTTP 429")
    with pytest.raises(agentrio.ProviderError) as caught:
        result.raise_for_error()
    assert type(caught.value) is agentrio.errors.RateLimited
    assert (str(caught.value), caught.value.provider, caught.value.retry_after) == (
        "HTTP 429",
        None,
        None,
    )


def test_raise_for_error_raises_phase_failed_for_another_exception() -> None:
    for name in ("ValueError", "ScriptExhausted", "__class__", "phase_error", "PhaseFailed"):
        result = agentrio.PhaseResult[str]("", (), "error", name, "oops")
        with pytest.raises(agentrio.errors.PhaseFailed) as caught:
            result.raise_for_error()
        assert str(caught.value) == f"{name}: oops"
        assert caught.value.error_type == name
        assert caught.value.result is result
