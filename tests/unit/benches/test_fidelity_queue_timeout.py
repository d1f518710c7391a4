"""`bench fidelity --queue-timeout`: the share rejected compared, and the page it records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tidescale import cli
from tidescale.benches import fidelity


def test_the_share_rejected_agrees_within_its_points_or_a_tenth_of_itself() -> None:
    assert fidelity.rejected_within(0.0, 0.019) is True and fidelity.rejected_within(0.0, 0.021) is False
    assert fidelity.rejected_within(0.40, 0.43) is True  # 3 points, under 10 % of 40 %
    assert fidelity.rejected_within(0.40, 0.45) is False
    assert fidelity.rejected_within(None, 0.1) is None and fidelity.rejected_within(0.1, None) is None


def test_a_side_counts_what_its_queue_policy_rejected() -> None:
    curve, cfg = fidelity.model_curve(), fidelity.batcher_config(0.3)
    arrivals = fidelity.poisson(1.2 * fidelity.capacity_rps(curve, fidelity.batcher_config()), 10.0, seed=3)
    side = fidelity.simulate(curve, cfg, arrivals, seed=3)
    s = side.summary()
    assert s["rejected"] > 0 and s["requests"] + s["rejected"] == len(arrivals)
    assert s["rejected_share"] == round(s["rejected"] / len(arrivals), 4)
    assert float(side.queue.max()) < 0.3  # nothing served after waiting past the timeout
    plain = fidelity.simulate(curve, fidelity.batcher_config(), arrivals, seed=3).summary()
    assert "rejected" not in plain and plain["requests"] == len(arrivals)


def test_compare_sides_judges_the_share_rejected_with_a_queue_policy_only() -> None:
    def side(served: int, rejected: int | None) -> fidelity.SideResult:
        lat = np.full(served, 0.2)
        return fidelity.SideResult(np.arange(served, dtype=float), lat, lat / 2, np.bincount([8] * 10, minlength=33),
                                   rejected)

    vs = fidelity.compare_sides(side(800, 200), side(750, 250))
    assert vs["rejected_share_diff_pt"] == pytest.approx(5.0) and vs["rejected_within"] is False
    assert vs["within_10pct"] and not fidelity.agrees(vs)
    plain = fidelity.compare_sides(side(800, None), side(800, None))
    assert "rejected_within" not in plain and fidelity.agrees(plain)


def test_a_queue_timeout_run_is_recorded_beside_the_default_page() -> None:
    point = fidelity.run_point(1.2, 4.0, seed=1, real=False, workdir=Path("/nonexistent"), log=print,
                               queue_timeout_s=0.3)
    assert point["sim"]["rejected"] > 0
    result = {"queue_timeout_s": 0.3}
    assert fidelity.page_name(result) == "fidelity-queue-timeout" and fidelity.page_name({}) == "fidelity"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "61"])
def test_a_bad_queue_timeout_exits_2_naming_it(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "fidelity", "--no-real", "--no-record", "--queue-timeout", value])
    assert exc.value.code == 2
    assert "--queue-timeout must be in (0, 60] seconds" in capsys.readouterr().err
