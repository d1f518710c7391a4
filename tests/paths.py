"""Paths the tests share: the repository and the read-only fixtures beside it."""

from pathlib import Path

from tidescale.contracts.tools import FIXTURES as FIXTURES

REPO = Path(__file__).resolve().parent.parent
