"""Settings: flags > env > YAML > defaults, with clear errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from tests.hostile import YAML_DOCUMENTS
from tidescale.contracts.errors import UsageError
from tidescale.contracts.settings import ComponentSettings, load_settings


class DemoLikeSettings(ComponentSettings):
    model_config = SettingsConfigDict(env_prefix="TIDESCALE_TESTCOMP_", extra="forbid")
    section: ClassVar[str] = "testcomp"
    port: int = 9000
    name: str = "default"


def test_defaults() -> None:
    s = load_settings(DemoLikeSettings)
    assert (s.port, s.name) == (9000, "default")


def test_precedence_flag_over_env_over_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("testcomp:\n  port: 1111\n  name: from-yaml\n")
    assert load_settings(DemoLikeSettings, cfg).port == 1111
    monkeypatch.setenv("TIDESCALE_TESTCOMP_PORT", "2222")
    s = load_settings(DemoLikeSettings, cfg)
    assert (s.port, s.name) == (2222, "from-yaml")
    assert load_settings(DemoLikeSettings, cfg, port=3333, name=None).port == 3333


def test_shipped_settings_read_neither_the_environment_nor_a_config_file(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a benchmark records as shipped must not follow the shell that runs it."""
    monkeypatch.setenv("TIDESCALE_TESTCOMP_PORT", "2222")
    monkeypatch.setenv("TIDESCALE_TESTCOMP_NAME", "from-env")
    assert DemoLikeSettings().port == 2222  # a plain build reads the environment
    shipped = DemoLikeSettings.shipped(name="given")
    assert (shipped.port, shipped.name) == (9000, "given") and type(shipped) is DemoLikeSettings
    assert DemoLikeSettings().port == 2222  # and the environment is read again after
    cfg = tmp_path / "c.yaml"
    cfg.write_text("testcomp:\n  port: 1111\n")
    assert load_settings(DemoLikeSettings, cfg).port == 2222  # env over YAML, as before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("testcomp:\n  port: not-a-number\n", "testcomp.port"),
        ("testcomp:\n  colour: blue\n", "testcomp.colour"),
        ("- a list\n", "must be a mapping"),
        ("testcomp: [1, 2]\n", "section 'testcomp' must be a mapping"),
        ("testcomp: {port: 1\n", "not valid YAML"),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(UsageError, match=message):
        load_settings(DemoLikeSettings, cfg)


def test_missing_and_oversized_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_settings(DemoLikeSettings, tmp_path / "nope.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 << 20))
    with pytest.raises(UsageError, match="larger than"):
        load_settings(DemoLikeSettings, big)


def test_bad_env_value_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDESCALE_TESTCOMP_PORT", "eighty")
    with pytest.raises(UsageError, match="testcomp.port"):
        load_settings(DemoLikeSettings)


class Credentials(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: SecretStr = SecretStr("")


class SecretiveSettings(ComponentSettings):
    model_config = SettingsConfigDict(env_prefix="TIDESCALE_SECRETIVE_", extra="forbid")
    section: ClassVar[str] = "secretive"
    token: SecretStr | None = None
    api_password: str = ""
    credentials: Credentials = Field(default_factory=lambda: Credentials())
    port: int = 9000


@pytest.mark.parametrize("text", [
    "secretive:\n  token: 123456789\n",  # an unquoted number: not a string
    "secretive:\n  token: [123456789]\n",
    "secretive:\n  api_password: 123456789\n",
    "secretive:\n  credentials: {key: 123456789}\n",
    "secretive:\n  tokne: '123456789'\n",  # a misspelt key: extra_forbidden, value still hidden
])
def test_validation_errors_never_echo_a_secret(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(UsageError, match="secretive") as exc:
        load_settings(SecretiveSettings, cfg)
    assert "123456789" not in str(exc.value)


def test_validation_errors_still_show_other_values_truncated(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"secretive:\n  port: {'9' * 5000}x\n")
    with pytest.raises(UsageError, match="secretive.port") as exc:
        load_settings(SecretiveSettings, cfg)
    assert "99999" in str(exc.value) and len(str(exc.value)) < 1000


@pytest.mark.parametrize(("name", "text"), YAML_DOCUMENTS, ids=[n for n, _ in YAML_DOCUMENTS])
@pytest.mark.parametrize("where", ["top", "in-section"])
def test_hostile_yaml_is_a_short_usage_error(tmp_path: Path, name: str, text: str, where: str) -> None:
    if where == "in-section":
        text = "testcomp:\n  name:\n" + "".join(f"    {line}\n" for line in text.splitlines())
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(UsageError) as exc:
        load_settings(DemoLikeSettings, cfg)
    assert len(str(exc.value)) < 1000


def test_yaml_aliases_and_deep_nesting_are_refused_by_name(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(dict(YAML_DOCUMENTS)["billion-laughs"])
    with pytest.raises(UsageError, match=r"alias \(\*a\) at line 2; aliases are not allowed"):
        load_settings(DemoLikeSettings, cfg)
    cfg.write_text(dict(YAML_DOCUMENTS)["deep-list"])
    with pytest.raises(UsageError, match="nested more than 64 levels deep"):
        load_settings(DemoLikeSettings, cfg)
    cfg.write_text("base: &b {port: 1}\ntestcomp: *b\n")
    with pytest.raises(UsageError, match="alias"):
        load_settings(DemoLikeSettings, cfg)


def test_a_fifo_or_a_directory_as_config_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(UsageError, match="is not a regular file"):
            load_settings(DemoLikeSettings, path)


def test_a_username_from_the_environment_joins_the_files_of_the_config(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The chart sets the basic-auth username from a Secret (env) and the file paths in config.yaml."""
    from tidescale.autoscaler.settings import RecommenderSettings
    from tidescale.contracts.settings import load_settings

    config = tmp_path / "config.yaml"
    config.write_text("recommender:\n  prometheus_auth:\n    basic_auth_password_file: /p\n    tenant: ml\n")
    monkeypatch.setenv("TIDESCALE_RECOMMENDER_PROMETHEUS_AUTH__BASIC_AUTH_USERNAME", "bob")
    auth = load_settings(RecommenderSettings, config).prometheus_auth
    assert (auth.basic_auth_username, str(auth.basic_auth_password_file), auth.tenant) == ("bob", "/p", "ml")
