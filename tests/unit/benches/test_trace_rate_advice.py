"""The trace-rate advice: Prometheus' quantile arithmetic, the error curve and the advised N."""

from __future__ import annotations

import numpy as np
import pytest

from tidescale.benches import trace_rate
from tidescale.benches.trace_rate import (
    MAX_ADVISED_RATE,
    advised_rate,
    error_curve,
    exporter_bounds,
    histogram_quantiles,
    traced_needed,
)
from tidescale.contracts.errors import UsageError

BOUNDS = (0.1, 0.2, 0.4)


@pytest.mark.parametrize(("counts", "expected"), [
    ([0, 10, 0, 0], 0.199),  # all in (0.1, 0.2]: rank 9.9 of 10 → 0.1 + 0.1 × 0.99
    ([10, 0, 0, 0], 0.099),  # the first bucket starts at 0
    ([50, 49, 0, 1], 0.2),  # rank 99 reached at the end of (0.1, 0.2]
    ([50, 48, 0, 2], 0.4),  # rank in +Inf → the highest finite bound
    ([0, 0, 100, 0], 0.398),
])
def test_histogram_quantiles_reads_as_prometheus_does(counts: list[float], expected: float) -> None:
    got = histogram_quantiles(0.99, np.array([counts], dtype=float), BOUNDS)
    assert got[0] == pytest.approx(expected)


def test_the_error_shrinks_with_traced_requests_and_stops_at_the_bucket_error() -> None:
    rng = np.random.default_rng(3)
    population = rng.lognormal(np.log(0.05), 0.6, size=200_000)
    curve = error_curve(population, exporter_bounds(), (100, 1_000, 10_000, 50_000), trials=80)
    p95 = [p["p95_error"] for p in curve]
    assert p95[0] > p95[1] > p95[2]
    assert p95[-1] < 0.05
    assert all(p["median_error"] <= p["p95_error"] for p in curve)


def test_traced_needed_is_where_the_curve_stays_within_the_target() -> None:
    curve = [{"traced": 100, "p95_error": 0.3}, {"traced": 1_000, "p95_error": 0.015},
             {"traced": 2_000, "p95_error": 0.025}, {"traced": 5_000, "p95_error": 0.01}]
    assert traced_needed(curve, 0.02) == 5_000  # 1,000 dips under but 2,000 does not stay
    assert traced_needed(curve, 0.001) is None


def test_advised_rate_is_whole_bounded_and_refuses_nonsense() -> None:
    assert advised_rate(1_000, 20_000) == 15
    assert advised_rate(1, 20_000) == 1  # never below 1: trace everything
    assert advised_rate(1e9, 10) == MAX_ADVISED_RATE
    for rps, needed in ((0, 10), (10, 0), (-1, 10)):
        with pytest.raises(UsageError):
            advised_rate(rps, needed)
    with pytest.raises(UsageError, match="--target"):
        trace_rate.run(quick=True, target=1.5)


def test_the_quick_run_advises_from_the_heavy_tailed_case() -> None:
    result = trace_rate.run(quick=True)
    hard = result["populations"]["fleet_heavy_tail"]
    assert result["advice"]["traced_per_window"] == hard["traced_needed"]
    rates = [n for n in (result["advice"]["rate_by_request_rps"] or {}).values()]
    assert rates == sorted(rates)  # more traffic, rarer tracing


@pytest.mark.parametrize("target", ["0", "1.5", "-0.1"])
def test_the_cli_refuses_an_impossible_target_with_exit_2(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tidescale import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "trace-rate", "--quick", "--target", target])
    assert exc.value.code == 2
    assert "--target must be a relative error between 0 and 1" in capsys.readouterr().err
