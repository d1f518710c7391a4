"""`fork_map`: forked workers run what does not pickle, and hand results back in the items' order."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tidescale.benches.autoscale import report as benchreport
from tidescale.benches.forked import fork_map


def test_forked_workers_run_closures_and_keep_the_order() -> None:
    offset = 10
    pids: set[int] = set()

    def square(n: int) -> tuple[int, int]:  # a closure: pickle could not send it to a spawned worker
        return n * n + offset, os.getpid()

    finished: list[int] = []
    forked = fork_map(square, list(range(7)), 3, finished.append)
    assert [r for r, _ in forked] == [n * n + 10 for n in range(7)]
    pids.update(pid for _, pid in forked)
    assert os.getpid() not in pids and sorted(finished) == list(range(7))
    serial = fork_map(square, list(range(7)), 1)
    assert [r for r, _ in serial] == [r for r, _ in forked] and {pid for _, pid in serial} == {os.getpid()}


def test_a_failing_item_fails_the_map() -> None:
    def fail_on_three(n: int) -> int:
        if n == 3:
            raise ValueError("item 3")
        return n

    with pytest.raises(ValueError, match="item 3"):
        fork_map(fail_on_three, [1, 2, 3, 4], 2)


def test_the_bench_records_the_same_results_with_two_jobs() -> None:
    """Seeded simulations: the workers change the wall time, not a figure."""
    def doc(jobs: int) -> dict[str, Any]:
        opts = benchreport.BenchOptions(["surge-3x", "cold-start-30s"], ("static", "oracle"), quick=True,
                                        peer_settings=("static=4",), oracle_search=2, jobs=jobs)
        result, runs = benchreport.run(opts)
        assert set(runs) == {"surge-3x", "cold-start-30s"}
        setup = dict(result["setup"])
        assert setup.pop("jobs") == jobs and setup.pop("wall_s") > 0
        return {**result, "setup": setup}

    assert doc(2) == doc(1)
    with pytest.raises(benchreport.UsageError, match=r"--jobs must be in \[1, 256\], got 0"):
        benchreport.BenchOptions(["surge-3x"], jobs=0)
