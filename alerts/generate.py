"""Generated artifacts of the alerts package (see tidescale.devstack.artifacts)."""

from __future__ import annotations

from tidescale.alerts.config import AlertsConfig, default_config
from tidescale.alerts.render import alertmanager_yaml, alerts_yaml, dump, recording_yaml
from tidescale.alerts.slo import slo_clauses
from tidescale.contracts.placeholders import CLUSTER_LABEL

# Committed once, in the chart's files/ (what the chart ships, promtool tests and the dev stack read).
RECORDING = "deploy/helm/tidescale/files/rules/tidescale-recording.yaml"
ALERTING = "deploy/helm/tidescale/files/rules/tidescale-alerts.yaml"
ALERTMANAGER = "deploy/helm/tidescale/files/alertmanager/alertmanager.yaml"
# The SLO group's PromQL with placeholders: the chart fills them from its `slo` values.
SLO_CLAUSES = "deploy/helm/tidescale/files/slo/clauses.yaml"


def rendered(cfg: AlertsConfig) -> dict[str, str]:
    """File name → content for one configuration (used by `alerts render` and the tests)."""
    return {
        "tidescale-recording.yaml": recording_yaml(cfg),
        "tidescale-alerts.yaml": alerts_yaml(cfg),
        "alertmanager.yaml": alertmanager_yaml(cfg),
    }


def chart_config() -> AlertsConfig:
    """The default configuration with the cluster label as the placeholder the chart fills in
    (values `clusterLabel`; tidescale.contracts.placeholders)."""
    return default_config().model_copy(update={"aggregation_labels": [CLUSTER_LABEL]})


def artifacts() -> dict[str, str]:
    """Repository-relative path -> full file content."""
    cfg = chart_config()
    files = rendered(cfg)
    return {
        RECORDING: files["tidescale-recording.yaml"],
        ALERTING: files["tidescale-alerts.yaml"],
        ALERTMANAGER: files["alertmanager.yaml"],
        SLO_CLAUSES: dump(slo_clauses(cfg)),
    }
