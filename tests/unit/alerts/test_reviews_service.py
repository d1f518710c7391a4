"""The review service through its HTTP API (FastAPI TestClient, SQLite in a temp dir)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile import URLS_WITH_CREDENTIALS, HostileServer
from tests.unit.alerts.reviews_helpers import AUTH, TOKEN, alert, payload
from tidescale.alerts.reviews import service as service_mod
from tidescale.alerts.reviews.background import BackgroundWork
from tidescale.alerts.reviews.profiles import fetch_profile
from tidescale.alerts.reviews.service import create_app
from tidescale.alerts.reviews.settings import ReviewsSettings
from tidescale.contracts.errors import UsageError
from tidescale.devstack.ports import free_port


def make_client(tmp_path: Path, **overrides: Any) -> TestClient:
    settings = ReviewsSettings(database=f"sqlite:///{tmp_path / 'reviews.db'}", token=TOKEN, **overrides)
    return TestClient(create_app(settings))


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    with make_client(tmp_path) as c:
        yield c


def post(client: TestClient, body: Any, headers: dict[str, str] = AUTH) -> httpx.Response:
    return client.post("/api/v1/alertmanager", json=body, headers=headers)


def background(client: TestClient) -> BackgroundWork[Any]:
    """The service's background evidence work (profile fetches, Events), to wait for in tests."""
    work: BackgroundWork[Any] = client.app.state.service.background  # type: ignore[attr-defined]
    return work


def reviews(client: TestClient, **params: str) -> list[dict[str, Any]]:
    resp = client.get("/api/v1/reviews", params=params)
    assert resp.status_code == 200
    return resp.json()["items"]


def test_the_service_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="TIDESCALE_REVIEWS_TOKEN"):
        create_app(ReviewsSettings(database=f"sqlite:///{tmp_path / 'r.db'}"))


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}])
def test_webhook_needs_the_bearer_token(client: TestClient, headers: dict[str, str]) -> None:
    resp = post(client, payload(alert()), headers)
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"] == "Bearer"
    assert reviews(client) == []


def test_one_review_per_model_version_reason_under_resends_and_groups(client: TestClient) -> None:
    first = post(client, payload(alert()))
    assert first.status_code == 200 and first.json()["opened"] == 1
    for _ in range(3):  # re-sends, and a group notification carrying it with another alert
        assert post(client, payload(alert())).json()["opened"] == 0
    grouped = post(client, payload(alert(), alert(reason="p99_regression")))
    assert grouped.json() == {"accepted": 2, "opened": 1, "reopened": 0, "cleared": 0, "rejected": []}
    items = reviews(client)
    assert [(r["model"], r["version"], r["reason"], r["state"]) for r in items] == [
        ("ctr", "2", "op_share_string", "open"), ("ctr", "2", "p99_regression", "open"),
    ]
    assert items[0]["value"] == 0.3 and items[0]["labels"]["op_class"] == "string"


def test_resolved_clears_the_condition_and_a_later_firing_reopens(client: TestClient) -> None:
    post(client, payload(alert()))
    (review,) = reviews(client)
    client.patch(f"/api/v1/reviews/{review['id']}", json={"state": "closed", "note": "accepted"}, headers=AUTH)
    resolved = alert(status="resolved", ends="2026-11-21T11:00:00Z")
    assert post(client, payload(resolved, status="resolved")).json()["cleared"] == 1
    (review,) = reviews(client)
    assert review["condition"] == "cleared" and review["state"] == "closed"
    assert review["cleared_at"].startswith("2026-11-21T11:00:00")
    # A late re-send of the old firing instance must not reopen it...
    assert post(client, payload(alert())).json()["reopened"] == 0
    assert reviews(client)[0]["state"] == "closed"
    # ...a new instance (new startsAt) does.
    assert post(client, payload(alert(starts="2026-11-22T09:00:00Z"))).json()["reopened"] == 1
    (review,) = reviews(client)
    assert review["state"] == "open" and review["condition"] == "firing" and review["times_reopened"] == 1
    assert review["note"] == "accepted"


