"""agentrio.toml: parsing, where it is found, errors that name the file, the key and
what was expected; model strings and tiers on AgentSpec; escalation on a stall."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import attrs
import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    Config,
    ConfigError,
    InvalidArgument,
    Limits,
    ModelReply,
    ProviderConfig,
    ToolCallRequest,
    Usage,
    load_config,
    parse_config,
)
from agentrio.config import Models, find_config, structure_limits
from agentrio.providers.base import split_model
from agentrio.testing import FakeLLMServer, FakeRequest, ScriptedModel, open_fake_llm
from agentrio.types import ProviderModel

GOOD = """\
escalation = ["fast", "smart"]

[providers.local]
kind = "ollama"
base_url = "http://127.0.0.1:11434"

[providers.openai]
kind = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
max_concurrent = 16
tokens_per_minute = 200000
timeout = 30
stream = true

[tiers]
fast = "local:qwen2.5:0.5b"
smart = "openai:gpt-4o"
"""


@pytest.fixture
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No agentrio.toml anywhere: not in $AGENTRIO_CONFIG, the cwd or the user's folder."""
    monkeypatch.delenv("AGENTRIO_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- "instance:model" ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("local:qwen2.5:0.5b", ("local", "qwen2.5:0.5b")),  # split at the first colon only
        ("openai:gpt-4o", ("openai", "gpt-4o")),
        ("a:b:c:d", ("a", "b:c:d")),
    ],
)
def test_split_model(text: str, parts: tuple[str, str]) -> None:
    assert split_model(text) == parts


@pytest.mark.parametrize("text", ["", "qwen", ":qwen", "local:", ":"])
def test_split_model_errors_spell_out_the_format(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        split_model(text)
    assert "'instance:model'" in str(info.value) and repr(text) in str(info.value)
    assert "local:qwen2.5:0.5b" in str(info.value)  # an example


def test_agent_spec_model_forms() -> None:
    model = ScriptedModel([])
    assert AgentSpec("a", model=model).model is model
    assert AgentSpec("a", model="fast").model == "fast"  # a tier: resolved at spawn
    assert AgentSpec("a", model="local:qwen2.5:0.5b").model == "local:qwen2.5:0.5b"
    for bad in (":m", "local:"):
        with pytest.raises(ConfigError, match="'instance:model'"):
            AgentSpec("a", model=bad)
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.model"):
        AgentSpec("a", model="")


# -- parsing ---------------------------------------------------------------------------


def test_a_good_file(tmp_path: Path) -> None:
    path = write(tmp_path / "agentrio.toml", GOOD)
    config = load_config(path)
    assert config.path == str(path)
    assert config.escalation == ["fast", "smart"]
    assert config.tiers == {"fast": "local:qwen2.5:0.5b", "smart": "openai:gpt-4o"}
    assert config.providers["local"] == ProviderConfig(
        name="local", kind="ollama", base_url="http://127.0.0.1:11434"
    )
    openai = config.providers["openai"]
    assert (openai.name, openai.kind, openai.api_key_env) == ("openai", "openai", "OPENAI_API_KEY")
    assert (openai.max_concurrent, openai.tokens_per_minute, openai.stream) == (16, 200000, True)
    assert openai.timeout == 30.0 and isinstance(openai.timeout, float)  # 30 is 30.0


def test_the_limits_in_a_file(tmp_path: Path) -> None:
    limits = "max_response_bytes = 1000\nmax_line_bytes = 100\nmax_reply_chars = 50\n"
    path = write(tmp_path / "agentrio.toml", PROVIDER + limits + "max_retry_wait = 5\n")
    local = load_config(path).providers["local"]
    assert (local.max_response_bytes, local.max_line_bytes, local.max_reply_chars) == (
        1000,
        100,
        50,
    )
    assert local.max_retry_wait == 5.0 and isinstance(local.max_retry_wait, float)


@pytest.mark.parametrize(
    "table",
    [
        'base_url = "http://h"\napi_key_env = "sk-proj-Q2x9SECRET"',
        'base_url = "ftp://u:sk-proj-Q2x9SECRET@h/v1?key=sk-proj-Q2x9SECRET"',
        'base_url = "https://u:sk-proj-Q2x9SECRET@[::1/v1"',
    ],
)
def test_a_key_in_the_file_is_not_echoed(tmp_path: Path, table: str) -> None:
    text = f'[providers.p]\nkind = "openai"\n{table}\n'
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "agentrio.toml", text))
    assert "providers.p" in str(info.value) and "SECRET" not in str(info.value)


LANES = """\
[providers.local]
kind = "ollama"
base_url = "http://h"
max_concurrent = 8
lane_concurrency = { background = 6 }

[lanes]
tool_concurrency = 4

[lanes.control]
max_concurrency = 2

[lanes.background]
max_concurrency = 1
attempts = 3
backoff_initial = 1
backoff_max = 10
"""


