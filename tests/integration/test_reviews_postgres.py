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
