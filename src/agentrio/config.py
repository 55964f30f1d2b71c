"""agentrio.toml: provider instances and model tiers, structured by cattrs into attrs classes.

Example (top-level keys such as ``escalation`` go before the first table:
after ``[tiers]`` they would belong to it):

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

    [tiers]
    fast = "local:qwen2.5:0.5b"
    smart = "openai:gpt-4o"

    [limits]
    max_iterations = 20
    max_continuation_turns = 3

    [modes.inline]
    max_iterations = 8

    [router]
    simple_tier = "fast"
    complex_tier = "smart"

    [lanes]
    tool_concurrency = 8

    [lanes.background]
    max_concurrency = 2
    attempts = 3

The file is ``$AGENTRIO_CONFIG`` if set, else ``./agentrio.toml``, else
``agentrio/agentrio.toml`` in the user config folder (``$XDG_CONFIG_HOME`` or
``~/.config``). Every error names the file, the key and what was expected.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import cattrs

from .agents.budgets.limits import Limits
from .agents.routing.modes import PRESETS, Mode
from .agents.routing.router import RuleRouter
from .agents.routing.tiers import check_ladder, fallback_tier, next_configured
from .agents.tools.lanes import Lanes
from .errors import AgentrioError, ConfigError, InvalidArgument
from .messages import ModelSettings
from .providers.base import MODEL_FORMAT, Model, split_model
from .providers.builtin import BUILTIN_NAMES, builtin_provider, kind_defaults
from .providers.limiter import LANES
from .providers.provider import Provider, ProviderConfig
from .providers.redact import redact_url

__all__ = [
    "Config",
    "Models",
    "find_config",
    "found_config",
    "load_config",
    "parse_config",
    "structure_limits",
    "structure_modes",
]

_TOP_LEVEL = ("providers", "tiers", "escalation", "limits", "modes", "router", "lanes")


@attrs.frozen
class Config:
    """The parsed agentrio.toml.

    Pass it (or the path of a file) as ``open_runtime(config=...)``. Agents
    whose ``model`` is a string resolve it through it when spawned; one
    [`Provider`][agentrio.Provider] is made per instance, on first use, and closed
    when the runtime ends. Without ``config=``, the runtime calls
    [`load_config`][agentrio.load_config] the first time it needs one. The file
    is described in [agentrio.toml][agentriotoml]; for example:

        escalation = ["fast", "smart"]   # before the first [table]

        [providers.local]
        kind = "ollama"
        base_url = "http://127.0.0.1:11434"

        [providers.openai]
        kind = "openai"
        base_url = "https://api.openai.com/v1"
        api_key_env = "OPENAI_API_KEY"

        [tiers]
        fast = "local:qwen2.5:0.5b"
        smart = "openai:gpt-4o"

        [limits]
        max_iterations = 20
        max_identical_results = 0   # 0 turns a stall rule off (TOML has no null)

        [modes.inline]
        max_iterations = 8

        [router]
        simple_tier = "fast"
        complex_tier = "smart"

        [lanes]
        tool_concurrency = 8

        [lanes.background]
        max_concurrency = 2
        attempts = 3

    Attributes:
        providers: provider instances by name (``[providers.NAME]`` tables).
            The built-in instances ``openai``, ``anthropic`` and ``ollama``
            (see [No configuration][no-configuration]) are not in it: they
            are made from their environment variables when first named, and
            a table of the same name replaces one. A table may leave out
            ``kind`` when its name is a built-in instance's, and
            ``base_url`` to be its kind's official endpoint (the kind's key
            variable then too, unless it names ``api_key_env``).
        tiers: tier name -> ``"instance:model"``; ``""`` declares a tier
            without a model, which falls back to the nearest tier below it in
            ``escalation`` that has one (a ``TierFellBack`` event says so).
        escalation: tiers in order, weakest first: a stalled phase on one is
            retried once on the next that has a model (with
            ``AgentSpec(escalate_on_stall=True)``); the order a tier without
            a model falls back in.
        path: the file it came from (None when built in code).
        limits: the ``[limits]`` table, as [`agentrio.Limits`][agentrio.Limits]: the
            fields it sets, each checked as ``Limits`` checks it, and the
            defaults for the rest (``Limits()`` without the table); ``0``
            turns ``max_identical_calls`` or ``max_identical_results`` off.
            The runtime does not apply it by itself: pass it to the specs
            that should have it, ``AgentSpec(..., limits=config.limits)``
            (or ``attrs.evolve(config.limits, ...)`` to change a field).
        modes: the modes by name: the presets (``inline``, ``background``)
            with the ``[modes.NAME]`` tables laid over them (a new name is
            laid over ``Mode(NAME)``; the fields a table leaves out keep
            their values). A table takes ``max_iterations``, ``timeout``
            (``inf``: no deadline), ``max_continuation_turns`` and ``lane``,
            each checked as ``Mode`` checks it. A runtime with this
            configuration runs ``run(mode="NAME")`` and ``respond()`` in them
            (under ``open_runtime(modes=...)``).
        router: the ``[router]`` table, as the [`agentrio.RuleRouter`][agentrio.RuleRouter]
            (its fields; the ones it leaves out keep their defaults) that
            ``respond()`` uses unless one is given to it or to
            ``open_runtime``.
        lanes: the ``[lanes]`` table, a [`Lanes`][agentrio.Lanes]:
            ``tool_concurrency``, and a table per lane (``interactive``,
            ``query``, ``execute``, ``background``; ``control`` for
            ``interactive``) with the fields of ``LanePolicy``.
            ``open_runtime(config=...)`` uses it unless given ``lanes=``; a
            configuration the runtime finds only when an agent first needs
            a model string comes too late for its lanes.

    Raises:
        ConfigError: a tier names a provider that is neither configured nor
            built in, or is
            not an ``"instance:model"`` string; ``escalation`` names an
            unknown tier; a tier declared ``""`` that ``escalation`` does not
            list, or below which no tier of ``escalation`` has a model;
            ``limits`` is not a ``Limits``; a ``modes`` entry is not a
            ``Mode`` of its key's name; ``router`` is not a
            ``RuleRouter``, or names a tier that is not in ``tiers`` (an
            ``"instance:model"`` string is taken as it is).
    """

    providers: dict[str, ProviderConfig] = attrs.field(factory=dict)
    tiers: dict[str, str] = attrs.field(factory=dict)
    escalation: list[str] = attrs.field(factory=list)
    path: str | None = None
    limits: Limits = attrs.field(factory=Limits)
    modes: dict[str, Mode] = attrs.field(factory=lambda: dict(PRESETS))
    router: RuleRouter = attrs.field(factory=RuleRouter)
    lanes: Lanes = attrs.field(factory=Lanes)

    def __attrs_post_init__(self) -> None:
        where = self.path or "the configuration"
        for tier, target in self.tiers.items():
            if target == "":  # declared without a model: it falls back (routing/tiers.py)
                continue
            try:
                instance, _ = split_model(target)
            except ConfigError as exc:
                raise ConfigError(f"{where}: tiers.{tier}: {exc}") from None
            if instance not in self.providers and instance not in BUILTIN_NAMES:
                raise ConfigError(
                    f"{where}: tiers.{tier} names provider {instance!r}, which is not "
                    f"configured (providers: {sorted(self.providers)}; built in: "
                    f"{', '.join(BUILTIN_NAMES)})"
                )
        if not isinstance(self.limits, Limits):
            raise ConfigError(f"{where}: limits must be an agentrio.Limits, got {self.limits!r}")
        for tier in self.escalation:
            if tier not in self.tiers:
                raise ConfigError(
                    f"{where}: escalation names tier {tier!r}, which is not in [tiers] "
                    f"({sorted(self.tiers)})"
                )
        why = check_ladder(self.tiers, self.escalation)
        if why:
            raise ConfigError(f"{where}: {why}")
        self._check_modes(where)
        if not isinstance(self.router, RuleRouter):
            raise ConfigError(
                f"{where}: router must be an agentrio.RuleRouter, got {self.router!r}"
            )
        for tier in self.router.tiers():
            if tier not in self.tiers and ":" not in tier:
                raise ConfigError(
                    f"{where}: router names tier {tier!r}, which is not in [tiers] "
                    f"({sorted(self.tiers)})"
                )

    def _check_modes(self, where: str) -> None:
        if not isinstance(self.modes, dict):
            raise ConfigError(f"{where}: modes must be a dict of name -> agentrio.Mode")
        for name, mode in self.modes.items():
            if not isinstance(mode, Mode) or mode.name != name:
                raise ConfigError(
                    f"{where}: modes[{name!r}] must be an agentrio.Mode named {name!r}, "
                    f"got {mode!r}"
                )


class _Mismatch(TypeError):
    """A value of the wrong type; the message is written from the declared type."""


def _strict(kind: type) -> Callable[[object, type], object]:
    # cattrs' default hook is kind(value): stream = "false" would become True,
    # max_concurrent = 1.5 would become 1, and tiers.fast = 5 would become "5".
    def structure(value: object, _: type) -> object:
        exact = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
        whole = kind is float and isinstance(value, int) and not isinstance(value, bool)
        if not (exact or whole):
            raise _Mismatch
        return float(value) if whole else value  # type: ignore[arg-type]

    return structure


def _literal(value: object, type_: Any) -> object:
    # cattrs' own check says "foo not in literal typing.Literal[...]"; and
    # True == 1 must not pass for a 1.
    if any(value == a and type(value) is type(a) for a in typing.get_args(type_)):
        return value
    raise _Mismatch


def _union_factory(type_: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    arms = [a for a in typing.get_args(type_) if a is not type(None)]
    none_ok = len(arms) < len(typing.get_args(type_))  # (TOML has no null; code may pass None)

    def structure(value: object, _: Any) -> object:
        if value is None and none_ok:
            return None
        if len(arms) == 1:  # an Optional: the arm's own errors say more than ours
            return converter.structure(value, arms[0])
        for arm in arms:
            try:
                return converter.structure(value, arm)
            except Exception:  # the next arm may take it
                continue
        raise _Mismatch

    return structure


def _list_factory(type_: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    from cattrs.cols import list_structure_factory

    items = list_structure_factory(type_, converter)

    def structure(value: object, _: Any) -> object:
        if not isinstance(value, list):  # cattrs would take "ab" as ["a", "b"]
            raise _Mismatch
        return items(value, type_)

    return structure


def _is_union(type_: Any) -> bool:
    origin: object = typing.get_origin(type_)
    return origin is typing.Union or origin is types.UnionType


def _is_literal(type_: Any) -> bool:
    origin: object = typing.get_origin(type_)
    return origin is typing.Literal


def _is_list(type_: Any) -> bool:
    origin: object = typing.get_origin(type_)
    return origin is list


@functools.cache
def _converter() -> cattrs.Converter:
    # cattrs is imported on first use: a runtime without agentrio.toml never loads it.
    import cattrs

    converter = cattrs.Converter(forbid_extra_keys=True)
    for kind in (bool, int, float, str):
        converter.register_structure_hook(kind, _strict(kind))
    converter.register_structure_hook_func(_is_literal, _literal)
    converter.register_structure_hook_factory(_is_union, _union_factory)
    converter.register_structure_hook_factory(_is_list, _list_factory)
    converter.register_structure_hook_func(lambda t: t == tuple[str, ...], _strings)
    converter.register_structure_hook(ModelSettings, _settings)
    return converter


def _strings(value: object, _: object) -> tuple[str, ...]:
    # (cattrs would make a tuple of a string's characters)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"must be a list of strings, got {value!r}")
    return tuple(value)


def _settings(value: object, _: type) -> ModelSettings:
    """A ``[providers.NAME.settings]`` table as ModelSettings (a ConfigError if not)."""
    fields = ModelSettings.__struct_fields__
    if not isinstance(value, dict):
        raise ConfigError(f"expected a table of ModelSettings fields ({', '.join(fields)})")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown settings {unknown}; the fields of ModelSettings are {', '.join(fields)}"
        )
    try:
        return ModelSettings(**value)
    except InvalidArgument as exc:
        raise ConfigError(str(exc).replace("ModelSettings.", "settings.", 1)) from None


# -- errors in English ----------------------------------------------------------------------

_NAMES: dict[Any, tuple[str, str]] = {  # type: (one, a list of them)
    bool: ("true or false", "true or false values"),
    int: ("an int", "ints"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# Keys whose values may be secrets: a wrong value there is described, not shown.
_SECRET_KEY = re.compile(r"(^|_)key($|_)|secret|password|auth|header", re.IGNORECASE)
_MISSING = object()


def _expected(type_: Any) -> str:
    """What a value of *type_* is, in words (``an int``, ``one of "a", "b"``, ``a table``)."""
    if type_ in _NAMES:
        return _NAMES[type_][0]
    origin, args = typing.get_origin(type_), typing.get_args(type_)
    if origin is typing.Literal:
        return "one of " + ", ".join(_toml(a) for a in args)
    if _is_union(type_):
        return " or ".join(_expected(a) for a in args if a is not type(None))
    if origin in (list, tuple, set, frozenset) or type_ in (list, tuple):
        inner = _NAMES.get(args[0]) if args else None
        return f"a list of {inner[1]}" if inner else "a list"
    if origin is dict or type_ is dict or attrs.has(type_):
        return "a table"
    return "a valid value"


def _toml(value: object) -> str:
    """*value* as it is written in TOML (a URL's credentials hidden, a long string cut)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = redact_url(value) if "://" in value else value
        text = text if len(text) <= 60 else text[:57] + "..."
        return json.dumps(text, ensure_ascii=False)
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        shown = [_toml(v) for v in value[:5]]
        return "[" + ", ".join(shown + (["..."] if len(value) > 5 else [])) + "]"
    return str(value)


def _described(value: object) -> str:
    """What *value* is, without showing it (for keys that may hold a secret)."""
    if isinstance(value, bool):
        return "true or false"
    kinds = {str: "a string", int: "an int", float: "a number", list: "a list", dict: "a table"}
    return next((name for kind, name in kinds.items() if isinstance(value, kind)), "a value")


def _join(path: str, key: object) -> str:
    """``path.key`` (``path[0]`` for a list index), the key quoted if TOML needs it."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    shown = text if _BARE_KEY.fullmatch(text) else json.dumps(text, ensure_ascii=False)
    return f"{path}.{shown}" if path else shown


def _got(value: object, path: str) -> str:
    return _described(value) if _SECRET_KEY.search(path) else _toml(value)


def _unknown_keys(table: str, unknown: Iterable[str], known: Iterable[str]) -> str:
    """One clause per unknown key (with the likeliest known one), then the known keys."""
    import difflib  # (0.24 MB of the standard library, for a config with a typo only)

    names = sorted(known)
    clauses = []
    for key in sorted(unknown):
        guess = difflib.get_close_matches(key, names, n=1)
        hint = f" (did you mean {guess[0]}?)" if guess else ""
        clauses.append(f"{_join(table, key)} is not a known key{hint}")
    keys = f"the keys of {table} are" if table else "the top-level keys are"
    return "; ".join(clauses) + f"; {keys} {', '.join(names)}"


def _keys_of(cls: type) -> list[str]:
    """The keys a table structured as *cls* takes (a provider's name is its table's)."""
    implied = {"name"} if cls is ProviderConfig else set()
    return [f.name for f in attrs.fields(cls) if f.init and f.name not in implied]


def _item(value: object, key: object) -> object:
    if isinstance(value, dict):
        return value.get(key, _MISSING)
    if isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value):
        return value[key]
    return _MISSING


def _own(exc: Exception, path: str) -> str:
    """Our own checks' message, placed at *path*.

    ``ProviderConfig`` says ``provider 'local': max_concurrent must be ...``:
    that becomes ``providers.local.max_concurrent must be ...``.
    """
    text = str(exc)
    match = re.match(r"provider '[^']*': (\w+) ", text)
    if match and path:
        return f"{path}.{text[match.start(1) :]}"
    return f"{path}: {text}" if path else text


def _problems(exc: BaseException, value: object, type_: Any, path: str) -> list[str]:
    """Every problem in a cattrs error tree, in English, with the key it is at."""
    from cattrs.errors import (
        ClassValidationError,
        ForbiddenExtraKeysError,
        IterableValidationError,
    )

    out: list[str] = []
    if isinstance(exc, ClassValidationError):
        fields, others = exc.group_exceptions()
        for sub, field in fields:
            out += _problems(sub, _item(value, field.name), field.type, _join(path, field.name))
    elif isinstance(exc, IterableValidationError):
        items, others = exc.group_exceptions()
        for sub, item in items:
            out += _problems(sub, _item(value, item.index), item.type, _join(path, item.index))
    if isinstance(exc, ClassValidationError | IterableValidationError):
        for sub in others:  # the table's own: unknown keys, our checks of the whole
            out += _problems(sub, value, type_, path)
        return out
    if isinstance(exc, ForbiddenExtraKeysError):
        return [_unknown_keys(path, exc.extra_fields, _keys_of(exc.cl))]
    if isinstance(exc, KeyError) and value is _MISSING:
        return [f"{path} is missing (required: {_expected(type_)})"]
    if isinstance(exc, AgentrioError):
        return [_own(exc, path)]
    return [f"{path} must be {_expected(type_)}, got {_got(value, path)}"]


def _structure(value: object, type_: Any, key: str, where: str) -> Any:
    """*value* structured as *type_* by the converter; a ConfigError naming *key* if not.

    The message is English: ``agentrio.toml: providers.local.kind must be one
    of "openai", "anthropic", "ollama", got "foo"``, one clause per problem.
    """
    from cattrs.errors import StructureHandlerNotFoundError

    try:
        return _converter().structure(value, type_)
    except StructureHandlerNotFoundError:
        raise  # a type cattrs cannot build: a bug here, not in the file
    except Exception as exc:
        problems = "; ".join(_problems(exc, value, type_, key))
        raise ConfigError(f"{where}: {problems}") from None


def structure_limits(
    table: object, *, key: str = "limits", where: str, base: Limits | None = None
) -> Limits:
    """*base* (default: ``Limits()``) with the fields of a TOML *table* set.

    Each value is checked as ``Limits`` checks it; ``timeout`` has no TOML
    spelling for ``None`` (and needs none: it is the default), and 0 turns a
    stall rule off as ``None`` does in code.

    Args:
        table: the parsed table, e.g. ``data["limits"]``.
        key: where the table is in the file, for the messages (``"limits"``).
        where: the file, for the messages.
        base: the limits the table's fields are laid over.

    Raises:
        ConfigError: not a table, an unknown field, or a bad value; naming
            *where*, ``<key>.<field>`` and what was expected.
    """
    return _overlay(table, base or Limits(), key=key, where=where)


_T = typing.TypeVar("_T", Limits, Mode, RuleRouter)


def _overlay(table: object, base: _T, *, key: str, where: str, skip: str = "") -> _T:
    """*base* (an attrs class) with the fields of a TOML *table* set.

    Each value is checked for its type here, then for its range by the class
    itself; *skip* is a field a table may not set (a mode's name is its key).
    """
    kind = type(base).__name__
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: {key} must be a table of {kind} fields")
    fields = {name: t for name, t in _fields(type(base)).items() if name != skip}
    unknown = set(table) - set(fields)
    if unknown:
        raise ConfigError(f"{where}: {_unknown_keys(key, unknown, fields)}")
    values = {
        name: _structure(value, fields[name], _join(key, name), where)
        for name, value in table.items()
    }
    try:
        return attrs.evolve(base, **values)
    except InvalidArgument as exc:
        raise ConfigError(f"{where}: {str(exc).replace(f'{kind}.', f'{key}.', 1)}") from None


_FIELDS: dict[type, dict[str, Any]] = {}


def _fields(cls: type[Limits | Mode | RuleRouter]) -> dict[str, Any]:
    """The fields of an attrs class set in its constructor, and their types
    (its annotations are strings)."""
    fields = _FIELDS.get(cls)
    if fields is None:
        hints = typing.get_type_hints(cls)
        fields = {f.name: hints[f.name] for f in attrs.fields(cls) if f.init}
        _FIELDS[cls] = fields
    return fields


def structure_modes(table: object, *, where: str) -> dict[str, Mode]:
    """The presets with the ``[modes.NAME]`` tables of *table* laid over them.

    Raises:
        ConfigError: naming *where*, ``modes.<name>.<field>`` and what was expected.
    """
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: modes must be a table of [modes.NAME] tables")
    modes = dict(PRESETS)
    for name, fields in table.items():
        base = modes.get(name)
        if base is None:
            try:
                base = Mode(name)
            except InvalidArgument as exc:
                raise ConfigError(f"{where}: modes: {exc}") from None
        modes[name] = _overlay(fields, base, key=f"modes.{name}", where=where, skip="name")
    return modes


def parse_config(data: dict[str, object], *, path: str | None = None) -> Config:
    """Structure the contents of an agentrio.toml (already parsed into a dict, with
    ``tomllib``) into a [`Config`][agentrio.Config]; *path* is used in error messages.

    Raises:
        ConfigError: an unknown top-level key (only ``providers``, ``tiers``,
            ``escalation``, ``limits``, ``modes``, ``router`` and ``lanes``
            are known), an unknown key in a provider table, in ``[limits]``,
            in a ``[modes.NAME]`` table, in ``[router]`` or in ``[lanes]``
            (the message names the likeliest key meant and lists the
            table's keys; for ``[lanes]``, a lane that does not exist, or
            ``control`` and ``interactive`` both given), a missing key, or a
            bad value; the message names *path*, the key and what was
            expected, in English: ``agentrio.toml: providers.local.kind must
            be one of "openai", "anthropic", "ollama", "openai-responses", got "foo"``.
    """
    where = path or "the configuration"
    extra = set(data) - set(_TOP_LEVEL)
    if extra:
        raise ConfigError(f"{where}: {_unknown_keys('', extra, _TOP_LEVEL)}")
    raw_providers = data.get("providers", {})
    if not isinstance(raw_providers, dict):
        raise ConfigError(f"{where}: providers must be a table of [providers.NAME] tables")
    providers = {}
    for name, table in raw_providers.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: providers.{name} must be a table")
        providers[name] = _structure(
            _with_defaults(name, table, where), ProviderConfig, _join("providers", name), where
        )
    raw_tiers, raw_escalation = data.get("tiers", {}), data.get("escalation", [])
    if not isinstance(raw_tiers, dict):
        raise ConfigError(f'{where}: tiers must be a table of name = "instance:model"')
    if not isinstance(raw_escalation, list):
        raise ConfigError(f"{where}: escalation must be a list of tier names")
    slip = raw_tiers.get("escalation")
    if isinstance(slip, list):
        raise ConfigError(
            f'{where}: tiers.escalation must be a string "instance:model", got {_toml(slip)}: '
            "escalation is a top-level key, so it goes before the first [table]"
        )
    tiers = _structure(raw_tiers, dict[str, str], "tiers", where)
    escalation = _structure(raw_escalation, list[str], "escalation", where)
    limits = structure_limits(data.get("limits", {}), where=where)
    modes = structure_modes(data.get("modes", {}), where=where)
    router = _overlay(data.get("router", {}), RuleRouter(), key="router", where=where)
    lanes = _structure(_lanes_table(data.get("lanes", {}), where), Lanes, "lanes", where)
    return Config(
        providers=providers,
        tiers=tiers,
        escalation=escalation,
        path=path,
        limits=limits,
        modes=modes,
        router=router,
        lanes=lanes,
    )


def _with_defaults(name: str, table: dict[str, object], where: str) -> dict[str, object]:
    """A ``[providers.NAME]`` table with the keys it may leave out filled in.

    ``kind`` defaults to the table's name when that is a built-in instance's
    (``[providers.openai]``); without ``base_url``, the table is its kind's
    official endpoint, as the built-in instance is (its URL variable, else
    the official URL, and its key variable unless ``api_key_env`` is given).
    A table that gives ``base_url`` gets no ``api_key_env`` it did not ask
    for: the official key is not sent to another server.
    """
    filled: dict[str, object] = {"name": name, **table}
    if "kind" not in table and name in BUILTIN_NAMES:
        filled["kind"] = name
    if "base_url" not in table and isinstance(filled.get("kind"), str):
        kind = typing.cast(str, filled["kind"])
        try:
            defaults = kind_defaults(kind)
        except ConfigError as exc:
            raise ConfigError(
                f"{where}: providers.{name} has no base_url, so it is {kind}'s official "
                f"endpoint, but {exc}"
            ) from None
        filled = {**defaults, **filled}
    return filled


def _lanes_table(raw: object, where: str) -> dict[str, object]:
    """The ``[lanes]`` table, its lanes' names checked (``control``: ``interactive``)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: lanes must be a table ([lanes], [lanes.NAME])")
    table = dict(raw)
    if "control" in table:
        if "interactive" in table:
            raise ConfigError(
                f"{where}: lanes.control and lanes.interactive are one lane: give only one"
            )
        table["interactive"] = table.pop("control")
    known = {*LANES, "tool_concurrency"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{where}: lanes has unknown keys {unknown}; expected tool_concurrency and "
            f"the lanes {list(LANES)} (or control)"
        )
    return table


def find_config() -> Path | None:
    """The agentrio.toml to use: ``$AGENTRIO_CONFIG``, ``./agentrio.toml``, the user's; or None."""
    env = os.environ.get("AGENTRIO_CONFIG")
    if env:
        return Path(env)
    local = Path("agentrio.toml")
    if local.is_file():
        return local
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    user = Path(base) / "agentrio" / "agentrio.toml"
    return user if user.is_file() else None


def found_config() -> Config:
    """The agentrio.toml `find_config` finds, read; or, when there is none, an empty
    ``Config``, in which only the built-in instances (``openai``, ``anthropic``,
    ``ollama``) are known.

    Raises:
        ConfigError: the file found cannot be used (see `load_config`).
    """
    file = find_config()
    return Config() if file is None else load_config(file)


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and structure an agentrio.toml.

    Without *path*, the file is ``$AGENTRIO_CONFIG`` if set, else
    ``./agentrio.toml``, else ``agentrio/agentrio.toml`` in
    ``$XDG_CONFIG_HOME`` (default ``~/.config``).

    Raises:
        ConfigError: no file was found, it cannot be read, it is not TOML,
            or a value is wrong; the message names the file, the key and what
            was expected.
    """
    file = Path(path) if path is not None else find_config()
    if file is None:
        raise ConfigError(
            "no agentrio.toml found: set AGENTRIO_CONFIG, or put one in the current "
            "folder or in ~/.config/agentrio/"
        )
    import tomllib  # (imported when a file is read: most runs have none)

    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    return parse_config(data, path=str(file))


class Models:
    """Turns tier names and ``"instance:model"`` strings into model objects.

    One [`Provider`][agentrio.Provider] (one connection pool) is made per instance, on first
    use, and shared by every model of that instance; `aclose` closes them.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._providers: dict[str, Provider] = {}

    def provider(self, name: str) -> Provider:
        """The provider instance called *name*: the configuration's, else a built-in one.

        Raises:
            ConfigError: no instance has that name; or the instance's
                environment variables cannot be used (its key's variable is
                unset, empty or holds whitespace; a built-in instance's base
                URL variable is not a URL): the message names the variable,
                never its value.
        """
        provider = self._providers.get(name)
        if provider is None:
            settings = self.config.providers.get(name) or builtin_provider(name)
            if settings is None:
                where = self.config.path or "the configuration"
                raise ConfigError(
                    f"unknown provider instance {name!r}; {where} has "
                    f"{sorted(self.config.providers) or 'none'}, and the built-in ones are "
                    f"{', '.join(BUILTIN_NAMES)}"
                )
            provider = self._providers[name] = Provider(settings)
        return provider

    def resolve(self, model: str | Model) -> Model:
        """A model object for a tier name, an ``"instance:model"`` string, or a model object."""
        if not isinstance(model, str):
            return model
        if ":" not in model:
            config = self.config
            lower = fallback_tier(model, config.tiers, config.escalation)
            target = config.tiers.get(model if lower is None else lower)
            if target is None:
                hint = ""
                if self.config.path is None and not self.config.tiers:
                    hint = "; tiers are defined in agentrio.toml, and no agentrio.toml was found"
                raise ConfigError(
                    f"{model!r} is neither a tier ({sorted(self.config.tiers) or 'none'}) "
                    f"nor a model string {MODEL_FORMAT}{hint}"
                )
            model = target
        instance, name = split_model(model)
        return self.provider(instance).model(name)

    def next_tier(self, model: str | Model) -> Model | None:
        """The model of the tier after *model* in ``escalation`` (None if there is none);
        a tier without a model (``""``) is skipped."""
        if not isinstance(model, str):
            return None
        stronger = next_configured(model, self.config.tiers, self.config.escalation)
        return None if stronger is None else self.resolve(stronger)

    async def aclose(self) -> None:
        """Close every provider made here."""
        for provider in self._providers.values():
            await provider.aclose()
        self._providers.clear()