def test_resolved_for_an_unknown_review_is_accepted_and_creates_nothing(client: TestClient) -> None:
    resp = post(client, payload(alert(status="resolved", ends="2026-11-21T11:00:00Z"), status="resolved"))
    assert resp.json()["cleared"] == 0 and reviews(client) == []


def test_alerts_without_model_or_version_are_rejected_and_counted(client: TestClient) -> None:
    no_version = alert()
    del no_version["labels"]["version"]
    generic = alert(reason="")
    generic["labels"]["alertname"] = "SomeTeamAlert"
    del generic["labels"]["reason"]
    resp = post(client, payload(no_version, generic))
    body = resp.json()
    assert resp.status_code == 200 and body["accepted"] == 1
    assert body["rejected"] == [{"index": 0, "reason": "missing_model_version",
                                 "detail": "alert TritonModelReviewRequired has no version label; "
                                           "reviews are per model version"}]
    (review,) = reviews(client)
    assert review["reason"] == "SomeTeamAlert" and review["alertname"] == "SomeTeamAlert"
    metrics = client.get("/metrics").text
    assert 'tidescale_reviews_webhook_rejected_total{reason="missing_model_version"} 1.0' in metrics
    assert 'tidescale_model_reviews{state="open"} 1.0' in metrics
    assert 'tidescale_model_reviews{state="closed"} 0.0' in metrics


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "firing", "alerts": []}, "version: Field required"),
        ({**payload(), "alerts": [{"status": "firing"}]}, "alerts.0.labels: Field required"),
        ({**payload(), "alerts": [{**alert(), "startsAt": "yesterday"}]}, "alerts.0.startsAt"),
        ({**payload(), "alerts": "x"}, "alerts: Input should be a valid list"),
        ({**payload(), "version": "3"}, "version: unsupported webhook version '3'"),
        ([1, 2], "(body)"),
    ],
)
def test_malformed_payloads_get_400_naming_the_field(client: TestClient, body: Any, field: str) -> None:
    resp = post(client, body)
    assert resp.status_code == 400
    assert field in resp.json()["detail"]


def test_non_json_body_is_400_and_oversized_body_is_413(tmp_path: Path) -> None:
    with make_client(tmp_path, max_body_bytes=2048) as client:
        resp = client.post("/api/v1/alertmanager", content=b"{not json", headers=AUTH)
        assert resp.status_code == 400 and resp.json()["detail"] == "body is not valid JSON"
        big = payload(*[alert(version=str(i)) for i in range(40)])
        resp = post(client, big)
        assert resp.status_code == 413 and "larger than 2048 bytes" in resp.json()["detail"]
        assert reviews(client) == []


def test_patch_acknowledge_and_close_with_a_note(client: TestClient) -> None:
    post(client, payload(alert()))
    rid = reviews(client)[0]["id"]
    assert client.patch(f"/api/v1/reviews/{rid}", json={"state": "acknowledged"}).status_code == 401
    resp = client.patch(f"/api/v1/reviews/{rid}", json={"state": "acknowledged"}, headers=AUTH)
    assert resp.status_code == 200 and resp.json()["state"] == "acknowledged"
    resp = client.patch(f"/api/v1/reviews/{rid}", json={"state": "closed"}, headers=AUTH)
    assert resp.status_code == 409 and "needs a note" in resp.json()["detail"]
    resp = client.patch(f"/api/v1/reviews/{rid}", json={"state": "closed", "note": "hash ints"}, headers=AUTH)
    assert resp.json()["state"] == "closed" and resp.json()["note"] == "hash ints"
    resp = client.patch(f"/api/v1/reviews/{rid}", json={"state": "acknowledged"}, headers=AUTH)
    assert resp.status_code == 409 and "from 'closed' to 'acknowledged'" in resp.json()["detail"]
    assert client.patch("/api/v1/reviews/999", json={"note": "x"}, headers=AUTH).status_code == 404
    assert client.patch(f"/api/v1/reviews/{rid}", json={"state": "gone"}, headers=AUTH).status_code == 422
    assert client.get(f"/api/v1/reviews/{rid}").json()["id"] == rid
    assert client.get("/api/v1/reviews/999").status_code == 404


