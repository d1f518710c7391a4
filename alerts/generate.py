"""Generated artifacts of the alerts package (see tidescale.artifacts)."""

from __future__ import annotations

from tidescale.alerts.config import AlertsConfig, default_config
from tidescale.alerts.render import alertmanager_yaml, alerts_yaml, recording_yaml

RECORDING = "alerts/rules/tidescale-recording.yaml"
ALERTING = "alerts/rules/tidescale-alerts.yaml"
ALERTMANAGER = "alerts/alertmanager.yaml"
HELM_RULES = "deploy/helm/tidescale/files/rules"
HELM_ALERTMANAGER = "deploy/helm/tidescale/files/alertmanager"


def rendered(cfg: AlertsConfig) -> dict[str, str]:
    """File name → content for one configuration (used by `alerts render` and the tests)."""
    return {
        "tidescale-recording.yaml": recording_yaml(cfg),
        "tidescale-alerts.yaml": alerts_yaml(cfg),
        "alertmanager.yaml": alertmanager_yaml(cfg),
    }


def artifacts() -> dict[str, str]:
    """Repository-relative path -> full file content."""
    files = rendered(default_config())
    return {
        RECORDING: files["tidescale-recording.yaml"],
        ALERTING: files["tidescale-alerts.yaml"],
        ALERTMANAGER: files["alertmanager.yaml"],
        f"{HELM_RULES}/tidescale-recording.yaml": files["tidescale-recording.yaml"],
        f"{HELM_RULES}/tidescale-alerts.yaml": files["tidescale-alerts.yaml"],
        f"{HELM_ALERTMANAGER}/alertmanager.yaml": files["alertmanager.yaml"],
    }