def test_the_lanes_in_a_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "agentrio.toml", LANES))
    assert config.providers["local"].lane_concurrency == {"background": 6}
    assert config.lanes == agentrio.Lanes(
        interactive=agentrio.LanePolicy(max_concurrency=2),
        background=agentrio.LanePolicy(
            max_concurrency=1, attempts=3, backoff_initial=1.0, backoff_max=10.0
        ),
        tool_concurrency=4,
    )
    assert load_config(write(tmp_path / "empty.toml", "")).lanes == agentrio.Lanes()


async def test_the_runtime_takes_its_lanes_from_its_config(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = write(tmp_path / "agentrio.toml", LANES)
    async with agentrio.open_runtime(config=path) as rt:
        lanes = rt._services.tool_lanes
        assert lanes is not None and lanes.policies[3].attempts == 3
    mine = agentrio.Lanes(tool_concurrency=1)
    async with agentrio.open_runtime(config=path, lanes=mine) as rt:
        lanes = rt._services.tool_lanes
        assert lanes is not None and lanes.policies[3].attempts == 1  # lanes= wins
    async with agentrio.open_runtime(config=path, lanes=agentrio.Lanes()) as rt:
        assert rt._services.tool_lanes is None  # nothing limited or retried: no lanes at all
    with pytest.raises(InvalidArgument, match=r"lanes must be an agentrio\.Lanes"):
        async with agentrio.open_runtime(lanes={"tool_concurrency": 1}):  # type: ignore[arg-type]
            pass


def test_an_empty_file_is_an_empty_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "agentrio.toml", ""))
    assert (config.providers, config.tiers, config.escalation) == ({}, {}, [])
    assert config.limits == Limits()


def test_the_limits_table(tmp_path: Path) -> None:
    text = (
        "[limits]\nmax_iterations = 20\ntimeout = 300\nmax_continuation_turns = 3\n"
        "max_identical_calls = 4\nmax_identical_results = 0\nfinal_answer = false\n"
    )
    config = load_config(write(tmp_path / "agentrio.toml", text))
    assert config.limits == Limits(
        max_iterations=20,
        timeout=300.0,
        max_continuation_turns=3,
        max_identical_calls=4,
        max_identical_results=None,  # 0 turns the rule off
        final_answer=False,
    )
    assert isinstance(config.limits.timeout, float)
    # the fields it leaves out keep their defaults
    assert config.limits.max_parallel_tools == Limits().max_parallel_tools


async def test_an_agent_runs_with_the_files_limits(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    text = "[limits]\nmax_continuation_turns = 1\nmax_identical_calls = 3\n"
    config = load_config(write(tmp_path / "agentrio.toml", text))
    model = ScriptedModel(
        [ModelReply(text="Let me look."), ModelReply(text="Let me look again."), ModelReply()]
    )
    async with agentrio.open_runtime(config=config) as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model, limits=config.limits))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == ("done", "Let me look again.")
    assert model.remaining == 1


def test_structure_limits_lays_a_table_over_other_limits() -> None:
    base = Limits(max_iterations=5, max_continuation_turns=3)
    limits = structure_limits({"max_continuation_turns": 1}, where="x.toml", base=base)
    assert limits == Limits(max_iterations=5, max_continuation_turns=1)
    with pytest.raises(ConfigError, match=r"^x\.toml: modes\.background\.mailbox must be an int"):
        structure_limits({"mailbox": -1}, key="modes.background", where="x.toml", base=base)


PROVIDER = '[providers.local]\nkind = "ollama"\nbase_url = "http://h"\n'

