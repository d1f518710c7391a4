"""Every float setting of every component is finite, and every bad setting exits 2 with a message
naming it (issue 43 #17 and #18)."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from tests.hostile import JSON_DOCUMENTS, NUMBERS, URLS_WITH_CREDENTIALS, deep_json
from tidescale.alerts.config import AlertsConfig
from tidescale.alerts.reviews.settings import ReviewsSettings
from tidescale.autoscaler.settings import RecommenderSettings
from tidescale.cli import main
from tidescale.contracts.settings import ComponentSettings
from tidescale.devstack.demo.settings import DemoSettings
from tidescale.devstack.fleet.settings import FleetSettings
from tidescale.devstack.ports import free_port
from tidescale.exporters.settings import ExporterSettings

COMPONENTS: list[type[ComponentSettings]] = [ExporterSettings, AlertsConfig, ReviewsSettings, RecommenderSettings,
                                             DemoSettings, FleetSettings]
# Where infinity is a documented value ("inf: off"); NaN is refused there too.
INF_MEANS_OFF = {"RecommenderTuning.drain_s", "RecommenderTuning.pod_drain_s", "RecommenderTuning.trend_cap",
                 "RecommenderTuning.fall_window_s"}
# Required fields of nested sections, to build one around the field under test.
REQUIRED = {"deployment": "triton", "namespace": "ml", "model": "m", "name": "group"}
NON_FINITE = [(name, value) for name, value in NUMBERS if name in ("nan", "inf", "neg-inf")]


def _float_slots(annotation: Any) -> typing.Iterator[tuple[Any, type[BaseModel] | None]]:
    """(a way to put a value where *annotation* holds a float, or None) and nested models."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is float:
        yield (lambda v: v), None
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield None, annotation
    elif origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in args[:1] if origin is typing.Annotated else args:
            yield from _float_slots(arg)
    elif origin in (list, tuple, set, frozenset) and args:
        for put, model in _float_slots(args[0]):
            yield ((lambda v, put=put: [put(v)]) if put else None), model
    elif origin is dict and len(args) == 2:
        for put, model in _float_slots(args[1]):
            yield ((lambda v, put=put: {"k": put(v)}) if put else None), model


def float_fields(model: type[BaseModel], seen: set[type[BaseModel]] | None = None) -> typing.Iterator[
        tuple[type[BaseModel], str, Any]]:
    """(model, field, put) for every float field of *model* and the sections nested in it."""
    seen = seen if seen is not None else set()
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        for put, nested in _float_slots(field.annotation):
            if put is not None:
                yield model, name, put
            if nested is not None:
                yield from float_fields(nested, seen)


def build(model: type[BaseModel], name: str, value: Any) -> None:
    required = {k: v for k, v in REQUIRED.items() if k in model.model_fields and model.model_fields[k].is_required()}
    model.model_validate({**required, name: value})


CASES = sorted({(m.__name__, n): (m, n, put) for c in COMPONENTS for m, n, put in float_fields(c)}.items())


def test_the_walk_finds_the_float_settings() -> None:
    names = {key for key, _ in CASES}
    assert {("RecommenderSettings", "interval_s"), ("RecommenderSettings", "capacity_rps"),
            ("RecommenderTuning", "drain_s"), ("TargetSettings", "capacity_rps"), ("FastPathSettings", "timeout_s"),
            ("ExporterSettings", "bucket_max_s"), ("ExporterSettings", "slo_thresholds_s"),
            ("AlertsConfig", "bucket_boundaries_s"), ("AlertsConfig", "op_class_limits"),
            ("SloGroup", "latency_threshold_s"), ("ReviewsSettings", "profile_timeout_s")} <= names
    assert len(names) > 60


@pytest.mark.parametrize(("key", "case"), CASES, ids=[f"{m}.{n}" for (m, n), _ in CASES])
@pytest.mark.parametrize(("what", "value"), NON_FINITE, ids=[n for n, _ in NON_FINITE])
def test_every_float_setting_is_finite(key: tuple[str, str], case: tuple[Any, str, Any], what: str,
                                       value: float) -> None:
    model, name, put = case
    if f"{model.__name__}.{name}" in INF_MEANS_OFF and what == "inf":
        build(model, name, put(value))  # "off"
        return
    with pytest.raises(ValidationError) as info:
        build(model, name, put(value))
    assert any(err["loc"][:1] == (name,) for err in info.value.errors())


def test_infinite_interval_and_capacity_were_the_reported_cases() -> None:
    for field in ("interval_s", "capacity_rps", "query_timeout_s", "stale_after_s", "cold_start_s"):
        with pytest.raises(ValidationError, match="finite"):
            RecommenderSettings(**{field: float("inf")})  # type: ignore[arg-type]


# --- every bad setting exits 2 with a message that names it ----------------------------------------

def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0), capsys.readouterr().err
    return 0, capsys.readouterr().err


