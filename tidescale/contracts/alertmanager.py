"""The one client of Alertmanager's v2 API (the dev stack, the demo's summary, the tests)."""

from __future__ import annotations

from typing import Any

import httpx

from tidescale.contracts import jsonio
from tidescale.contracts.errors import TidescaleError


class AlertmanagerUnavailable(TidescaleError):
    """Alertmanager could not answer (down, timeout, HTTP error, bad body)."""


def active_alerts(url: str, timeout_s: float = 10.0, active_only: bool = True) -> list[dict[str, Any]]:
    """The alerts Alertmanager holds (`GET /api/v2/alerts`), each a dict with `labels`, `status`, …"""
    try:
        r = httpx.get(f"{url.rstrip('/')}/api/v2/alerts", params={"active": str(active_only).lower()},
                      timeout=timeout_s)
        body = jsonio.loads(r.content) if r.is_success else None
    except jsonio.NestedTooDeeply:
        raise AlertmanagerUnavailable("alertmanager answer nested too deeply") from None
    except (httpx.HTTPError, ValueError) as exc:
        raise AlertmanagerUnavailable(f"alertmanager at {url} unreachable: {type(exc).__name__}") from None
    if not isinstance(body, list):
        raise AlertmanagerUnavailable(f"alertmanager alerts failed ({r.status_code}): {r.text[:200]}")
    return [a for a in body if isinstance(a, dict)]
