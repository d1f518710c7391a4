"""Kubernetes Events on the model's Deployment when a review opens (fake Events API)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.kube_events import FakeEventApi
from tests.unit.alerts.reviews_helpers import AUTH, TOKEN, alert, payload
from tidescale.alerts.reviews.kube_events import KubeEventPoster, deployment_of, event_body
from tidescale.alerts.reviews.service import create_app
from tidescale.alerts.reviews.settings import ReviewsSettings


def client_with(tmp_path: Path, api: FakeEventApi, **settings: Any) -> TestClient:
    cfg = ReviewsSettings(database=f"sqlite:///{tmp_path / 'r.db'}", token=TOKEN, kube_events=True, **settings)
    return TestClient(create_app(cfg, events=KubeEventPoster(cfg.model_deployments, api)))


def test_an_event_is_posted_once_per_opened_review(tmp_path: Path) -> None:
    api = FakeEventApi()
    with client_with(tmp_path, api, model_deployments={"ctr": "ml/triton-ctr"}) as client:
        client.post("/api/v1/alertmanager", json=payload(alert()), headers=AUTH)
        client.post("/api/v1/alertmanager", json=payload(alert()), headers=AUTH)  # re-send: no second event
    ((namespace, body),) = api.posted
    assert namespace == "ml"
    assert body["involvedObject"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton-ctr",
                                      "namespace": "ml"}
    assert body["reason"] == "ModelReviewOpened"
    assert "model ctr version 2 needs a review (op_share_string)" in body["message"]


def test_a_failing_api_server_does_not_lose_the_review(tmp_path: Path) -> None:
    forbidden = FakeEventApi(fail_with=RuntimeError("forbidden: events is forbidden"))
    with client_with(tmp_path, forbidden, model_deployments={"ctr": "ml/triton-ctr"}) as client:
        resp = client.post("/api/v1/alertmanager", json=payload(alert()), headers=AUTH)
        assert resp.status_code == 200 and resp.json()["opened"] == 1
        assert len(client.get("/api/v1/reviews").json()["items"]) == 1


def test_the_deployment_comes_from_the_alert_label_or_the_mapping() -> None:
    review = {"id": 1, "namespace": "ml", "model": "ctr", "version": "2", "reason": "r",
              "labels": {"deployment": "triton"}}
    assert deployment_of(review, {}) == ("ml", "triton")
    assert deployment_of({**review, "labels": {}}, {"ctr": "prod/triton-ctr"}) == ("prod", "triton-ctr")
    assert deployment_of({**review, "labels": {}}, {"ctr": "no-slash"}) is None
    body = event_body("ml", "triton", review, datetime(2026, 11, 21, 12, tzinfo=UTC))
    assert body["firstTimestamp"] == "2026-11-21T12:00:00Z" and body["metadata"]["namespace"] == "ml"
