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

import math
import os
import re
import reprlib
import stat
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretBytes,
    SecretStr,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from tidescale.contracts import jsonio
from tidescale.contracts.errors import UsageError
from tidescale.contracts.redact import redact_url, redact_urls

_YAML_SECTION: ContextVar[dict[str, Any] | None] = ContextVar("_YAML_SECTION", default=None)
MAX_CONFIG_BYTES = 1 << 20
# Nesting a real config never needs; deeper YAML would exhaust the recursive composer (RecursionError).
MAX_YAML_DEPTH = 64
# Longest rendering of a bad value (or any text from the file) an error message may carry.
MAX_SHOWN_CHARS = 120
# Fields whose values an error message never shows, besides SecretStr/SecretBytes fields.
SECRET_NAME = re.compile(r"token|password|secret|credential", re.IGNORECASE)

S = TypeVar("S", bound="ComponentSettings")


class _YamlSectionSource(PydanticBaseSettingsSource):
    """The component's section of the YAML file given to `load_settings`."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        data = _YAML_SECTION.get() or {}
        return data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_YAML_SECTION.get() or {})


def _not_nan(value: float) -> float:
    if math.isnan(value):
        raise ValueError("NaN is not a setting")
    return value


InfOff = Annotated[float, Field(allow_inf_nan=True), AfterValidator(_not_nan)]
"""A float setting where infinity means "off" (say so where it is declared, `# inf: off`); NaN is
still refused. Every other float setting is finite: `interval_s: .inf` stopped the recommender's
loop while /healthz said ok, `capacity_rps: .inf` scaled any load to the minimum."""

Host = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[^\x00-\x20\x7f]+$")]
"""An address to listen on: a name or an IP, no NUL, space or control character (a NUL reached the
socket layer as a traceback)."""


def renamed_keys(data: Any, renamed: Mapping[str, str]) -> Any:
    """*data* with each old key of *renamed* moved to its new name (the new one wins when both are set):
    a setting keeps its old name as an alias when it is renamed."""
    if not renamed or not isinstance(data, dict):
        return data
    out = dict(data)
    for old, new in renamed.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


class SettingsModel(BaseModel):
    """Base of every nested settings section: unknown keys and non-finite floats refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # Old name -> current name of each renamed setting, still read.
    renamed: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _read_old_names(cls, data: Any) -> Any:
        return renamed_keys(data, cls.renamed)


