"""Session-scoped pytest fixtures over the dev fleet: `triton_fleet = fleet_fixture(replicas=2)`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tidescale.devstack.fleet.running import running_fleet, running_stack


def fleet_fixture(replicas: int = 2, scope: str = "session", stack: bool = False, **kwargs: Any) -> Callable[..., Any]:
    """A pytest fixture that starts a fleet (or a whole FleetStack) once per *scope*."""
    factory = running_stack if stack else running_fleet

    @pytest.fixture(scope=scope)  # type: ignore[call-overload]
    def _fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        with factory(tmp_path_factory.mktemp("fleet"), replicas=replicas, **kwargs) as running:
            yield running

    return _fixture  # type: ignore[no-any-return]
