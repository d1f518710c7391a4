"""Settings: flags > env > YAML > defaults, with clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from pydantic_settings import SettingsConfigDict

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
