"""The review database's versioned migrations on SQLite (PostgreSQL, with two replicas starting at once,
is in tests/integration/test_reviews_postgres.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from tidescale.alerts.reviews import migrations
from tidescale.alerts.reviews.schema import WebhookAlert
from tidescale.alerts.reviews.store import Base, Review, ReviewStore
from tidescale.contracts.errors import TidescaleError
from tidescale.devstack.tools import FIXTURES


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


def version_2_database(database: str) -> None:
    """*database* as tidescale made it at schema version 2 (its dialect's DDL), with one closed review."""
    engine = create_engine(database)
    ddl = FIXTURES / "reviews" / f"schema-v2-{engine.dialect.name}.sql"
    with engine.begin() as conn:
        for statement in ddl.read_text().split(";\n"):
            if statement.strip():
                conn.execute(text(statement))
        conn.execute(text(f"CREATE TABLE {migrations.VERSION_TABLE} (version INTEGER PRIMARY KEY)"))
        conn.execute(text(f"INSERT INTO {migrations.VERSION_TABLE} (version) VALUES (1), (2)"))
        conn.execute(text("INSERT INTO reviews (namespace, model, version, reason, alertname, state, condition, "
                          "starts_at, opened_at, updated_at, times_reopened, labels, annotations, profile_pending) "
                          "VALUES ('ml', 'm', '1', 'r', 'A', 'closed', 'cleared', '2026-01-01', '2026-01-01', "
                          "'2026-01-01', 2, '{}', '{}', FALSE)"))
    engine.dispose()


def check_version_2_migrates_to_a_key_with_the_cluster(database: str) -> None:
    """Migration 3 (issue 46): the review of before keeps its id and gets cluster ''; afterwards two
    clusters' alerts for one model, namespace, version and reason open two reviews."""
    version_2_database(database)
    store = ReviewStore(database)
    with store.engine.connect() as conn:
        assert migrations.current_version(conn) == migrations.LATEST
        inspector = inspect(conn)
        assert {c["name"] for c in inspector.get_columns("reviews")} == {c.name for c in Review.__table__.columns}
        assert [u["column_names"] for u in inspector.get_unique_constraints("reviews")] == [
            ["cluster", "namespace", "model", "version", "reason"]]
        indexes = {i["name"] for i in inspector.get_indexes("reviews") if "duplicates_constraint" not in i}
        assert indexes == {"ix_reviews_model", "ix_reviews_state"}  # PostgreSQL lists the key's own index too
        assert "reviews_before_rebuild" not in inspector.get_table_names()
    [old] = store.list()
    assert (old["cluster"], old["state"], old["times_reopened"]) == ("", "closed", 2)
    at = datetime(2026, 2, 1, tzinfo=UTC)
    for cluster in ("east", "west"):
        alert = WebhookAlert.model_validate({"status": "firing", "startsAt": at.isoformat(), "labels": {
            "alertname": "A", "reason": "r", "namespace": "ml", "model": "m", "version": "1", "cluster": cluster}})
        assert store.apply_firing(alert, at=at.replace(tzinfo=None))[1] == "opened"
    reviews = store.list()
    assert reviews[0] == old and sorted(r["cluster"] for r in reviews) == ["", "east", "west"]
    assert [r["cluster"] for r in store.list(cluster="west")] == ["west"]
    store.close()
    assert migrations.migrate(create_engine(database), Base.metadata) == migrations.LATEST  # idempotent


def test_a_version_2_database_gets_the_cluster_in_its_review_key_and_keeps_its_reviews(tmp_path: Path) -> None:
    """SQLite cannot alter a constraint: the table is copied once, in the migration's transaction."""
    check_version_2_migrates_to_a_key_with_the_cluster(url(tmp_path))
