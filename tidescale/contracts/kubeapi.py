"""The Kubernetes API client the way every tidescale component loads it."""

from __future__ import annotations

from typing import Any


def core_v1_api() -> Any:
    """CoreV1Api from the in-cluster service account, else the local kubeconfig (for development)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CoreV1Api()
