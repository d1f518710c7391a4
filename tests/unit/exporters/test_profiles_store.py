"""The profile store: uploads in, op-share gauges out, every bound enforced."""

from __future__ import annotations

import gzip

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.paths import FIXTURES
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.store import ProfileStore
from tidescale.exporters.selfmetrics import SelfMetrics

TF = FIXTURES / "profiles" / "tensorflow"
STRING_OPS = (TF / "ctr_string_ops.xplane.pb").read_bytes()
INT_IDS_TRACE = (TF / "ctr_int_ids.trace_viewer.json.gz").read_bytes()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


@pytest.fixture
def clock() -> list[float]:
    return [2_000_000_000.0]


@pytest.fixture
def store(clock: list[float]) -> ProfileStore:
    return ProfileStore(max_bytes=4 << 20, max_models=3, self_metrics=SelfMetrics(), clock=lambda: clock[0])


def test_ingest_exports_shares_top_ops_and_age(store: ProfileStore, clock: list[float]) -> None:
    reg = CollectorRegistry()
    reg.register(store)
    rep = store.ingest(STRING_OPS, filename="host.xplane.pb", content_type="application/x-protobuf",
                       model="ctr", version="7")
    assert rep.format == "xplane" and rep.model == "ctr"
    assert sample(reg, "tidescale_op_time_share", model="ctr", version="7", op_class="string") == pytest.approx(
        0.09, abs=0.005)
    assert sample(reg, "tidescale_op_top_share", model="ctr", version="7", op="ParseExampleV2",
                  op_class="parse") == pytest.approx(0.536, abs=0.005)
    assert sample(reg, "tidescale_profile_timestamp_seconds", model="ctr", version="7") == clock[0]
    captured = rep.captured_at
    assert captured is not None
    assert sample(reg, "tidescale_profile_age_seconds", model="ctr", version="7") == pytest.approx(
        clock[0] - captured)
    assert store.report("ctr", "7") is rep
    assert store.self_metrics is not None and store.self_metrics.profile_bytes == len(STRING_OPS)


def test_a_new_profile_replaces_the_old_one(store: ProfileStore) -> None:
    store.ingest(STRING_OPS, model="ctr", version="1")
    store.ingest(INT_IDS_TRACE, filename="t.json.gz", model="ctr", version="1")
    rep = store.report("ctr", "1")
    assert rep is not None and rep.op_class_share["string"] == 0.0


def test_model_cap_evicts_the_oldest_and_counts(store: ProfileStore) -> None:
    for v in ("1", "2", "3"):
        store.ingest(INT_IDS_TRACE, model="m", version=v)
    store.ingest(INT_IDS_TRACE, model="m", version="4")  # was a 429 for good: the store never freed a slot
    assert store.report("m", "1") is None and store.report("m", "4") is not None
    assert store.self_metrics is not None and sum(store.self_metrics.series_dropped.values()) == 1
    store.ingest(INT_IDS_TRACE, model="m", version="3")  # replacing an existing one evicts nothing
    assert sum(store.self_metrics.series_dropped.values()) == 1


@pytest.mark.parametrize(("model", "status"), [("", 400), ("a\nb", 400), ("x" * 201, 400), ("tab\there", 400)])
def test_hostile_model_names_are_400(store: ProfileStore, model: str, status: int) -> None:
    with pytest.raises(BadInput) as exc:
        store.ingest(INT_IDS_TRACE, model=model, version="1")
    assert exc.value.status_code == status


def test_quotes_in_names_are_escaped_in_the_exposition(store: ProfileStore) -> None:
    reg = CollectorRegistry()
    reg.register(store)
    store.ingest(INT_IDS_TRACE, model='we"ird\\model', version="1")
    text = generate_latest(reg).decode()
    assert 'model="we\\"ird\\\\model"' in text


def test_oversized_upload_is_413(store: ProfileStore) -> None:
    with pytest.raises(BadInput) as exc:
        store.ingest(b"{" + b" " * (5 << 20), model="m", version="1")
    assert exc.value.status_code == 413


def test_bomb_upload_is_413() -> None:
    assert ProfileStore(max_bytes=1 << 20).max_inflated_bytes == 1 << 30  # the default cap
    store = ProfileStore(max_bytes=1 << 20, max_inflated_bytes=16 << 20)
    bomb = gzip.compress(b'{"traceEvents": [' + b" " * (40 << 20), compresslevel=6)
    assert len(bomb) < store.max_bytes
    with pytest.raises(BadInput) as exc:
        store.ingest(bomb, model="m", version="1")
    assert exc.value.status_code == 413
    assert store.report("m", "1") is None
