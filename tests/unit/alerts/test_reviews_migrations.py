"""The review database's versioned migrations on SQLite (PostgreSQL, with two replicas starting at once,
is in tests/integration/test_reviews_postgres.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from tidescale.alerts.reviews import migrations
from tidescale.alerts.reviews.store import Base, Review, ReviewStore
from tidescale.contracts.errors import TidescaleError


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'reviews.db'}"


def test_an_empty_database_migrates_to_exactly_the_model(tmp_path: Path) -> None:
    engine = create_engine(url(tmp_path))
    assert migrations.migrate(engine, Base.metadata) == 0
    with engine.connect() as conn:
        assert migrations.current_version(conn) == migrations.LATEST
        columns = {c["name"] for c in inspect(conn).get_columns("reviews")}
    assert columns == {c.name for c in Review.__table__.columns}
    assert migrations.migrate(engine, Base.metadata) == migrations.LATEST  # idempotent: a restart changes nothing


def test_a_database_of_tidescale_0_1_is_adopted_with_its_reviews(tmp_path: Path) -> None:
    engine = create_engine(url(tmp_path))
    Base.metadata.create_all(engine)  # what 0.1 did: no version table
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO reviews (namespace, model, version, reason, alertname, state, condition, "
                          "starts_at, opened_at, updated_at, times_reopened, labels, annotations) VALUES "
                          "('ml', 'm', '1', 'r', 'A', 'open', 'firing', '2026-01-01', '2026-01-01', '2026-01-01', "
                          "0, '{}', '{}')"))
    assert migrations.migrate(engine, Base.metadata) == 1
    store = ReviewStore(url(tmp_path))
    assert [r["model"] for r in store.list()] == ["m"]


def test_a_version_1_database_gets_the_columns_of_version_2_and_keeps_its_reviews(tmp_path: Path) -> None:
    """startsAt as sent and the profile fetch owed (issue 43 #10, #15), added by ALTER TABLE."""
    engine = create_engine(url(tmp_path))
    with engine.begin() as conn:
        migrations.MIGRATIONS[0].apply(conn, Base.metadata)
        for column in ("sent_starts_at", "profile_pending"):  # what version 1 created
            conn.execute(text(f"ALTER TABLE reviews DROP COLUMN {column}"))
        conn.execute(text(f"CREATE TABLE {migrations.VERSION_TABLE} (version INTEGER PRIMARY KEY)"))
        conn.execute(text(f"INSERT INTO {migrations.VERSION_TABLE} (version) VALUES (1)"))
        conn.execute(text("INSERT INTO reviews (namespace, model, version, reason, alertname, state, condition, "
                          "starts_at, opened_at, updated_at, times_reopened, labels, annotations) VALUES "
                          "('ml', 'm', '1', 'r', 'A', 'open', 'firing', '2026-01-01', '2026-01-01', '2026-01-01', "
                          "0, '{}', '{}')"))
    assert migrations.migrate(engine, Base.metadata) == 1
    with engine.connect() as conn:
        assert {c["name"] for c in inspect(conn).get_columns("reviews")} == {c.name for c in Review.__table__.columns}
    store = ReviewStore(url(tmp_path))
    assert [r["model"] for r in store.list()] == ["m"] and store.pending_profiles() == []


def test_a_database_newer_than_this_tidescale_is_refused_by_name(tmp_path: Path) -> None:
    ReviewStore(url(tmp_path)).close()
    engine = create_engine(url(tmp_path))
    with engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {migrations.VERSION_TABLE} (version) VALUES ({migrations.LATEST + 1})"))
    with pytest.raises(TidescaleError, match="newer than this tidescale"):
        ReviewStore(url(tmp_path))
