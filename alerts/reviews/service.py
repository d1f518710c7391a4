"""The review service: `POST /api/v1/alertmanager` (bearer token), the review API and /metrics."""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterator
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from tidescale.alerts.reviews.kube_events import KubeEventPoster
from tidescale.alerts.reviews.profiles import fetch_profile
from tidescale.alerts.reviews.schema import (
    MAX_VALUE_CHARS,
    Rejection,
    ReviewPatch,
    WebhookAlert,
    WebhookPayload,
    WebhookResult,
)
from tidescale.alerts.reviews.settings import ReviewsSettings
from tidescale.alerts.reviews.store import STATES, ReviewStore
from tidescale.contracts import catalog

SUPPORTED_VERSION = "4"


class ReviewCountCollector(Collector):
    """`tidescale_model_reviews{state}` read from the database at scrape time (survives restarts)."""

    def __init__(self, store: ReviewStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        fam = catalog.get("tidescale_model_reviews")
        gauge = GaugeMetricFamily(fam.name, fam.help, labels=["state"])
        for state, count in sorted(self.store.counts_by_state().items()):
            gauge.add_metric([state], count)
        yield gauge


def field_errors(exc: ValidationError) -> str:
    """`alerts.0.labels: Field required; …`: every bad field by its path in the payload."""
    parts = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(p) for p in err["loc"]) or "(body)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def alert_problem(alert: WebhookAlert) -> tuple[str, str] | None:
    """(reason, detail) when an alert cannot become a review, else None."""
    missing = [k for k in ("model", "version") if not alert.labels.get(k)]
    if missing:
        name = alert.labels.get("alertname", "(no alertname)")
        detail = f"alert {name} has no {' or '.join(missing)} label; reviews are per model version"
        return "missing_model_version", detail
    for key, value in (*alert.labels.items(), *alert.annotations.items()):
        if len(value) > MAX_VALUE_CHARS or len(key) > 256:
            return "oversized_field", f"label or annotation {key[:64]!r} is longer than {MAX_VALUE_CHARS} characters"
    return None


class ReviewService:
    """What the HTTP handlers call; holds the store, the settings and the rejection counter."""

    def __init__(self, settings: ReviewsSettings, store: ReviewStore, events: KubeEventPoster | None = None) -> None:
        self.settings = settings
        self.store = store
        self.events = events or (KubeEventPoster(settings.model_deployments) if settings.kube_events else None)
        self.registry = CollectorRegistry()
        self.registry.register(ReviewCountCollector(store))
        rejected = catalog.get("tidescale_reviews_webhook_rejected_total")
        self.rejected = Counter(
            rejected.name.removesuffix("_total"), rejected.help, ["reason"], registry=self.registry
        )

    def process(self, payload: WebhookPayload) -> WebhookResult:
        result = WebhookResult(accepted=0, opened=0, reopened=0, cleared=0, rejected=[])
        for index, alert in enumerate(payload.alerts):
            problem = alert_problem(alert)
            if problem:
                self.rejected.labels(problem[0]).inc()
                result.rejected.append(Rejection(index=index, reason=problem[0], detail=problem[1]))
                continue
            result.accepted += 1
            if alert.status == "resolved":
                result.cleared += self.store.apply_resolved(alert) == "cleared"
                continue
            review_id, outcome = self.store.apply_firing(alert)
            result.opened += outcome == "opened"
            result.reopened += outcome == "reopened"
            if outcome in ("opened", "reopened"):
                self.on_open(review_id, alert)
        return result

    def on_open(self, review_id: int, alert: WebhookAlert) -> None:
        """Evidence and notice for a newly (re)opened review: the profile report, a Kubernetes Event."""
        if self.settings.exporter_url:
            profile, error = fetch_profile(
                self.settings.exporter_url, alert.labels["model"], alert.labels["version"],
                self.settings.profile_timeout_s,
            )
            self.store.attach_profile(review_id, profile, error)
        if self.events is not None:
            review = self.store.get(review_id)
            if review is not None:
                self.events.post(review)

    def reject_payload(self, status: int, reason: str, detail: str) -> HTTPException:
        self.rejected.labels(reason).inc()
        return HTTPException(status, detail=detail)


async def read_limited(request: Request, limit: int) -> bytes:
    """The request body, or 413 as soon as it exceeds *limit* bytes (never buffered past it)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, detail=f"request body larger than {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise HTTPException(413, detail=f"request body larger than {limit} bytes")
    return bytes(body)


def create_app(
    settings: ReviewsSettings, store: ReviewStore | None = None, events: KubeEventPoster | None = None
) -> FastAPI:
    """The FastAPI app; refuses to build without a token (write endpoints are never open)."""
    if settings.token is None or not settings.token.get_secret_value():
        from tidescale.contracts.errors import UsageError

        raise UsageError("the review service needs a bearer token: set TIDESCALE_REVIEWS_TOKEN")
    token = settings.token.get_secret_value().encode()
    service = ReviewService(settings, store or ReviewStore(settings.database), events)
    app = FastAPI(title="tidescale model reviews", docs_url=None, redoc_url=None)
    app.state.service = service

    def require_token(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
            raise HTTPException(401, detail="missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    @app.post("/api/v1/alertmanager", dependencies=[Depends(require_token)])
    async def alertmanager_webhook(request: Request) -> WebhookResult:
        body = await read_limited(request, settings.max_body_bytes)
        try:
            raw = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise service.reject_payload(400, "malformed_payload", "body is not valid JSON") from None
        try:
            payload = WebhookPayload.model_validate(raw)
        except ValidationError as exc:
            raise service.reject_payload(400, "malformed_payload", field_errors(exc)) from None
        if payload.version != SUPPORTED_VERSION:
            raise service.reject_payload(
                400, "unsupported_version",
                f"version: unsupported webhook version {payload.version!r} (expected {SUPPORTED_VERSION!r})",
            )
        if len(payload.alerts) > settings.max_alerts_per_payload:
            detail = f"alerts: {len(payload.alerts)} alerts, at most {settings.max_alerts_per_payload}"
            raise service.reject_payload(413, "too_many_alerts", detail)
        return await run_in_threadpool(service.process, payload)

    @app.get("/api/v1/reviews")
    def list_reviews(
        state: str | None = Query(None), model: str | None = Query(None, max_length=255),
        limit: int = Query(500, ge=1, le=5000),
    ) -> dict[str, Any]:
        if state is not None and state not in STATES:
            raise HTTPException(400, detail=f"state: must be one of {', '.join(STATES)}, got {state!r}")
        return {"items": service.store.list(state=state, model=model, limit=limit)}

    @app.get("/api/v1/reviews/{review_id}")
    def get_review(review_id: int) -> dict[str, Any]:
        review = service.store.get(review_id)
        if review is None:
            raise HTTPException(404, detail=f"no review with id {review_id}")
        return review

    @app.patch("/api/v1/reviews/{review_id}", dependencies=[Depends(require_token)])
    def patch_review(review_id: int, patch: ReviewPatch) -> dict[str, Any]:
        try:
            review = service.store.patch(review_id, patch.state, patch.note)
        except ValueError as exc:
            raise HTTPException(409, detail=str(exc)) from None
        if review is None:
            raise HTTPException(404, detail=f"no review with id {review_id}")
        return review

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "reviews": service.store.total()}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    return app
