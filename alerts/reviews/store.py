"""Durable reviews in SQL (SQLite with WAL by default, PostgreSQL through the same URL).

One row per (cluster, namespace, model, version, reason): the cluster is the value of the alert's
cluster label (the chart's `clusterLabel`, which Prometheus adds to the alerts it sends as an
external label), so one Alertmanager behind several clusters keeps their reviews apart; empty
where the alert has none. Alertmanager re-sends and group notifications
update that row; alert instances are told apart by `startsAt`, so an old re-send never reopens a
review and a resolved notification never deletes one.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    false,
    func,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from tidescale.alerts.reviews.migrations import migrate
from tidescale.alerts.reviews.schema import WebhookAlert, review_reason, to_float
from tidescale.contracts.errors import TidescaleError, UsageError
from tidescale.contracts.placeholders import DEFAULT_CLUSTER_LABEL
from tidescale.contracts.redact import redact_url, redact_urls

STATES = ("open", "acknowledged", "closed")
# Manual transitions the API allows (a firing alert may also reopen any review).
TRANSITIONS: dict[str, set[str]] = {
    "open": {"acknowledged", "closed"},
    "acknowledged": {"open", "closed"},
    "closed": {"open"},
}

# A startsAt later than now plus this is taken as now plus this: a clock far ahead (or a bogus 2099)
# would otherwise make every later real instance look older, so the review never reopens or clears.
# The clamp is taken once per alert instance (the startsAt as sent is kept): a re-send of the same
# instance is the same instance, not a newer one that reopens a closed review.
MAX_CLOCK_SKEW = timedelta(minutes=5)

FiringOutcome = Literal["opened", "reopened", "refreshed", "stale"]
ResolvedOutcome = Literal["cleared", "unknown", "stale"]


class Base(DeclarativeBase):
    pass


@dataclass(frozen=True)
class ReviewKey:
    """What tells one review from another: the alert's cluster, namespace, model, version and reason."""

    cluster: str
    namespace: str
    model: str
    version: str
    reason: str


# The unique key of a review, by its columns (migration 3 rebuilt it when `cluster` joined).
REVIEW_KEY = "uq_review_key"
REVIEW_KEY_COLUMNS = tuple(f.name for f in dataclasses.fields(ReviewKey))


class Review(Base):
    __tablename__ = "reviews"
    __table_args__ = (UniqueConstraint(*REVIEW_KEY_COLUMNS, name=REVIEW_KEY),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(253), default="", server_default="")
    namespace: Mapped[str] = mapped_column(String(253))
    model: Mapped[str] = mapped_column(String(255), index=True)
    version: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(String(255))
    alertname: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), index=True)
    condition: Mapped[str] = mapped_column(String(16))
    starts_at: Mapped[datetime] = mapped_column(DateTime)  # clamped to the clock skew allowed
    sent_starts_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)  # as Alertmanager sent it
    cleared_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    opened_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)
    times_reopened: Mapped[int] = mapped_column(Integer, default=0)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON)
    annotations: Mapped[dict[str, Any]] = mapped_column(JSON)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    p99_before_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    p99_after_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    profile: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    profile_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # A profile fetch is owed (set with the opening, cleared when the profile or its error is
    # recorded): survives a restart, which resumes it.
    profile_pending: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    note: Mapped[str | None] = mapped_column(Text, nullable=True)

    def to_dict(self) -> dict[str, Any]:
        def iso(d: datetime | None) -> str | None:
            return d.replace(tzinfo=UTC).isoformat() if d else None

        return {
            "id": self.id, "cluster": self.cluster, "namespace": self.namespace, "model": self.model,
            "version": self.version, "reason": self.reason, "alertname": self.alertname, "state": self.state,
            "condition": self.condition, "starts_at": iso(self.starts_at), "cleared_at": iso(self.cleared_at),
            "opened_at": iso(self.opened_at), "updated_at": iso(self.updated_at),
            "times_reopened": self.times_reopened, "labels": self.labels, "annotations": self.annotations,
            "value": self.value, "p99_before_s": self.p99_before_s, "p99_after_s": self.p99_after_s,
            "profile": self.profile, "profile_error": self.profile_error, "note": self.note,
        }


