"""Settings of `tidescale reviews serve` (flags > TIDESCALE_REVIEWS_* > `reviews:` YAML section)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from tidescale.contracts.placeholders import DEFAULT_CLUSTER_LABEL
from tidescale.contracts.promql import LABEL_NAME
from tidescale.contracts.settings import Host, ServingSettings


class ReviewsSettings(ServingSettings):
    """Where the service listens (and the server's bounds, `ServingSettings`), where it stores reviews,
    and the bearer token writers need."""

    section: ClassVar[str] = "reviews"
    model_config = SettingsConfigDict(env_prefix="TIDESCALE_REVIEWS_", extra="forbid")

    host: Host = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    # SQLite (WAL) by default; postgresql+psycopg://… works through the same setting.
    database: str = "sqlite:///reviews.db"
    token: SecretStr | None = None
    exporter_url: str | None = Field(None, pattern=r"^https?://")
    profile_timeout_s: float = Field(2.0, gt=0, le=60)
    max_body_bytes: int = Field(1 << 20, ge=1024)  # each webhook or PATCH body, checked before it is parsed
    max_alerts_per_payload: int = Field(1000, ge=1)
    # Post a Kubernetes Event on the model's Deployment when a review opens (needs RBAC: create events).
    kube_events: bool = False
    # model -> "namespace/deployment", for alerts without a `deployment` label.
    model_deployments: dict[str, str] = Field(default_factory=dict)
    # The alert label that names the cluster (the chart's `clusterLabel`; Prometheus adds it to the alerts
    # it sends when it is an external label): part of the review key, so clusters behind one
    # Alertmanager keep their reviews apart.
    cluster_label: str = Field(DEFAULT_CLUSTER_LABEL, pattern=LABEL_NAME.pattern)
    # This cluster's value of cluster_label (the chart's `autoscaling.cluster`): a review of another
    # cluster gets no Event here, where its Deployment is not. Empty: every review gets its Event.
    cluster: str = Field("", max_length=253)
