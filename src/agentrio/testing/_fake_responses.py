"""The fake LLM server's OpenAI Responses API (``POST /v1/responses``): reading its
requests, writing its responses whole or as stream events, field for field as the
official SDK's ``openai.types.responses`` types have them.

What the real API refuses, this refuses too (answered 400): an item without a
field the API requires, a function tool whose schema is not in strict form
unless it says ``strict: false``, a ``reasoning`` item that nothing follows,
with ``store: false`` a reasoning item without its ``encrypted_content`` (the
server kept nothing to find it by), ``include:
["reasoning.encrypted_content"]`` for a model that does not reason (``gpt-4o``),
and a ``max_output_tokens`` below 16.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec

from ..messages import (
    ChatMessage,
    ContentPart,
    DocumentPart,
    ImagePart,
    ModelReply,
    TextPart,
    ThinkingBlock,
    ToolCallRequest,
)
from . import _fake_wire
from ._fake_wire import (
    _IMAGE_TYPES,
    Answer,
    ApiName,
    BadRequest,
    FakeRequest,
    _arguments,
    _from_data_url,
    _made,
    _name_tool_turns,
    _parts_text,
    _pieces,
    _strict_problem,
    json_bytes,
)

__all__ = [
    "FRAMES",
    "REPLY",
    "parse_request",
    "parse_responses",
    "responses_frames",
    "responses_reply",
]


class _Content(msgspec.Struct):
    """A content part of an input message (input_text, input_image, input_file), of
    an assistant's (output_text, refusal), or of a reasoning item (reasoning_text)."""

    type: Literal[
        "input_text", "input_image", "input_file", "output_text", "refusal", "reasoning_text"
    ]
    text: str = ""
    image_url: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    refusal: str = ""


class _Summary(msgspec.Struct):
    text: str
    type: Literal["summary_text"]


class _Item(msgspec.Struct):
    """One input item: a message (EasyInputMessageParam, or an output message sent
    back), a function_call, a function_call_output or a reasoning item."""

    type: Literal["message", "function_call", "function_call_output", "reasoning"] = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[_Content] | None = None
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[_Content] | None = None
    summary: list[_Summary] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class _Tool(msgspec.Struct):
    type: Literal["function"]
    name: str
    parameters: dict[str, object] | None = None
    strict: bool | None = None
    description: str | None = None


class _Format(msgspec.Struct):
    type: Literal["text", "json_schema", "json_object"]
    name: str | None = None
    schema: dict[str, object] | None = None
    strict: bool | None = None
    description: str | None = None


class _Text(msgspec.Struct):
    format: _Format | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class _Choice(msgspec.Struct):
    type: Literal["function"]
    name: str


