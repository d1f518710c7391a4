"""The review service on a real PostgreSQL (the `database` URL the chart's existingSecret provides):
the same HTTP behaviour the SQLite unit tests pin, and no loss or duplicate across a kill -9."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.hostile import DATETIMES, LABEL_VALUES
from tests.integration.test_reviews_reliability import kill_9_mid_stream
from tests.postgres import create_database, running_postgres
from tests.unit.alerts import test_reviews_hostile as hostile
from tests.unit.alerts import test_reviews_migrations as migrations_test
from tests.unit.alerts import test_reviews_service as behaviour
from tests.unit.alerts.reviews_helpers import TOKEN
from tidescale.alerts.reviews.service import create_app
from tidescale.alerts.reviews.settings import ReviewsSettings

pytestmark = pytest.mark.integration
_names = itertools.count()


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with running_postgres() as url:
        yield url


@pytest.fixture()
def database(postgres: str) -> str:
    """An empty database for each test."""
    return create_database(postgres, f"reviews_{next(_names)}")


@pytest.mark.parametrize("case", [
    behaviour.test_one_review_per_model_version_reason_under_resends_and_groups,
    behaviour.test_resolved_clears_the_condition_and_a_later_firing_reopens,
    behaviour.test_resolved_for_an_unknown_review_is_accepted_and_creates_nothing,
    behaviour.test_patch_acknowledge_and_close_with_a_note,
    behaviour.test_list_filters_by_state_and_model,
    behaviour.test_regression_reviews_record_p99_before_and_after,
], ids=lambda f: f.__name__.removeprefix("test_"))
def test_http_behaviour_on_postgresql(case: Callable[[TestClient], None], database: str) -> None:
    with TestClient(create_app(ReviewsSettings(database=database, token=TOKEN))) as client:
        case(client)


def test_kill_9_mid_stream_loses_and_duplicates_nothing_on_postgresql(database: str, tmp_path: Path) -> None:
    kill_9_mid_stream(tmp_path, database)


def pg_client(database: str) -> TestClient:
    return TestClient(create_app(ReviewsSettings(database=database, token=TOKEN, max_body_bytes=16 << 20)))


@pytest.mark.parametrize("field", hostile.FIELDS)
@pytest.mark.parametrize(("name", "value"), LABEL_VALUES, ids=[n for n, _ in LABEL_VALUES])
def test_one_bad_alert_never_blocks_the_payload_on_postgresql(database: str, field: str, name: str,
                                                              value: str) -> None:
    """PostgreSQL enforces String(n) and refuses NUL: the service must reject such an alert alone."""
    with pg_client(database) as client:
        hostile.check_one_bad_alert_never_blocks_the_payload(client, field, value)


def test_the_store_limits_are_enforced_on_postgresql(database: str) -> None:
    with pg_client(database) as client:
        hostile.check_the_store_limits_are_enforced(client)


@pytest.mark.parametrize("field", ["startsAt", "endsAt"])
@pytest.mark.parametrize(("name", "value"), DATETIMES, ids=[n for n, _ in DATETIMES])
def test_hostile_datetimes_on_postgresql(database: str, field: str, name: str, value: str) -> None:
    with pg_client(database) as client:
        hostile.check_hostile_datetimes(client, field, value)


def test_ids_beyond_the_integer_column_on_postgresql(database: str) -> None:
    with pg_client(database) as client:
        for review_id in (2**31, 2**63):
            assert client.get(f"/api/v1/reviews/{review_id}").status_code == 422
        assert client.get(f"/api/v1/reviews/{2**31 - 1}").status_code == 404


def test_a_version_2_database_gets_the_cluster_in_its_review_key_on_postgresql(database: str) -> None:
    migrations_test.check_version_2_migrates_to_a_key_with_the_cluster(database)


def test_replicas_starting_at_once_migrate_once(database: str) -> None:
    """Four review-service replicas start together on an empty database: one migrates, all serve."""
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import create_engine, text

    from tidescale.alerts.reviews import migrations
    from tidescale.alerts.reviews.store import ReviewStore

    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: ReviewStore(database), range(4)))
    with create_engine(database).connect() as conn:
        versions = [v for (v,) in conn.execute(text(f"SELECT version FROM {migrations.VERSION_TABLE}"))]
    assert versions == [m.version for m in migrations.MIGRATIONS]
    for store in stores:
        store.close()


def test_two_replicas_under_concurrent_resends_keep_one_review_and_count_a_reopen_once(database: str) -> None:
    """Alertmanager HA pairs send the same notification to both replicas at once: the row lock makes
    the read-modify-write of each one atomic across processes, not only across threads."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.unit.alerts.reviews_helpers import alert
    from tidescale.alerts.reviews.schema import WebhookAlert
    from tidescale.alerts.reviews.store import ReviewStore

    replicas = [ReviewStore(database), ReviewStore(database)]
    first = WebhookAlert.model_validate(alert(starts="2026-11-21T10:00:00Z"))
    resolved = WebhookAlert.model_validate(alert(status="resolved", starts="2026-11-21T10:00:00Z",
                                                 ends="2026-11-21T10:30:00Z"))
    again = WebhookAlert.model_validate(alert(starts="2026-11-21T11:00:00Z"))
    with ThreadPoolExecutor(8) as pool:
        opened = list(pool.map(lambda i: replicas[i % 2].apply_firing(first), range(16)))
        assert replicas[0].apply_resolved(resolved) == "cleared"
        outcomes = [o for _, o in pool.map(lambda i: replicas[i % 2].apply_firing(again), range(16))]
    assert len({review_id for review_id, _ in opened}) == 1 and [o for _, o in opened].count("opened") == 1
    assert outcomes.count("reopened") == 1
    [review] = replicas[1].list()
    assert review["times_reopened"] == 1 and review["state"] == "open"
    for store in replicas:
        store.close()
