"""The built-in instances ``openai``, ``anthropic`` and ``ollama``: no agentrio.toml needed.

From a subprocess with only environment variables set, over the fake server on
127.0.0.1 (each wire); the variables that cannot be used, each a ConfigError at
spawn naming the variable, never its value; OLLAMA_HOST as Ollama reads it; an
Anthropic base URL with or without ``/v1``.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import trio

import agentrio
from agentrio import AgentSpec, ConfigError, ModelReply, ProviderError
from agentrio.config import Config, Models
from agentrio.providers.builtin import builtin_provider
from agentrio.providers.provider import Kind
from agentrio.testing import FakeRequest, open_fake_llm

HI = [agentrio.ChatMessage("user", "hi")]
SECRET = "sk-FAKE-SECRET-7f3a"  # a recognisable fake key: never in a message
_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OLLAMA_HOST",
)


@pytest.fixture
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No agentrio.toml anywhere, and none of the built-ins' variables set."""
    monkeypatch.delenv("AGENTRIO_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def answer(request: FakeRequest) -> ModelReply:
    return ModelReply(text=f"{request.api} answered {request.model}")


# -- no configuration, from a subprocess ---------------------------------------------------

SCRIPT = textwrap.dedent(
    """
    import sys
    import trio
    import agentrio

    async def main() -> None:
        async with agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(agentrio.AgentSpec("a", sys.argv[1]))
            result = await agent.run("hi")
            print(result.stop_reason, result.final_text)

    trio.run(main)
    """
)


@pytest.mark.parametrize(
    ("model", "variables"),
    [
        ("openai:gpt-5-mini", {"OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": "{url}/v1"}),
        # The Anthropic SDK's way (no /v1), and agentrio's (with it): both work.
        ("anthropic:claude-x", {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": "{url}"}),
        ("anthropic:claude-x", {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": "{url}/v1/"}),
        ("ollama:qwen3:0.6b", {"OLLAMA_HOST": "127.0.0.1:{port}"}),
    ],
    ids=["openai", "anthropic", "anthropic-v1", "ollama-host-port"],
)
async def test_zero_config_from_a_subprocess(
    tmp_path: Path, model: str, variables: dict[str, str]
) -> None:
    key = None if model.startswith("ollama") else SECRET  # the fake server checks it
    async with open_fake_llm(answer, api_key=key) as server:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
        for name, value in variables.items():
            env[name] = value.format(url=server.base_url, port=server.port)
        done = await trio.run_process(
            [sys.executable, "-c", SCRIPT, model],
            cwd=tmp_path,  # no agentrio.toml here, nor in HOME
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    instance, name = model.split(":", 1)
    assert out == f"done {instance} answered {name}\n"
    assert [(r.api, r.model) for r in server.requests] == [(instance, name)]
    assert SECRET not in out + err


async def test_the_official_endpoints_by_default(no_config: Path) -> None:
    def config(name: str) -> agentrio.ProviderConfig:
        found = builtin_provider(name)
        assert found is not None
        return found

    assert (config("openai").base_url, config("openai").api_key_env) == (
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
    )
    assert (config("anthropic").base_url, config("anthropic").api_key_env) == (
        "https://api.anthropic.com",
        "ANTHROPIC_API_KEY",
    )
    assert (config("ollama").base_url, config("ollama").api_key_env) == (
        "http://127.0.0.1:11434",
        None,
    )
    assert builtin_provider("local") is None
    # Ollama needs no key: nothing set, it resolves.
    models = Models(Config())
    model = models.resolve("ollama:qwen3:0.6b")
    assert repr(model) == "<ProviderModel ollama:qwen3:0.6b>"
    await models.aclose()


# -- variables that cannot be used ---------------------------------------------------------

UNUSABLE = [
    ("openai:m", {}, "OPENAI_API_KEY", "is not set"),
    ("openai:m", {"OPENAI_API_KEY": ""}, "OPENAI_API_KEY", "is not set"),
    ("openai:m", {"OPENAI_API_KEY": f"{SECRET} "}, "OPENAI_API_KEY", "whitespace"),
    ("openai:m", {"OPENAI_API_KEY": f" {SECRET}"}, "OPENAI_API_KEY", "whitespace"),
    ("openai:m", {"OPENAI_API_KEY": f"{SECRET}\n"}, "OPENAI_API_KEY", "whitespace"),
    ("openai:m", {"OPENAI_API_KEY": f"{SECRET}\x1b"}, "OPENAI_API_KEY", "control"),
    ("openai:m", {"OPENAI_API_KEY": f"{SECRET}\u2019"}, "OPENAI_API_KEY", "outside ASCII"),
    ("openai:m", {"OPENAI_BASE_URL": ""}, "OPENAI_BASE_URL", "is set but empty"),
    ("openai:m", {"OPENAI_BASE_URL": f"ftp://{SECRET}@h/v1"}, "OPENAI_BASE_URL", "not a usable"),
    ("openai:m", {"OPENAI_BASE_URL": f"api.example.com/{SECRET}"}, "OPENAI_BASE_URL", "usable"),
    ("openai:m", {"OPENAI_BASE_URL": f"https:///v1?key={SECRET}"}, "OPENAI_BASE_URL", "usable"),
    ("openai:m", {"OPENAI_BASE_URL": f"http://u:{SECRET}@[::1/v1"}, "OPENAI_BASE_URL", "usable"),
    ("openai:m", {"OPENAI_BASE_URL": f"https://h/v1?k={SECRET} "}, "OPENAI_BASE_URL", "space"),
    ("openai:m", {"OPENAI_BASE_URL": f"http://{SECRET}@h:99999/v1"}, "OPENAI_BASE_URL", "usable"),
    ("anthropic:m", {}, "ANTHROPIC_API_KEY", "is not set"),
    ("anthropic:m", {"ANTHROPIC_API_KEY": f"{SECRET}\t"}, "ANTHROPIC_API_KEY", "whitespace"),
    ("anthropic:m", {"ANTHROPIC_BASE_URL": f"{SECRET}"}, "ANTHROPIC_BASE_URL", "usable"),
    ("ollama:m", {"OLLAMA_HOST": ""}, "OLLAMA_HOST", "is set but empty"),
    ("ollama:m", {"OLLAMA_HOST": f"h:{SECRET}"}, "OLLAMA_HOST", "not a usable URL"),
    ("ollama:m", {"OLLAMA_HOST": f"ftp://{SECRET}"}, "OLLAMA_HOST", "not a usable URL"),
    ("ollama:m", {"OLLAMA_HOST": f"{SECRET} :1"}, "OLLAMA_HOST", "whitespace"),
    ("ollama:m", {"OLLAMA_HOST": "127.0.0.1:114340"}, "OLLAMA_HOST", "not a usable URL"),
]


@pytest.mark.parametrize(("model", "variables", "named", "why"), UNUSABLE)
async def test_an_unusable_variable_is_a_config_error_at_spawn_naming_it(
    no_config: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    variables: dict[str, str],
    named: str,
    why: str,
) -> None:
    # (the other variables of the instance hold usable values: only *named* is wrong)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-good-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-good-key")
    if not variables:
        monkeypatch.delenv(named)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    async with agentrio.open_runtime() as rt:
        with pytest.raises(ConfigError) as info:
            await rt.spawn_agent(AgentSpec("a", model))  # at spawn: no call is made
        assert rt.usage().requests == 0
    message = str(info.value)
    assert named in message
    assert why in message
    assert SECRET not in message
    assert SECRET not in repr(info.value)


# -- OLLAMA_HOST as Ollama's CLI reads it -------------------------------------------------


@pytest.mark.parametrize(
    ("host", "base_url"),
    [
        ("127.0.0.1", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://0.0.0.0:8080"),
        ("ollama.internal", "http://ollama.internal:11434"),
        ("ollama.internal/prefix", "http://ollama.internal:11434/prefix"),
        ("[::1]:5000", "http://[::1]:5000"),
        ("[::1]", "http://[::1]:11434"),
        ("::1", "http://[::1]:11434"),
        ("https://ollama.example.com", "https://ollama.example.com"),
        ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
    ],
)
def test_ollama_host(host: str, base_url: str) -> None:
    config = builtin_provider("ollama", {"OLLAMA_HOST": host})
    assert config is not None and config.base_url == base_url


# -- base URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_an_anthropic_base_url_with_or_without_v1(suffix: str) -> None:
    async with open_fake_llm(answer) as server:
        config = agentrio.ProviderConfig(
            name="claude", kind="anthropic", base_url=server.base_url + suffix
        )
        async with agentrio.Provider(config, api_key="k") as provider:
            reply = await provider.complete("c", HI, [], max_output_tokens=9)
    assert reply.text == "anthropic answered c"


async def test_an_anthropic_gateway_path_gets_v1_as_the_sdk_adds_it() -> None:
    async with open_fake_llm(answer) as server:
        config = agentrio.ProviderConfig(
            name="claude", kind="anthropic", base_url=server.base_url + "/gateway"
        )
        async with agentrio.Provider(config, api_key="k") as provider:
            with pytest.raises(ProviderError, match=r"no route for /gateway/v1/messages"):
                await provider.complete("c", HI, [], max_output_tokens=9)


async def test_an_openai_base_url_is_used_as_given(
    no_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No /v1 is added: compatible servers put their API under different paths.
    async with open_fake_llm(answer) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        models = Models(Config())
        model = models.resolve("openai:m")
        try:
            with pytest.raises(ProviderError, match=r"HTTP 404.*no route for /chat/completions"):
                await model.complete(HI, [], max_output_tokens=9)
        finally:
            await models.aclose()


def test_a_responses_table_without_base_url_is_openais_endpoint() -> None:
    from agentrio.providers.builtin import kind_defaults

    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    assert kind_defaults("openai-responses", env) == kind_defaults("openai", env)
    assert kind_defaults("openai-responses", {})["api_key_env"] == "OPENAI_API_KEY"


# -- ProviderConfig without base_url: as a table without one ---------------------------------


@pytest.mark.parametrize(
    ("kind", "base_url", "key_env"),
    [
        ("openai", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ("openai-responses", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ("anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
        ("ollama", "http://127.0.0.1:11434", None),
    ],
)
def test_a_provider_config_without_base_url_is_the_official_endpoint(
    no_config: Path, kind: Kind, base_url: str, key_env: str | None
) -> None:
    # The issue's "ProviderConfig needs a base_url; api_key_env defaults to
    # nothing": in code as in agentrio.toml, leaving base_url out is the official API.
    config = agentrio.ProviderConfig(name="mine", kind=kind)
    assert (config.base_url, config.api_key_env) == (base_url, key_env)
    assert type(config.base_url) is str
    assert config == agentrio.ProviderConfig(
        name="mine", kind=kind, base_url=base_url, api_key_env=key_env
    )
    own = agentrio.ProviderConfig(name="mine", kind=kind, api_key_env="MY_KEY")
    assert own.api_key_env == "MY_KEY"
    # A base URL given gets no key it did not ask for; an empty one is still refused.
    assert (
        agentrio.ProviderConfig(name="l", kind="openai", base_url="http://h/v1").api_key_env is None
    )
    with pytest.raises(ConfigError, match="must start with http"):
        agentrio.ProviderConfig(name="l", kind="openai", base_url="")


async def test_a_provider_config_without_base_url_follows_the_variables(
    no_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://{SECRET}@:80/v1")
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL") as info:
        agentrio.ProviderConfig(name="mine", kind="openai")
    assert SECRET not in str(info.value)
    async with open_fake_llm(answer, api_key=SECRET) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        config = agentrio.ProviderConfig(name="mine", kind="openai")
        async with agentrio.Provider(config) as provider:
            reply = await provider.complete("gpt-5-mini", HI, [], max_output_tokens=9)
    assert reply.text == "openai answered gpt-5-mini"
