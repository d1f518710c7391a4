"""The percentiles benchmark's pure parts: the workload, our method, the pages Prometheus scrapes."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidescale.benches.percentiles import (
    PROM_DEFAULT_BUCKETS,
    QUANTILES,
    _PodPage,
    markdown,
    relative_errors,
    workload,
)
from tidescale.exporters.buckets import log_buckets


def test_workload_has_the_advertised_shapes() -> None:
    pods = workload(seed=1, per_pod=20_000, pods=6)
    everything = np.concatenate(pods)
    assert len(pods) == 6 and everything.size == 120_000
    assert (everything < 0.003).mean() > 0.15  # the cached fast path (bimodal)
    assert everything.max() > 20 * np.median(everything)  # the heavy tail
    assert np.median(pods[0]) > 1.3 * np.median(pods[1])  # pod 0 sits on a slower node


def test_relative_errors_against_the_exact_quantiles() -> None:
    pods = workload(seed=2, per_pod=20_000, pods=4)
    truth = {k: float(np.quantile(np.concatenate(pods), q)) for k, q in QUANTILES.items()}
    estimates: dict[str, float | None] = {"p50": truth["p50"] * 1.02, "p95": truth["p95"], "p99": None}
    errors = relative_errors(estimates, truth)
    assert errors["p50"] == pytest.approx(0.02) and errors["p95"] == 0.0 and errors["p99"] is None


def test_pod_page_exposes_histogram_and_triton_style_summary() -> None:
    values = workload(seed=3, per_pod=5_000, pods=1)[0]
    registry = CollectorRegistry()
    registry.register(_PodPage(values, log_buckets(0.001, 20, [0.1]), with_summary=True))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    quantiles = {s.labels["quantile"]: s.value for s in families["nv_inference_request_summary_us"].samples
                 if "quantile" in s.labels}
    assert set(quantiles) == {"0.5", "0.95", "0.99"}
    assert abs(quantiles["0.5"] - np.quantile(values, 0.5) * 1e6) < 1e-3
    buckets = [s for s in families["tidescale_request_duration_seconds"].samples if s.name.endswith("_bucket")]
    assert buckets[-1].value == values.size
    plain = CollectorRegistry()
    plain.register(_PodPage(values, PROM_DEFAULT_BUCKETS, with_summary=False))
    assert "nv_inference_request_summary_us" not in generate_latest(plain).decode()


def test_markdown_reports_every_method(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tidescale.benches.percentiles as bench

    monkeypatch.setattr(bench, "RESULT_PNG", tmp_path / "p.png")
    errs = {"p50": 0.01, "p95": 0.02, "p99": None}
    methods = ("tidescale_histogram", "default_buckets", "averaged_summaries")
    result = {"methods": {m: dict(errs) for m in methods},
              "truth_seconds": {"p50": 0.01, "p95": 0.02, "p99": 0.03}, "requests": 10, "pods": 2}
    text = markdown(result)
    assert all(f"`{m}`" in text for m in methods) and "n/a" in text
    assert (tmp_path / "p.png").stat().st_size > 0