class _Request(msgspec.Struct):
    model: str
    input: str | list[_Item]
    instructions: str | None = None
    tools: list[_Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | _Choice | None = None
    stream: bool | None = None
    store: bool | None = None
    include: list[str] | None = None
    max_output_tokens: int | None = None
    parallel_tool_calls: bool | None = None
    text: _Text | None = None


# -- the request ---------------------------------------------------------------------


def _need(value: object, field: str, where: str) -> None:
    if value is None:
        raise BadRequest(f"{where}: missing required parameter '{field}'")


def _input_part(part: _Content, where: str) -> ContentPart:
    if part.type == "input_text":
        return TextPart(part.text)
    if part.type == "input_image":
        url = part.image_url
        if url is None or part.detail is None:
            raise BadRequest(f"{where}: an input_image needs image_url (here) and detail")
        if url.startswith("data:"):
            media_type, data = _from_data_url(url, where, _IMAGE_TYPES)
            return _made(ImagePart, where, data=data, media_type=media_type)
        return _made(ImagePart, where, url=url)
    if part.type == "input_file":
        if part.file_data is not None:
            _, data = _from_data_url(part.file_data, where, ("application/pdf",))
            return _made(DocumentPart, where, data=data, name=part.filename or "")
        if part.file_url is not None:
            return _made(DocumentPart, where, url=part.file_url)
    raise BadRequest(f"{where}: the fake server takes input_text, input_image and input_file parts")


def _message(item: _Item, where: str) -> ChatMessage:
    _need(item.role, "role", where)
    _need(item.content, "content", where)
    role = "system" if item.role == "developer" else item.role
    assert role is not None
    content = item.content
    if isinstance(content, str):
        return ChatMessage(role, content)
    parts = list(content or ())
    if any(p.type == "reasoning_text" for p in parts):
        raise BadRequest(f"{where}: reasoning_text parts go in reasoning items only")
    if role == "assistant":
        if any(p.type.startswith("input_") for p in parts):
            raise BadRequest(f"{where}: an assistant message takes output_text and refusal parts")
        return ChatMessage("assistant", "".join(p.text or p.refusal for p in parts))
    if any(p.type in ("output_text", "refusal") for p in parts):
        raise BadRequest(f"{where}: a {item.role} message takes input_* parts")
    made = tuple(_input_part(p, f"{where}.content[{i}]") for i, p in enumerate(parts))
    if role != "user" and any(not isinstance(p, TextPart) for p in made):
        raise BadRequest(f"{where}: images and files go in user messages only")
    if all(isinstance(p, TextPart) for p in made):
        return ChatMessage(role, _parts_text(made))
    return ChatMessage("user", _parts_text(made), parts=made)


def _reasoning(item: _Item, where: str, store: bool) -> ThinkingBlock:
    _need(item.id, "id", where)
    _need(item.summary, "summary", where)
    if not store and not item.encrypted_content:
        raise BadRequest(
            f"{where}: Item with id {item.id!r} not found. Items are not persisted when "
            "`store` is set to false. Try again with `store` set to true, or pass the "
            "item's encrypted_content."
        )
    content = item.content if isinstance(item.content, list) else ()
    texts = [p.text for p in content if p.type == "reasoning_text"]
    return ThinkingBlock(
        "".join(texts),
        id=item.id or "",
        encrypted_content=item.encrypted_content or "",
        summary=tuple(s.text for s in item.summary or ()),
    )


class _Turns:
    """Input items gathered into turns: an assistant's reasoning, message and
    function calls make one assistant turn, as agentrio keeps them."""

    def __init__(self) -> None:
        self.out: list[ChatMessage] = []
        self.text: list[str] = []
        self.calls: list[ToolCallRequest] = []
        self.thinking: list[ThinkingBlock] = []

    def flush(self) -> None:
        if self.text or self.calls or self.thinking:
            turn = ChatMessage("assistant", "".join(self.text), tuple(self.calls))
            if self.thinking:
                turn = msgspec.structs.replace(turn, thinking=tuple(self.thinking))
            self.out.append(turn)
        self.text, self.calls, self.thinking = [], [], []

    def add(self, item: _Item, where: str, store: bool) -> None:
        if item.type == "reasoning":
            if self.text or self.calls:
                self.flush()
            self.thinking.append(_reasoning(item, where, store))
        elif item.type == "function_call":
            for field in ("call_id", "name", "arguments"):
                _need(getattr(item, field), field, where)
            assert item.name is not None and item.arguments is not None
            arguments = _arguments(item.arguments)
            self.calls.append(ToolCallRequest(item.name, arguments, item.call_id or ""))
        elif item.type == "message" and item.role == "assistant":
            if self.calls:
                self.flush()
            self.text.append(_message(item, where).content)
        else:
            self.flush()
            if item.type == "function_call_output":
                _need(item.call_id, "call_id", where)
                _need(item.output, "output", where)
                output = item.output
                if isinstance(output, str):
                    self.out.append(ChatMessage("tool", output, tool_call_id=item.call_id))
                    return
                parts = list(output or ())
                if any(not p.type.startswith("input_") for p in parts):
                    raise BadRequest(f"{where}.output: takes input_* parts")
                made = tuple(_input_part(p, f"{where}.output[{i}]") for i, p in enumerate(parts))
                shown = made if any(not isinstance(p, TextPart) for p in made) else ()
                self.out.append(
                    ChatMessage("tool", _parts_text(made), tool_call_id=item.call_id, parts=shown)
                )
            else:
                self.out.append(_message(item, where))


def _messages(request: _Request) -> list[ChatMessage]:
    turns = _Turns()
    if request.instructions:
        turns.out.append(ChatMessage("system", request.instructions))
    if isinstance(request.input, str):
        turns.out.append(ChatMessage("user", request.input))
        return turns.out
    store = request.store is not False
    for i, item in enumerate(request.input):
        turns.add(item, f"input[{i}]", store)
    if request.input and request.input[-1].type == "reasoning":
        raise BadRequest(
            f"input[{len(request.input) - 1}]: Item of type 'reasoning' was provided "
            "without its required following item."
        )
    turns.flush()
    return _name_tool_turns(turns.out)


def _tools(request: _Request) -> list[str]:
    for i, tool in enumerate(request.tools or ()):
        if tool.strict is not False:  # (the API reads a tool without strict as strict)
            problem = _strict_problem(tool.parameters or {}, "parameters")
            if tool.parameters is None or problem:
                raise BadRequest(
                    f"tools[{i}]: Invalid schema for function {tool.name!r}: {problem or 'none'} "
                    "(strict mode; send strict: false for a schema not in strict form)"
                )
    return [t.name for t in request.tools or ()]


def _output(request: _Request) -> tuple[dict[str, object] | None, str | None]:
    form = request.text.format if request.text is not None else None
    schema = None
    if form is not None and form.type == "json_schema":
        if form.name is None or form.schema is None:
            raise BadRequest("text.format of type 'json_schema' needs 'name' and 'schema'")
        schema = form.schema
        if form.strict:
            if schema.get("type") != "object":
                raise BadRequest("text.format: a strict schema's root must be an object")
            problem = _strict_problem(schema, "schema")
            if problem:
                raise BadRequest(f"text.format: invalid strict schema: {problem}")
    given = request.tool_choice
    choice = given.name if isinstance(given, _Choice) else given
    if isinstance(given, _Choice) and given.name not in [t.name for t in request.tools or ()]:
        raise BadRequest(f"Tool choice 'function' {given.name!r} not found in 'tools' parameter.")
    return schema, choice


def parse_responses(body: dict[str, object]) -> FakeRequest:
    """Validate *body* as a Responses API request and normalise it.

    Raises:
        BadRequest: as the real API would answer 400 (see the module).
    """
    try:
        request = msgspec.convert(body, _Request)
    except msgspec.ValidationError as exc:
        raise BadRequest(str(exc)) from exc
    if request.max_output_tokens is not None and request.max_output_tokens < 16:
        raise BadRequest(
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, "
            f"but got {request.max_output_tokens} instead."
        )
    if "reasoning.encrypted_content" in (request.include or ()) and request.model.startswith(
        ("gpt-3.5", "gpt-4", "chatgpt-", "gpt-5-chat")
    ):
        raise BadRequest("Encrypted content is not supported with this model.")
    schema, choice = _output(request)
    return FakeRequest(
        api="responses",
        model=request.model,
        messages=_messages(request),
        tools=_tools(request),
        stream=bool(request.stream),
        max_tokens=request.max_output_tokens,
        body=body,
        output_schema=schema,
        tool_choice=choice,
    )


# -- the response --------------------------------------------------------------------


def _usage(reply: ModelReply) -> dict[str, object]:
    u = reply.usage
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {
            "cached_tokens": u.cached_input_tokens,
            "cache_write_tokens": u.cache_write_tokens,
        },
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total_tokens,
    }


