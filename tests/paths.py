"""Paths the tests share: the repository and the read-only fixtures beside it."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO.parent / "shared" / "fixtures"
