"""Paths the tests share: the repository and its fixtures (tests/fixtures, read-only)."""

from pathlib import Path

from tidescale.devstack.tools import FIXTURES as FIXTURES

REPO = Path(__file__).resolve().parent.parent
