"""Generated artifacts of the dashboards package (see tidescale.artifacts)."""

from __future__ import annotations


def artifacts() -> dict[str, str]:
    """Repository-relative path -> full file content."""
    return {}
