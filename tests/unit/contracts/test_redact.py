"""`redact_url` / `redact_urls`: no credential from a URL survives, whatever it holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import URLS_WITH_CREDENTIALS
from tidescale.contracts.redact import redact_url, redact_urls

IDS = [n for n, _, _ in URLS_WITH_CREDENTIALS]


@pytest.mark.parametrize(("name", "url", "secret"), URLS_WITH_CREDENTIALS, ids=IDS)
def test_no_credential_survives(name: str, url: str, secret: str) -> None:
    assert secret not in redact_url(url)
    assert "***" in redact_url(url)


@pytest.mark.parametrize(("name", "url", "secret"), URLS_WITH_CREDENTIALS, ids=IDS)
def test_no_credential_survives_in_a_message(name: str, url: str, secret: str) -> None:
    if "://" not in url:
        pytest.skip("free text is searched for scheme://… URLs")
    for message in (f"poll of {url} failed", f"Cannot connect to URL({url!r})", f'{{"url": "{url}"}}'):
        assert secret not in redact_urls(message)


@pytest.mark.parametrize("url", ["http://triton:8000", "http://10.0.0.5:8000", "http://[fd00::5]:8000",
                                 "https://prometheus.monitoring.svc:9090/api/v1/query?query=up",
                                 "postgresql://db/reviews?sslmode=require", "triton:8000"])
def test_urls_without_credentials_are_unchanged(url: str) -> None:
    assert redact_url(url) == url
    assert redact_urls(f"GET {url} answered 503") == f"GET {url} answered 503"


def test_what_is_left_says_where() -> None:
    assert redact_url("http://user:pass@triton:8000") == "http://***@triton:8000"
    assert redact_url("postgresql://app:pw@db:5432/reviews?sslmode=require&sslpassword=x") == \
        "postgresql://***@db:5432/reviews?sslmode=require&sslpassword=***"


@given(st.text(), st.text())
def test_any_userinfo_is_hidden_whole(user: str, password: str) -> None:
    assert redact_url(f"http://{user}:{password}@triton:8000") == "http://***@triton:8000"


@given(st.text(alphabet=st.characters(blacklist_characters=" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0'\"<>`",
                                      blacklist_categories=("Zs", "Zl", "Zp")), min_size=1))
def test_any_password_is_hidden_in_free_text(password: str) -> None:
    text = redact_urls(f"error: GET 'http://u:{password}@triton:8000/v2' failed")
    assert text == "error: GET 'http://***@triton:8000/v2' failed"
