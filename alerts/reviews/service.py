"""The review service: `POST /api/v1/alertmanager` (bearer token), the review API and /metrics.

Writes check the token before anything reads the body, and read it only up to `max_body_bytes`
(contracts/http.py); the body is parsed in a worker thread. The probes (`/healthz`, `/readyz`) ask
the store in worker threads of their own, so requests holding every shared worker cannot delay them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import ValidationError
from sqlalchemy.exc import DataError
from starlette.concurrency import run_in_threadpool

from tidescale.alerts.reviews.background import BackgroundWork
from tidescale.alerts.reviews.kube_events import KubeEventPoster
from tidescale.alerts.reviews.profiles import fetch_profile
from tidescale.alerts.reviews.schema import (
    MAX_VALUE_CHARS,
    Rejection,
    ReviewPatch,
    WebhookAlert,
    WebhookPayload,
    WebhookResult,
    review_reason,
    text_problem,
)
from tidescale.alerts.reviews.settings import ReviewsSettings
from tidescale.alerts.reviews.store import (
    MAX_REVIEW_ID,
    STATES,
    ReviewStore,
    text_column_limits,
    utc_naive,
)
from tidescale.alerts.reviews.store import now as utc_now
from tidescale.contracts import catalog, jsonio
from tidescale.contracts.errors import UsageError
from tidescale.contracts.http import bearer_matches, configured_token, install_error_boundary, read_capped

log = logging.getLogger(__name__)

SUPPORTED_VERSION = "4"
MAX_KEY_CHARS = 256
# Opened reviews whose evidence (profile, Kubernetes Event) is fetched after the webhook answered.
BACKGROUND_WORKERS = 4
BACKGROUND_CAPACITY = 1000
SHUTDOWN_DRAIN_S = 10.0
# Stored columns that come from one label each (the review key's reason: the `reason` label, else the
# alert name; its cluster: the settings' cluster_label).
KEY_LABELS = {"namespace": "namespace", "model": "model", "version": "version", "alertname": "alertname"}
PROBE_THREADS = 2  # liveness and readiness at once


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


def field_errors(errors: Sequence[Any]) -> str:
    """`alerts.0.labels: Field required; …`: every bad field by its path in the payload, never its value
    (which may be huge, a secret, or not even representable in JSON, like 1e999999)."""
    parts = []
    for err in list(errors)[:10]:
        loc = ".".join(str(p) for p in err["loc"]) or "(body)"
        parts.append(f"{loc[:200]}: {str(err['msg'])[:300]}")
    return "; ".join(parts)


def _clipped(text: str) -> str:
    return repr(text[:64]) + ("…" if len(text) > 64 else "")


def fields_problem(alert: WebhookAlert, cluster_label: str) -> tuple[str, str] | None:
    """(reason, detail) for a label or annotation the store cannot hold."""
    for kind, mapping in (("label", alert.labels), ("annotation", alert.annotations)):
        for key, value in mapping.items():
            if len(value) > MAX_VALUE_CHARS or len(key) > MAX_KEY_CHARS:
                return "oversized_field", f"{kind} {_clipped(key)} is longer than {MAX_VALUE_CHARS} characters"
            for what, text in (("name", key), ("value", value)):
                problem = text_problem(text)
                if problem:
                    return "invalid_text", f"{kind} {what} {_clipped(key if what == 'value' else text)} {problem}"
    limits = text_column_limits()
    key_values = {column: alert.labels.get(label, "")
                  for column, label in {**KEY_LABELS, "cluster": cluster_label}.items()}
    key_values["reason"] = review_reason(alert.labels)
    for column, value in key_values.items():
        if len(value) > limits[column]:
            return "oversized_field", f"{column} {_clipped(value)} is longer than {limits[column]} characters"
    return None


def normalised_times(alert: WebhookAlert) -> WebhookAlert | tuple[str, str]:
    """The alert with naive-UTC times, or (reason, detail). The clock-skew clamp of startsAt
    (MAX_CLOCK_SKEW) is the store's: it is taken once per alert instance, not per notification."""
    try:
        starts = utc_naive(alert.startsAt)
        ends = utc_naive(alert.endsAt) if alert.endsAt else None
    except OverflowError:
        return "invalid_datetime", "startsAt or endsAt is outside the representable range once converted to UTC"
    return alert.model_copy(update={"startsAt": starts, "endsAt": ends})


