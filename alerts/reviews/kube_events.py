"""Optional: a Kubernetes Event on the model's Deployment when a review opens (`kubectl describe`
then shows it next to rollouts). Best effort: failures are logged and never block a review."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from tidescale.contracts.kubeapi import EventsApi, deployment_event

log = logging.getLogger(__name__)
COMPONENT = "tidescale-reviews"


def event_body(namespace: str, deployment: str, review: dict[str, Any], now: datetime) -> dict[str, Any]:
    cluster = f" in cluster {review['cluster']}" if review.get("cluster") else ""
    message = (f"model {review['model']} version {review['version']}{cluster} needs a review "
               f"({review['reason']}); review #{review['id']}")
    return deployment_event(namespace, deployment, reason="ModelReviewOpened", message=message,
                            component=COMPONENT, now=now, name_prefix="tidescale-review")


def deployment_of(review: dict[str, Any], model_deployments: dict[str, str]) -> tuple[str, str] | None:
    """(namespace, deployment): the alert's `deployment` label, else the configured `model: ns/deploy`."""
    labels = review.get("labels") or {}
    if labels.get("deployment") and review.get("namespace"):
        return review["namespace"], labels["deployment"]
    target = model_deployments.get(review["model"], "")
    namespace, sep, deployment = target.partition("/")
    return (namespace, deployment) if sep and namespace and deployment else None


class KubeEventPoster:
    """Posts review Events through the Kubernetes API (in-cluster config, else kubeconfig)."""

    def __init__(self, model_deployments: dict[str, str], api: EventsApi | None = None) -> None:
        self.model_deployments = model_deployments
        self._api = api

    def _client(self) -> EventsApi:
        if self._api is None:
            from tidescale.contracts.kubeapi import core_v1_api

            self._api = core_v1_api()
        return self._api

    def post(self, review: dict[str, Any]) -> bool:
        target = deployment_of(review, self.model_deployments)
        if target is None:
            log.info("no Deployment known for model %s; no Kubernetes Event", review["model"])
            return False
        namespace, deployment = target
        try:
            self._client().create_namespaced_event(
                namespace, event_body(namespace, deployment, review, datetime.now(UTC)))
        except Exception as exc:  # the API server being away must not lose the review
            log.warning("posting a Kubernetes Event for review %s failed: %s", review["id"], exc)
            return False
        return True
