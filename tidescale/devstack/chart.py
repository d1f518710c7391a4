"""The chart's generated parts (see tidescale.devstack.artifacts): what the chart passes through to
Python is described by the Python that reads it, never a second time by hand.

- `exporter.settings` and `recommender.settings` in values.schema.json are the schemas of
  `ExporterSettings` and `RecommenderSettings`, less the settings the chart sets itself, so a misspelt
  key is refused by `helm install` instead of crash-looping the component (which refuses unknown keys);
- Chart.yaml's version and appVersion are the project's version, so `helm package` gives a chart
  versioned like the image it deploys.
The rest of values.schema.json is written by hand; the generator replaces only these parts of it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel

from tidescale.devstack.tools import REPO_ROOT

CHART = "deploy/helm/tidescale"
SCHEMA = f"{CHART}/values.schema.json"
CHART_YAML = f"{CHART}/Chart.yaml"

# The settings the chart fills in from its own values (serving.*, exporter.port and healthPort,
# exporter.traceSampleRate, exporter.traceFiles, the auth Secret, the node's name): refused in
# exporter.settings, where they would silently win over those values.
EXPORTER_OWNED = frozenset({
    "host", "port", "kube_namespace", "kube_selector", "kube_http_port", "kube_node_name", "trace_sample_rate",
    "trace_dir", "trace_file_name", "trace_file_keep_rotations", "token", "health_port",
})
# What the chart sets from its own values (recommender.port, prometheusUrl, prometheusAuth, kubeEvents, `slo`,
# autoscaling.*): refused in recommender.settings for the same reason.
RECOMMENDER_OWNED = frozenset({
    "host", "port", "health_port", "prometheus_url", "prometheus_auth", "slo_p99_s", "slo", "kube_events",
    "scale_mode", "series_matchers", "hpa_tolerance_rounding", "targets",
})
# JSON Schema keywords worth keeping from pydantic's output; the rest (title, format, writeOnly) is noise
# for a values file or a format the chart's validator would not check anyway.
_KEEP = frozenset({"type", "anyOf", "items", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                   "minLength", "maxLength", "pattern", "default", "description", "minItems", "maxItems"})


def _clean(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _clean(v) for k, v in schema.items() if k in _KEEP or k == "additionalProperties"}
        if "properties" in schema:  # a nested model, inlined: its fields by name
            out["properties"] = {name: _clean(v) for name, v in schema["properties"].items()}
        return out
    if isinstance(schema, list):
        return [_clean(v) for v in schema]
    return schema


def _inlined(schema: Any, defs: dict[str, Any]) -> Any:
    """*schema* with every `$ref` to one of *defs* replaced by that definition, closed like its model."""
    if isinstance(schema, list):
        return [_inlined(v, defs) for v in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        nested = {"type": "object", "additionalProperties": False,
                  "properties": {k: _inlined(v, defs) for k, v in target.get("properties", {}).items()}}
        return {**nested, **({"description": schema["description"]} if "description" in schema else {})}
    return {k: _inlined(v, defs) for k, v in schema.items()}


def _inf_off(model: type[BaseModel]) -> dict[str, Any]:
    """Field name -> the same for a nested model, or True for an `InfOff` field (infinity means off)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            out[name] = _inf_off(field.annotation)
        elif any(getattr(m, "allow_inf_nan", None) is True for m in field.metadata):
            out[name] = True
    return out


def _infinity_as_text(properties: dict[str, Any], inf_off: dict[str, Any]) -> None:
    """An `InfOff` field takes a number or the text "inf" (JSON, and so Helm's schema check, has no
    infinity); a default of infinity is said in words, not written."""
    for name, mark in inf_off.items():
        prop = properties.get(name)
        if prop is None:
            continue
        if isinstance(mark, dict):
            _infinity_as_text(prop.get("properties", {}), mark)
            continue
        prop["type"] = ["number", "string"]
        if not math.isfinite(prop.get("default", 0.0)):
            del prop["default"]
            prop["description"] = "off by default (inf); a number turns it on"


def settings_schema(model: type[BaseModel], owned: frozenset[str], described_as: str) -> dict[str, Any]:
    """The values schema of a settings pass-through: *model*'s fields but *owned*, closed (nested models too)."""
    full = model.model_json_schema()
    defs = full.get("$defs", {})
    properties = {name: _clean(_inlined(prop, defs)) for name, prop in full["properties"].items() if name not in owned}
    _infinity_as_text(properties, _inf_off(model))
    return {"type": "object", "additionalProperties": False, "description": described_as, "properties": properties}


def schema_text(current: str) -> str:
    schema = json.loads(current)
    from tidescale.exporters.settings import ExporterSettings

    exporter = schema["properties"]["exporter"]["properties"]
    exporter["settings"] = settings_schema(
        ExporterSettings, EXPORTER_OWNED,
        "Exporter settings (docs/exporter.md), generated from ExporterSettings; the chart sets "
        + ", ".join(sorted(EXPORTER_OWNED)) + " from its own values.")
    from tidescale.autoscaler.settings import RecommenderSettings

    recommender = schema["properties"]["recommender"]["properties"]
    recommender["settings"] = settings_schema(
        RecommenderSettings, RECOMMENDER_OWNED,
        "Recommender settings (docs/autoscaler.md), generated from RecommenderSettings; the chart sets "
        + ", ".join(sorted(RECOMMENDER_OWNED)) + " from its own values.")
    return json.dumps(schema, indent=2, allow_nan=False) + "\n"


def chart_yaml_text(current: str, version: str) -> str:
    """Chart.yaml with version and appVersion set to the project's *version*."""
    out, versions = re.subn(r"(?m)^version: .*$", f"version: {version}", current)
    out, apps = re.subn(r"(?m)^appVersion: .*$", f'appVersion: "{version}"', out)
    if (versions, apps) != (1, 1):
        raise ValueError(f"{CHART_YAML} must have one version and one appVersion line")
    return out


def artifacts() -> dict[str, str]:
    from tidescale import __version__

    return {
        SCHEMA: schema_text((REPO_ROOT / SCHEMA).read_text()),
        CHART_YAML: chart_yaml_text((REPO_ROOT / CHART_YAML).read_text(), __version__),
    }
