"""One SLO: the exporter's buckets, the alert rules, the recommender, the benchmark and the chart
all read `tidescale.contracts.slo`, and every threshold the rules select is a bucket boundary."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.paths import REPO
from tidescale.alerts.config import default_config
from tidescale.autoscaler.settings import RecommenderSettings
from tidescale.benches.autoscale.scenarios import DEFAULT_SLO_S
from tidescale.contracts.errors import UsageError
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S, SLO_THRESHOLDS_S, check_slo_threshold, threshold_problems
from tidescale.exporters.buckets import log_buckets
from tidescale.exporters.settings import ExporterSettings


def exporter_boundaries() -> tuple[float, ...]:
    s = ExporterSettings()
    return log_buckets(s.bucket_min_s, s.bucket_max_s, s.slo_thresholds_s, s.max_buckets)


def test_every_component_defaults_to_the_one_slo() -> None:
    cfg = default_config()
    assert cfg.slo_latency_threshold_s == SLO_LATENCY_THRESHOLD_S
    assert RecommenderSettings().slo_latency_threshold_s == SLO_LATENCY_THRESHOLD_S
    assert DEFAULT_SLO_S == SLO_LATENCY_THRESHOLD_S
    values = yaml.safe_load((REPO / "deploy" / "helm" / "tidescale" / "values.yaml").read_text())
    assert values["slo"]["latency"]["thresholdSeconds"] == SLO_LATENCY_THRESHOLD_S


def test_every_alert_threshold_is_an_exporter_bucket_boundary() -> None:
    cfg = default_config()
    thresholds = [*cfg.bucket_boundaries_s, *(s.latency_threshold_s for s in cfg.resolved_slos())]
    assert threshold_problems(thresholds, exporter_boundaries()) == []
    assert set(SLO_THRESHOLDS_S) <= set(exporter_boundaries())


def test_a_threshold_off_the_buckets_is_reported() -> None:
    assert threshold_problems([0.3], exporter_boundaries()) == [
        f"SLO threshold 0.3s is not a histogram bucket boundary (boundaries: "
        f"{', '.join(f'{b:g}' for b in sorted(exporter_boundaries()))})"]


@given(st.lists(st.floats(min_value=0.002, max_value=15.0), min_size=1, max_size=8))
def test_log_buckets_keep_any_thresholds_exact(thresholds: list[float]) -> None:
    assert threshold_problems(thresholds, log_buckets(0.001, 20.0, thresholds, 60)) == []


@pytest.mark.parametrize("bad", [0.0, -0.5, math.nan, math.inf, -math.inf])
def test_an_slo_that_is_not_a_finite_positive_number_is_refused_naming_the_flag(bad: float) -> None:
    with pytest.raises(UsageError, match=r"^--slo-p99 must be a finite number > 0 \(seconds\), got"):
        check_slo_threshold(bad, "--slo-p99")


@given(st.floats(min_value=1e-6, max_value=3600.0))
def test_a_finite_positive_slo_passes_unchanged(threshold_s: float) -> None:
    assert check_slo_threshold(threshold_s) == threshold_s
