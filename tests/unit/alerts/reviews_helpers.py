"""Alertmanager webhook payloads for the review-service tests (shape of Alertmanager 0.25+, v4)."""

from __future__ import annotations

from typing import Any

TOKEN = "test-token-7c1f"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def alert(
    model: str = "ctr", version: str = "2", reason: str = "op_share_string", status: str = "firing",
    starts: str = "2026-11-21T10:00:00Z", ends: str = "0001-01-01T00:00:00Z", **labels: str,
) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {"alertname": "TritonModelReviewRequired", "severity": "info", "model": model,
                   "version": version, "reason": reason, "op_class": "string", **labels},
        "annotations": {"summary": "s", "description": "string ops take 30%", "value": "0.3"},
        "startsAt": starts,
        "endsAt": ends,
        "generatorURL": "http://prometheus:9090/graph?g0.expr=...",
        "fingerprint": f"{model}{version}{reason}",
    }


def payload(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}/{alertname="TritonModelReviewRequired"}:{model="ctr"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "model-reviews",
        "groupLabels": {"model": "ctr"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        # Fields newer Alertmanagers add; the service must ignore them.
        "routeLabels": {"receiver": "model-reviews"},
        "notification_reason": "new_alert",
        "alerts": list(alerts),
    }
