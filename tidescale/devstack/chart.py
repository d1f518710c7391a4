"""The chart's generated parts (see tidescale.devstack.artifacts): what the chart passes through to
Python is described by the Python that reads it, never a second time by hand.

- `exporter.settings` in values.schema.json is the schema of `ExporterSettings`, less the settings
  the chart sets itself, so a misspelt key is refused by `helm install` instead of crash-looping the
  exporter (which refuses unknown keys);
- Chart.yaml's version and appVersion are the project's version, so `helm package` gives a chart
  versioned like the image it deploys.
The rest of values.schema.json is written by hand; the generator replaces only these parts of it.
"""

from __future__ import annotations

import json
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
# JSON Schema keywords worth keeping from pydantic's output; the rest (title, format, writeOnly) is noise
# for a values file or a format the chart's validator would not check anyway.
_KEEP = frozenset({"type", "anyOf", "items", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                   "minLength", "maxLength", "pattern", "default", "description", "minItems", "maxItems"})


def _clean(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _clean(v) for k, v in schema.items() if k in _KEEP}
    if isinstance(schema, list):
        return [_clean(v) for v in schema]
    return schema


def settings_schema(model: type[BaseModel], owned: frozenset[str], described_as: str) -> dict[str, Any]:
    """The values schema of a settings pass-through: *model*'s fields but *owned*, closed."""
    full = model.model_json_schema()
    if "$defs" in full:
        raise ValueError(f"{model.__name__} has nested models: inline them before generating the chart schema")
    properties = {name: _clean(prop) for name, prop in full["properties"].items() if name not in owned}
    return {"type": "object", "additionalProperties": False, "description": described_as, "properties": properties}


def schema_text(current: str) -> str:
    schema = json.loads(current)
    from tidescale.exporters.settings import ExporterSettings

    exporter = schema["properties"]["exporter"]["properties"]
    exporter["settings"] = settings_schema(
        ExporterSettings, EXPORTER_OWNED,
        "Exporter settings (docs/exporter.md), generated from ExporterSettings; the chart sets "
        + ", ".join(sorted(EXPORTER_OWNED)) + " from its own values.")
    return json.dumps(schema, indent=2) + "\n"


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
