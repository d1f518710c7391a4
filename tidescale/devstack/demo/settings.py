"""Settings of `tidescale demo` (YAML section `demo`, env `TIDESCALE_DEMO_*`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from tidescale.contracts.settings import ComponentSettings
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S
from tidescale.sim.traffic import SCENARIOS, TraceUnit


class DemoSettings(ComponentSettings):
    """The embedded default: the four-part story for 5 minutes on the local Kubernetes cluster, 1..4
    replicas (`on: local`: a diurnal day with a 3x surge on the process stack)."""

    model_config = SettingsConfigDict(env_prefix="TIDESCALE_DEMO_", extra="forbid")
    section: ClassVar[str] = "demo"
    renamed: ClassVar[Mapping[str, str]] = {"slo_p99_s": "slo_latency_threshold_s"}

    duration_s: float = Field(300.0, gt=0, le=24 * 3600)
    scenario: str = "diurnal-surge"
    base_rps: float = Field(22.0, gt=0, le=2000)
    trace_csv: Path | None = None
    trace_unit: TraceUnit | None = None  # its numeric timestamps' (None: header or size)
    time_scale: float = Field(0.05, gt=0)
    min_replicas: int = Field(1, ge=1, le=16)
    max_replicas: int = Field(4, ge=1, le=16)
    cold_start_s: float = Field(8.0, ge=0, le=600)
    slo_latency_threshold_s: float = Field(SLO_LATENCY_THRESHOLD_S, gt=0)
    # Service curves 4x slower than the V100 calibration, so one replica saturates near 80 req/s.
    curve_scale: float = Field(4.0, ge=1.0, le=100.0)
    model_mix: dict[str, float] = Field(default_factory=lambda: {"resnet50": 0.8, "ctr_ranker": 0.2})
    inject_faults: bool = True
    live: bool = True
    seed: int = 0
    # Where the story plays: the local Kubernetes cluster (the chart, the real HPA) or the process stack.
    on: Literal["cluster", "local"] = "cluster"
    # On the cluster: how the HPA reads the recommender (the chart's autoscaling.mode).
    autoscaling_mode: Literal["keda", "adapter"] = "keda"

    @model_validator(mode="after")
    def _check(self) -> DemoSettings:
        if self.scenario not in SCENARIOS and self.trace_csv is None:
            raise ValueError(f"unknown scenario {self.scenario!r}; choose one of {', '.join(sorted(SCENARIOS))}")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        return self