BAD_FILES = [
    # (contents, what the message must say besides the file's path)
    ("this is [not toml", ["not valid TOML"]),
    (
        "foo = 1\n" + PROVIDER,
        ["foo is not a known key", "top-level keys are escalation, lanes, limits, modes"],
    ),
    ("providers = 3", ["providers must be a table"]),
    ("[providers]\nlocal = 3", ["providers.local must be a table"]),
    (
        # (a table that gives its kind may leave base_url out: its kind's official
        # one, as ProviderConfig does; without a kind, the kind is what is missing)
        "[providers.local]\nmax_concurrent = 4",
        [
            "providers.local.kind is missing (required: one of "
            '"openai", "anthropic", "ollama", "openai-responses")',
        ],
    ),
    (
        '[providers.local]\nkind = "gemini"\nbase_url = "http://h"',
        [
            'providers.local.kind must be one of "openai", "anthropic", "ollama", '
            '"openai-responses", got "gemini"'
        ],
    ),
    (
        '[providers.local]\nkind = 5\nbase_url = "http://h"',
        [
            'providers.local.kind must be one of "openai", "anthropic", "ollama", '
            '"openai-responses", got 5'
        ],
    ),
    (
        '[providers.local]\nkind = "ollama"\nbase_url = "127.0.0.1:11434"',
        ["providers.local.base_url must start with http:// or https://"],
    ),
    (
        PROVIDER + 'base_ur = "x"',
        [
            "providers.local.base_ur is not a known key (did you mean base_url?)",
            "the keys of providers.local are anthropic_version, api_key_env, auth_header,",
        ],
    ),
    (PROVIDER + "max_concurrent = 0", ["providers.local.max_concurrent must be an int > 0"]),
    (
        PROVIDER + 'max_concurrent = "ten"',
        ['providers.local.max_concurrent must be an int, got "ten"'],
    ),
    (PROVIDER + "max_concurrent = 1.5", ["providers.local.max_concurrent must be an int, got 1.5"]),
    (PROVIDER + "max_retries = -1", ["providers.local.max_retries must be an int >= 0"]),
    (PROVIDER + 'stream = "false"', ['providers.local.stream must be true or false, got "false"']),
    (PROVIDER + "tool_calls_in_text = 1", ["providers.local.tool_calls_in_text must be true or"]),
    (PROVIDER + "timeout = true", ["providers.local.timeout must be a number, got true"]),
    (PROVIDER + "timeout = 0", ["providers.local.timeout must be a number > 0"]),
    (PROVIDER + "api_key_env = 5", ["providers.local.api_key_env must be a string, got an int"]),
    (
        PROVIDER + 'api_key_env = "sk-proj-Q2x9"',
        ["providers.local.api_key_env must name an environment variable"],
    ),
    (
        '[providers.local]\nkind = "ollama"\nbase_url = "http://[::1"',
        ["providers.local.base_url is not a valid URL"],
    ),
    (PROVIDER + "usd_per_million_input_tokens = nan", ["usd_per_million_input_tokens must be"]),
    (PROVIDER + "usd_per_million_output_tokens = inf", ["usd_per_million_output_tokens"]),
    (PROVIDER + "usd_per_million_output_tokens = -1", ["usd_per_million_output_tokens"]),
    (PROVIDER + "max_response_bytes = 0", ["providers.local.max_response_bytes must be"]),
    (PROVIDER + "max_line_bytes = 1.5", ["providers.local.max_line_bytes must be an int, got 1.5"]),
    (
        PROVIDER + 'max_reply_chars = "1M"',
        ['providers.local.max_reply_chars must be an int, got "1M"'],
    ),
    (PROVIDER + "max_retry_wait = -1", ["providers.local.max_retry_wait must be a number > 0"]),
    (
        PROVIDER + "usd_per_million_cached_input_tokens = -1",
        ["usd_per_million_cached_input_tokens must be >= 0"],
    ),
    (PROVIDER + 'max_tokens_field = "max"', ["providers.local", "max_tokens_field"]),
    (
        PROVIDER + "[providers.local.settings]\ntemprature = 0.5",
        ["providers.local.settings", "unknown settings ['temprature']", "temperature, top_p"],
    ),
    (
        PROVIDER + "[providers.local.settings]\ntop_p = 2",
        ["providers.local.settings", "settings.top_p must be a number from 0 to 1, got 2"],
    ),
    (
        PROVIDER + '[providers.local.settings]\nstop = "END"',
        ["providers.local.settings", "settings.stop must be a list of str"],
    ),
    (
        PROVIDER + "[providers.local.settings]\nparallel_tool_calls = false",
        ["providers.local", "ModelSettings.parallel_tool_calls is not a setting of the ollama"],
    ),
    (
        PROVIDER + "[providers.local.settings]\noptions = {num_predict = 9}",
        ["providers.local.settings", "num_predict", "Limits.max_output_tokens"],
    ),
    (
        '[providers."a:b"]\nkind = "ollama"\nbase_url = "http://h"',
        ['providers."a:b": a provider name', "without ':'"],
    ),
    ('tiers = "fast"\n' + PROVIDER, ["tiers must be a table"]),
    (PROVIDER + "[tiers]\nfast = 5", ["tiers.fast must be a string, got 5"]),
    (PROVIDER + '[tiers]\nfast = "qwen"', ["tiers.fast", "'instance:model'", "'qwen'"]),
    (PROVIDER + '[tiers]\nfast = ":qwen"', ["tiers.fast", "'instance:model'"]),
    (
        PROVIDER + '[tiers]\nfast = "remote:qwen"',
        ["tiers.fast", "provider 'remote'", "not configured", "['local']"],
    ),
    ('escalation = "fast"\n' + PROVIDER, ["escalation must be a list of tier names"]),
    ("limits = 3", ["limits must be a table"]),
    (
        "[limits]\nmax_iteration = 3",
        [
            "limits.max_iteration is not a known key (did you mean max_iterations?)",
            "the keys of limits are context_fill, final_answer,",
        ],
    ),
    ("[limits]\nmax_iterations = 0", ["limits.max_iterations must be an int >= 1, got 0"]),
    ('[limits]\nmax_iterations = "3"', ['limits.max_iterations must be an int, got "3"']),
    ("[limits]\nmax_continuation_turns = -1", ["limits.max_continuation_turns", ">= 0"]),
    ("[limits]\nmax_identical_calls = 1", ["limits.max_identical_calls", ">= 2", "0 (off)"]),
    ("[limits]\nmax_identical_results = 2.5", ["limits.max_identical_results must be an int"]),
    ("[limits]\ntimeout = true", ["limits.timeout must be a number, got true"]),
    ("[limits]\ncontext_fill = 2", ["limits.context_fill must be in (0, 1]"]),
    ("[limits]\nfinal_answer = 1", ["limits.final_answer must be true or false, got 1"]),
    ("escalation = [1]\n" + PROVIDER, ["escalation[0] must be a string, got 1"]),
    (
        'escalation = ["fast", "smart"]\n' + PROVIDER + '[tiers]\nfast = "local:m"',
        ["escalation names tier 'smart'", "not in [tiers]", "['fast']"],
    ),
    ("lanes = 3", ["lanes must be a table"]),
    ("[lanes]\ntool_concurrency = 0", ["lanes: ", "tool_concurrency must be an int >= 1"]),
    ('[lanes]\ntool_concurrency = "8"', ["lanes.tool_concurrency", 'must be an int, got "8"']),
    ("[lanes.urgent]\nattempts = 2", ["lanes has unknown keys ['urgent']", "'interactive'"]),
    ("[lanes.background]\nattempts = 0", ["lanes.background", "attempts must be an int >= 1"]),
    ("[lanes.background]\nretries = 2", ["lanes.background.retries is not a known key"]),
    ("[lanes.query]\nbackoff_max = -1", ["lanes.query", "backoff_max must be a number"]),
    (
        "[lanes.control]\nattempts = 2\n[lanes.interactive]\nattempts = 3",
        ["lanes.control and lanes.interactive are one lane"],
    ),
    (
        PROVIDER + "lane_concurrency = { later = 2 }",
        ["providers.local", "lane_concurrency key must be one of", "'later'"],
    ),
    (PROVIDER + "lane_concurrency = { background = 0 }", ["lane_concurrency.background"]),
    # The usual slip: escalation written after [tiers] belongs to the tiers table.
    (
        PROVIDER + '[tiers]\nfast = "local:m"\nescalation = ["fast"]',
        [
            'tiers.escalation must be a string "instance:model", got ["fast"]',
            "escalation is a top-level key, so it goes before the first [table]",
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD_FILES)
def test_bad_files_name_the_file_the_key_and_what_was_expected(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = write(tmp_path / "conf" / "agentrio.toml", text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    for part in expected:
        assert part in message
    assert info.value.__cause__ is None  # the message says it all; no library traceback
    for internal in ("typing.", "Literal[", " @ ", "invalid value for type", "NoneType", "| None"):
        assert internal not in message  # English, not cattrs' wording


@attrs.frozen
class Inner:
    size: int
    mode: Literal["a", "b"] = "a"


@attrs.frozen
class Outer:
    """A table with a field of every kind a config class may have."""

    kind: Literal["openai", "anthropic", "ollama"]
    count: int = 0
    share: float = 0.0
    flag: bool = False
    label: str = ""
    names: list[str] = attrs.field(factory=list)
    tags: dict[str, str] = attrs.field(factory=dict)
    inner: Inner = Inner(1)
    limit: int | None = None
    either: int | str = 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"kind": "foo"}, 'x.kind must be one of "openai", "anthropic", "ollama", got "foo"'),
        ({"kind": True}, 'x.kind must be one of "openai", "anthropic", "ollama", got true'),
        ({"count": "ten"}, 'x.count must be an int, got "ten"'),
        ({"count": True}, "x.count must be an int, got true"),
        ({"share": "half"}, 'x.share must be a number, got "half"'),
        ({"flag": "yes"}, 'x.flag must be true or false, got "yes"'),
        ({"label": 3.5}, "x.label must be a string, got 3.5"),
        ({"names": "ab"}, 'x.names must be a list of strings, got "ab"'),
        ({"names": ["a", 2]}, "x.names[1] must be a string, got 2"),
        ({"tags": ["a"]}, 'x.tags must be a table, got ["a"]'),
        ({"tags": {"a b": 1}}, 'x.tags."a b" must be a string, got 1'),
        ({"inner": 3}, "x.inner must be a table, got 3"),
        ({"inner": {}}, "x.inner.size is missing (required: an int)"),
        ({"inner": {"size": 1, "mode": "c"}}, 'x.inner.mode must be one of "a", "b", got "c"'),
        (
            {"inner": {"size": 1, "sise": 2}},
            "x.inner.sise is not a known key (did you mean size?); the keys of x.inner are "
            "mode, size",
        ),
        ({"limit": 1.5}, "x.limit must be an int, got 1.5"),
        ({"either": [1]}, "x.either must be an int or a string, got [1]"),
        ({"count": float("nan")}, "x.count must be an int, got nan"),
        (
            {"count": "https://u:p4ss-SECRET@h/v1?k=SECRET"},
            'x.count must be an int, got "https://[redacted]@h/v1?k=[redacted]"',
        ),
        ({"count": "y" * 100}, 'x.count must be an int, got "' + "y" * 57 + '..."'),
    ],
)
def test_every_kind_of_field_is_explained_in_english(
    table: dict[str, object], message: str
) -> None:
    from agentrio.config import _structure

    with pytest.raises(ConfigError) as info:
        _structure({"kind": "openai", **table}, Outer, "x", "f.toml")
    text = str(info.value)
    assert text.startswith(f"f.toml: {message}")
    assert "SECRET" not in text


