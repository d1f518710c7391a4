"""Settings from flags, `TIDESCALE_…` environment variables and an optional YAML file.

Precedence: flags > environment > YAML file > defaults. Each component declares its own
`ComponentSettings` subclass with a `section` (its key in the YAML file) and an env prefix,
so components stay independent and one YAML file can configure all of them:

    exporter:
      port: 9105
    reviews:
      database: sqlite:///reviews.db
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from tidescale.contracts.errors import UsageError

_YAML_SECTION: ContextVar[dict[str, Any] | None] = ContextVar("_YAML_SECTION", default=None)
MAX_CONFIG_BYTES = 1 << 20

S = TypeVar("S", bound="ComponentSettings")


class _YamlSectionSource(PydanticBaseSettingsSource):
    """The component's section of the YAML file given to `load_settings`."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        data = _YAML_SECTION.get() or {}
        return data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_YAML_SECTION.get() or {})


class ComponentSettings(BaseSettings):
    """Base for each component's settings; subclasses set `section` and `env_prefix`."""

    model_config = SettingsConfigDict(extra="forbid", env_nested_delimiter="__", validate_default=True)
    section: ClassVar[str] = ""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlSectionSource(settings_cls))


def read_yaml_file(path: Path) -> dict[str, Any]:
    """The YAML file as a mapping, or a UsageError that names the file and the problem."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise UsageError(f"config file {path} is larger than {MAX_CONFIG_BYTES} bytes")
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"config file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"config file {path} is not valid YAML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read config file {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must be a mapping of sections, got {type(data).__name__}")
    return data


def format_validation_error(section: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        where = f"{section}.{loc}" if section else loc
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        parts.append(f"  {where}: {err['msg']}{shown}")
    return f"invalid {section or 'settings'}:\n" + "\n".join(parts)


def load_settings(cls: type[S], config_file: Path | None = None, **flags: Any) -> S:
    """Build *cls* from flags (None means 'not given'), environment and the YAML file."""
    section: dict[str, Any] = {}
    if config_file is not None:
        data = read_yaml_file(config_file)
        raw = data.get(cls.section, {}) if cls.section else data
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise UsageError(f"config file {config_file}: section {cls.section!r} must be a mapping")
        section = raw
    given = {k: v for k, v in flags.items() if v is not None}
    token = _YAML_SECTION.set(section)
    try:
        return cls(**given)
    except ValidationError as exc:
        raise UsageError(format_validation_error(cls.section, exc)) from None
    finally:
        _YAML_SECTION.reset(token)