RECOMMEND = ["autoscale", "recommend", "--print-config"]
BAD_SETTINGS: list[tuple[str, dict[str, str], list[str], str]] = [
    ("malformed-json-env", {"TIDESCALE_RECOMMENDER_TARGETS": "[{"}, RECOMMEND,
     "TIDESCALE_RECOMMENDER_TARGETS is not valid JSON"),
    ("deep-json-env", {"TIDESCALE_RECOMMENDER_TARGETS": deep_json(5000).decode()}, RECOMMEND,
     "TIDESCALE_RECOMMENDER_TARGETS"),
    ("nan-bucket", {"TIDESCALE_EXPORTER_BUCKET_MAX_S": "nan"}, ["exporter", "serve"], "exporter.bucket_max_s"),
    ("inf-bucket", {"TIDESCALE_EXPORTER_BUCKET_MIN_S": "inf"}, ["exporter", "serve"], "exporter.bucket_min_s"),
    ("inf-slo-threshold", {"TIDESCALE_EXPORTER_SLO_THRESHOLDS_S": "[0.5, Infinity]"}, ["exporter", "serve"],
     "exporter.slo_thresholds_s.1"),
    ("nan-alert-bucket", {"TIDESCALE_ALERTS_BUCKET_BOUNDARIES_S": "[0.5, NaN]"}, ["alerts", "render"],
     "alerts.bucket_boundaries_s.1"),
    ("inf-interval", {"TIDESCALE_RECOMMENDER_INTERVAL_S": "inf"}, RECOMMEND, "recommender.interval_s"),
    ("nul-in-exporter-host", {}, ["exporter", "serve", "--host", "127.0.0.1\x00x"], "exporter.host"),
    ("nul-in-recommender-host", {}, [*RECOMMEND, "--host", "0.0.0.0\x00"], "recommender.host"),
    ("nul-in-reviews-host", {"TIDESCALE_REVIEWS_TOKEN": "t"}, ["reviews", "serve", "--host", "\x00"],
     "reviews.host"),
]
BAD_IDS = [name for name, *_ in BAD_SETTINGS]


@pytest.mark.parametrize(("name", "env", "argv", "says"), BAD_SETTINGS, ids=BAD_IDS)
def test_a_bad_setting_exits_2_naming_it(name: str, env: dict[str, str], argv: list[str], says: str,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # alerts render writes ./rendered-alerts when it gets that far
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, err = run(argv, capsys)
    assert code == 2 and says in err and "Traceback" not in err, err[-500:]


@pytest.mark.parametrize(("name", "document"), JSON_DOCUMENTS, ids=[n for n, _ in JSON_DOCUMENTS])
def test_any_json_in_an_environment_variable_is_a_setting_or_a_usage_error(
        name: str, document: bytes, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = document.decode("utf-8", errors="replace").replace("\x00", "")
    monkeypatch.setenv("TIDESCALE_RECOMMENDER_SERIES_MATCHERS", text)
    code, err = run(RECOMMEND, capsys)
    assert code in (0, 2) and "Traceback" not in err
    assert code == 0 or "TIDESCALE_RECOMMENDER_SERIES_MATCHERS" in err or "recommender.series_matchers" in err


def test_a_database_that_is_not_sqlite_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("not a database, but a text file of some length\n" * 100)
    monkeypatch.setenv("TIDESCALE_REVIEWS_TOKEN", "t")
    code, err = run(["reviews", "serve", "--database", f"sqlite:///{tmp_path / 'notes.txt'}"], capsys)
    assert code == 2 and "cannot open review database" in err and "file is not a database" in err


def test_a_database_password_never_reaches_the_error(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43 #7: the review service's start-up error printed the PostgreSQL URL as given."""
    monkeypatch.setenv("TIDESCALE_REVIEWS_TOKEN", "t")
    url = f"postgresql+psycopg://reviews:s3cret@127.0.0.1:{free_port()}/reviews"
    code, err = run(["reviews", "serve", "--database", url], capsys)
    assert code == 2 and "***@127.0.0.1" in err and "s3cret" not in err
    code, err = run(["reviews", "serve", "--database", "nosuch://reviews:s3cret@db/x"], capsys)
    assert code == 2 and "is not usable" in err and "s3cret" not in err


def test_a_finite_interval_too_long_to_wait_is_refused() -> None:
    """threading.Event.wait(1e300) raises OverflowError: the loop would stop as with inf."""
    with pytest.raises(ValidationError, match="interval_s"):
        RecommenderSettings(interval_s=1e300)


@pytest.mark.parametrize(("name", "url", "secret"), URLS_WITH_CREDENTIALS, ids=[n for n, *_ in URLS_WITH_CREDENTIALS])
def test_no_credential_of_a_database_url_reaches_the_start_up_error(name: str, url: str, secret: str) -> None:
    from tidescale.alerts.reviews.store import ReviewStore
    from tidescale.contracts.errors import UsageError

    with pytest.raises(UsageError) as info:
        ReviewStore(url.replace("postgresql://", "nosuchdriver://"))
    assert secret not in str(info.value)
