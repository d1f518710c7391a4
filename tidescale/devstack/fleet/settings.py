"""Settings of `tidescale fleet run` (YAML section `fleet`, env `TIDESCALE_FLEET_*`, flags win)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tidescale.contracts.settings import ComponentSettings
from tidescale.devstack.fleet.fleet import MAX_REPLICAS
from tidescale.devstack.fleet.triton import TraceSettings

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class FleetSettings(ComponentSettings):
    """How the local fleet runs and what traffic it gets."""

    section: ClassVar[str] = "fleet"
    model_config = SettingsConfigDict(env_prefix="TIDESCALE_FLEET_", extra="forbid")

    replicas: int = Field(2, ge=0, le=MAX_REPLICAS)
    scenario: str = "diurnal-surge"
    duration: float = Field(120.0, gt=0)
    base_rps: float = Field(20.0, gt=0)
    time_scale: float = Field(1.0, gt=0)
    rate_scale: float = Field(1.0, gt=0)
    cold_start: float = Field(45.0, ge=0, le=3600)
    models: str = "resnet50=1,ctr_ranker=1"
    gpus_per_node: int = Field(8, ge=1, le=16)
    seed: int = 0
    namespace: str = Field("tidescale-demo", pattern=DNS_LABEL)
    deployment: str = Field("triton", pattern=DNS_LABEL)
    trace_mode: Literal["off", "triton", "opentelemetry"] = "off"
    trace_rate: int = Field(100, ge=1)
    otlp_url: str = Field("http://127.0.0.1:4318/v1/traces", pattern=r"^https?://")
    summary_latencies: bool = False
    max_in_flight: int = Field(256, ge=1, le=10_000)

    def trace(self) -> TraceSettings | None:
        if self.trace_mode == "off":
            return None
        return TraceSettings(mode=self.trace_mode, rate=self.trace_rate, url=self.otlp_url)