def alert_problem(alert: WebhookAlert, cluster_label: str) -> tuple[str, str] | None:
    """(reason, detail) when an alert cannot become a review, else None."""
    missing = [k for k in ("model", "version") if not alert.labels.get(k)]
    if missing:
        name = alert.labels.get("alertname", "(no alertname)")
        detail = f"alert {name[:64]} has no {' or '.join(missing)} label; reviews are per model version"
        return "missing_model_version", detail
    return fields_problem(alert, cluster_label)


@dataclass(frozen=True)
class Opened:
    """A review that just opened or reopened: what the background evidence fetch needs."""

    review_id: int
    model: str
    version: str
    resumed: bool = False  # a fetch a previous run owed (its Event, if any, was that run's to post)


class ReviewService:
    """What the HTTP handlers call; holds the store, the settings and the rejection counter."""

    def __init__(self, settings: ReviewsSettings, store: ReviewStore, events: KubeEventPoster | None = None) -> None:
        self.settings = settings
        self.store = store
        self.events = events or (KubeEventPoster(settings.model_deployments) if settings.kube_events else None)
        self.clock: Callable[[], datetime] = utc_now
        self.registry = CollectorRegistry()
        self.registry.register(ReviewCountCollector(store))
        rejected = catalog.get("tidescale_reviews_webhook_rejected_total")
        self.rejected = Counter(
            rejected.name.removesuffix("_total"), rejected.help, ["reason"], registry=self.registry
        )
        self.background: BackgroundWork[Opened] = BackgroundWork(
            self.on_open, workers=BACKGROUND_WORKERS, capacity=BACKGROUND_CAPACITY, name="review-evidence")
        self.resume_pending()

    def resume_pending(self) -> None:
        """Queue the profile fetches a previous run owed: reviews it opened but stopped before it
        could fetch their evidence (shutdown's drain ran out, a kill). Each is fetched, or its
        `profile_error` says why not, so no review is left without either."""
        for review_id, model, version in self.store.pending_profiles():
            if not self.settings.exporter_url:
                self.store.attach_profile(review_id, None, "not fetched: the service restarted without an "
                                                           "exporter_url")
            elif not self.background.submit(Opened(review_id, model, version, resumed=True)):
                self.store.attach_profile(review_id, None, f"not fetched: {BACKGROUND_CAPACITY} reviews were "
                                                           "already waiting for their evidence at start-up")

    def receive(self, body: bytes) -> WebhookResult:
        """A webhook body checked, parsed and stored (blocking: the route runs it in a worker thread)."""
        try:
            raw = parse_json(body)
        except ValueError as exc:
            raise self.reject_payload(400, "malformed_payload", str(exc)) from None
        try:
            payload = WebhookPayload.model_validate(raw)
        except ValidationError as exc:
            raise self.reject_payload(400, "malformed_payload", field_errors(exc.errors())) from None
        if payload.version != SUPPORTED_VERSION:
            raise self.reject_payload(
                400, "unsupported_version",
                f"version: unsupported webhook version {payload.version!r} (expected {SUPPORTED_VERSION!r})",
            )
        if len(payload.alerts) > self.settings.max_alerts_per_payload:
            detail = f"alerts: {len(payload.alerts)} alerts, at most {self.settings.max_alerts_per_payload}"
            raise self.reject_payload(413, "too_many_alerts", detail)
        return self.process(payload)

    def patch(self, review_id: int, body: bytes) -> dict[str, Any]:
        """A PATCH body parsed and applied to review *review_id* (blocking, like `receive`)."""
        try:
            raw = parse_json(body)
        except ValueError as exc:
            raise HTTPException(400, detail=str(exc)) from None
        try:
            patch = ReviewPatch.model_validate(raw)
        except ValidationError as exc:
            raise HTTPException(422, detail=field_errors(exc.errors())) from None
        try:
            review = self.store.patch(review_id, patch.state, patch.note)
        except ValueError as exc:
            raise HTTPException(409, detail=str(exc)) from None
        if review is None:
            raise HTTPException(404, detail=f"no review with id {review_id}")
        return review

    def process(self, payload: WebhookPayload) -> WebhookResult:
        """Store each alert on its own; a bad one is rejected and counted, the others are stored."""
        result = WebhookResult(accepted=0, opened=0, reopened=0, cleared=0, rejected=[])
        now = self.clock()
        for index, raw in enumerate(payload.alerts):
            checked = alert_problem(raw, self.settings.cluster_label) or normalised_times(raw)
            if isinstance(checked, tuple):
                self._reject(result, index, *checked)
                continue
            try:
                self._apply(checked, result, now)
            except DataError as exc:  # a value the database refuses that validation did not foresee
                self._reject(result, index, "unstorable", f"the database refused the alert: {type(exc.orig).__name__}")
                continue
            result.accepted += 1
        return result

    def _reject(self, result: WebhookResult, index: int, reason: str, detail: str) -> None:
        self.rejected.labels(reason).inc()
        result.rejected.append(Rejection(index=index, reason=reason, detail=detail))

    def _apply(self, alert: WebhookAlert, result: WebhookResult, now: datetime) -> None:
        if alert.status == "resolved":
            result.cleared += self.store.apply_resolved(alert, now) == "cleared"
            return
        review_id, outcome = self.store.apply_firing(alert, now, want_profile=bool(self.settings.exporter_url))
        result.opened += outcome == "opened"
        result.reopened += outcome == "reopened"
        if outcome not in ("opened", "reopened"):
            return
        cluster = alert.labels.get(self.settings.cluster_label, "")
        if self.of_another_cluster(cluster):
            if self.settings.exporter_url:
                self.store.attach_profile(review_id, None, f"not fetched: the review is of cluster {cluster!r}, "
                                                           f"this service's is {self.settings.cluster!r}")
            return
        if self.settings.exporter_url or self.events is not None:
            opened = Opened(review_id, alert.labels["model"], alert.labels["version"])
            if not self.background.submit(opened):
                self.store.attach_profile(review_id, None, f"not fetched: {BACKGROUND_CAPACITY} reviews were "
                                                           "already waiting for their evidence")

    def of_another_cluster(self, cluster: str) -> bool:
        """Whether a review of *cluster* belongs to another cluster than this service's: one
        Alertmanager may serve several, and this cluster's exporter and Deployments are not that
        cluster's (same names or not), so its review gets neither a profile nor an Event here."""
        return bool(self.settings.cluster and cluster and cluster != self.settings.cluster)

    def on_open(self, opened: Opened) -> None:
        """Evidence and notice for a newly (re)opened review: the profile report, a Kubernetes Event.
        Runs in the background, after the webhook answered."""
        if self.settings.exporter_url:
            profile, error = fetch_profile(
                self.settings.exporter_url, opened.model, opened.version, self.settings.profile_timeout_s,
            )
            self.store.attach_profile(opened.review_id, profile, error)
        if self.events is not None and not opened.resumed:
            review = self.store.get(opened.review_id)
            if review is not None:
                self.events.post(review)

    def reject_payload(self, status: int, reason: str, detail: str) -> HTTPException:
        self.rejected.labels(reason).inc()
        return HTTPException(status, detail=detail)


