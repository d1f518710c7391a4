"""The fixtures are part of the repository, and its README says where each came from."""

from __future__ import annotations

import re
from fnmatch import fnmatch

from tests.paths import FIXTURES, REPO


def test_the_fixtures_are_in_the_repository() -> None:
    assert FIXTURES == REPO / "tests" / "fixtures"
    assert (FIXTURES / "README.md").is_file()


def test_the_readme_describes_every_fixture() -> None:
    names = re.findall(r"`([^`\s]+)`", (FIXTURES / "README.md").read_text())
    undescribed = [rel for rel in (p.relative_to(FIXTURES).as_posix() for p in sorted(FIXTURES.rglob("*"))
                                   if p.is_file() and p.name != "README.md")
                   if not any(fnmatch(rel, f"*{name}") for name in names)]
    assert not undescribed, f"describe these in {FIXTURES / 'README.md'}: {undescribed}"