def test_list_filters_by_state_and_model(client: TestClient) -> None:
    post(client, payload(alert(model="ctr"), alert(model="ranker")))
    rid = reviews(client, model="ranker")[0]["id"]
    client.patch(f"/api/v1/reviews/{rid}", json={"state": "acknowledged"}, headers=AUTH)
    assert [r["model"] for r in reviews(client, state="open")] == ["ctr"]
    assert [r["model"] for r in reviews(client, state="acknowledged")] == ["ranker"]
    resp = client.get("/api/v1/reviews", params={"state": "bogus"})
    assert resp.status_code == 400 and "state: must be one of" in resp.json()["detail"]


def test_regression_reviews_record_p99_before_and_after(client: TestClient) -> None:
    regression = alert(reason="p99_regression")
    regression["annotations"].update({"p99_before_seconds": "0.099", "p99_after_seconds": "0.2485"})
    post(client, payload(regression))
    (review,) = reviews(client)
    assert (review["p99_before_s"], review["p99_after_s"]) == (0.099, 0.2485)


def test_opening_a_review_attaches_the_exporters_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, str]] = []

    def fake_fetch(url: str, model: str, version: str, timeout_s: float) -> tuple[dict[str, Any], None]:
        calls.append((url, model, version))
        return {"op_class_share": {"string": 0.3}, "top_ops": [{"op": "ParseExampleV2"}]}, None

    monkeypatch.setattr(service_mod, "fetch_profile", fake_fetch)
    with make_client(tmp_path, exporter_url="http://exporter:9105") as client:
        post(client, payload(alert()))
        post(client, payload(alert()))  # a re-send does not fetch again
        assert background(client).drain(timeout=30)
        (review,) = reviews(client)
    assert calls == [("http://exporter:9105", "ctr", "2")]
    assert review["profile"]["op_class_share"] == {"string": 0.3}


def test_fetch_profile_handles_404_errors_and_trims_reports() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.raw_path == b"/v1/profiles/ctr%2Fx/2":  # the slash stays escaped
            return httpx.Response(404, json={"detail": "none"})
        if request.url.path == "/v1/profiles/bad/1":
            return httpx.Response(200, content=b"[1]")
        return httpx.Response(200, json={"op_class_share": {"string": 0.3, "odd": "x"},
                                         "top_ops": [{"op": str(i)} for i in range(50)],
                                         "total_self_time_us": 10, "nested": {"a": 1}})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    report, err = fetch_profile("http://e", "ctr", "2", 1.0, client)
    assert err is None and report is not None
    assert report["op_class_share"] == {"string": 0.3} and len(report["top_ops"]) == 20
    assert "nested" not in report and report["total_self_time_us"] == 10
    assert fetch_profile("http://e", "ctr/x", "2", 1.0, client) == (
        None, "the exporter has no profile for ctr/x version 2")
    assert fetch_profile("http://e", "bad", "1", 1.0, client)[1] == "the exporter's profile report is not a JSON object"
    report, err = fetch_profile("http://127.0.0.1:9", "m", "1", 0.5)
    assert report is None and err is not None and "unreachable" in err


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        JSONISH,
        st.fixed_dictionaries({"version": st.just("4"), "status": st.sampled_from(["firing", "resolved", "x"]),
                               "alerts": st.lists(st.dictionaries(st.sampled_from(
                                   ["status", "labels", "annotations", "startsAt", "endsAt"]), JSONISH), max_size=3)}),
    )
)
def test_fuzzed_payloads_never_crash_the_service(client: TestClient, body: Any) -> None:
    resp = post(client, body)
    assert resp.status_code in (200, 400), resp.text
    assert "detail" in resp.json() or "accepted" in resp.json()


