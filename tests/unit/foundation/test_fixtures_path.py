"""Where the shared fixtures are found: a clone away from ../shared can point at them."""

from __future__ import annotations

from pathlib import Path

from tidescale.contracts.tools import REPO_ROOT, find_fixtures


def test_environment_variable_wins(tmp_path: Path) -> None:
    assert find_fixtures({"TIDESCALE_FIXTURES": str(tmp_path)}) == tmp_path


def test_missing_override_falls_back_to_the_checkout(tmp_path: Path) -> None:
    found = find_fixtures({"TIDESCALE_FIXTURES": str(tmp_path / "absent")})
    assert found in (REPO_ROOT / "shared" / "fixtures", REPO_ROOT.parent / "shared" / "fixtures",
                     Path("/work/shared/fixtures"))
    assert find_fixtures({}) == found