def bearer_token(settings: ReviewsSettings) -> bytes:
    """The configured token (`configured_token`); refuses none or a blank one: nobody could
    authenticate, and writes are never open."""
    token = configured_token(settings.token)
    if token is None:
        state = "is not set" if settings.token is None else "is empty or only whitespace"
        raise UsageError(f"the review service needs a bearer token: TIDESCALE_REVIEWS_TOKEN (reviews.token) {state}")
    return token


def parse_json(body: bytes) -> Any:
    """The JSON body, or a ValueError naming why not."""
    try:
        return jsonio.loads(body)
    except jsonio.NestedTooDeeply:
        raise ValueError("body is nested too deeply") from None
    except ValueError:
        raise ValueError("body is not valid JSON") from None


def create_app(
    settings: ReviewsSettings, store: ReviewStore | None = None, events: KubeEventPoster | None = None
) -> FastAPI:
    """The FastAPI app; refuses to build without a token (write endpoints are never open)."""
    token = bearer_token(settings)
    own_store = store is None
    service = ReviewService(settings, store or ReviewStore(settings.database, settings.cluster_label), events)
    probe_threads = anyio.CapacityLimiter(PROBE_THREADS)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(service.background.close, SHUTDOWN_DRAIN_S)
        if own_store:  # its database connections go back at shutdown, not when the process ends
            await run_in_threadpool(service.store.close)

    app = FastAPI(title="tidescale model reviews", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.service = service
    service.registry.register(install_error_boundary(app, "reviews", log))

    # Write routes take the Request and no body parameter: FastAPI would read and parse a declared
    # body before this dependency runs.
    def require_token(request: Request) -> None:
        if not bearer_matches(request.headers.get("authorization", ""), token):
            raise HTTPException(401, detail="missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    @app.post("/api/v1/alertmanager", dependencies=[Depends(require_token)])
    async def alertmanager_webhook(request: Request) -> WebhookResult:
        body = await read_capped(request, settings.max_body_bytes)
        return await run_in_threadpool(service.receive, body)

    @app.get("/api/v1/reviews")
    def list_reviews(
        state: str | None = Query(None), model: str | None = Query(None, max_length=255),
        limit: int = Query(500, ge=1, le=5000), cluster: str | None = Query(None, max_length=253),
    ) -> dict[str, Any]:
        if state is not None and state not in STATES:
            raise HTTPException(400, detail=f"state: must be one of {', '.join(STATES)}, got {_clipped(state)}")
        for name, value in (("model", model), ("cluster", cluster)):
            if value is not None and (problem := text_problem(value)):
                raise HTTPException(400, detail=f"{name}: {problem}")
        return {"items": service.store.list(state=state, model=model, limit=limit, cluster=cluster)}

    review_id_path = Path(ge=1, le=MAX_REVIEW_ID, description="a review id (a positive 32-bit integer)")

    @app.get("/api/v1/reviews/{review_id}")
    def get_review(review_id: int = review_id_path) -> dict[str, Any]:
        review = service.store.get(review_id)
        if review is None:
            raise HTTPException(404, detail=f"no review with id {review_id}")
        return review

    @app.patch("/api/v1/reviews/{review_id}", dependencies=[Depends(require_token)])
    async def patch_review(request: Request, review_id: int = review_id_path) -> dict[str, Any]:
        body = await read_capped(request, settings.max_body_bytes)
        return await run_in_threadpool(service.patch, review_id, body)

    async def count_reviews() -> int:
        return await anyio.to_thread.run_sync(service.store.total, limiter=probe_threads)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "reviews": await count_reviews()}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Ready while the review store answers: Alertmanager's webhook goes only to a replica that
        can record what it is sent (the database itself, for PostgreSQL)."""
        try:
            await count_reviews()
        except Exception as exc:
            log.warning("review store not answering: %s", type(exc).__name__)
            return JSONResponse({"status": "not ready", "detail": "the review store does not answer"},
                                status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": field_errors(exc.errors())}, status_code=422)

    return app
