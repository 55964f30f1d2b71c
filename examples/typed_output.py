"""Typed outputs: an agent whose answers are a ``msgspec.Struct``, on three wire formats.

The agent's spec declares ``output_type=Movie``: each phase's answer is
parsed and validated as a ``Movie``, and ``result.output`` is one (typed
for mypy: the spec is an ``AgentSpec[Movie]``, the result a
``PhaseResult[Movie]``). The provider's model is told the schema in its
API's own way: OpenAI's ``response_format`` (a strict JSON schema),
Ollama's ``format``, Anthropic's forced ``final_result`` tool.

The model is the fake LLM server over real HTTP. Its handler plays a model
that forgets the ``year`` in its first answer: the agent sends the answer
back with why it was refused, and the model answers again. Then ``map``
looks up three films at once, each result a ``Movie``.

Run it with ``python examples/typed_output.py``.
"""

from __future__ import annotations

from typing import Literal

import msgspec
import trio

import agentrio
from agentrio import ModelReply, Usage
from agentrio.testing import FakeRequest, open_fake_llm


class Movie(msgspec.Struct):
    title: str
    year: int
    genres: list[str]


CATALOG = {
    "alien": Movie("Alien", 1979, ["horror", "science fiction"]),
    "heat": Movie("Heat", 1995, ["crime"]),
    "up": Movie("Up", 2009, ["animation", "adventure"]),
}
WIRES: list[tuple[Literal["openai", "anthropic", "ollama"], str]] = [
    ("openai", "/v1"),
    ("anthropic", "/v1"),
    ("ollama", ""),
]
# How each wire format asks for an answer of the schema: a field of its request body.
SCHEMA_FIELD = {"openai": "response_format", "anthropic": "tool_choice", "ollama": "format"}


def play_a_model(request: FakeRequest) -> ModelReply:
    """Answer with the film the first user turn names; forget its year the first time."""
    assert request.output_schema is not None  # the wire format told the schema
    asked = [m.content for m in request.messages if m.role == "user"]
    film = CATALOG[asked[0].lower()]
    answer = msgspec.structs.asdict(film)
    if len(asked) == 1:  # the first answer: no year (the agent refuses it)
        del answer["year"]
    return ModelReply(text=msgspec.json.encode(answer).decode(), usage=Usage(40, 12))


def shown(sent: object) -> str:
    """What the request carried, in short."""
    assert isinstance(sent, dict)
    if "json_schema" in sent:
        return f"{sent['type']}, strict: {sent['json_schema']['strict']}"
    if "name" in sent:
        return f"forced tool {sent['name']!r}"
    return f"a JSON schema of {sorted(sent['properties'])}"


async def main() -> None:
    retries = 0
    async with open_fake_llm(play_a_model) as server, agentrio.open_runtime() as rt:
        for kind, path in WIRES:
            config = agentrio.ProviderConfig(name=kind, kind=kind, base_url=server.base_url + path)
            async with agentrio.Provider(config) as provider:
                spec = agentrio.AgentSpec("critic", provider.model("m"), output_type=Movie)
                agent = await rt.spawn_agent(spec, name=f"critic-{kind}")
                result = await agent.run("Alien")
                movie = result.output  # a Movie | None, for mypy too
                assert movie is not None
                sent = server.requests[-1].body[SCHEMA_FIELD[kind]]
                print(f"{kind}: {movie.title} ({movie.year}); {SCHEMA_FIELD[kind]}: {shown(sent)}")
                history = await agent.history()
                retries += sum(t.message.content.startswith("Your answer") for t in history)
                if kind == "openai":
                    many = await rt.map(spec, ["Heat", "Up", "Alien"])
                    years = [
                        r.output.year
                        for r in many
                        if isinstance(r, agentrio.PhaseResult) and r.output
                    ]
                    print(f"map: {years}")
    print(f"typed outputs: 3 wire formats, {retries} retries, map: {len(years)} movies")


if __name__ == "__main__":
    trio.run(main)
