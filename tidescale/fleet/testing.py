"""One-line fleets for integration tests in any area.

    from tidescale.fleet.testing import running_fleet, fleet_fixture

    def test_x(tmp_path):
        with running_fleet(tmp_path, replicas=1) as fleet:
            url = fleet.ready_urls()[0]

    triton_fleet = fleet_fixture(replicas=2)          # a session-scoped pytest fixture named as assigned
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tidescale.fleet.fleet import TritonFleet
from tidescale.fleet.model_repo import DEFAULT_MODELS, ModelSpec, with_load_seconds
from tidescale.fleet.stack import FleetStack


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


def fleet_fixture(replicas: int = 2, scope: str = "session", stack: bool = False, **kwargs: Any) -> Callable[..., Any]:
    """A pytest fixture that starts a fleet (or a whole FleetStack) once per *scope*."""
    import pytest

    factory = running_stack if stack else running_fleet

    @pytest.fixture(scope=scope)  # type: ignore[call-overload]
    def _fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        with factory(tmp_path_factory.mktemp("fleet"), replicas=replicas, **kwargs) as running:
            yield running

    return _fixture  # type: ignore[no-any-return]