# --- issue 43 #15: the evidence fetch has a deadline, and a fetch owed at shutdown is not lost ----

@pytest.mark.parametrize(("name", "error"), [
    ("trickle", "gave no complete answer within 0.5 s"),
    ("gzip-bomb", "larger than 524288 bytes"),
    ("redirect-elsewhere", "answered HTTP 302"),
])
def test_a_hostile_exporter_costs_the_fetch_at_most_its_deadline_and_cap(name: str, error: str) -> None:
    with HostileServer(name) as url:
        report, err = fetch_profile(url, "ctr", "2", 0.5)
    assert report is None and err is not None and error in err


def test_the_exporter_urls_password_is_never_recorded() -> None:
    report, err = fetch_profile(f"http://reviews:s3cret@127.0.0.1:{free_port()}", "m", "1", 0.5)
    assert report is None and err is not None and "***@127.0.0.1" in err and "s3cret" not in err


@pytest.mark.parametrize(("name", "url", "secret"), URLS_WITH_CREDENTIALS, ids=[n for n, *_ in URLS_WITH_CREDENTIALS])
def test_no_credential_of_the_exporter_url_reaches_profile_error(name: str, url: str, secret: str) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"connection refused for url {request.url}", request=request)

    for status in (None, 500):
        client = httpx.Client(transport=httpx.MockTransport(
            refuse if status is None else (lambda _r, status=status: httpx.Response(status))))
        report, err = fetch_profile(url, "m", "1", 0.5, client)
        assert report is None and err is not None and secret not in err


def test_a_fetch_owed_at_shutdown_is_resumed_at_start_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shutdown gives the queue SHUTDOWN_DRAIN_S; a review whose fetch had not ended by then kept
    neither a profile nor an error. The fetch owed is in the store, and the next start does it."""
    release = threading.Event()

    def stuck_fetch(url: str, model: str, version: str, timeout_s: float) -> tuple[None, str]:
        release.wait(timeout=10)
        return None, "the first run's fetch, too late"

    monkeypatch.setattr(service_mod, "SHUTDOWN_DRAIN_S", 0.1)
    monkeypatch.setattr(service_mod, "fetch_profile", stuck_fetch)
    try:
        with make_client(tmp_path, exporter_url="http://exporter:9105") as first:
            assert post(first, payload(alert(model="a"), alert(model="b"))).json()["opened"] == 2
        assert [(r["profile"], r["profile_error"]) for r in reviews(first)] == [(None, None)] * 2

        def working_fetch(url: str, model: str, version: str, timeout_s: float) -> tuple[dict[str, Any], None]:
            return {"op_class_share": {"string": 0.3}, "model": model}, None

        monkeypatch.setattr(service_mod, "fetch_profile", working_fetch)
        with make_client(tmp_path, exporter_url="http://exporter:9105") as second:
            assert background(second).drain(timeout=30)
            assert [r["profile"]["model"] for r in reviews(second)] == ["a", "b"]
            assert second.app.state.service.store.pending_profiles() == []  # type: ignore[attr-defined]
    finally:
        release.set()


def test_a_fetch_owed_with_no_exporter_left_to_ask_is_recorded_as_failed(tmp_path: Path) -> None:
    with make_client(tmp_path, exporter_url="http://exporter:9105") as first:
        first.app.state.service.background.close(timeout=1)  # type: ignore[attr-defined]  # a process killed
        first.app.state.service.background.submit = lambda _item: True  # type: ignore[attr-defined]
        post(first, payload(alert()))
    with make_client(tmp_path) as second:
        (review,) = reviews(second)
    assert review["profile"] is None and review["profile_error"] == ("not fetched: the service restarted without "
                                                                     "an exporter_url")
