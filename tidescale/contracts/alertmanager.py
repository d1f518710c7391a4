"""The one client of Alertmanager's v2 API (the dev stack, the demo's summary, the tests)."""

from __future__ import annotations

from typing import Any

import httpx

from tidescale.contracts import jsonio, outbound
from tidescale.contracts.errors import TidescaleError
from tidescale.contracts.redact import redact_url, redact_urls


class AlertmanagerUnavailable(TidescaleError):
    """Alertmanager could not answer (down, timeout, HTTP error, bad body)."""


MAX_ANSWER_BYTES = 16 << 20  # thousands of alerts; more is not an Alertmanager worth reading


def active_alerts(url: str, timeout_s: float = 10.0, active_only: bool = True) -> list[dict[str, Any]]:
    """The alerts Alertmanager holds (`GET /api/v2/alerts`), each a dict with `labels`, `status`, …;
    within *timeout_s* as a whole, at most MAX_ANSWER_BYTES decompressed, no redirect followed."""
    shown = redact_url(url)
    try:
        with outbound.client(timeout_s) as http:
            r = outbound.get(http, f"{url.rstrip('/')}/api/v2/alerts", deadline_s=timeout_s,
                             max_bytes=MAX_ANSWER_BYTES, params={"active": str(active_only).lower()})
        body = jsonio.loads(r.content) if 200 <= r.status < 300 else None
    except jsonio.NestedTooDeeply:
        raise AlertmanagerUnavailable("alertmanager answer nested too deeply") from None
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        raise AlertmanagerUnavailable(f"alertmanager at {shown} unreachable: {type(exc).__name__}") from None
    if not isinstance(body, list):
        text = redact_urls(r.content[:200].decode("utf-8", errors="replace"))
        raise AlertmanagerUnavailable(f"alertmanager alerts failed ({r.status}): {text}")
    return [a for a in body if isinstance(a, dict)]