# The largest id the `Integer` primary key holds on every backend (PostgreSQL's int4).
MAX_REVIEW_ID = 2**31 - 1


def text_column_limits() -> dict[str, int]:
    """Characters each bounded text column holds ({"model": 255, …}): what the service validates against."""
    return {c.name: c.type.length for c in Review.__table__.columns
            if isinstance(c.type, String) and c.type.length is not None}


def key_of(alert: WebhookAlert, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> ReviewKey:
    labels = alert.labels
    return ReviewKey(labels.get(cluster_label, ""), labels.get("namespace", ""), labels["model"], labels["version"],
                     review_reason(labels))


def utc_naive(d: datetime) -> datetime:
    """Naive UTC (SQLite keeps no zone); naive input is taken as UTC already."""
    return d.astimezone(UTC).replace(tzinfo=None) if d.tzinfo else d


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer; survives kill -9
    cur.execute("PRAGMA synchronous=NORMAL")  # durable against process crashes in WAL mode
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


def make_engine(url: str) -> Engine:
    try:
        engine = create_engine(url, pool_pre_ping=True)
    except (ArgumentError, ImportError, ValueError) as exc:
        raise UsageError(f"database URL {redact_url(url)!r} is not usable: {redact_urls(str(exc))}") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


class ReviewStore:
    """All review reads and writes; writes are serialised so concurrent re-sends cannot race, within
    one process by a lock and across replicas by row locks and the unique key."""

    def __init__(self, url: str, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> None:
        self.cluster_label = cluster_label
        self.engine = make_engine(url)
        try:
            migrate(self.engine, Base.metadata)
        except DBAPIError as exc:  # unreachable, refused, not a database at all (a file that is not SQLite)
            raise UsageError(f"cannot open review database {redact_url(url)!r}: "
                             f"{redact_urls(str(exc.orig))[:300]}") from None
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        self._write_lock = threading.Lock()

    def close(self) -> None:
        self.engine.dispose()

    def _find(self, s: Session, key: ReviewKey) -> Review | None:
        """The review of *key*, row-locked until the transaction ends (PostgreSQL: SELECT … FOR UPDATE),
        so two replicas never both reopen it; SQLite serialises writers anyway."""
        return s.scalars(select(Review).filter_by(**dataclasses.asdict(key)).with_for_update()).one_or_none()

    @staticmethod
    def _starts(review: Review | None, sent: datetime, at: datetime) -> datetime:
        """The instance's startsAt as the review keeps it: for a re-send of the instance the review
        holds, the value it was clamped to when first seen; else the one sent, at most *at* +
        MAX_CLOCK_SKEW. Clamped afresh at each notification, a far-future instance's re-send an
        hour later read as a newer instance and reopened a review someone had closed."""
        if review is not None and review.sent_starts_at == sent:
            return review.starts_at
        return min(sent, at + MAX_CLOCK_SKEW)

    def apply_firing(self, alert: WebhookAlert, at: datetime | None = None,
                     want_profile: bool = False) -> tuple[int, FiringOutcome]:
        """Store a firing alert at *at* (naive UTC, default now). *want_profile*: an opened or
        reopened review owes a profile fetch (`profile_pending`), in the same transaction."""
        key, sent, at = key_of(alert, self.cluster_label), utc_naive(alert.startsAt), at or now()
        with self._write_lock:
            for _ in range(2):  # a second try after a unique-key race with another process
                try:
                    with self._session.begin() as s:
                        review = self._find(s, key)
                        starts = self._starts(review, sent, at)
                        if review is None:
                            review = self._new(key, alert, starts, sent)
                            review.profile_pending = want_profile
                            s.add(review)
                            s.flush()
                            return review.id, "opened"
                        outcome = self._refire(review, alert, starts, sent)
                        if outcome == "reopened" and want_profile:
                            review.profile_pending = True
                        return review.id, outcome
                except IntegrityError:
                    continue
        raise TidescaleError(f"could not store review {key}")

    def _new(self, key: ReviewKey, alert: WebhookAlert, starts: datetime, sent: datetime) -> Review:
        t = now()
        review = Review(
            **dataclasses.asdict(key), alertname=alert.labels.get("alertname", ""), state="open",
            condition="firing",
            starts_at=starts, sent_starts_at=sent, opened_at=t, updated_at=t, times_reopened=0,
        )
        self._record_values(review, alert)
        return review

    def _refire(self, review: Review, alert: WebhookAlert, starts: datetime, sent: datetime) -> FiringOutcome:
        if starts < review.starts_at or (starts == review.starts_at and review.condition == "cleared"):
            return "stale"  # a re-send of an alert instance we already saw end
        reopen = starts > review.starts_at and (review.condition == "cleared" or review.state == "closed")
        review.starts_at, review.sent_starts_at = starts, sent
        review.condition = "firing"
        review.cleared_at = None
        review.updated_at = now()
        self._record_values(review, alert)
        if reopen:
            review.state = "open"
            review.times_reopened += 1
            return "reopened"
        return "refreshed"

    @staticmethod
    def _record_values(review: Review, alert: WebhookAlert) -> None:
        review.labels = dict(alert.labels)
        review.annotations = dict(alert.annotations)
        review.value = to_float(alert.annotations.get("value"))
        before = to_float(alert.annotations.get("p99_before_seconds"))
        after = to_float(alert.annotations.get("p99_after_seconds"))
        if before is not None or after is not None:
            review.p99_before_s, review.p99_after_s = before, after

    def apply_resolved(self, alert: WebhookAlert, at: datetime | None = None) -> ResolvedOutcome:
        key, sent, at = key_of(alert, self.cluster_label), utc_naive(alert.startsAt), at or now()
        with self._write_lock, self._session.begin() as s:
            review = self._find(s, key)
            if review is None:
                return "unknown"
            if self._starts(review, sent, at) < review.starts_at or review.condition == "cleared":
                return "stale"
            review.condition = "cleared"
            review.cleared_at = utc_naive(alert.endsAt) if alert.endsAt else now()
            review.updated_at = now()
            return "cleared"

    def attach_profile(self, review_id: int, profile: dict[str, Any] | None, error: str | None) -> None:
        with self._write_lock, self._session.begin() as s:
            review = s.get(Review, review_id)
            if review is not None:
                review.profile, review.profile_error, review.profile_pending = profile, error, False

    def pending_profiles(self) -> list[tuple[int, str, str]]:
        """(id, model, version) of every review that still owes its profile fetch, oldest first."""
        query = select(Review.id, Review.model, Review.version).where(Review.profile_pending).order_by(Review.id)
        with self._session() as s:
            return [(int(i), m, v) for i, m, v in s.execute(query).all()]

    def get(self, review_id: int) -> dict[str, Any] | None:
        with self._session() as s:
            review = s.get(Review, review_id)
            return review.to_dict() if review else None

    def list(self, state: str | None = None, model: str | None = None, limit: int = 500,
             cluster: str | None = None) -> list[dict[str, Any]]:
        query = select(Review).order_by(Review.id).limit(limit)
        if state:
            query = query.where(Review.state == state)
        if model:
            query = query.where(Review.model == model)
        if cluster is not None:
            query = query.where(Review.cluster == cluster)
        with self._session() as s:
            return [r.to_dict() for r in s.scalars(query)]

    def patch(self, review_id: int, state: str | None, note: str | None) -> dict[str, Any] | None:
        """Apply a manual transition; ValueError names a forbidden one."""
        with self._write_lock, self._session.begin() as s:
            review = s.get(Review, review_id)
            if review is None:
                return None
            if state is not None and state != review.state:
                if state not in TRANSITIONS[review.state]:
                    raise ValueError(f"a review cannot go from {review.state!r} to {state!r}")
                if state == "closed" and not (note or review.note):
                    raise ValueError("closing a review needs a note saying what was decided")
                review.state = state
            if note is not None:
                review.note = note
            review.updated_at = now()
            return review.to_dict()

    def counts_by_state(self) -> dict[str, int]:
        with self._session() as s:
            rows = s.execute(select(Review.state, func.count()).group_by(Review.state)).all()
        counts = dict.fromkeys(STATES, 0)
        counts.update({state: int(n) for state, n in rows})
        return counts

    def total(self) -> int:
        with self._session() as s:
            return int(s.scalar(select(func.count()).select_from(Review)) or 0)
