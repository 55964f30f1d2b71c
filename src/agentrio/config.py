"""agentrio.toml: provider instances and model tiers, structured by cattrs into attrs classes.

Example (top-level keys such as ``escalation`` go before the first table:
after ``[tiers]`` they would belong to it)::

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

The file is ``$AGENTRIO_CONFIG`` if set, else ``./agentrio.toml``, else
``agentrio/agentrio.toml`` in the user config folder (``$XDG_CONFIG_HOME`` or
``~/.config``). Every error names the file, the key and what was expected.
"""

from __future__ import annotations

import functools
import os
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import cattrs

from .errors import ConfigError, InvalidArgument
from .messages import ModelSettings
from .providers.base import Model
from .providers.provider import Provider, ProviderConfig
from .supervisors.limits import Limits

__all__ = [
    "Config",
    "Models",
    "find_config",
    "load_config",
    "parse_config",
    "split_model",
    "structure_limits",
]

_FORMAT = "'instance:model' (for example 'local:qwen2.5:0.5b'; the model part may hold colons)"


def split_model(text: str) -> tuple[str, str]:
    """Split ``"instance:model"`` at the first colon.

    Raises:
        ConfigError: no colon, or an empty part; the message spells out the format.
    """
    instance, colon, model = text.partition(":")
    if not colon or not instance or not model:
        raise ConfigError(f"model strings are {_FORMAT}, got {text!r}")
    return instance, model


@attrs.frozen
class Config:
    """The parsed agentrio.toml.

    Attributes:
        providers: provider instances by name.
        tiers: tier name -> ``"instance:model"``.
        escalation: tiers in order: a stalled phase on one is retried once on
            the next (with ``AgentSpec(escalate_on_stall=True)``).
        path: the file it came from (None when built in code).
        limits: the ``[limits]`` table, as :class:`agentrio.Limits` (the
            fields it leaves out keep their defaults); for the specs that
            want it: ``AgentSpec(..., limits=config.limits)``.
    """

    providers: dict[str, ProviderConfig] = attrs.field(factory=dict)
    tiers: dict[str, str] = attrs.field(factory=dict)
    escalation: list[str] = attrs.field(factory=list)
    path: str | None = None
    limits: Limits = attrs.field(factory=Limits)

    def __attrs_post_init__(self) -> None:
        where = self.path or "the configuration"
        for tier, target in self.tiers.items():
            try:
                instance, _ = split_model(target)
            except ConfigError as exc:
                raise ConfigError(f"{where}: tiers.{tier}: {exc}") from None
            if instance not in self.providers:
                raise ConfigError(
                    f"{where}: tiers.{tier} names provider {instance!r}, which is not "
                    f"configured (providers: {sorted(self.providers)})"
                )
        if not isinstance(self.limits, Limits):
            raise ConfigError(f"{where}: limits must be an agentrio.Limits, got {self.limits!r}")
        for tier in self.escalation:
            if tier not in self.tiers:
                raise ConfigError(
                    f"{where}: escalation names tier {tier!r}, which is not in [tiers] "
                    f"({sorted(self.tiers)})"
                )


def _strict(kind: type) -> Callable[[object, type], object]:
    # cattrs' default hook is kind(value): stream = "false" would become True,
    # max_concurrent = 1.5 would become 1, and tiers.fast = 5 would become "5".
    def structure(value: object, _: type) -> object:
        exact = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
        whole = kind is float and isinstance(value, int) and not isinstance(value, bool)
        if not (exact or whole):
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return float(value) if whole else value  # type: ignore[arg-type]

    return structure


@functools.cache
def _converter() -> cattrs.Converter:
    # cattrs is imported on first use: a runtime without agentrio.toml never loads it.
    import cattrs

    converter = cattrs.Converter(forbid_extra_keys=True)
    for kind in (bool, int, float, str):
        converter.register_structure_hook(kind, _strict(kind))
    converter.register_structure_hook(ModelSettings, _settings)
    return converter


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


def _explain(exc: BaseException, type_: type | None) -> str:
    # Our own checks already say what was expected; cattrs' default would
    # reduce them to "invalid value".
    if isinstance(exc, ConfigError):
        return str(exc)
    from cattrs.v import format_exception

    return format_exception(exc, type_)


