"""Confidence intervals for figures measured over a few rounds or draws, shared by the benchmarks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Student's t at 97.5 % (a two-sided 95 % interval) by degrees of freedom; beyond the table, the value
# for 10 (a little wider than the true one: the interval errs on the side of "not judged").
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def interval(values: Sequence[float]) -> tuple[float, float] | None:
    """(mean, half-width of its 95 % confidence interval) of *values*; None with fewer than two."""
    if len(values) < 2:
        return None
    mean = float(np.mean(values))
    sem = float(np.std(values, ddof=1)) / math.sqrt(len(values))
    return mean, T_975.get(len(values) - 1, T_975[10]) * sem


def ci_text(mean: float | None, half: float | None, fmt: str) -> str:
    """*fmt* ("{:.2f} ± {:.2f} %") filled with a mean and its interval's half-width; the mean alone where
    there is no interval (one draw), "–" where there is no mean."""
    if mean is None:
        return "–"
    return fmt.split(" ±")[0].format(mean) if half is None else fmt.format(mean, half)