def test_every_problem_of_a_table_is_named_once() -> None:
    from agentrio.config import _structure

    table = {"kind": "x", "count": "1", "inner": {"size": "2"}, "extra": 1}
    with pytest.raises(ConfigError) as info:
        _structure(table, Outer, "t", "f.toml")
    problems = str(info.value).removeprefix("f.toml: ").split("; ")
    assert problems[:3] == [
        't.kind must be one of "openai", "anthropic", "ollama", got "x"',
        't.count must be an int, got "1"',
        't.inner.size must be an int, got "2"',
    ]
    assert problems[3].startswith("t.extra is not a known key")


def test_good_values_of_every_kind() -> None:
    from agentrio.config import _structure

    table = {
        "kind": "ollama",
        "count": 3,
        "share": 1,
        "names": ["a"],
        "tags": {"h": "v"},
        "inner": {"size": 2, "mode": "b"},
        "limit": 4,
        "either": "s",
    }
    outer = _structure(table, Outer, "t", "f.toml")
    assert outer == Outer("ollama", 3, 1.0, False, "", ["a"], {"h": "v"}, Inner(2, "b"), 4, "s")
    assert isinstance(outer.share, float)


def test_a_value_under_a_key_that_may_hold_a_secret_is_not_shown(tmp_path: Path) -> None:
    text = PROVIDER + 'api_key_env = ["sk-proj-Q2x9SECRET"]\n'
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path / "agentrio.toml", text))
    assert "providers.local.api_key_env must be a string, got a list" in str(info.value)
    assert "SECRET" not in str(info.value)


