"""`tidescale demo`: the local stack playing a scenario (filled by the foundation work)."""

from __future__ import annotations


def demo_command() -> None:
    """Run the demo."""
