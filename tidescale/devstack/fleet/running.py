"""Fleets started and stopped as one `with` block (benchmarks, the fleet CLI, tests).

    with running_fleet(tmp_path, replicas=1) as fleet:
        url = fleet.ready_urls()[0]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tidescale.devstack.fleet.fleet import TritonFleet
from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, ModelSpec, with_load_seconds
from tidescale.devstack.fleet.stack import FleetStack


@contextmanager
def running_fleet(workdir: Path, replicas: int = 2, load_seconds: float = 0.0,
                  models: Sequence[ModelSpec] = DEFAULT_MODELS, **kwargs: Any) -> Iterator[TritonFleet]:
    """A started fleet (every replica Ready), stopped on exit; models load in *load_seconds*."""
    fleet = TritonFleet(workdir, with_load_seconds(tuple(models), load_seconds), replicas=replicas, **kwargs)
    with fleet:
        yield fleet


@contextmanager
def running_stack(workdir: Path, replicas: int = 2, load_seconds: float = 0.0,
                  models: Sequence[ModelSpec] = DEFAULT_MODELS, **kwargs: Any) -> Iterator[FleetStack]:
    """Fleet + simulated GPU nodes + kube-state-metrics, GPUs sampled every 0.5 s by default."""
    kwargs.setdefault("gpu_poll_interval", 0.5)
    with FleetStack(workdir, with_load_seconds(tuple(models), load_seconds), replicas=replicas, **kwargs) as stack:
        yield stack
