"""Images and documents in: a user turn of text, an image and a PDF, over real HTTP.

The agent's model is the fake LLM server speaking the OpenAI wire format.
Its handler plays a model that can see: it reads the image and the document
of the user's turn (the server decoded them from the request's ``image_url``
and ``file`` parts) and says what it got. A second phase asks a follow-up in
plain text: the history still holds the image, so the model sees it again.

Then the same turn goes to an Ollama instance as an image URL, which
Ollama's API does not take: ``run()`` refuses it before any request.

Run it with ``python examples/image_input.py``.
"""

from __future__ import annotations

import struct
import zlib

import trio

import agentrio
from agentrio import DocumentPart, ImagePart, ModelReply, Provider, ProviderConfig, Usage
from agentrio.testing import FakeRequest, open_fake_llm


def tiny_png(width: int, height: int) -> bytes:
    """A real PNG, black, of *width* x *height* pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    pixels = zlib.compress(b"".join(b"\x00" + bytes(width) for _ in range(height)))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


PDF = b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\ntrailer << >>\n%%EOF\n"


def model(request: FakeRequest) -> ModelReply:
    """Describe every image and document the conversation holds."""
    usage = Usage(input_tokens=40, output_tokens=12)
    seen = []
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, ImagePart) and part.data is not None:
                width, height = struct.unpack(">II", part.data[16:24])
                seen.append(f"a {width}x{height} {part.media_type} image")
            elif isinstance(part, DocumentPart):
                seen.append(f"the document {part.name!r}")
    return ModelReply(text=f"I see {' and '.join(seen)}.", usage=usage)


async def main() -> None:
    async with open_fake_llm(model) as server:
        config = ProviderConfig(name="vision", kind="openai", base_url=server.base_url + "/v1")
        async with Provider(config) as provider, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(agentrio.AgentSpec("eye", provider.model("gpt-x")))
            # (annotated: a list of a str and parts is a list[object] to a type checker)
            turn: list[str | ImagePart | DocumentPart] = [
                "What are these?",
                ImagePart(data=tiny_png(4, 3), media_type="image/png"),
                DocumentPart(data=PDF, name="notes.pdf"),
            ]
            first = await agent.run(turn)
            again = await agent.run("And now?")
        print(first.final_text)
        print(again.final_text)
        sent = server.requests[0].body["messages"]
        kinds = [part["type"] for part in sent[0]["content"]]  # type: ignore[index]
        print(f"the first request's parts: {kinds}")

        ollama = ProviderConfig(name="local", kind="ollama", base_url=server.base_url)
        async with Provider(ollama) as local, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(agentrio.AgentSpec("eye", local.model("llava")))
            try:
                await agent.run(["What is this?", ImagePart(url="https://example.com/cat.png")])
            except agentrio.InvalidArgument as exc:
                print(f"refused: {exc}")
        requests = server.statistics().http_requests
    print(f"image_input: 2 phases answered, {requests} requests, the URL refused before sending")


if __name__ == "__main__":
    trio.run(main)
