"""The Alertmanager configuration: who gets paged, who gets a ticket, what opens a model review."""

from __future__ import annotations

from typing import Any

from tidescale.alerts.alerting import MODEL_REVIEW_ALERT, WATCHDOG_ALERT
from tidescale.alerts.config import AlertsConfig

PAGER, TICKETS, MODEL_REVIEWS, WATCHDOG, NULL = "pager", "tickets", "model-reviews", "watchdog", "null"
GROUP_BY = ["namespace", "model"]
# Reviews are keyed by these labels, so one notification group never mixes two reviews.
REVIEW_GROUP_BY = ["namespace", "model", "version", "reason"]


def _webhook(url: str, send_resolved: bool = True, **http_config: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {"url": url, "send_resolved": send_resolved}
    if http_config:
        cfg["http_config"] = http_config
    return cfg


def alertmanager_config(cfg: AlertsConfig) -> dict[str, Any]:
    am = cfg.alertmanager
    bearer = {"type": "Bearer", "credentials_file": am.reviews_token_file}
    return {
        "global": {"resolve_timeout": am.resolve_timeout},
        "route": {
            "receiver": TICKETS,
            "group_by": GROUP_BY,
            "group_wait": am.group_wait,
            "group_interval": am.group_interval,
            "repeat_interval": am.repeat_interval,
            "routes": [
                {"matchers": [f'alertname="{WATCHDOG_ALERT}"'], "receiver": WATCHDOG, "repeat_interval": "1m"},
                {
                    "matchers": [f'alertname="{MODEL_REVIEW_ALERT}"'],
                    "receiver": MODEL_REVIEWS,
                    "group_by": REVIEW_GROUP_BY,
                },
                {"matchers": ['severity="critical"'], "receiver": PAGER},
                {"matchers": ['severity="warning"'], "receiver": TICKETS},
                {"matchers": ['severity=~"info|none"'], "receiver": NULL},
            ],
        },
        "inhibit_rules": [
            {
                "source_matchers": ['severity="critical"'],
                "target_matchers": ['severity="warning"'],
                "equal": ["alertname", "namespace", "model"],
            }
        ],
        "receivers": [
            {"name": PAGER, "webhook_configs": [_webhook(am.pager_url)]},
            {"name": TICKETS, "webhook_configs": [_webhook(am.tickets_url)]},
            {"name": MODEL_REVIEWS, "webhook_configs": [_webhook(am.reviews_url, authorization=bearer)]},
            {"name": WATCHDOG},
            {"name": NULL},
        ],
    }
