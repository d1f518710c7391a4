"""One sample-quantile function: the estimators the callers name, and what none means."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidescale.sim.samples import sample_quantile, sample_quantiles


def test_the_estimators_the_callers_name() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert sample_quantile(values, 0.99) == pytest.approx(99.01)       # linear: numpy's default
    assert sample_quantile(values, 0.99, "higher") == 100.0            # a latency some request had
    assert sample_quantile(values, 0.99, "inverted_cdf") == 99.0       # nearest rank: 99 % at or below
    assert sample_quantile(values, 0.5, "nearest") == 51.0  # index round(49.5) = 50, half to even
    assert sample_quantiles(values, (0.5, 0.99)) == [pytest.approx(50.5), pytest.approx(99.01)]


def test_no_values_is_none_and_a_bad_q_is_refused() -> None:
    assert sample_quantile([], 0.99) is None and sample_quantiles([], (0.5, 0.9)) == [None, None]
    with pytest.raises(ValueError, match="not in"):
        sample_quantile([1.0], 1.5)
    with pytest.raises(ValueError, match="not all in"):
        sample_quantiles([1.0], (0.5, -0.1))


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200), st.floats(0, 1))
def test_every_estimator_stays_within_the_samples(values: list[float], q: float) -> None:
    for method in ("linear", "higher", "nearest", "inverted_cdf"):
        found = sample_quantile(values, q, method)  # type: ignore[arg-type]
        assert found is not None and min(values) <= found <= max(values)
    assert sample_quantile(np.asarray(values), q) == pytest.approx(float(np.quantile(values, q)))