def test_settings_and_wire_fields_in_a_file(tmp_path: Path) -> None:
    text = """\
[providers.local]
kind = "ollama"
base_url = "http://127.0.0.1:11434"

[providers.local.settings]
temperature = 0
stop = ["\\n\\n"]
options = {num_ctx = 8192, top_k = 20}
keep_alive = "10m"
extra_headers = {"x-team" = "blue"}

[providers.claude]
kind = "anthropic"
base_url = "https://api.anthropic.com/v1"
anthropic_version = "2023-06-01"
usd_per_million_input_tokens = 3.0
usd_per_million_output_tokens = 15.0
usd_per_million_cached_input_tokens = 0.3
usd_per_million_cache_write_tokens = 3.75
settings = {cache_control = {type = "ephemeral"}, tool_choice = "auto"}

[providers.vllm]
kind = "openai"
base_url = "http://127.0.0.1:8000/v1"
max_tokens_field = "max_tokens"
"""
    config = load_config(write(tmp_path / "agentrio.toml", text))
    local, claude, vllm = (config.providers[n] for n in ("local", "claude", "vllm"))
    assert local.settings == agentrio.ModelSettings(
        temperature=0,
        stop=("\n\n",),
        options={"num_ctx": 8192, "top_k": 20},
        keep_alive="10m",
        extra_headers={"x-team": "blue"},
    )
    assert claude.settings == agentrio.ModelSettings(
        cache_control={"type": "ephemeral"}, tool_choice="auto"
    )
    assert (
        claude.usd_per_million_cached_input_tokens,
        claude.usd_per_million_cache_write_tokens,
    ) == (
        0.3,
        3.75,
    )
    assert (vllm.max_tokens_field, vllm.settings) == ("max_tokens", None)


def test_parse_config_without_a_file_says_the_configuration() -> None:
    with pytest.raises(ConfigError, match=r"^the configuration: providers\.x must be a table"):
        parse_config({"providers": {"x": 1}})


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_config(tmp_path / "missing.toml")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ConfigError, match=r"dir\.toml: cannot read it"):
        load_config(tmp_path / "dir.toml")


def test_config_in_code_is_checked_too() -> None:
    local = ProviderConfig(name="local", kind="ollama", base_url="http://h")
    with pytest.raises(ConfigError, match=r"tiers\.fast names provider 'nope'"):
        Config(providers={"local": local}, tiers={"fast": "nope:m"})
    with pytest.raises(ConfigError, match="escalation names tier 'x'"):
        Config(providers={"local": local}, escalation=["x"])
    with pytest.raises(ConfigError, match=r"limits must be an agentrio\.Limits"):
        Config(limits={"max_iterations": 3})  # type: ignore[arg-type]