def _structure(value: object, type_: Any, key: str, where: str) -> Any:
    """*value* structured as *type_* by the converter; a ConfigError naming *key* if not."""
    from cattrs import BaseValidationError, transform_error

    try:
        return _converter().structure(value, type_)
    except BaseValidationError as exc:
        problems = "; ".join(transform_error(exc, key, _explain))
        raise ConfigError(f"{where}: {problems}") from None
    except ConfigError as exc:  # one of our own checks, not wrapped by cattrs
        raise ConfigError(f"{where}: {key}: {exc}") from None
    except (TypeError, ValueError) as exc:  # a lone value (not in a table): not wrapped either
        raise ConfigError(f"{where}: {key}: {exc}") from None


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
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: {key} must be a table of Limits fields")
    types = _limits_fields()
    unknown = sorted(set(table) - set(types))
    if unknown:
        raise ConfigError(
            f"{where}: {key}: unknown fields {unknown}; the fields of Limits are {sorted(types)}"
        )
    # Each value is checked for its type here, then for its range by Limits.
    values = {
        name: _structure(value, types[name], f"{key}.{name}", where)
        for name, value in table.items()
    }
    try:
        return attrs.evolve(base or Limits(), **values)
    except InvalidArgument as exc:
        raise ConfigError(f"{where}: {str(exc).replace('Limits.', f'{key}.', 1)}") from None


@functools.cache
def _limits_fields() -> dict[str, Any]:
    """The fields of Limits and their types (its annotations are strings)."""
    hints = typing.get_type_hints(Limits)
    return {field.name: hints[field.name] for field in attrs.fields(Limits)}


def parse_config(data: dict[str, object], *, path: str | None = None) -> Config:
    """Structure the contents of an agentrio.toml (already parsed) into a :class:`Config`.

    Raises:
        ConfigError: naming *path*, the key and what was expected.
    """
    where = path or "the configuration"
    extra = sorted(set(data) - {"providers", "tiers", "escalation", "limits"})
    if extra:
        raise ConfigError(
            f"{where}: unknown top-level keys {extra}; expected providers, tiers, escalation, "
            f"limits"
        )
    raw_providers = data.get("providers", {})
    if not isinstance(raw_providers, dict):
        raise ConfigError(f"{where}: providers must be a table of [providers.NAME] tables")
    providers = {}
    for name, table in raw_providers.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: providers.{name} must be a table")
        providers[name] = _structure(
            {**table, "name": name}, ProviderConfig, f"providers.{name}", where
        )
    raw_tiers, raw_escalation = data.get("tiers", {}), data.get("escalation", [])
    if not isinstance(raw_tiers, dict):
        raise ConfigError(f'{where}: tiers must be a table of name = "instance:model"')
    if not isinstance(raw_escalation, list):
        raise ConfigError(f"{where}: escalation must be a list of tier names")
    tiers = _structure(raw_tiers, dict[str, str], "tiers", where)
    escalation = _structure(raw_escalation, list[str], "escalation", where)
    limits = structure_limits(data.get("limits", {}), where=where)
    return Config(providers=providers, tiers=tiers, escalation=escalation, path=path, limits=limits)


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


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and structure an agentrio.toml (*path*, else :func:`find_config`'s).

    Raises:
        ConfigError: no file, unreadable TOML, or a bad value (file, key and why).
    """
    file = Path(path) if path is not None else find_config()
    if file is None:
        raise ConfigError(
            "no agentrio.toml found: set AGENTRIO_CONFIG, or put one in the current "
            "folder or in ~/.config/agentrio/"
        )
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    return parse_config(data, path=str(file))


class Models:
    """Turns tier names and ``"instance:model"`` strings into model objects.

    One :class:`Provider` (one connection pool) is made per instance, on first
    use, and shared by every model of that instance; :meth:`aclose` closes them.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._providers: dict[str, Provider] = {}

    def provider(self, name: str) -> Provider:
        """The provider instance called *name*."""
        provider = self._providers.get(name)
        if provider is None:
            settings = self.config.providers.get(name)
            if settings is None:
                where = self.config.path or "the configuration"
                raise ConfigError(
                    f"unknown provider instance {name!r}; {where} has "
                    f"{sorted(self.config.providers) or 'none'}"
                )
            provider = self._providers[name] = Provider(settings)
        return provider

    def resolve(self, model: str | Model) -> Model:
        """A model object for a tier name, an ``"instance:model"`` string, or a model object."""
        if not isinstance(model, str):
            return model
        if ":" not in model:
            target = self.config.tiers.get(model)
            if target is None:
                raise ConfigError(
                    f"{model!r} is neither a tier ({sorted(self.config.tiers) or 'none'}) "
                    f"nor a model string {_FORMAT}"
                )
            model = target
        instance, name = split_model(model)
        return self.provider(instance).model(name)

    def next_tier(self, model: str | Model) -> Model | None:
        """The model of the tier after *model* in ``escalation`` (None if there is none)."""
        order = self.config.escalation
        if isinstance(model, str) and model in order:
            i = order.index(model)
            if i + 1 < len(order):
                return self.resolve(order[i + 1])
        return None

    async def aclose(self) -> None:
        """Close every provider made here."""
        for provider in self._providers.values():
            await provider.aclose()
        self._providers.clear()
