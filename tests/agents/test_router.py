"""The router: Route, RuleRouter's rules (shape, keywords, tool hints, length) in
several languages and scripts, its [router] table in agentrio.toml."""

# ruff: noqa: RUF001  (full-width punctuation on purpose: requests in Japanese)

from __future__ import annotations

import tomllib

import pytest
import trio
import trio.testing

import agentrio
from agentrio import Route, RuleRouter
from agentrio.agents.routing.router import choose_route

ROUTER = RuleRouter()


def test_route() -> None:
    assert Route("inline") == Route("inline", None, "")
    with pytest.raises(agentrio.InvalidArgument, match=r"Route\.mode must be a non-empty str"):
        Route("")
    with pytest.raises(agentrio.InvalidArgument, match=r"Route\.tier must be a non-empty str"):
        Route("inline", "")
    with pytest.raises(agentrio.InvalidArgument, match=r"Route\.reason must be a str"):
        Route("inline", None, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_", "mode", "reason"),
    [
        # keywords (English by default)
        ("Draft a letter to the landlord.", "background", "background keyword 'draft'"),
        ("Please RESEARCH this topic.", "background", "background keyword 'research'"),
        ("What is the capital of France?", "inline", "inline keyword 'what is'"),
        # a keyword is a whole word: "drafty" is not "draft"
        ("It is drafty in here.", "inline", "7 estimated tokens (short_request_tokens: 20)"),
        # shape
        ("Fix this:\n```\nx = 1\n```", "background", "a code block"),
        ("Two things:\n1. the tests\n2. the docs", "background", "a list of 2 items"),
        ("Buy:\n- milk\n- eggs", "background", "a list of 2 items"),
        ("a\nb\nc\nd", "background", "4 lines"),
        ("a\n\nb\n\nc", "inline", "3 estimated tokens (short_request_tokens: 20)"),  # 3 lines
        ("Read https://a.example/x then https://b.example/y", "background", "2 links or paths"),
        ("Is src/main.py older than docs/api.md?", "background", "2 links or paths"),
        ("Look at /etc/hosts and ./notes", "background", "2 links or paths"),
        (
            "Summarise https://a.example/x",
            "inline",
            "9 estimated tokens (short_request_tokens: 20)",
        ),
        # tool hints: two different ones
        ("read the log and search it for errors", "background", "tool hints 'read', 'search'"),
        ("Please search for the latest version, thanks.", "inline", "13 estimated tokens"),
        # length
        # length, in estimated tokens: ASCII characters / 3.5, plus one
        ("x" * 175, "background", "51 estimated tokens (long_request_tokens: 50)"),
        ("x" * 172, "inline", "no rule matched"),
        ("x" * 66, "inline", "19 estimated tokens (short_request_tokens: 20)"),
        ("x" * 67, "inline", "no rule matched"),
        ("Hi!", "inline", "1 estimated tokens (short_request_tokens: 20)"),
    ],
)
def test_rules(request_: str, mode: str, reason: str) -> None:
    route = ROUTER(request_)
    assert route.mode == mode
    assert route.reason.startswith(reason)


@pytest.mark.parametrize(
    ("request_", "mode", "reason"),
    [
        # Japanese: no spaces, full-width list markers; routed by shape and length
        ("東京の天気は？", "inline", "8 estimated tokens"),
        ("作業：\n１．ログを読む\n２．エラーを探す", "background", "a list of 2 items"),
        ("・りんご\n・みかん\n・ぶどう", "background", "a list of 3 items"),
        ("① 設計\n② 実装", "background", "a list of 2 items"),
        ("会議の議事録を要約してください。" * 4, "background", "65 estimated tokens"),
        ("このコードを直して：\n```\nprint(1)\n```", "background", "a code block"),
        ("https://a.example/x、https://b.example/yを比べて", "background", "2 links or paths"),
        # Russian, Arabic, Chinese
        ("Сколько времени?", "inline", "15 estimated tokens"),
        ("ما هو الوقت الآن؟", "inline", "15 estimated tokens"),
        ("第一步\n第二步\n第三步\n第四步", "background", "4 lines"),
        ("请总结这份报告。" * 8, "background", "65 estimated tokens"),
        # a request in Chinese says in 60 characters what English says in 200
        (
            "请详细分析以下三份季度报告，比较收入、利润率和前景，并用表格总结差异，"
            "最后给出建议。另外请检查每份报告中的数据是否一致。",
            "background",
            "61 estimated tokens",
        ),
        ("一、检查日志\n二、修复错误\n三、运行测试", "background", "a list of 3 items"),
        ("十一、检查日志\n十二、修复错误", "background", "a list of 2 items"),
        ("１、ログを読む\n２、エラーを探す", "background", "a list of 2 items"),
        ("一些问题、一些答案", "inline", "10 estimated tokens"),
    ],
)
def test_rules_in_other_languages(request_: str, mode: str, reason: str) -> None:
    route = ROUTER(request_)
    assert (route.mode, route.reason.split(" (")[0]) == (mode, reason.split(" (")[0])