# -- where the file is found ---------------------------------------------------------------


def test_no_file_anywhere(no_config: Path) -> None:
    assert find_config() is None
    with pytest.raises(ConfigError, match=r"no agentrio\.toml found: set AGENTRIO_CONFIG"):
        load_config()


def test_the_user_config_folder(no_config: Path) -> None:
    user = write(no_config / "xdg" / "agentrio" / "agentrio.toml", GOOD)
    assert find_config() == user
    assert load_config().path == str(user)


def test_home_config_without_xdg(no_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    user = write(no_config / "home" / ".config" / "agentrio" / "agentrio.toml", GOOD)
    assert find_config() == user


def test_the_current_folder_comes_before_the_users(no_config: Path) -> None:
    write(no_config / "xdg" / "agentrio" / "agentrio.toml", GOOD)
    write(no_config / "work" / "agentrio.toml", PROVIDER)
    assert find_config() == Path("agentrio.toml")
    assert list(load_config().providers) == ["local"]


def test_agentrio_config_comes_first(no_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(no_config / "work" / "agentrio.toml", GOOD)
    chosen = write(no_config / "elsewhere.toml", PROVIDER)
    monkeypatch.setenv("AGENTRIO_CONFIG", str(chosen))
    assert find_config() == chosen
    assert load_config().path == str(chosen)
    monkeypatch.setenv("AGENTRIO_CONFIG", str(no_config / "missing.toml"))
    with pytest.raises(ConfigError, match=r"missing\.toml: cannot read it"):
        load_config()  # named explicitly: a missing file is an error, not a fallback


# -- resolving models ------------------------------------------------------------------


async def test_models_resolve_tiers_strings_and_objects(tmp_path: Path) -> None:
    text = PROVIDER + '[tiers]\nfast = "local:qwen2.5:0.5b"\nsmart = "local:big"\n'
    models = Models(
        load_config(write(tmp_path / "agentrio.toml", 'escalation = ["fast", "smart"]\n' + text))
    )
    fast = models.resolve("fast")
    assert isinstance(fast, ProviderModel) and fast.name == "qwen2.5:0.5b"
    direct = models.resolve("local:llama3.2:1b")
    assert isinstance(direct, ProviderModel) and direct.name == "llama3.2:1b"
    assert fast.provider is direct.provider  # one provider (one pool) per instance
    scripted = ScriptedModel([])
    assert models.resolve(scripted) is scripted
    smart = models.next_tier("fast")
    assert isinstance(smart, ProviderModel) and smart.name == "big"
    assert models.next_tier("smart") is None and models.next_tier("local:x") is None
    with pytest.raises(ConfigError, match="'medium' is neither a tier"):
        models.resolve("medium")
    with pytest.raises(ConfigError, match="unknown provider instance 'remote'"):
        models.resolve("remote:m")
    await models.aclose()


def test_a_missing_api_key_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    models = Models(load_config(write(tmp_path / "agentrio.toml", GOOD)))
    with pytest.raises(ConfigError, match="'OPENAI_API_KEY' \\(api_key_env\\) is not set"):
        models.resolve("smart")


# -- the built-in instances and agentrio.toml ------------------------------------------------

SECRET = "sk-FAKE-SECRET-7f3a"  # a recognisable fake value: never in a message


def name_and_model(request: FakeRequest) -> ModelReply:
    return ModelReply(text=f"{request.api} {request.model}")


async def test_a_table_overrides_a_built_in_instance(
    no_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The built-in openai's variables hold nothing usable: the table replaces it whole.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", f"ftp://{SECRET}")
    monkeypatch.setenv("MY_KEY", "the-right-key")
    async with open_fake_llm(name_and_model, api_key="the-right-key") as server:
        text = (
            f'[providers.openai]\nkind = "anthropic"\nbase_url = "{server.base_url}"\n'
            'api_key_env = "MY_KEY"\n\n[tiers]\nsmart = "openai:claude-x"\n'
        )
        write(no_config / "work" / "agentrio.toml", text)
        async with agentrio.open_runtime() as rt:
            for name, model in (("a", "openai:claude-y"), ("b", "smart")):
                agent = await rt.spawn_agent(AgentSpec(name, model))
                assert (await agent.run("hi")).final_text.startswith("anthropic claude-")
            # ...and the other built-in instances are still there.
            monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
            with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
                await rt.spawn_agent(AgentSpec("c", "anthropic:claude-x"))
    assert [r.model for r in server.requests] == ["claude-y", "claude-x"]


async def test_a_table_without_base_url_is_its_kinds_official_endpoint(
    no_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-good")
    async with open_fake_llm(name_and_model, api_key="sk-good") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        text = (
            "[providers.anthropic]\nmax_concurrent = 3\n\n"  # kind: the built-in's
            '[providers.work]\nkind = "anthropic"\nstream = true\n'
        )
        config = load_config(write(no_config / "agentrio.toml", text))
        for name in ("anthropic", "work"):
            table = config.providers[name]
            assert table.kind == "anthropic" and table.base_url == server.base_url
            assert table.api_key_env == "ANTHROPIC_API_KEY"
        assert config.providers["anthropic"].max_concurrent == 3
        async with agentrio.open_runtime(config=config) as rt:
            agent = await rt.spawn_agent(AgentSpec("a", "work:claude-z"))
            assert (await agent.run("hi")).final_text == "anthropic claude-z"
    # A table that gives its base_url is a server of its own: no key it did not name.
    own = load_config(write(no_config / "own.toml", '[providers.openai]\nbase_url = "http://h/v1"'))
    assert own.providers["openai"].kind == "openai"
    assert own.providers["openai"].api_key_env is None


def test_a_table_without_base_url_names_an_unusable_variable(
    no_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://{SECRET} /v1")
    path = write(no_config / "agentrio.toml", '[providers.big]\nkind = "openai"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: providers.big has no base_url")
    assert "the environment variable OPENAI_BASE_URL holds whitespace" in message
    assert SECRET not in message


def test_tiers_may_name_the_built_in_instances(no_config: Path) -> None:
    text = '[tiers]\nfast = "ollama:qwen3:0.6b"\nsmart = "openai:gpt-5-mini"\n'
    config = load_config(write(no_config / "agentrio.toml", text))
    assert config.providers == {} and config.tiers["smart"] == "openai:gpt-5-mini"
    with pytest.raises(ConfigError, match=r"tiers\.fast names provider 'olama'.*built in"):
        load_config(write(no_config / "bad.toml", '[tiers]\nfast = "olama:qwen3"\n'))


# -- agents with model strings, over the fake server ------------------------------------------


def one_server_config(server: FakeLLMServer, **extra: object) -> Config:
    local = ProviderConfig(name="local", kind="ollama", base_url=server.base_url)
    tiers = {"fast": "local:small", "smart": "local:big"}
    return Config(providers={"local": local}, tiers=tiers, escalation=["fast", "smart"], **extra)  # type: ignore[arg-type]


async def test_agents_with_tiers_and_model_strings(autojump_clock: trio.testing.MockClock) -> None:
    async with (
        open_fake_llm(lambda r: ModelReply(text=f"I am {r.model}")) as server,
        agentrio.open_runtime(config=one_server_config(server)) as rt,
    ):
        by_tier = await rt.spawn_agent(AgentSpec("a", model="fast"))
        by_string = await rt.spawn_agent(AgentSpec("b", model="local:qwen2.5:0.5b"))
        assert (await by_tier.run("hi")).final_text == "I am small"
        assert (await by_string.run("hi")).final_text == "I am qwen2.5:0.5b"
        with pytest.raises(ConfigError, match="neither a tier"):
            await rt.spawn_agent(AgentSpec("c", model="medium"))
        with pytest.raises(ConfigError, match="unknown provider instance 'remote'"):
            await rt.spawn_agent(AgentSpec("d", model="remote:m"))
        assert (await by_tier.run("again")).stop_reason == "done"  # still running
    assert [r.model for r in server.requests] == ["small", "qwen2.5:0.5b", "small"]


async def test_the_runtime_finds_the_config_file(
    autojump_clock: trio.testing.MockClock, no_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_fake_llm(lambda r: ModelReply(text=r.model)) as server:
        text = f'[providers.local]\nkind = "ollama"\nbase_url = "{server.base_url}"\n'
        path = write(no_config / "work" / "agentrio.toml", text + '[tiers]\nfast = "local:s"\n')
        async with agentrio.open_runtime() as rt:  # ./agentrio.toml
            assert (
                await (await rt.spawn_agent(AgentSpec("a", "fast"))).run("hi")
            ).final_text == "s"
        async with agentrio.open_runtime(config=path) as rt:  # a path
            assert (
                await (await rt.spawn_agent(AgentSpec("a", "local:p"))).run("")
            ).final_text == "p"
        path.rename(no_config / "moved.toml")
        monkeypatch.setenv("AGENTRIO_CONFIG", str(no_config / "moved.toml"))
        async with agentrio.open_runtime() as rt:  # $AGENTRIO_CONFIG
            assert (
                await (await rt.spawn_agent(AgentSpec("a", "local:e"))).run("")
            ).final_text == "e"


async def test_the_lanes_of_a_found_config_file(
    autojump_clock: trio.testing.MockClock, no_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(no_config / "work" / "agentrio.toml", LANES)
    async with agentrio.open_runtime() as rt:  # ./agentrio.toml, as for tiers and modes
        lanes = rt._services.tool_lanes
        assert lanes is not None and lanes.policies[3].attempts == 3
    async with agentrio.open_runtime(lanes=agentrio.Lanes()) as rt:
        assert rt._services.tool_lanes is None  # lanes= wins
    # a found file that cannot be used is an error where it is first needed, not here
    monkeypatch.setenv("AGENTRIO_CONFIG", str(no_config / "missing.toml"))
    async with agentrio.open_runtime() as rt:
        assert rt._services.tool_lanes is None
        with pytest.raises(ConfigError, match="cannot read it"):
            await rt.spawn_agent(AgentSpec("a", model="fast"))


async def test_no_config_a_tier_is_an_error_at_spawn(
    autojump_clock: trio.testing.MockClock, no_config: Path
) -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(ConfigError, match=r"neither a tier.*no agentrio\.toml was found"):
            await rt.spawn_agent(AgentSpec("a", model="fast"))
        with pytest.raises(ConfigError, match=r"'remote'.*built-in ones are openai, anthropic"):
            await rt.spawn_agent(AgentSpec("a", model="remote:m"))
        # Model objects need no configuration.
        spec = AgentSpec("b", model=ScriptedModel([ModelReply(text="ok")]))
        assert (await (await rt.spawn_agent(spec)).run("hi")).final_text == "ok"


# -- escalation ------------------------------------------------------------------------------


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    return f"nothing about {key}"


def by_model(request: FakeRequest) -> ModelReply:
    """The small model repeats one call forever (a stall); the big one answers."""
    if request.model == "big":
        return ModelReply(text="the smart answer", usage=Usage(50, 5))
    if not request.tools:  # the final turn after a stall: no tools offered
        return ModelReply(text="I am stuck", usage=Usage(40, 3))
    return ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": "x"}),), usage=Usage(30, 4))


async def run_escalating(
    server: FakeLLMServer, model: str, escalate: bool, phases: int = 1
) -> list[agentrio.PhaseResult]:
    async with agentrio.open_runtime(config=one_server_config(server)) as rt:
        spec = AgentSpec("a", model=model, tools=[lookup], escalate_on_stall=escalate)
        agent = await rt.spawn_agent(spec)
        return [await agent.run(f"question {i}") for i in range(phases)]


async def test_a_stall_on_fast_is_retried_once_on_smart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_fake_llm(by_model) as server:
        first, second = await run_escalating(server, "fast", escalate=True, phases=2)
    assert (first.stop_reason, first.final_text) == ("done", "the smart answer")
    assert first.tool_calls == ()  # the result is the retry's: smart called no tool
    # Two calls, the final turn, the retry on smart; then the agent stays on smart.
    assert [r.model for r in server.requests] == ["small", "small", "small", "big", "big"]
    assert second.stop_reason == "done"
    # The retry on smart saw the stalled attempt (the context carries over).
    retry = server.requests[3]
    assert [m.content for m in retry.messages if m.role == "user"][-1] == "question 0"
    assert any(m.role == "tool" for m in retry.messages)


@pytest.mark.parametrize(
    ("model", "escalate"),
    [
        ("fast", False),  # not asked for
        ("smart", True),  # the last tier: nowhere to go
        ("local:small", True),  # a model string, not a tier
    ],
)
async def test_no_escalation(
    autojump_clock: trio.testing.MockClock, model: str, escalate: bool
) -> None:
    async with open_fake_llm(by_model) as server:
        (result,) = await run_escalating(server, model, escalate)
    if model == "smart":
        assert result.stop_reason == "done"
        assert [r.model for r in server.requests] == ["big"]
    else:
        assert (result.stop_reason, result.final_text) == ("stalled", "I am stuck")
        assert [r.model for r in server.requests] == ["small"] * 3


async def test_escalation_only_on_a_stall(autojump_clock: trio.testing.MockClock) -> None:
    def answer(request: FakeRequest) -> ModelReply:
        return ModelReply(text=f"{request.model} says hi")

    async with open_fake_llm(answer) as server:
        (result,) = await run_escalating(server, "fast", escalate=True)
    assert result.final_text == "small says hi"
    assert [r.model for r in server.requests] == ["small"]


async def test_escalation_across_two_servers(autojump_clock: trio.testing.MockClock) -> None:
    async with open_fake_llm(by_model) as fast_server, open_fake_llm(by_model) as smart_server:
        config = Config(
            providers={
                "here": ProviderConfig(
                    name="here", kind="openai", base_url=fast_server.base_url + "/v1"
                ),
                "there": ProviderConfig(
                    name="there", kind="anthropic", base_url=smart_server.base_url + "/v1"
                ),
            },
            tiers={"fast": "here:small", "smart": "there:big"},
            escalation=["fast", "smart"],
        )
        async with agentrio.open_runtime(config=config) as rt:
            spec = AgentSpec("a", model="fast", tools=[lookup], escalate_on_stall=True)
            result = await (await rt.spawn_agent(spec)).run("q")
    assert result.final_text == "the smart answer"
    assert [r.api for r in fast_server.requests] == ["openai"] * 3
    assert [r.api for r in smart_server.requests] == ["anthropic"]
