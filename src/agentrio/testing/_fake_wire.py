"""The fake LLM server's wire formats: reading OpenAI, Anthropic and Ollama requests,
and writing their replies (whole or as stream frames) and errors.
"""

from __future__ import annotations

import base64
import binascii
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Literal

import attrs
import msgspec

from ..errors import InvalidArgument
from ..messages import (
    ChatMessage,
    ContentPart,
    DocumentPart,
    ImagePart,
    ModelReply,
    RawBlock,
    TextPart,
    ToolCallRequest,
)
from ._fake_cache import marks_problem

__all__ = [
    "FRAMES",
    "MAX_BODY",
    "REPLY",
    "ROUTES",
    "STREAM_TYPES",
    "Answer",
    "ApiName",
    "PausedTurns",
    "BadRequest",
    "FakeRequest",
    "authorized",
    "error_body",
    "forced_call",
    "json_bytes",
    "parse_request",
]

ApiName = Literal["openai", "anthropic", "ollama", "responses"]

MAX_BODY = 32 * 1024 * 1024  # bytes: the largest request body read


class FakeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One API request as a reply handler sees it, normalised from its wire format.

    Attributes:
        api: ``"openai"``, ``"anthropic"``, ``"ollama"`` or ``"responses"``
            (OpenAI's Responses API: see ``_fake_responses``).
        model: the model asked for.
        messages: the conversation: a system prompt first (Anthropic's
            top-level ``system`` included), user and assistant turns (tool
            calls as ``ToolCallRequest`` with parsed arguments), and one
            ``"tool"`` turn per tool result (Anthropic's ``tool_result``
            blocks included, with the tool's name filled in from the call it
            answers). A user turn with images or documents has them in its
            ``parts`` (``ImagePart``, ``DocumentPart``, with its text parts
            as ``TextPart``), decoded from OpenAI's ``image_url`` and
            ``file`` parts, Anthropic's ``image`` and ``document`` blocks
            and Ollama's ``images``; a malformed one is answered 400, as
            the real APIs answer it. A tool turn whose Anthropic
            ``tool_result`` holds ``image`` or ``document`` blocks has them
            in its ``parts`` too. An Anthropic assistant turn that holds
            server-tool blocks or citations has its blocks (but the thinking
            and ``tool_use`` ones) in ``blocks``, as sent.
        tools: the names of the tools offered.
        stream: whether a streamed answer was asked for.
        max_tokens: the output limit asked for, if any
            (``max_completion_tokens`` or ``max_tokens``, Anthropic's
            ``max_tokens``, Ollama's ``options.num_predict``).
        body: the request's JSON body, as sent.
        output_schema: the JSON schema the answer must match, if the
            request asks for one: OpenAI's ``response_format`` (its
            ``json_schema.schema``), Ollama's ``format`` (an object), or on
            Anthropic the input schema of the tool ``tool_choice`` forces.
        tool_choice: the tool choice asked for, if any: ``"auto"``,
            ``"none"``, ``"required"`` (Anthropic's ``"any"``) or the name of
            the tool forced (OpenAI's ``function``, Anthropic's ``tool``).
    """

    api: ApiName
    model: str
    messages: list[ChatMessage]
    tools: list[str]
    stream: bool
    max_tokens: int | None = None
    body: dict[str, object] = {}
    output_schema: dict[str, object] | None = None
    tool_choice: str | None = None


# -- the wire formats: requests ------------------------------------------------------


class BadRequest(Exception):
    """The body is not a valid request; the message says why (answered 400)."""


class _OaFunction(msgspec.Struct):
    name: str
    arguments: str = "{}"


class _OaToolCall(msgspec.Struct):
    function: _OaFunction
    id: str = ""
    type: str = "function"


class _OaImageUrl(msgspec.Struct):
    url: str
    detail: Literal["auto", "low", "high"] = "auto"


class _OaFile(msgspec.Struct):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class _Part(msgspec.Struct):
    type: Literal["text", "image_url", "file", "input_audio", "refusal"]
    text: str = ""
    image_url: _OaImageUrl | None = None
    file: _OaFile | None = None


class _OaMessage(msgspec.Struct):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_Part] | None = None
    tool_calls: list[_OaToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class _FunctionSpec(msgspec.Struct):
    name: str
    description: str = ""
    parameters: dict[str, object] = {}


class _FunctionTool(msgspec.Struct):
    function: _FunctionSpec
    type: str = "function"


class _JsonSchema(msgspec.Struct):
    name: Annotated[str, msgspec.Meta(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    schema: dict[str, object] = {}
    strict: bool | None = None
    description: str = ""


class _ResponseFormat(msgspec.Struct):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: _JsonSchema | None = None


class _Named(msgspec.Struct):
    name: str


class _OaToolChoice(msgspec.Struct):
    type: Literal["function"]
    function: _Named


class _OaRequest(msgspec.Struct):
    model: str
    messages: list[_OaMessage]
    tools: list[_FunctionTool] | None = None
    stream: bool | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    response_format: _ResponseFormat | None = None
    tool_choice: Literal["auto", "none", "required"] | _OaToolChoice | None = None


class _AnSource(msgspec.Struct):
    type: Literal["base64", "url", "text"]
    media_type: str = ""
    data: str = ""
    url: str = ""


class _AnBlock(msgspec.Struct):
    type: str
    text: str = ""
    source: _AnSource | None = None
    title: str | None = None
    id: str = ""
    name: str = ""
    input: dict[str, object] = {}
    tool_use_id: str = ""
    # (a server tool's result holds a list of results, or an object: an error,
    # code execution's output)
    content: str | list[_AnBlock] | dict[str, object] | None = None
    citations: list[dict[str, object]] | None = None


class _AnMessage(msgspec.Struct):
    role: Literal["user", "assistant"]
    content: str | list[_AnBlock]


class _AnTool(msgspec.Struct):
    name: str
    description: str = ""
    input_schema: dict[str, object] = {}


class _AnToolChoice(msgspec.Struct):
    type: Literal["auto", "any", "tool", "none"]
    name: str = ""
    disable_parallel_tool_use: bool = False


class _AnRequest(msgspec.Struct):
    model: str
    max_tokens: int
    messages: list[_AnMessage]
    system: str | list[_AnBlock] | None = None
    tools: list[_AnTool] | None = None
    stream: bool = False
    tool_choice: _AnToolChoice | None = None


class _OlFunction(msgspec.Struct):
    name: str
    arguments: dict[str, object] = {}


class _OlToolCall(msgspec.Struct):
    function: _OlFunction
    id: str = ""


class _OlMessage(msgspec.Struct):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[_OlToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    images: list[str] | None = None


class _OlRequest(msgspec.Struct):
    model: str
    messages: list[_OlMessage] = []
    tools: list[_FunctionTool] | None = None
    stream: bool = True  # Ollama streams unless told not to
    options: dict[str, object] | None = None
    format: Literal["json"] | dict[str, object] | None = None


# -- content parts, checked as the real APIs check them ---------------------------------

_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def _decoded(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: the data is not valid base64") from None


def _made(kind: type[ImagePart] | type[DocumentPart], where: str, **fields: object) -> ContentPart:
    try:
        return kind(**fields)  # type: ignore[arg-type]
    except InvalidArgument as exc:
        raise BadRequest(f"{where}: {exc}") from None


def _from_data_url(url: str, where: str, kinds: tuple[str, ...]) -> tuple[str, bytes]:
    head, comma, data = url.partition(",")
    media_type = head.removeprefix("data:").removesuffix(";base64")
    if not comma or not head.endswith(";base64") or media_type not in kinds:
        raise BadRequest(f"{where}: expected a data:<{' or '.join(kinds)}>;base64,... URL")
    return media_type, _decoded(data, where)


def _openai_part(part: _Part, where: str) -> ContentPart:
    if part.type == "text":
        return TextPart(part.text)
    if part.type == "image_url":
        if part.image_url is None:
            raise BadRequest(f"{where}: an image_url part needs image_url")
        url = part.image_url.url
        if url.startswith("data:"):
            media_type, data = _from_data_url(url, where, _IMAGE_TYPES)
            return _made(ImagePart, where, data=data, media_type=media_type)
        return _made(ImagePart, where, url=url)
    if part.type == "file" and part.file is not None and part.file.file_data is not None:
        _, data = _from_data_url(part.file.file_data, where, ("application/pdf",))
        name = part.file.filename or ""
        return _made(DocumentPart, where, data=data, name=name)
    raise BadRequest(f"{where}: the fake server takes text, image_url and file (file_data) parts")


def _openai_parts(m: _OaMessage, index: int) -> tuple[ContentPart, ...]:
    content = m.content
    if not isinstance(content, list) or all(p.type == "text" for p in content):
        return ()
    if m.role != "user":
        raise BadRequest(f"messages[{index}]: image and file parts go in user messages only")
    return tuple(_openai_part(p, f"messages[{index}].content[{i}]") for i, p in enumerate(content))


def _anthropic_source(block: _AnBlock, where: str) -> ContentPart:
    source = block.source
    if source is None:
        raise BadRequest(f"{where}: an {block.type} block needs a source")
    image = block.type == "image"
    fields: dict[str, object] = {} if image else {"name": block.title or ""}
    if source.type == "url":
        fields["url"] = source.url
    elif source.type == "text":
        if image or source.media_type != "text/plain":
            raise BadRequest(f"{where}: a text source is for a text/plain document")
        fields.update(data=source.data.encode(), media_type="text/plain")
    else:
        types = _IMAGE_TYPES if image else ("application/pdf",)
        if source.media_type not in types:
            raise BadRequest(f"{where}: source.media_type must be one of {', '.join(types)}")
        fields.update(data=_decoded(source.data, where), media_type=source.media_type)
    return _made(ImagePart if image else DocumentPart, where, **fields)


def _anthropic_parts(blocks: list[_AnBlock], where: str) -> tuple[ContentPart, ...]:
    if all(b.type not in ("image", "document") for b in blocks):
        return ()
    parts: list[ContentPart] = []
    for i, block in enumerate(blocks):
        if block.type == "text":
            parts.append(TextPart(block.text))
        elif block.type in ("image", "document"):
            parts.append(_anthropic_source(block, f"{where}.content[{i}]"))
    return tuple(parts)


def _ollama_parts(m: _OlMessage, index: int) -> tuple[ContentPart, ...]:
    if not m.images:
        return ()
    parts: list[ContentPart] = [TextPart(m.content)] if m.content else []
    for i, text in enumerate(m.images):
        where = f"messages[{index}].images[{i}]"
        data = _decoded(text, where)
        kind = "image/png" if data.startswith(b"\x89PNG") else "image/jpeg"
        if not data.startswith((b"\x89PNG", b"\xff\xd8\xff")):
            raise BadRequest(f"{where}: not a PNG or JPEG image")
        parts.append(_made(ImagePart, where, data=data, media_type=kind))
    return tuple(parts)


def _parts_text(parts: tuple[ContentPart, ...]) -> str:
    return "\n".join(p.text for p in parts if isinstance(p, TextPart))


def _text(content: str | list[_Part] | list[_AnBlock] | dict[str, object] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, dict):
        return ""
    return "".join(part.text for part in content if part.type == "text")


def _arguments(text: str) -> dict[str, object]:
    # Broken arguments in a history (a model's own malformed call) become {}:
    # the handler sees the conversation, not a 400.
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _name_tool_turns(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Fill in a tool turn's ``name`` from the call it answers, when the wire lacks it."""
    names = {c.id: c.name for m in messages for c in m.tool_calls if c.id}
    return [
        msgspec.structs.replace(m, name=names[m.tool_call_id])
        if m.role == "tool" and m.name is None and m.tool_call_id in names
        else m
        for m in messages
    ]


def _openai_messages(request: _OaRequest) -> list[ChatMessage]:
    out = []
    for index, m in enumerate(request.messages):
        parts = _openai_parts(m, index)
        if parts:
            out.append(ChatMessage("user", _parts_text(parts), parts=parts))
            continue
        calls = tuple(
            ToolCallRequest(c.function.name, _arguments(c.function.arguments), c.id)
            for c in m.tool_calls or ()
        )
        role = "system" if m.role == "developer" else m.role
        out.append(
            ChatMessage(role, _text(m.content), calls, m.tool_call_id, m.name if calls else None)
        )
    return out


def _tool_turn(block: _AnBlock, where: str) -> ChatMessage:
    """A ``tool_result`` block: its text, and its images and documents as parts."""
    content = block.content
    parts = _anthropic_parts(content, where) if isinstance(content, list) else ()
    text = _parts_text(parts) if parts else _text(content)
    return ChatMessage("tool", text, tool_call_id=block.tool_use_id, parts=parts)


def _anthropic_turn(
    message: _AnMessage, raw: list[dict[str, object]], where: str
) -> list[ChatMessage]:
    if isinstance(message.content, str):
        return [ChatMessage(message.role, message.content)]
    if message.role == "assistant":
        calls = tuple(
            ToolCallRequest(b.name, b.input, b.id) for b in message.content if b.type == "tool_use"
        )
        blocks = _server_blocks(message.content, raw, where)
        return [ChatMessage("assistant", _text(message.content), calls, blocks=blocks)]
    if any(_server_block(b) for b in message.content):
        raise BadRequest(f"{where}: server tool blocks and citations go in assistant turns only")
    out = [
        _tool_turn(b, f"{where}.content[{i}]")
        for i, b in enumerate(message.content)
        if b.type == "tool_result"
    ]
    parts = _anthropic_parts(message.content, where)
    if parts:
        out.append(ChatMessage("user", _parts_text(parts), parts=parts))
        return out
    text = _text(message.content)
    if text or not out:
        out.append(ChatMessage("user", text))
    return out


_READ = frozenset(("tool_use", "thinking", "redacted_thinking"))


def _server_block(block: _AnBlock) -> bool:
    """A block that only a server tool makes: its call, its result, cited text."""
    if block.type == "text":
        return bool(block.citations)
    kind = block.type
    return kind == "server_tool_use" or (kind.endswith("_tool_result") and kind != "tool_result")


def _server_blocks(
    blocks: list[_AnBlock], raw: list[dict[str, object]], where: str
) -> tuple[RawBlock, ...]:
    """An assistant turn's blocks (*raw*: as sent) but its thinking and tool calls,
    when it holds server-tool blocks or citations (as the client keeps them); each result
    checked to answer a ``server_tool_use`` before it, as the API checks."""
    if not any(_server_block(b) for b in blocks):
        return ()
    used: set[str] = set()
    for i, block in enumerate(blocks):
        if block.type == "server_tool_use":
            if not block.id or not block.name:
                raise BadRequest(f"{where}.content[{i}]: server_tool_use needs an id and a name")
            used.add(block.id)
        elif _server_block(block) and block.type != "text" and block.tool_use_id not in used:
            raise BadRequest(
                f"{where}.content[{i}]: {block.type} answers no server_tool_use before it "
                f"(tool_use_id {block.tool_use_id!r})"
            )
    # (as the client keeps them: without the cache_control markers put on the wire)
    return tuple(
        RawBlock.of(_unmarked(raw[i])) for i, b in enumerate(blocks) if b.type not in _READ
    )


class PausedTurns:
    """The blocks of the paused server-tool turns answered (``pause_turn``), by the id
    of their last ``server_tool_use``, to check that they come back as they went.

    At most ``MOST`` are remembered (the oldest are forgotten): a client that
    never goes on from a paused turn costs nothing for ever.
    """

    MOST = 10_000

    def __init__(self) -> None:
        self._sent: dict[str, list[object]] = {}

    def answered(self, reply: ModelReply) -> None:
        """Remember *reply*'s blocks if it is a paused server-tool turn."""
        if reply.finish_reason != "pause_turn" or not reply.blocks:
            return
        blocks = [msgspec.json.decode(b.json) for b in reply.blocks]
        uses = [b.get("id") for b in blocks if b.get("type") == "server_tool_use"]
        if uses and isinstance(uses[-1], str):
            self._sent[uses[-1]] = blocks
            if len(self._sent) > self.MOST:
                del self._sent[next(iter(self._sent))]

    def check(self, request: FakeRequest) -> str | None:
        """Why *request* is refused, if its last turn is a paused one sent back altered."""
        if not self._sent or not request.messages or request.messages[-1].role != "assistant":
            return None
        # (the request's blocks come without their cache_control markers)
        sent = [msgspec.json.decode(b.json) for b in request.messages[-1].blocks]
        for block in sent:
            key = block.get("id") if block.get("type") == "server_tool_use" else None
            expected = self._sent.pop(key, None) if isinstance(key, str) else None
            if expected is not None and sent[-len(expected) :] != expected:
                return (
                    f"the paused turn of server_tool_use {key!r} did not come back as it was "
                    "sent: send its blocks back unchanged, last"
                )
        return None


def _unmarked(block: dict[str, object]) -> dict[str, object]:
    """*block* without its ``cache_control`` marker."""
    if "cache_control" not in block:
        return block
    return {k: v for k, v in block.items() if k != "cache_control"}


# What the real API answers a request whose turns hold tool blocks without tools.
TOOLS_UNDEFINED = "Requests which include `tool_use` or `tool_result` blocks must define tools."


def _tool_blocks(message: _AnMessage) -> bool:
    blocks = message.content if isinstance(message.content, list) else ()
    return any(b.type in ("tool_use", "tool_result") for b in blocks)


def _anthropic_messages(request: _AnRequest, body: dict[str, object]) -> list[ChatMessage]:
    if not request.tools and any(_tool_blocks(m) for m in request.messages):
        raise BadRequest(TOOLS_UNDEFINED)
    out = [ChatMessage("system", _text(request.system))] if request.system else []
    sent = body["messages"]
    assert isinstance(sent, list)  # (checked as a list of messages)
    for i, message in enumerate(request.messages):
        raw = sent[i]["content"]
        out.extend(_anthropic_turn(message, raw if isinstance(raw, list) else [], f"messages[{i}]"))
    return out


def _ollama_messages(request: _OlRequest) -> list[ChatMessage]:
    out = []
    for index, m in enumerate(request.messages):
        parts = _ollama_parts(m, index)
        if parts:
            if m.role != "user":
                raise BadRequest(f"messages[{index}]: images go in user messages only")
            out.append(ChatMessage("user", m.content, parts=parts))
            continue
        calls = tuple(
            ToolCallRequest(c.function.name, c.function.arguments, c.id) for c in m.tool_calls or ()
        )
        out.append(ChatMessage(m.role, m.content, calls, m.tool_call_id, m.tool_name))
    return out


def _ollama_max_tokens(request: _OlRequest) -> int | None:
    value = (request.options or {}).get("num_predict")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _strict_problem(node: object, where: str) -> str:
    """Why *node* is not a schema in OpenAI's strict form ("" if it is)."""
    if not isinstance(node, dict):
        return ""
    if node.get("type") == "object":
        properties = node.get("properties")
        if not isinstance(properties, dict):
            return f"{where}: an object without 'properties'"
        if node.get("additionalProperties") is not False:
            return f"{where}: 'additionalProperties' must be false"
        if sorted(node.get("required") or ()) != sorted(properties):
            return f"{where}: 'required' must list every property"
    for key, value in node.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            children = [(f"{where}.{key}.{k}", v) for k, v in value.items()]
        elif key == "items":
            children = [(f"{where}.items", value)]
        elif key in ("anyOf", "allOf"):
            children = [(f"{where}.{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        for path, child in children:
            problem = _strict_problem(child, path)
            if problem:
                return problem
    return ""


def _openai_output(oa: _OaRequest) -> tuple[dict[str, object] | None, str | None]:
    form = oa.response_format
    schema = None
    if form is not None and form.type == "json_schema":
        if form.json_schema is None:
            raise BadRequest("response_format of type 'json_schema' needs 'json_schema'")
        schema = form.json_schema.schema
        if form.json_schema.strict:
            if schema.get("type") != "object":
                raise BadRequest("response_format: a strict schema's root must be an object")
            problem = _strict_problem(schema, "schema")
            if problem:
                raise BadRequest(f"response_format: invalid strict schema: {problem}")
    given = oa.tool_choice
    choice = given.function.name if isinstance(given, _OaToolChoice) else given
    if choice is not None and oa.tools is None:
        raise BadRequest("tool_choice is only allowed when tools are specified")
    return schema, choice


def _anthropic_output(an: _AnRequest) -> tuple[dict[str, object] | None, str | None]:
    choice = an.tool_choice
    if choice is None:
        return None, None
    tools = {t.name: t for t in an.tools or ()}
    if choice.type in ("any", "tool") and not tools:
        raise BadRequest(f"tool_choice of type {choice.type!r} needs tools")
    if choice.type != "tool":
        return None, {"any": "required"}.get(choice.type, choice.type)
    forced = tools.get(choice.name)
    if forced is None:
        raise BadRequest(f"tool_choice names tool {choice.name!r}, which is not in tools")
    return forced.input_schema, choice.name


def parse_request(api: ApiName, body: dict[str, object]) -> FakeRequest:
    """Validate *body* as a request of *api* and normalise it.

    Raises:
        BadRequest: a required field is missing or has the wrong type; a
            ``response_format`` schema marked strict is not in OpenAI's
            strict form; a ``tool_choice`` forces a tool that is not offered.
    """
    try:
        if api == "openai":
            oa = msgspec.convert(body, _OaRequest)
            messages = _openai_messages(oa)
            tools = [t.function.name for t in oa.tools or ()]
            stream, limit = bool(oa.stream), oa.max_completion_tokens or oa.max_tokens
            model = oa.model
            schema, choice = _openai_output(oa)
        elif api == "anthropic":
            an = msgspec.convert(body, _AnRequest)
            if problem := marks_problem(body):
                raise BadRequest(problem)
            messages, tools = _anthropic_messages(an, body), [t.name for t in an.tools or ()]
            stream, limit, model = an.stream, an.max_tokens, an.model
            schema, choice = _anthropic_output(an)
        else:
            ol = msgspec.convert(body, _OlRequest)
            messages = _ollama_messages(ol)
            tools = [t.function.name for t in ol.tools or ()]
            stream, limit, model = ol.stream, _ollama_max_tokens(ol), ol.model
            schema = ol.format if isinstance(ol.format, dict) else None
            choice = None
    except msgspec.ValidationError as exc:
        raise BadRequest(str(exc)) from exc
    return FakeRequest(
        api=api,
        model=model,
        messages=_name_tool_turns(messages),
        tools=tools,
        stream=stream,
        max_tokens=limit,
        body=body,
        output_schema=schema,
        tool_choice=choice,
    )


def forced_call(request: FakeRequest, reply: ModelReply) -> ModelReply:
    """*reply* as a server that obeys a forced tool choice sends it.

    On Anthropic, a reply with text and no tool calls, to a request whose
    ``tool_choice`` forces a tool (``"tool"``, or ``"any"``: then
    ``final_result`` if it is offered, else the first tool), goes out as a
    call of that tool, its input the text read as a JSON object, or, for a
    tool whose input is the ``{"result": ...}`` wrapper of a typed answer
    that is no object, the text's JSON value wrapped so; any other text goes
    out as it is.
    """
    choice = request.tool_choice
    if request.api != "anthropic" or reply.tool_calls or choice in (None, "auto", "none"):
        return reply
    if choice == "required":
        choice = "final_result" if "final_result" in request.tools else request.tools[0]
    try:
        value = msgspec.json.decode(reply.text)
    except (msgspec.DecodeError, RecursionError):
        return reply
    if not isinstance(value, dict):
        if not _wraps(request, choice):
            return reply
        value = {"result": value}
    return msgspec.structs.replace(reply, text="", tool_calls=(ToolCallRequest(choice, value),))


def _wraps(request: FakeRequest, name: str) -> bool:
    """Is the input of the tool *name* the ``{"result": ...}`` wrapper of an answer?"""
    tools = request.body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and tool.get("name") == name:
            schema = tool.get("input_schema")
            if isinstance(schema, dict):
                properties = schema.get("properties")
                return isinstance(properties, dict) and list(properties) == ["result"]
    return False


# -- the wire formats: replies -------------------------------------------------------


@attrs.frozen
class Answer:
    """One reply about to go out, with what the wire needs besides it."""

    reply: ModelReply
    model: str
    number: int
    malformed: bool = False

    def call_id(self, i: int, prefix: str) -> str:
        call = self.reply.tool_calls[i]
        return call.id or f"{prefix}{self.number:06d}{i:02d}"

    def arguments_text(self, call: ToolCallRequest) -> str:
        text = msgspec.json.encode(call.arguments).decode()
        return _break_json(text) if self.malformed else text

    def arguments_value(self, call: ToolCallRequest) -> object:
        # Anthropic and Ollama send an object; broken JSON can only be its text.
        return self.arguments_text(call) if self.malformed else call.arguments


def _break_json(text: str) -> str:
    """``{"a": 1}`` -> ``{'a': 1,}``: single quotes and a trailing comma, as models do."""
    text = text.replace('"', "'")
    return text[:-1] + ",}" if text.endswith("}") else text + ","


def _pieces(text: str, parts: int = 3) -> list[str]:
    if not text:
        return []
    size = max(1, math.ceil(len(text) / parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def json_bytes(value: object) -> bytes:
    """*value* encoded as JSON."""
    return msgspec.json.encode(value)


def _openai_calls(answer: Answer) -> list[dict[str, object]]:
    return [
        {
            "id": answer.call_id(i, "call_"),
            "type": "function",
            "function": {"name": c.name, "arguments": answer.arguments_text(c)},
        }
        for i, c in enumerate(answer.reply.tool_calls)
    ]


def _openai_usage(reply: ModelReply) -> dict[str, object]:
    u = reply.usage
    usage: dict[str, object] = {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
    }
    # The details only when there are some (as servers other than OpenAI's do).
    if u.cached_input_tokens or u.reasoning_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": u.cached_input_tokens}
        usage["completion_tokens_details"] = {"reasoning_tokens": u.reasoning_tokens}
    return usage


def _reasoning_text(reply: ModelReply) -> str:
    """A reply's thinking as an OpenAI-compatible server's ``reasoning_content``."""
    return "".join(b.thinking for b in reply.thinking if not b.redacted)


def _openai_finish(reply: ModelReply) -> str:
    if reply.finish_reason in ("length", "content_filter"):
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def _openai_reply(answer: Answer) -> dict[str, object]:
    reply = answer.reply
    message: dict[str, object] = {
        "role": "assistant",
        "content": reply.text if reply.text or not reply.tool_calls else None,
        "refusal": reply.refusal or None,
    }
    if reply.tool_calls:
        message["tool_calls"] = _openai_calls(answer)
    if reply.thinking:  # as DeepSeek (and vLLM, LM Studio, llama.cpp) send reasoning
        message["reasoning_content"] = _reasoning_text(reply)
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": _openai_finish(reply),
    }
    return {
        "id": f"chatcmpl-{answer.number:06d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer.model,
        "choices": [choice],
        "usage": _openai_usage(reply),
    }


def _openai_frames(answer: Answer) -> list[bytes]:
    head = {
        "id": f"chatcmpl-{answer.number:06d}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": answer.model,
    }

    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + json_bytes({**head, "choices": [choice]}) + b"\n\n"

    reply = answer.reply
    frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
    frames += [chunk({"reasoning_content": p}) for p in _pieces(_reasoning_text(reply))]
    frames += [chunk({"content": piece}) for piece in _pieces(reply.text)]
    frames += [chunk({"refusal": piece}) for piece in _pieces(reply.refusal)]
    for i, call in enumerate(reply.tool_calls):
        fn = {"name": call.name, "arguments": ""}
        start = {"index": i, "id": answer.call_id(i, "call_"), "type": "function", "function": fn}
        frames.append(chunk({"tool_calls": [start]}))
        frames += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            for piece in _pieces(answer.arguments_text(call))
        ]
    frames.append(chunk({}, _openai_finish(reply)))
    usage = {**head, "choices": [], "usage": _openai_usage(reply)}
    return [*frames, b"data: " + json_bytes(usage) + b"\n\n", b"data: [DONE]\n\n"]


def _anthropic_content(answer: Answer) -> list[dict[str, object]]:
    reply = answer.reply
    content: list[dict[str, object]] = [
        {"type": "redacted_thinking", "data": b.redacted}
        if b.redacted
        else {"type": "thinking", "thinking": b.thinking, "signature": b.signature}
        for b in reply.thinking
    ]
    if reply.blocks:  # (a scripted answer of server-tool blocks: sent as they are)
        content.extend(msgspec.json.decode(b.json) for b in reply.blocks)
    elif reply.text:
        content.append({"type": "text", "text": reply.text})
    for i, call in enumerate(reply.tool_calls):
        content.append(
            {
                "type": "tool_use",
                "id": answer.call_id(i, "toolu_"),
                "name": call.name,
                "input": answer.arguments_value(call),
            }
        )
    return content


_ANTHROPIC_STOPS = {"length": "max_tokens", "refusal": "refusal", "pause_turn": "pause_turn"}


def _anthropic_usage(reply: ModelReply) -> dict[str, object]:
    # The API's input_tokens leaves out the cache reads and writes.
    u = reply.usage
    usage: dict[str, object] = {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens}
    if u.cached_input_tokens or u.cache_write_tokens:
        usage = {
            "input_tokens": u.input_tokens - u.cached_input_tokens - u.cache_write_tokens,
            "cache_creation_input_tokens": u.cache_write_tokens,
            "cache_read_input_tokens": u.cached_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": u.cache_write_tokens - u.cache_write_1h_tokens,
                "ephemeral_1h_input_tokens": u.cache_write_1h_tokens,
            },
            "output_tokens": u.output_tokens,
        }
    if u.reasoning_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": u.reasoning_tokens}
    return usage


def _anthropic_reply(answer: Answer) -> dict[str, object]:
    reply = answer.reply
    stop = _ANTHROPIC_STOPS.get(reply.finish_reason)
    return {
        "id": f"msg_{answer.number:06d}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": _anthropic_content(answer),
        "stop_reason": stop or ("tool_use" if reply.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": _anthropic_usage(reply),
    }


def _sse(data: Mapping[str, object]) -> bytes:
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + json_bytes(data) + b"\n\n"


def _anthropic_block(index: int, block: dict[str, object]) -> list[bytes]:
    if block["type"] == "text":
        start: dict[str, object] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(str(block["text"]))]
        citations = block.get("citations")
        if isinstance(citations, list) and citations:  # (as the API streams them: first)
            start["citations"] = []
            cited = [{"type": "citations_delta", "citation": c} for c in citations]
            deltas = [*cited, *deltas]
    elif block["type"] == "thinking":
        start = {"type": "thinking", "thinking": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": p} for p in _pieces(str(block["thinking"]))
        ]
        deltas.append({"type": "signature_delta", "signature": str(block["signature"])})
    elif block["type"] not in ("tool_use", "server_tool_use"):
        start, deltas = block, []  # (redacted thinking, a server tool's result: it comes whole)
    else:
        start = {**block, "input": {}}
        value = block["input"]
        text = value if isinstance(value, str) else json_bytes(value).decode()
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(text)]
    return [
        _sse({"type": "content_block_start", "index": index, "content_block": start}),
        *(_sse({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas),
        _sse({"type": "content_block_stop", "index": index}),
    ]


def _anthropic_frames(answer: Answer) -> list[bytes]:
    full = _anthropic_reply(answer)
    # output_tokens is 0 at the start (the real API sends a small placeholder):
    # the total comes in message_delta, and clients must take that one.
    usage = {**_anthropic_usage(answer.reply), "output_tokens": 0}
    usage.pop("output_tokens_details", None)  # (sent in message_delta)
    start = {**full, "content": [], "stop_reason": None, "usage": usage}
    frames = [_sse({"type": "message_start", "message": start}), _sse({"type": "ping"})]
    for index, block in enumerate(_anthropic_content(answer)):
        frames += _anthropic_block(index, block)
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None},
        "usage": {
            k: v
            for k, v in _anthropic_usage(answer.reply).items()
            if k in ("output_tokens", "output_tokens_details")
        },
    }
    return [*frames, _sse(delta), _sse({"type": "message_stop"})]


def _ollama_line(answer: Answer, message: Mapping[str, object], done: bool) -> dict[str, object]:
    line: dict[str, object] = {
        "model": answer.model,
        "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "message": {"role": "assistant", **message},
        "done": done,
    }
    if done:
        line |= {
            "done_reason": "length" if answer.reply.finish_reason == "length" else "stop",
            "total_duration": 0,
            "load_duration": 0,
            "prompt_eval_count": answer.reply.usage.input_tokens,
            "prompt_eval_duration": 0,
            "eval_count": answer.reply.usage.output_tokens,
            "eval_duration": 0,
        }
    return line


def _ollama_calls(answer: Answer) -> list[dict[str, object]]:
    return [
        {"function": {"name": c.name, "arguments": answer.arguments_value(c)}}
        for c in answer.reply.tool_calls
    ]


def _ollama_reply(answer: Answer) -> dict[str, object]:
    message: dict[str, object] = {"content": answer.reply.text}
    if answer.reply.tool_calls:
        message["tool_calls"] = _ollama_calls(answer)
    return _ollama_line(answer, message, done=True)


def _ollama_frames(answer: Answer) -> list[bytes]:
    lines = [_ollama_line(answer, {"content": p}, False) for p in _pieces(answer.reply.text)]
    if answer.reply.tool_calls:
        # Ollama sends each tool call whole, in a line of its own.
        calls = {"content": "", "tool_calls": _ollama_calls(answer)}
        lines.append(_ollama_line(answer, calls, False))
    lines.append(_ollama_line(answer, {"content": ""}, True))
    return [json_bytes(line) + b"\n" for line in lines]


# By API: the reply as one JSON object, the reply as stream frames, the streams'
# content type, and the API of each path served. (The Responses API's reply and
# frames are _fake_responses', which builds on this module: fake_server joins them.)
REPLY = {"openai": _openai_reply, "anthropic": _anthropic_reply, "ollama": _ollama_reply}
FRAMES = {"openai": _openai_frames, "anthropic": _anthropic_frames, "ollama": _ollama_frames}
STREAM_TYPES = {
    "openai": b"text/event-stream; charset=utf-8",
    "anthropic": b"text/event-stream; charset=utf-8",
    "ollama": b"application/x-ndjson",
    "responses": b"text/event-stream; charset=utf-8",
}
ROUTES: dict[str, ApiName] = {
    "/v1/chat/completions": "openai",
    "/v1/messages": "anthropic",
    "/api/chat": "ollama",
    "/v1/responses": "responses",
}
_OPENAI_ERRORS = {
    400: ("invalid_request_error", None),
    404: ("invalid_request_error", None),
    405: ("invalid_request_error", None),
    413: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    429: ("requests", "rate_limit_exceeded"),
}
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


def error_body(api: ApiName | None, status: int, message: str) -> dict[str, object]:
    """The JSON error *api* answers with *status* (None: OpenAI's shape)."""
    if api == "ollama":
        return {"error": message}
    if api == "anthropic":
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind, code = _OPENAI_ERRORS.get(status, ("server_error" if status >= 500 else "error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def authorized(api: ApiName, headers: dict[bytes, bytes], key: str | None) -> bool:
    """Do *headers* carry *key* as *api* expects it (None: every request may go)?"""
    if key is None:
        return True
    bearer = headers.get(b"authorization") == b"Bearer " + key.encode()
    if api == "anthropic":
        # As the real API: x-api-key, or the Bearer token the official client sends.
        return bearer or headers.get(b"x-api-key") == key.encode()
    return bearer