def test_keywords_in_any_script() -> None:
    router = RuleRouter(background_keywords=["作成", "Entwurf"], inline_keywords=["とは"])
    assert router("契約書を作成して").reason == "background keyword '作成'"
    assert router("契約書を作成して").mode == "background"
    assert router("Bitte einen ENTWURF schreiben").reason == "background keyword 'entwurf'"
    assert router("量子コンピュータとは何ですか" + "。" * 30).reason == "inline keyword 'とは'"
    # a word of ASCII letters among words of another script is still found
    assert RuleRouter(tool_hints=["grep", "git"])("gitでgrepして").mode == "background"


def test_empty_lists_turn_the_word_rules_off() -> None:
    router = RuleRouter(background_keywords=[], inline_keywords=[], tool_hints=[])
    assert router("Draft it.").reason == "3 estimated tokens (short_request_tokens: 20)"
    assert router("read it and search it " * 4).reason == "no rule matched"


def test_thresholds_and_tiers() -> None:
    router = RuleRouter(
        long_request_tokens=20,
        short_request_tokens=3,
        max_inline_lines=1,
        min_list_items=3,
        min_references=1,
        min_tool_hints=1,
        simple_tier="fast",
        default_tier="default",
        complex_tier="smart",
    )
    assert router("Hi") == Route("inline", "fast", "1 estimated tokens (short_request_tokens: 3)")
    assert router("Tell me a joke") == Route("inline", "default", "no rule matched")
    assert router("y" * 80).tier == "smart"
    assert router("a\nb").reason == "2 lines"
    assert router("- a\n- b").reason == "2 lines"  # 2 items: not a list at 3
    assert router("see https://a.example").reason == "1 links or paths"
    assert router("search").reason == "tool hints 'search'"
    assert router.tiers() == ("fast", "default", "smart")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"long_request_tokens": 0}, "RuleRouter.long_request_tokens must be an int >= 1"),
        ({"min_tool_hints": True}, "RuleRouter.min_tool_hints must be an int >= 1"),
        ({"background_keywords": "draft"}, "RuleRouter.background_keywords must be a list"),
        ({"tool_hints": ["ok", " "]}, "RuleRouter.tool_hints must hold non-empty strings"),
        ({"simple_tier": ""}, "RuleRouter.simple_tier must be a non-empty str or None"),
    ],
)
def test_bad_rules(kw: dict[str, object], match: str) -> None:
    with pytest.raises(agentrio.InvalidArgument, match=match):
        RuleRouter(**kw)  # type: ignore[arg-type]


def test_a_request_must_be_a_str() -> None:
    with pytest.raises(agentrio.InvalidArgument, match="request must be a str"):
        ROUTER(b"hi")  # type: ignore[arg-type]


async def test_choose_route_takes_sync_and_async_routers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(request: str) -> Route:
        await trio.sleep(1)
        return Route("background", None, f"async: {request}")

    assert await choose_route(lambda r: Route("inline", "fast", r), "x") == Route(
        "inline", "fast", "x"
    )
    assert await choose_route(slow, "y") == Route("background", None, "async: y")
    with pytest.raises(agentrio.InvalidArgument, match=r"must return an agentrio\.Route"):
        await choose_route(lambda r: ("inline", None), "x")


# -- [router] in agentrio.toml ---------------------------------------------------------------


def test_the_router_table() -> None:
    text = """
    [providers.local]
    kind = "ollama"
    base_url = "http://127.0.0.1:11434"

    [tiers]
    fast = "local:small"
    smart = "local:big"

    [router]
    long_request_tokens = 500
    background_keywords = ["entwurf", "schriftsatz"]
    inline_keywords = []
    simple_tier = "fast"
    complex_tier = "smart"
    """
    config = agentrio.parse_config(tomllib.loads(text), path="agentrio.toml")
    assert config.router == RuleRouter(
        long_request_tokens=500,
        background_keywords=["entwurf", "schriftsatz"],
        inline_keywords=[],
        simple_tier="fast",
        complex_tier="smart",
    )
    assert config.router("Einen Schriftsatz bitte") == Route(
        "background", "smart", "background keyword 'schriftsatz'"
    )
    assert agentrio.parse_config({}).router == RuleRouter()


@pytest.mark.parametrize(
    ("toml", "match"),
    [
        ("[router]\nlong_request_tokens = 0", "router.long_request_tokens must be an int >= 1"),
        ("[router]\nlong_request_tokens = '3'", r"router.long_request_tokens must be an int"),
        ("[router]\ntool_hints = 'search'", r"router.tool_hints must be a list of strings"),
        ("[router]\ntool_hints = [1]", r"router.tool_hints must be a list of strings"),
        (
            "[router]\nkeywords = []",
            r"router.keywords is not a known key \(did you mean inline_keywords\?\)",
        ),
        ("[router]\nsimple_tier = 'fast'", r"router names tier 'fast', which is not in \[tiers\]"),
        ("router = 3", "router must be a table of RuleRouter fields"),
    ],
)
def test_bad_router_tables(toml: str, match: str) -> None:
    with pytest.raises(agentrio.ConfigError, match=match) as info:
        agentrio.parse_config(tomllib.loads(toml), path="agentrio.toml")
    assert str(info.value).startswith("agentrio.toml: ")
