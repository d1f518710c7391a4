"""The Alertmanager config: amtool-valid, routes by severity, reviews to the webhook, no inline secrets."""

from __future__ import annotations

import pytest
import yaml

from tidescale.alerts.alertmanager import MODEL_REVIEWS, NULL, PAGER, TICKETS, WATCHDOG
from tidescale.devstack import rulecheck
from tidescale.devstack.rulecheck import ALERTMANAGER_CONFIG


def config() -> dict:
    return yaml.safe_load(ALERTMANAGER_CONFIG.read_text())


def test_amtool_check_config_is_clean() -> None:
    run = rulecheck.check_alertmanager()
    assert run.ok, run.output
    assert "SUCCESS" in run.output


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        ({"alertname": "TritonLatencyBudgetBurn", "severity": "critical", "namespace": "ml", "model": "m"}, PAGER),
        ({"alertname": "TritonLatencyBudgetBurn", "severity": "warning", "namespace": "ml", "model": "m"}, TICKETS),
        ({"alertname": "GPUXidErrors", "severity": "critical"}, PAGER),
        ({"alertname": "TritonModelReviewRequired", "severity": "info", "model": "m", "version": "2"}, MODEL_REVIEWS),
        # Even if someone raised its severity, a review never pages.
        ({"alertname": "TritonModelReviewRequired", "severity": "critical", "model": "m"}, MODEL_REVIEWS),
        ({"alertname": "Watchdog", "severity": "none"}, WATCHDOG),
        ({"alertname": "Something", "severity": "info"}, NULL),
        ({"alertname": "NoSeverity"}, TICKETS),
    ],
)
def test_amtool_routes(labels: dict[str, str], receiver: str) -> None:
    assert rulecheck.route_receivers(labels) == [receiver]


def test_critical_inhibits_warning_on_the_same_alert_and_model() -> None:
    (rule,) = config()["inhibit_rules"]
    assert rule["source_matchers"] == ['severity="critical"']
    assert rule["target_matchers"] == ['severity="warning"']
    assert set(rule["equal"]) == {"alertname", "namespace", "model"}


def test_grouping_and_the_review_webhook_uses_a_bearer_token_file() -> None:
    cfg = config()
    assert cfg["route"]["group_by"] == ["namespace", "model"]
    (receiver,) = [r for r in cfg["receivers"] if r["name"] == MODEL_REVIEWS]
    (hook,) = receiver["webhook_configs"]
    assert hook["url"].endswith("/api/v1/alertmanager")
    assert hook["send_resolved"] is True
    auth = hook["http_config"]["authorization"]
    assert auth["type"] == "Bearer" and "credentials_file" in auth and "credentials" not in auth
