"""Kubernetes Events on the model's Deployment when a review opens (fake Events API)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.kube_events import FakeEventApi
from tests.unit.alerts.reviews_helpers import AUTH, TOKEN, alert, payload
from tidescale.alerts.reviews import service as service_mod
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


def test_clusters_behind_one_alertmanager_keep_their_reviews_and_events_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: the cluster label is part of the review key, the Event names the cluster, and a
    review of another cluster gets neither this cluster's profile nor an Event on its Deployment
    (same names: the local `ml/triton-ctr` is not east's)."""
    fetched: list[str] = []

    def fake_fetch(url: str, model: str, version: str, timeout_s: float) -> tuple[dict[str, Any], None]:
        fetched.append(model)
        return {"op_class_share": {"string": 0.3}}, None

    monkeypatch.setattr(service_mod, "fetch_profile", fake_fetch)
    api = FakeEventApi()
    with client_with(tmp_path, api, model_deployments={"ctr": "ml/triton-ctr"}, cluster_label="k8s_cluster",
                     cluster="west", exporter_url="http://exporter:9105") as client:
        for cluster in ("west", "east", "west"):  # the second west is a re-send
            resp = client.post("/api/v1/alertmanager", json=payload(alert(k8s_cluster=cluster)), headers=AUTH)
            assert resp.status_code == 200
        items = {r["cluster"]: r for r in client.get("/api/v1/reviews").json()["items"]}
        east = client.get("/api/v1/reviews", params={"cluster": "east"}).json()["items"]
    assert sorted(items) == ["east", "west"] and [r["id"] for r in east] == [items["east"]["id"]]
    assert items["east"]["profile"] is None and "of cluster 'east'" in items["east"]["profile_error"]
    assert fetched == ["ctr"]  # west's, once
    ((_, body),) = api.posted
    assert "model ctr version 2 in cluster west needs a review" in body["message"]


def test_the_cluster_filter_and_settings_refuse_bad_input(tmp_path: Path) -> None:
    api = FakeEventApi()
    with client_with(tmp_path, api) as client:
        assert client.get("/api/v1/reviews", params={"cluster": "c" * 254}).status_code == 422
        nul = client.get("/api/v1/reviews", params={"cluster": "a\x00b"})
        assert nul.status_code == 400 and nul.json()["detail"].startswith("cluster:")
        assert client.get("/api/v1/reviews", params={"cluster": ""}).json() == {"items": []}
    for bad in ({"cluster_label": "k8s-cluster"}, {"cluster_label": ""}, {"cluster": "c" * 254}):
        with pytest.raises(ValueError):
            ReviewsSettings(database="sqlite://", token=TOKEN, **bad)
