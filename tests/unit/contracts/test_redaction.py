"""No credential from a URL or a DSN reaches a log line, an error message or printed output (issue 43, #7)."""

from __future__ import annotations

import pytest

from tests.hostile import LABEL_VALUES
from tidescale.contracts.redaction import redact_text, redact_url


@pytest.mark.parametrize(("url", "shown"), [
    ("http://prom:9090", "http://prom:9090"),
    ("sqlite:///reviews.db", "sqlite:///reviews.db"),
    ("https://tidescale:s3cret@mimir/prometheus", "https://tidescale:***@mimir/prometheus"),
    ("https://s3cret@mimir", "https://***@mimir"),  # a lone token as the userinfo
    ("postgresql+psycopg://reviews:s3cret@db:5432/reviews?sslmode=require",
     "postgresql+psycopg://reviews:***@db:5432/reviews?sslmode=require"),
    ("postgresql+psycopg://db/reviews?user=r&password=s3cret", "postgresql+psycopg://db/reviews?user=r&password=***"),
    ("sqlite:////var/lib/r.db?token=s3cret", "sqlite:////var/lib/r.db?token=***"),
    ("reviews:s3cret@db:5432/reviews", "reviews:***@db:5432/reviews"),  # no scheme
    ("http://u:s3cret@[::1", "<a URL that does not parse>"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(("name", "value"), LABEL_VALUES, ids=[n for n, _ in LABEL_VALUES])
def test_redact_url_takes_any_text(name: str, value: str) -> None:
    """Whatever a setting holds, redaction returns text and never the password that followed it."""
    shown = redact_url(f"http://u:s3cret@{value}/x")
    assert isinstance(shown, str) and "s3cret" not in shown


def test_redact_text_masks_every_url_it_quotes() -> None:
    text = "ConnectError for url 'http://u:s3cret@prom:9090/api' (was postgresql://r:pw2@db/x)"
    assert redact_text(text) == "ConnectError for url 'http://***@prom:9090/api' (was postgresql://***@db/x)"
