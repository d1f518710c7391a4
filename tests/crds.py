"""The CRDs that rendered custom resources are validated against: read from the upstream Go modules that
deploy/cluster/go pins (prometheus-operator, KEDA), in Go's module cache, so the tests check against the
same CRDs the local cluster installs."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidescale.devstack.cluster.addons import KEDA, OPERATOR_CRDS, PROMETHEUS_OPERATOR, module_dir

KEDA_CRDS = Path("config", "crd", "bases")
# kind -> (component and module, file in that module)
CRD_FILES: dict[str, tuple[tuple[str, str], Path]] = {
    "PrometheusRule": (PROMETHEUS_OPERATOR, OPERATOR_CRDS / "monitoring.coreos.com_prometheusrules.yaml"),
    "ServiceMonitor": (PROMETHEUS_OPERATOR, OPERATOR_CRDS / "monitoring.coreos.com_servicemonitors.yaml"),
    "PodMonitor": (PROMETHEUS_OPERATOR, OPERATOR_CRDS / "monitoring.coreos.com_podmonitors.yaml"),
    "AlertmanagerConfig": (PROMETHEUS_OPERATOR, OPERATOR_CRDS / "monitoring.coreos.com_alertmanagerconfigs.yaml"),
    "ScaledObject": (KEDA, KEDA_CRDS / "keda.sh_scaledobjects.yaml"),
    "TriggerAuthentication": (KEDA, KEDA_CRDS / "keda.sh_triggerauthentications.yaml"),
}


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """Safe loading, plus YAML 1.1's `=` value tag, which a plain `=` in an enum resolves to (the
    AlertmanagerConfig CRD's matchType) and which the safe loader has no constructor for."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


@functools.cache
def crd_path(kind: str) -> Path:
    """The CRD file of *kind* in Go's module cache (downloaded there first if missing)."""
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH: the CRDs are read from the Go modules deploy/cluster/go pins "
                    "(bash scripts/setup.sh installs what the cluster build needs)")
    (component, module), path = CRD_FILES[kind]
    return module_dir(component, module) / path


@functools.cache
def crd(kind: str) -> dict[str, Any]:
    docs = [d for d in yaml.load_all(crd_path(kind).read_text(), Loader=_Loader) if d]
    [found] = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    assert found["spec"]["names"]["kind"] == kind, crd_path(kind)
    return found


def openapi_schema(kind: str, version: str | None = None) -> dict[str, Any]:
    """The OpenAPI schema of *version* (default: the served storage version) of *kind*'s CRD."""
    versions = crd(kind)["spec"]["versions"]
    if version is None:
        [chosen] = [v for v in versions if v.get("served", True) and v.get("storage", True)]
    else:
        [chosen] = [v for v in versions if v["name"] == version]
    schema: dict[str, Any] = chosen["schema"]["openAPIV3Schema"]
    return schema