class _RenamedEnvSource(PydanticBaseSettingsSource):
    """`<prefix><OLD NAME>` environment variables of renamed settings, read under the new name."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        renamed: Mapping[str, str] = getattr(self.settings_cls, "renamed", {})
        prefix = str(self.config.get("env_prefix", "")).lower()
        env = {k.lower(): v for k, v in os.environ.items()}
        return {new: env[f"{prefix}{old}".lower()] for old, new in renamed.items() if f"{prefix}{old}".lower() in env}


# False while `ComponentSettings.shipped` builds settings from their defaults alone.
_READ_ENVIRONMENT: ContextVar[bool] = ContextVar("tidescale_read_environment", default=True)


class ComponentSettings(BaseSettings):
    """Base for each component's settings; subclasses set `section` and `env_prefix`. Every float
    setting is finite (NaN and infinity refused) unless its type is `InfOff`."""

    model_config = SettingsConfigDict(extra="forbid", env_nested_delimiter="__", validate_default=True,
                                      allow_inf_nan=False)
    section: ClassVar[str] = ""
    renamed: ClassVar[Mapping[str, str]] = {}  # as SettingsModel.renamed; old env names are read too

    @model_validator(mode="before")
    @classmethod
    def _read_old_names(cls, data: Any) -> Any:
        return renamed_keys(data, cls.renamed)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if not _READ_ENVIRONMENT.get():
            return (init_settings,)
        return (init_settings, env_settings, _RenamedEnvSource(settings_cls), _YamlSectionSource(settings_cls))

    @classmethod
    def shipped(cls: type[S], **fields: Any) -> S:
        """The shipped defaults with *fields*, reading no environment variable and no config file: a
        benchmark's pages record what ships, whatever the shell that runs them exports (a
        `TIDESCALE_RECOMMENDER_*` variable there silently changed the benchmarked recommender)."""
        token = _READ_ENVIRONMENT.set(False)
        try:
            return cls(**fields)
        finally:
            _READ_ENVIRONMENT.reset(token)


class ServingSettings(ComponentSettings):
    """What every HTTP service listens on and the bounds it serves with (`contracts/serving.py`).

    Each service declares its own `host` and `port` defaults; the bounds are the same for all. The
    keep-alive is well above the 5 s that Triton's OTLP exporter waits between posts, and above
    Prometheus' and KEDA's intervals: a server that closes an idle connection just as the client
    sends on it loses that request (Triton does not retry).
    """

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)
    health_port: int | None = Field(default=None, ge=1, le=65535, description="a second listener for /healthz and "
                                    "/readyz only, outside max_connections (the kubelet's probes); None: none")
    keep_alive_s: int = Field(default=75, ge=1, le=300, description="idle keep-alive connections close after this")
    header_timeout_s: float = Field(default=10.0, gt=0, le=300, allow_inf_nan=False,
                                    description="a request head must arrive within this (and the rest of a body "
                                                "answered before it ended)")
    max_header_bytes: int = Field(default=64 << 10, ge=4096, le=1 << 20,
                                  description="cap on an incomplete request head")
    max_connections: int = Field(default=1000, ge=1, le=100_000,
                                 description="open client connections; one more is answered 503 and closed")

    @model_validator(mode="after")
    def _two_ports(self) -> ServingSettings:
        if self.health_port is not None and self.health_port == self.port:
            raise ValueError(f"health_port must differ from port ({self.port})")
        return self


class _Refused(yaml.YAMLError):
    """A config file the loader will not build (an alias, too deep); the message says which and where."""


class _ConfigLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and bounds nesting.

    Aliases are what make a 471-byte "billion laughs" file expand to gigabytes once anything walks
    or prints the value; a config file never needs them. The composer recurses once per level, so
    depth is bounded here rather than by Python's recursion limit.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            anchor = clip(str(getattr(event, "anchor", "")), 40)
            raise _Refused(f"uses a YAML alias (*{anchor}) at line {event.start_mark.line + 1}; "
                           "aliases are not allowed in config files")
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise _Refused(f"is nested more than {MAX_YAML_DEPTH} levels deep (line {line})")
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self._depth -= 1


def clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """*text* cut to *limit* characters, saying so: an error message never carries a huge value."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _read_text(path: Path) -> str:
    """A regular file's text, read without blocking: a FIFO or device as --config would hang a read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UsageError(f"config file {path} does not exist") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"config file {path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise UsageError(f"config file {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return data.decode("utf-8")


def read_yaml_file(path: Path) -> dict[str, Any]:
    """The YAML file as a mapping, or a UsageError that names the file and the problem."""
    try:
        data = yaml.load(_read_text(path), Loader=_ConfigLoader)
    except _Refused as exc:
        raise UsageError(f"config file {path} {exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"config file {path} is not valid YAML: {clip(str(exc), 4 * MAX_SHOWN_CHARS)}") from None
    except RecursionError:
        raise UsageError(f"config file {path} is nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read config file {path}: {clip(str(exc))}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must be a mapping of sections, got {type(data).__name__}")
    return data


def _short_repr() -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxstring = r.maxother = r.maxlong = MAX_SHOWN_CHARS
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 6
    r.maxlevel = 3
    return r


_SHORT = _short_repr()


def _is_secret_type(annotation: Any) -> bool:
    if annotation in (SecretStr, SecretBytes):
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return False
    return any(_is_secret_type(arg) for arg in get_args(annotation))


def is_secret_field(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> bool:
    """True when the value at *loc* is a secret: a SecretStr/SecretBytes field (followed through nested
    models) or any path part named like one (`token`, `password`, …: also catches misspelt keys)."""
    if any(isinstance(part, str) and SECRET_NAME.search(part) for part in loc):
        return True
    annotation: Any = model
    for part in loc:
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            args = [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
            if not args:
                break
            annotation = args[0]
        field = annotation.model_fields.get(str(part))
        if field is None:
            if isinstance(part, int):
                continue  # a list index: stay on the item's model
            break
        annotation = field.annotation
        if _is_secret_type(annotation):
            return True
    return False


def _redacted(message: str, value: Any) -> str:
    if isinstance(value, str | int | float) and str(value):
        return message.replace(str(value), "***")
    return message


def _without_credentials(value: Any) -> Any:
    """*value* with the credentials of every URL in it hidden, before it is cut for showing (a cut could
    keep a password's start and drop the `@` that marks it). One word with an `@` is taken for a URL
    without a scheme (`user:pass@host:8000`)."""
    if isinstance(value, str):
        return redact_url(value) if "@" in value and len(value.split()) == 1 else redact_urls(value)
    if isinstance(value, list | tuple):
        return type(value)(_without_credentials(v) for v in value)
    return value


def format_validation_error(section: str, exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per bad field; a bad value is shown truncated, a secret's value never (nor in the message)."""
    parts = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or "(root)"
        where = f"{section}.{where}" if section else where
        value = err.get("input")
        # A URL's credentials are hidden wherever one is quoted (a Triton or database URL with a password).
        message = clip(redact_urls(str(err["msg"])), 2 * MAX_SHOWN_CHARS)
        if is_secret_field(model, loc):
            parts.append(f"  {clip(where)}: {_redacted(message, value)} (value hidden: secret)")
            continue
        # An unknown key's value helps nobody and may be a misspelt secret (`tokn: …`): never shown.
        hidden = isinstance(value, dict) or err["type"] == "extra_forbidden"
        shown = "" if hidden else f" (got {_SHORT.repr(_without_credentials(value))})"
        parts.append(f"  {clip(where)}: {message}{shown}")
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
        raise UsageError(format_validation_error(cls.section, exc, cls)) from None
    except SettingsError as exc:  # a value in the environment that is not the JSON its field needs
        raise UsageError(_environment_problem(cls, str(exc), "is not valid JSON")) from None
    except RecursionError:  # the JSON decoder pydantic-settings runs on a list or mapping from the environment
        raise UsageError(_environment_problem(cls, "", "is nested too deeply")) from None
    finally:
        _YAML_SECTION.reset(token)


def _environment_problem(cls: type[ComponentSettings], detail: str, problem: str) -> str:
    """Which environment variable is bad and why, never its value (it may be a secret)."""
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    field = re.search(r'field "([A-Za-z0-9_]+)"', detail)
    if field:
        name = f"{prefix}{field.group(1).upper()}"
    else:  # only the decoder knows: find the variable it could not follow
        deep = [k for k, v in os.environ.items() if k.upper().startswith(prefix) and _nested_too_deeply(v)]
        name = ", ".join(sorted(deep)) or f"a {prefix}* variable"
    return f"invalid {cls.section or 'settings'}: {clip(name)} {problem} (a list or mapping is given as JSON)"


def _nested_too_deeply(text: str) -> bool:
    try:
        jsonio.loads(text)
    except jsonio.NestedTooDeeply:
        return True
    except ValueError:
        return False
    return False
