"""What the demo's summary.json reports about alerting: alerts fired (Alertmanager) and reviews opened."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx

from tidescale.alerts.alerting import WATCHDOG_ALERT
from tidescale.contracts.alertmanager import active_alerts


def alerts_fired(alertmanager_url: str, timeout_s: float = 10.0) -> dict[str, int]:
    """Active alerts in Alertmanager by alert name (the Watchdog heartbeat left out)."""
    labels = (a.get("labels") for a in active_alerts(alertmanager_url, timeout_s))
    names = Counter(str(lab.get("alertname", "")) for lab in labels if isinstance(lab, dict))
    names.pop(WATCHDOG_ALERT, None)
    return dict(sorted(names.items()))


def reviews_opened(reviews_url: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Every review the service holds, as (namespace, model, version, reason, state)."""
    resp = httpx.get(f"{reviews_url.rstrip('/')}/api/v1/reviews", params={"limit": 5000}, timeout=timeout_s)
    resp.raise_for_status()
    keys = ("id", "namespace", "model", "version", "reason", "state")
    return [{k: r[k] for k in keys} for r in resp.json()["items"]]


def demo_summary(alertmanager_url: str, reviews_url: str) -> dict[str, Any]:
    """The `alerts_fired` and `reviews_opened` entries of the demo's summary.json."""
    return {"alerts_fired": alerts_fired(alertmanager_url), "reviews_opened": reviews_opened(reviews_url)}