def _incomplete(reply: ModelReply) -> dict[str, object] | None:
    reason = {"length": "max_output_tokens", "content_filter": "content_filter"}
    if reply.finish_reason in reason:
        return {"reason": reason[reply.finish_reason]}
    return None


def _items(answer: Answer, done: bool = True) -> list[dict[str, Any]]:
    """The output items: reasoning, the message (text or refusal), function calls;
    as ``response.output_item.done`` has them (*done*), or as ``added`` has them."""
    reply, n = answer.reply, answer.number
    status = "completed" if done else "in_progress"
    items: list[dict[str, Any]] = []
    for i, block in enumerate(reply.thinking):
        item: dict[str, Any] = {
            "id": block.id or f"rs_{n:06d}{i:02d}",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": t} for t in block.summary] if done else [],
            "encrypted_content": (block.encrypted_content or None) if done else None,
        }
        if block.thinking and done:
            item["content"] = [{"type": "reasoning_text", "text": block.thinking}]
        items.append(item)
    if reply.text or reply.refusal:
        part: dict[str, object] = (
            {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
            if reply.text
            else {"type": "refusal", "refusal": reply.refusal}
        )
        items.append(
            {
                "id": f"msg_{n:06d}",
                "type": "message",
                "status": "incomplete" if _incomplete(reply) and done else status,
                "role": "assistant",
                "content": [part] if done else [],
            }
        )
    for i, call in enumerate(reply.tool_calls):
        items.append(
            {
                "id": f"fc_{n:06d}{i:02d}",
                "type": "function_call",
                "status": status,
                "call_id": answer.call_id(i, "call_"),
                "name": call.name,
                "arguments": answer.arguments_text(call) if done else "",
            }
        )
    return items


def _response(answer: Answer, *, done: bool = True) -> dict[str, object]:
    reply = answer.reply
    incomplete = _incomplete(reply)
    status = ("incomplete" if incomplete else "completed") if done else "in_progress"
    return {
        "id": f"resp_{answer.number:06d}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": incomplete if done else None,
        "instructions": None,
        "max_output_tokens": None,
        "model": answer.model,
        "output": _items(answer) if done else [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _usage(reply) if done else None,
        "metadata": {},
    }


def responses_reply(answer: Answer) -> dict[str, object]:
    """The whole response (a ``Response`` object)."""
    return _response(answer)


class _Events:
    """SSE events, each with its ``event:`` line and its ``sequence_number``."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def add(self, kind: str, **fields: object) -> None:
        data = {"type": kind, "sequence_number": len(self.frames), **fields}
        self.frames.append(b"event: " + kind.encode() + b"\ndata: " + json_bytes(data) + b"\n\n")


def _message_events(events: _Events, index: int, item: dict[str, Any]) -> None:
    (part,) = item["content"]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    if part["type"] == "output_text":
        events.add("response.content_part.added", **where, part={**part, "text": ""})
        for piece in _pieces(part["text"]):
            events.add("response.output_text.delta", **where, delta=piece, logprobs=[])
        events.add("response.output_text.done", **where, text=part["text"], logprobs=[])
    else:
        events.add("response.content_part.added", **where, part={**part, "refusal": ""})
        for piece in _pieces(part["refusal"]):
            events.add("response.refusal.delta", **where, delta=piece)
        events.add("response.refusal.done", **where, refusal=part["refusal"])
    events.add("response.content_part.done", **where, part=part)


def _call_events(events: _Events, index: int, item: dict[str, Any]) -> None:
    where = {"item_id": item["id"], "output_index": index}
    arguments = str(item["arguments"])
    for piece in _pieces(arguments):
        events.add("response.function_call_arguments.delta", **where, delta=piece)
    events.add(
        "response.function_call_arguments.done", **where, name=item["name"], arguments=arguments
    )


def _summary_events(events: _Events, index: int, item: dict[str, Any]) -> None:
    for i, part in enumerate(item["summary"]):
        where = {"item_id": item["id"], "output_index": index, "summary_index": i}
        events.add("response.reasoning_summary_part.added", **where, part={**part, "text": ""})
        for piece in _pieces(part["text"]):
            events.add("response.reasoning_summary_text.delta", **where, delta=piece)
        events.add("response.reasoning_summary_text.done", **where, text=part["text"])
        events.add("response.reasoning_summary_part.done", **where, part=part)


def responses_frames(answer: Answer) -> list[bytes]:
    """The response as the stream's events, from ``response.created`` to
    ``response.completed`` (``response.incomplete`` for a cut answer)."""
    events = _Events()
    events.add("response.created", response=_response(answer, done=False))
    events.add("response.in_progress", response=_response(answer, done=False))
    for index, (added, item) in enumerate(zip(_items(answer, False), _items(answer), strict=True)):
        events.add("response.output_item.added", output_index=index, item=added)
        if item["type"] == "message":
            _message_events(events, index, item)
        elif item["type"] == "function_call":
            _call_events(events, index, item)
        else:
            _summary_events(events, index, item)
        events.add("response.output_item.done", output_index=index, item=item)
    whole = _response(answer)
    end = "response.incomplete" if whole["status"] == "incomplete" else "response.completed"
    events.add(end, response=whole)
    return events.frames


# Every API's, the Responses API's with the others (the fake server reads these).
REPLY = {**_fake_wire.REPLY, "responses": responses_reply}
FRAMES = {**_fake_wire.FRAMES, "responses": responses_frames}


def parse_request(api: ApiName, body: dict[str, object]) -> FakeRequest:
    """`_fake_wire.parse_request`, and `parse_responses` for the Responses API."""
    return parse_responses(body) if api == "responses" else _fake_wire.parse_request(api, body)
