"""`ExporterSettings`: flags > `TIDESCALE_EXPORTER_*` env > `exporter:` YAML section > defaults."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from tidescale.contracts.redact import redact_url
from tidescale.contracts.settings import Host, ServingSettings
from tidescale.contracts.slo import SLO_THRESHOLDS_S, SloValues


class ExporterSettings(ServingSettings):
    """Everything `tidescale exporter serve` can be told; defaults are safe for a laptop. The server's
    bounds (keep_alive_s, header_timeout_s, max_header_bytes, max_connections, health_port) are
    every service's (`ServingSettings`)."""

    section: ClassVar[str] = "exporter"
    model_config = SettingsConfigDict(env_prefix="TIDESCALE_EXPORTER_", extra="forbid")

    host: Host = "127.0.0.1"
    port: int = Field(9105, ge=1, le=65535)
    # Targets: static Triton HTTP URLs and/or pods found by label selector.
    triton_urls: list[str] = Field(default_factory=list)
    kube_namespace: str | None = None
    kube_selector: str | None = None
    kube_http_port: int = Field(8000, ge=1, le=65535, description="Triton's HTTP port on discovered pods")
    # One exporter per node (the chart's exporter.mode: daemonset, NODE_NAME from the downward API):
    # discover only the pods scheduled on this node, so that every pod is polled, and its spans
    # received, by exactly one exporter.
    kube_node_name: str | None = Field(None, min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    targets_file: Path | None = Field(None, description="file_sd JSON of Triton HTTP targets, re-read on change")
    poll_interval_s: float = Field(5.0, gt=0, le=3600)
    # Latency aggregation.
    slo_thresholds_s: list[float] = Field(default_factory=lambda: list(SLO_THRESHOLDS_S))
    # The chart's `slo` values (set by the chart): each SLO's threshold is a bucket boundary too, so
    # the rules never interpolate an SLO that a custom slo_thresholds_s left out.
    slo: SloValues | None = None
    bucket_min_s: float = Field(0.001, gt=0)
    bucket_max_s: float = Field(20.0, gt=0)
    max_buckets: int = Field(60, ge=4, le=60)
    trace_sample_rate: int = Field(1, ge=1, description="Triton --trace-config rate=N")
    max_series: int = Field(2000, ge=1, description="cap on latency label sets (model, version, stage, namespace, pod)")
    join_ttl_s: float = Field(30.0, gt=0, le=600)
    join_max_pending: int = Field(20_000, ge=1)
    join_max_bytes: int = Field(32 << 20, ge=64 << 10, description="byte budget of the span join buffer")
    trace_files: list[Path] = Field(default_factory=list, description="Triton mode=triton files to tail")
    # Triton never deletes a rotation (file.0, file.1, …): N deletes each finished one the exporter
    # has read once N newer ones exist (the exporter needs write access to the directory).
    trace_file_keep_rotations: int | None = Field(None, ge=1, description="None: keep every rotation")
    # A directory with a subdirectory per Triton pod, `<namespace>_<pod>`, each holding that pod's
    # trace file (the chart's exporter.traceFiles: a hostPath that Triton pods mount with subPathExpr).
    trace_dir: Path | None = Field(None, description="per-pod trace files: <trace_dir>/<namespace>_<pod>/<name>")
    trace_file_name: str = Field("trace.json", pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$",
                                 description="the file name Triton writes in each pod's subdirectory")
    trace_dir_idle_s: float = Field(600.0, gt=0, le=86400,
                                    description="a gone pod's read subdirectory is deleted after this long idle")
    # Uploads.
    token: SecretStr | None = Field(None, description="bearer token for write endpoints (TIDESCALE_EXPORTER_TOKEN)")
    traces_require_token: bool = True
    max_body_bytes: int = Field(8 << 20, ge=1024, description="cap on an OTLP body (after decompression)")
    max_profile_bytes: int = Field(256 << 20, ge=1024)
    # Each upload is spooled to $TMPDIR whole (the chart's tmp emptyDir holds this many times
    # max_profile_bytes, plus 64 MiB): three at once filled a 256Mi volume.
    max_profile_uploads: int = Field(1, ge=1, le=64,
                                     description="profile uploads at once; more answer 429 with Retry-After")
    log_format: Literal["json", "text"] = "json"
    # Background work: supervision, and the heartbeat of the loops that poll and tail.
    task_backoff_s: float = Field(1.0, gt=0, le=60, description="first restart delay of a failed background task")
    task_restart_limit: int = Field(10, ge=1, description="consecutive failures before liveness fails")
    stall_after_s: float = Field(300.0, gt=0, le=86400, allow_inf_nan=False,
                                 description="liveness fails when the stats poll or the trace-file loop has not "
                                             "finished a round for this long (at least 3 poll intervals)")

    @field_validator("slo_thresholds_s")
    @classmethod
    def _positive_slos(cls, value: list[float]) -> list[float]:
        if any(v <= 0 for v in value):
            raise ValueError("SLO thresholds must be positive seconds")
        return sorted(set(value))

    def boundary_thresholds_s(self) -> list[float]:
        """Where the latency histogram must have a boundary: slo_thresholds_s and every SLO's threshold."""
        own = {s.latency_threshold_s for s in self.slo.resolved()} if self.slo is not None else set()
        return sorted({*self.slo_thresholds_s, *own})

    @field_validator("token")
    @classmethod
    def _empty_token_is_none(cls, value: SecretStr | None) -> SecretStr | None:
        """An empty TIDESCALE_EXPORTER_TOKEN means "not set": write endpoints refuse everything."""
        return value if value is not None and value.get_secret_value().strip() else None

    @field_validator("triton_urls")
    @classmethod
    def _http_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"Triton URL must start with http:// or https://, got {redact_url(url)!r}")
        return [u.rstrip("/") for u in value]

    @model_validator(mode="after")
    def _consistent(self) -> ExporterSettings:
        if self.bucket_min_s >= self.bucket_max_s:
            raise ValueError("bucket_min_s must be below bucket_max_s")
        if (self.kube_selector is None) != (self.kube_namespace is None):
            raise ValueError("kube_namespace and kube_selector go together")
        if self.kube_node_name is not None and self.kube_namespace is None:
            raise ValueError("kube_node_name shards pod discovery by node: it needs kube_namespace and kube_selector")
        if self.trace_dir is not None and self.kube_selector is None and self.targets_file is None:
            raise ValueError("trace_dir reads the subdirectories of watched pods only: it needs kube_namespace and "
                             "kube_selector, or a targets_file whose targets are labelled with namespace and pod")
        return self
