"""Independent simulations on several cores (`bench autoscale --jobs N`).

A benchmark's scenarios carry their traffic as closures (rate functions), which do not pickle, so
the workers are forked: each inherits the function and the items, and only an item's index and its
result cross the process boundary. Every simulation is seeded, so the results do not depend on how
many workers ran them, only the wall time does.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# The forked worker's function and items: set by the pool's initializer, in the worker process only.
_adopted: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def fork_map(fn: Callable[[T], R], items: Sequence[T], jobs: int, done: Callable[[T], None] = lambda _i: None
             ) -> list[R]:
    """*fn* of each item, in the items' order; with *jobs* > 1, in that many forked workers (results
    must pickle). *done* is told of each item as it finishes, in the parent."""
    if jobs <= 1 or len(items) <= 1:
        out = []
        for item in items:
            out.append(fn(item))
            done(item)
        return out
    results: dict[int, R] = {}
    with multiprocessing.get_context("fork").Pool(min(jobs, len(items)), initializer=_adopt,
                                                  initargs=(fn, items)) as pool:
        for index, result in pool.imap_unordered(_run, range(len(items))):
            results[index] = result
            done(items[index])
    return [results[k] for k in range(len(items))]


def _adopt(fn: Callable[[Any], Any], items: Sequence[Any]) -> None:
    global _adopted
    _adopted = (fn, items)


def _run(index: int) -> tuple[int, Any]:
    assert _adopted is not None, "fork_map's worker runs after its initializer"
    fn, items = _adopted
    return index, fn(items[index])
