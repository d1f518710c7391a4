"""The review service under hostile input (tests/hostile.py): one bad alert never blocks a payload,
nothing a client sends gives a 5xx, a future startsAt never pins a review, and the webhook answers
without waiting for the exporter.

The `check_*` functions take a client so the PostgreSQL integration test runs the same cases.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.hostile import DATETIMES, JSON_DOCUMENTS, LABEL_VALUES, NUMBERS
from tests.unit.alerts.reviews_helpers import AUTH, TOKEN, alert, payload
from tidescale.alerts.reviews import service as service_mod
from tidescale.alerts.reviews.background import BackgroundWork
from tidescale.alerts.reviews.service import create_app
from tidescale.alerts.reviews.settings import ReviewsSettings
from tidescale.alerts.reviews.store import MAX_CLOCK_SKEW, text_column_limits
from tidescale.contracts.errors import UsageError

FIELDS = ["model", "version", "namespace", "cluster", "annotation", "label-name"]
STORE_REASONS = {"oversized_field", "invalid_text", "missing_model_version"}


def make_client(tmp_path: Path, **overrides: Any) -> TestClient:
    settings = ReviewsSettings(database=f"sqlite:///{tmp_path / 'reviews.db'}", token=TOKEN,
                               max_body_bytes=16 << 20, **overrides)
    return TestClient(create_app(settings))


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    with make_client(tmp_path) as c:
        yield c


def post_raw(client: TestClient, body: Any) -> httpx.Response:
    """JSON with ASCII escapes, so lone surrogates travel as the `\\ud800` a hostile sender would write."""
    return client.post("/api/v1/alertmanager", content=json.dumps(body).encode(),
                       headers={**AUTH, "content-type": "application/json"})


def hostile_alert(field: str, value: str) -> dict[str, Any]:
    a = alert(model="hostile")
    if field in ("model", "version", "namespace", "cluster"):
        a["labels"][field] = value
    elif field == "annotation":
        a["annotations"]["description"] = value
    else:
        a["labels"][value] = "x"
    return a


def metric(client: TestClient, reason: str) -> float:
    line = f'tidescale_reviews_webhook_rejected_total{{reason="{reason}"}} '
    for row in client.get("/metrics").text.splitlines():
        if row.startswith(line):
            return float(row.removeprefix(line))
    return 0.0


def check_one_bad_alert_never_blocks_the_payload(client: TestClient, field: str, value: str) -> None:
    """The neighbours are stored; the hostile alert is either stored exactly or rejected and counted."""
    resp = post_raw(client, payload(alert(model="before"), hostile_alert(field, value), alert(model="after")))
    assert resp.status_code == 200, resp.text[:300]
    body = resp.json()
    stored = {r["model"]: r for r in client.get("/api/v1/reviews").json()["items"]}
    assert {"before", "after"} <= set(stored)
    if body["rejected"]:
        (rejection,) = body["rejected"]
        assert rejection["index"] == 1 and rejection["reason"] in STORE_REASONS
        assert len(rejection["detail"]) < 500  # never echoes the value whole
        assert metric(client, rejection["reason"]) >= 1
        return
    assert body["accepted"] == 3
    review = stored[value if field == "model" else "hostile"]
    if field in ("model", "version", "namespace", "cluster"):
        assert review[field] == value
    elif field == "annotation":
        assert review["annotations"]["description"] == value
    else:
        assert review["labels"][value] == "x"


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(("name", "value"), LABEL_VALUES, ids=[n for n, _ in LABEL_VALUES])
def test_one_bad_alert_never_blocks_the_payload(client: TestClient, field: str, name: str, value: str) -> None:
    check_one_bad_alert_never_blocks_the_payload(client, field, value)


def check_the_store_limits_are_enforced(client: TestClient) -> None:
    limits = text_column_limits()
    bad = [
        hostile_alert("model", "m" * (limits["model"] + 1)),
        hostile_alert("version", "9" * (limits["version"] + 1)),
        hostile_alert("namespace", "n" * (limits["namespace"] + 1)),
        hostile_alert("cluster", "c" * (limits["cluster"] + 1)),
        hostile_alert("model", "a\x00b"),
        hostile_alert("annotation", "a\x00b"),
        hostile_alert("label-name", "a\x00b"),
        hostile_alert("model", "\ud800"),
    ]
    body = post_raw(client, payload(alert(model="ok"), *bad)).json()
    assert body["accepted"] == 1
    assert [(r["index"], r["reason"]) for r in body["rejected"]] == [
        (1, "oversized_field"), (2, "oversized_field"), (3, "oversized_field"), (4, "oversized_field"),
        (5, "invalid_text"), (6, "invalid_text"), (7, "invalid_text"), (8, "invalid_text"),
    ]
    assert "longer than 255 characters" in body["rejected"][0]["detail"]
    assert "cluster" in body["rejected"][3]["detail"] and "NUL" in body["rejected"][4]["detail"]
    assert metric(client, "oversized_field") == 4 and metric(client, "invalid_text") == 4
    assert [r["model"] for r in client.get("/api/v1/reviews").json()["items"]] == ["ok"]


def test_the_store_limits_are_enforced(client: TestClient) -> None:
    check_the_store_limits_are_enforced(client)


def check_hostile_datetimes(client: TestClient, field: str, value: str) -> None:
    a = alert(model="dated", **{"status": "resolved"} if field == "endsAt" else {})
    a["startsAt" if field == "startsAt" else "endsAt"] = value
    resp = post_raw(client, payload(alert(model="before"), a))
    assert resp.status_code < 500, resp.text[:300]
    assert 400 <= resp.status_code < 500 or resp.json()["accepted"] >= 1
    for review in client.get("/api/v1/reviews").json()["items"]:
        starts = datetime.fromisoformat(review["starts_at"])
        assert starts <= datetime.now(UTC) + MAX_CLOCK_SKEW + timedelta(minutes=1)


@pytest.mark.parametrize("field", ["startsAt", "endsAt"])
@pytest.mark.parametrize(("name", "value"), DATETIMES, ids=[n for n, _ in DATETIMES])
def test_hostile_datetimes_never_give_a_5xx(client: TestClient, field: str, name: str, value: str) -> None:
    check_hostile_datetimes(client, field, value)


@pytest.mark.parametrize(("name", "document"), JSON_DOCUMENTS, ids=[n for n, _ in JSON_DOCUMENTS])
def test_hostile_json_documents_get_a_4xx_naming_the_problem(client: TestClient, name: str, document: bytes) -> None:
    headers = {**AUTH, "content-type": "application/json"}
    resp = client.post("/api/v1/alertmanager", content=document, headers=headers)
    assert 400 <= resp.status_code < 500, resp.text[:300]
    assert resp.json()["detail"]
    post_raw(client, payload(alert()))
    resp = client.patch("/api/v1/reviews/1", content=document, headers=headers)
    assert 400 <= resp.status_code < 500, resp.text[:300]


def test_a_deeply_nested_body_is_named_as_such(client: TestClient) -> None:
    document = dict(JSON_DOCUMENTS)["deep-array"]
    resp = client.post("/api/v1/alertmanager", content=document, headers=AUTH)
    assert resp.status_code == 400 and resp.json()["detail"] == "body is nested too deeply"


@pytest.mark.parametrize(("name", "number"), NUMBERS, ids=[n for n, _ in NUMBERS])
def test_review_ids_outside_the_store_range_get_a_4xx(client: TestClient, name: str, number: object) -> None:
    assert client.get(f"/api/v1/reviews/{number}").status_code == 422
    assert client.patch(f"/api/v1/reviews/{number}", json={"note": "n"}, headers=AUTH).status_code == 422


def test_the_largest_int64_plus_one_needs_no_token_and_names_the_field(client: TestClient) -> None:
    resp = client.get("/api/v1/reviews/9223372036854775808")
    assert resp.status_code == 422 and "review_id" in json.dumps(resp.json()["detail"])


@pytest.mark.parametrize(("name", "value"), LABEL_VALUES, ids=[n for n, _ in LABEL_VALUES])
def test_hostile_model_filters_and_notes_get_a_4xx_or_work(client: TestClient, name: str, value: str) -> None:
    post_raw(client, payload(alert()))
    if len(value) < 8192 and "\ud800" not in value:  # what fits in a URL at all
        resp = client.get("/api/v1/reviews", params={"model": value})
        assert resp.status_code in (200, 400, 422), resp.text[:300]
    resp = client.patch("/api/v1/reviews/1", content=json.dumps({"note": value}).encode(),
                        headers={**AUTH, "content-type": "application/json"})
    assert resp.status_code in (200, 422), resp.text[:300]


def test_an_unexpected_exception_is_a_counted_500(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with make_client(tmp_path) as client:
        monkeypatch.setattr(client.app.state.service.store, "total",  # type: ignore[attr-defined]
                            lambda: 1 // 0)
        resp = client.get("/healthz")
        assert resp.status_code == 500 and "tidescale_http_unhandled_errors_total" in resp.json()["detail"]
        metrics = client.get("/metrics").text
    assert 'tidescale_http_unhandled_errors_total{route="/healthz",service="reviews"} 1.0' in metrics


def test_a_future_starts_at_does_not_pin_the_review(client: TestClient) -> None:
    service = client.app.state.service  # type: ignore[attr-defined]
    t0 = datetime(2026, 11, 21, 10, 0)
    service.clock = lambda: t0
    assert post_raw(client, payload(alert(starts="2099-01-01T00:00:00Z"))).json()["opened"] == 1
    (review,) = client.get("/api/v1/reviews").json()["items"]
    assert review["starts_at"].startswith((t0 + MAX_CLOCK_SKEW).isoformat())
    client.patch(f"/api/v1/reviews/{review['id']}", json={"state": "closed", "note": "n"}, headers=AUTH)
    # A real, later instance reopens it, and its resolution clears it.
    service.clock = lambda: t0 + timedelta(hours=1)
    assert post_raw(client, payload(alert(starts="2026-11-21T10:30:00Z"))).json()["reopened"] == 1
    resolved = alert(status="resolved", starts="2026-11-21T10:30:00Z", ends="2026-11-21T10:50:00Z")
    assert post_raw(client, payload(resolved, status="resolved")).json()["cleared"] == 1


def test_a_re_send_of_a_clamped_instance_does_not_reopen_a_review_someone_closed(client: TestClient) -> None:
    """Issue 43 #10: the clamp was taken afresh at every notification, so Alertmanager's routine
    re-send of the same far-future instance an hour later read as a newer instance and reopened it."""
    service = client.app.state.service  # type: ignore[attr-defined]
    t0 = datetime(2026, 11, 21, 10, 0)
    service.clock = lambda: t0
    assert post_raw(client, payload(alert(starts="2099-01-01T00:00:00Z"))).json()["opened"] == 1
    (review,) = client.get("/api/v1/reviews").json()["items"]
    client.patch(f"/api/v1/reviews/{review['id']}", json={"state": "closed", "note": "n"}, headers=AUTH)
    for hours in (1, 4, 8):  # repeat_interval re-sends
        service.clock = lambda hours=hours: t0 + timedelta(hours=hours)
        answer = post_raw(client, payload(alert(starts="2099-01-01T00:00:00Z"))).json()
        assert (answer["accepted"], answer["reopened"]) == (1, 0)
    (again,) = client.get("/api/v1/reviews").json()["items"]
    assert (again["state"], again["times_reopened"], again["starts_at"]) == ("closed", 0, review["starts_at"])
    # Its resolution clears it, and a late re-send of the ended instance is stale.
    resolved = alert(status="resolved", starts="2099-01-01T00:00:00Z", ends="2026-11-21T19:00:00Z")
    assert post_raw(client, payload(resolved, status="resolved")).json()["cleared"] == 1
    assert post_raw(client, payload(alert(starts="2099-01-01T00:00:00Z"))).json()["reopened"] == 0


def test_blank_tokens_are_refused_naming_the_setting_not_the_value(tmp_path: Path) -> None:
    for token in ("   ", "\t\n"):
        with pytest.raises(UsageError, match=r"TIDESCALE_REVIEWS_TOKEN \(reviews.token\) is empty") as exc:
            create_app(ReviewsSettings(database=f"sqlite:///{tmp_path / 'r.db'}", token=token))
        assert token not in str(exc.value).split(":", 1)[1]


def test_the_token_is_compared_without_surrounding_whitespace(tmp_path: Path) -> None:
    settings = ReviewsSettings(database=f"sqlite:///{tmp_path / 'r.db'}", token=f" {TOKEN}\n")
    with TestClient(create_app(settings)) as client:
        assert client.post("/api/v1/alertmanager", json=payload(alert()), headers=AUTH).status_code == 200


def test_the_webhook_answers_while_the_profile_fetch_is_blocked(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()

    def blocked_fetch(url: str, model: str, version: str, timeout_s: float) -> tuple[None, str]:
        started.set()
        release.wait(timeout=5)  # bounded, so the unfixed (blocking) service fails instead of hanging
        return None, "exporter unreachable"

    monkeypatch.setattr(service_mod, "fetch_profile", blocked_fetch)
    with make_client(tmp_path, exporter_url="http://exporter:9105") as client:
        resp = post_raw(client, payload(alert(model="a"), alert(model="b")))
        answered_while_blocked = not release.is_set()
        assert resp.status_code == 200 and resp.json()["opened"] == 2
        assert answered_while_blocked
        assert [r["profile_error"] for r in client.get("/api/v1/reviews").json()["items"]] == [None, None]
        assert started.wait(timeout=30)  # the fetch did start, in the background
        release.set()
        background: BackgroundWork[Any] = client.app.state.service.background  # type: ignore[attr-defined]
        assert background.drain(timeout=30)
        errors = [r["profile_error"] for r in client.get("/api/v1/reviews").json()["items"]]
    assert errors == ["exporter unreachable", "exporter unreachable"]


def test_background_work_is_bounded() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)
    done: list[int] = []

    def work(item: int) -> None:
        started.release()
        release.wait(timeout=30)
        done.append(item)

    jobs: BackgroundWork[int] = BackgroundWork(work, workers=2, capacity=3, name="t")
    first = [jobs.submit(i) for i in range(2)]
    assert started.acquire(timeout=10) and started.acquire(timeout=10)  # both workers hold one item
    rest = [jobs.submit(i) for i in range(2, 8)]
    # Two running, three waiting; the rest refused rather than buffered (no race: the workers are blocked).
    accepted = first + rest
    assert accepted == [True] * 5 + [False] * 3
    assert len(jobs._threads) == 2
    release.set()
    assert jobs.drain(timeout=30)
    assert sorted(done) == [i for i, ok in enumerate(accepted) if ok]
    assert jobs.close(timeout=1) and not jobs.submit(99)


def test_a_full_queue_records_why_the_profile_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_mod, "BACKGROUND_CAPACITY", 0)
    with make_client(tmp_path, exporter_url="http://exporter:9105") as client:
        client.app.state.service.background.capacity = 0  # type: ignore[attr-defined]
        post_raw(client, payload(alert()))
        (review,) = client.get("/api/v1/reviews").json()["items"]
    assert review["profile_error"].startswith("not fetched")
