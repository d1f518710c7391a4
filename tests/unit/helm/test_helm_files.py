"""Static checks of the chart's values schema and the Dockerfile (no helm, no Docker engine needed)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import yaml

from tests.paths import REPO

CHART = REPO / "deploy" / "helm" / "tidescale"
DOCKERFILE = REPO / "deploy" / "Dockerfile"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def _objects(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every object node with its own properties, under properties, definitions and array items."""
    out = []
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            out.append((path or "/", node))
        for key, value in node.get("properties", {}).items():
            out += _objects(value, f"{path}/{key}")
        for key, value in node.get("definitions", {}).items():
            out += _objects(value, f"#/definitions/{key}")
        out += _objects(node.get("items"), f"{path}[]")
    return out


def test_the_benchmarks_adapter_delay_is_the_recommenders_scrape_interval_the_chart_deploys() -> None:
    """`bench autoscale` charges the adapter mode one scrape of the recommender: the chart's interval."""
    from tidescale.benches.autoscale.scenarios import PUBLISH_DELAY_S

    interval = yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]["recommender"]["interval"]
    assert re.fullmatch(r"[0-9]+s", interval) and float(interval[:-1]) == PUBLISH_DELAY_S["adapter"]


def test_default_values_satisfy_the_schema(schema: dict[str, Any]) -> None:
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)


def test_schema_closes_every_configurable_object(schema: dict[str, Any]) -> None:
    """Unknown keys are rejected wherever the chart defines the keys itself."""
    # Kubernetes' own types, passed through; and `global`, which Helm shares with every chart of an umbrella.
    open_ok = {"/podSecurityContext", "/securityContext", "#/definitions/probe", "#/definitions/extraContainers[]",
               "/global"}
    for path, node in _objects(schema):
        if path not in open_ok:
            assert node.get("additionalProperties") is False, f"{path} accepts unknown keys"


def test_every_default_key_is_in_the_schema(schema: dict[str, Any]) -> None:
    def walk(values: Any, node: dict[str, Any], path: str) -> None:
        if not isinstance(values, dict) or node.get("additionalProperties") is not False:
            return
        for key, value in values.items():
            assert key in node["properties"], f"{path}/{key} missing from values.schema.json"
            walk(value, node["properties"][key], f"{path}/{key}")

    walk(yaml.safe_load((CHART / "values.yaml").read_text()), schema, "")


@pytest.mark.parametrize("bad", [
    {"exporter": {"replicas": 0}},
    {"exporter": {"replicas": 2}},
    {"exporter": {"resources": {"requests": {"cpu": True}}}},
    {"exporter": {"extraEnv": [{"value": "no name"}]}},
    {"recommender": {"extraVolumeMounts": [{"name": "v"}]}},
    {"monitoring": {"exporter": {"relabelings": [{"targetLabel": "a", "replacment": "b"}]}}},
    {"image": {"digest": "sha256:short"}},
    {"namespaceOverride": "Not_A_Namespace"},
    {"reviews": {"persistence": {"size": "lots"}}},
    {"serving": {"selector": {}}},
    {"dashboards": {"labels": {"grafana_dashboard": 1}}},
    {"recommender": {"headroom": 0.5}},
    {"autoscaling": {"targets": [{"deployment": "d", "model": "m", "prescale": [
        {"timezone": "UTC", "start": "at nine", "end": "0 10 * * *", "replicas": 2}]}]}},
])
def test_schema_rejects_wrong_values(schema: dict[str, Any], bad: dict[str, Any]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key, value in bad.items():
        values[key] = {**values[key], **value} if isinstance(value, dict) else value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, schema)


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_is_multi_stage_and_slim() -> None:
    froms = [rest for word, rest in _instructions() if word == "FROM"]
    assert len(froms) >= 2 and all("slim" in f for f in froms)
    assert any(word == "COPY" and rest.startswith("--from=build") for word, rest in _instructions())


def test_dockerfile_runs_as_a_numeric_non_root_user() -> None:
    users = [rest for word, rest in _instructions() if word == "USER"]
    assert users, "no USER instruction"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) > 0
    chart_uid = yaml.safe_load((CHART / "values.yaml").read_text())["podSecurityContext"]["runAsUser"]
    assert int(uid) == chart_uid


def test_dockerfile_adds_no_secrets_and_has_a_healthcheck() -> None:
    instructions = _instructions()
    assert not [rest for word, rest in instructions if word == "ADD"]
    copied = " ".join(rest for word, rest in instructions if word == "COPY")
    assert not re.search(r"\.env|\.pem|\.key|secret|token|\.git\b|\.venv", copied, re.IGNORECASE)
    assert not [rest for word, rest in instructions if word in ("ENV", "ARG") and re.search(r"TOKEN|PASSWORD", rest)]
    assert any(word == "HEALTHCHECK" and "/healthz" in rest for word, rest in instructions)
    entry = next(rest for word, rest in instructions if word == "ENTRYPOINT")
    assert json.loads(entry) == ["tidescale"]


def test_dockerignore_keeps_secrets_and_venvs_out() -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    for pattern in (".git", ".venv", "**/.env", "**/*.pem", "**/*.key", "tests"):
        assert pattern in ignored


def test_templates_hold_no_second_autoscaling_renderer() -> None:
    """HPA, ScaledObject and the KEDA query come from autoscaler/manifests.py (files/autoscaling/objects.yaml)."""
    from tests.paths import REPO

    templates = (REPO / "deploy" / "helm" / "tidescale" / "templates").glob("*")
    for path in templates:
        text = path.read_text()
        for written_twice in ("kind: HorizontalPodAutoscaler", "kind: ScaledObject", "tidescale_desired_replicas{",
                              "type: prometheus", "averageValue"):
            assert written_twice not in text, f"{path.name} writes {written_twice!r} by hand"


def test_chart_schema_lists_every_recommender_knob() -> None:
    import json

    from tests.paths import REPO
    from tidescale.autoscaler.settings import RecommenderTuning

    schema = json.loads((REPO / "deploy" / "helm" / "tidescale" / "values.schema.json").read_text())
    recommender = schema["properties"]["recommender"]["properties"]
    for tuning in (recommender["settings"]["properties"]["tuning"], recommender["tuning"]):  # and its old key
        assert set(tuning["properties"]) == set(RecommenderTuning.model_fields)


def test_every_schema_reference_resolves(schema: dict[str, Any]) -> None:
    refs = re.findall(r'"\$ref": "#/definitions/([^"]+)"', json.dumps(schema))
    assert refs and set(refs) <= set(schema["definitions"])


@pytest.mark.parametrize("good", [
    {"exporter": {"resources": {"requests": {"ephemeral-storage": "1Gi"}, "limits": {"nvidia.com/gpu": 1}}}},
    {"reviews": {"resources": {}}},
    {"recommender": {"extraEnv": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}},
    {"extraObjects": [{"apiVersion": "v1", "kind": "ConfigMap"}, "kind: {{ .Values.x }}"]},
    {"image": {"digest": "sha256:" + "ab" * 32}},
])
def test_schema_accepts_the_escape_hatches(schema: dict[str, Any], good: dict[str, Any]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key, value in good.items():
        values[key] = {**values[key], **value} if isinstance(value, dict) else value
    jsonschema.validate(values, schema)


def test_one_default_prometheus_url() -> None:
    """The chart's default and every Python default are the one DEFAULT_PROMETHEUS_URL."""
    import inspect

    from tidescale.autoscaler import manifests
    from tidescale.autoscaler.settings import RecommenderSettings
    from tidescale.contracts.prometheus import DEFAULT_PROMETHEUS_URL

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["recommender"]["prometheusUrl"] == DEFAULT_PROMETHEUS_URL
    assert RecommenderSettings.model_fields["prometheus_url"].default == DEFAULT_PROMETHEUS_URL
    assert inspect.signature(manifests.render).parameters["prometheus_url"].default == DEFAULT_PROMETHEUS_URL
    url = re.compile(r'"https?://(?!tidescale-placeholder)[^"]*:9090"')  # the generator's placeholder aside
    literals = [p for root in ("autoscaler", "alerts", "exporters", "dashboards", "tidescale/contracts")
                for p in (REPO / root).rglob("*.py") if url.search(p.read_text())]
    assert [p.relative_to(REPO).as_posix() for p in literals] == ["tidescale/contracts/prometheus.py"]


def test_the_chart_leaves_the_recommenders_defaults_to_python() -> None:
    """recommender.settings passes through with Python's defaults: values.yaml re-declares none of them
    (not in settings, not under the keys it had before), and its schema is RecommenderSettings'."""
    from tidescale.autoscaler.settings import RecommenderSettings
    from tidescale.devstack.chart import RECOMMENDER_OWNED

    values = yaml.safe_load((CHART / "values.yaml").read_text())["recommender"]
    assert values["settings"] == {}
    assert not {"intervalSeconds", "coldStartSeconds", "headroom", "capacityRps", "tuning", "fastPath"} & set(values)
    schema = json.loads((CHART / "values.schema.json").read_text())
    settings = schema["properties"]["recommender"]["properties"]["settings"]
    assert set(settings["properties"]) == set(RecommenderSettings.model_fields) - RECOMMENDER_OWNED
    assert settings["additionalProperties"] is False
    assert settings["properties"]["fast_path"]["additionalProperties"] is False


@pytest.mark.parametrize(("key", "value", "ok"), [
    *[("client_retries", v, ok) for v, ok in [(0, True), (2, True), (10, True), (11, False), (-1, False),
                                              ("2", False), (1.5, False)]],
    # the replicas a capacity profile was measured on (a load test through the Service)
    *[("profile_replicas", v, ok) for v, ok in [(1, True), (4, True), (1000, True), (0, False), (1001, False),
                                                ("4", False), (2.5, False)]],
    # queue sizing's latency-vs-load curve: [fraction of the SLO, share of the capacity] rows
    *[("budget_shares", v, ok) for v, ok in [([[0.5, 0.9]], True), (None, True), ([[0.5]], False),
                                             ([[0.5, 0.9, 1.0]], False), ("0.5", False), ([[0.5, 0.9]] * 65, False),
                                             ([[0.5, "0.9"]], False), ([[0, 0.9]], False), ([[1.0, 0.9]], False),
                                             ([[0.5, 0]], False), ([[0.5, 1.5]], False), ([[0.5, 1.0]], True)]]])
def test_the_schema_bounds_the_recommenders_counts(schema: dict[str, Any], key: str, value: Any, ok: bool) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["recommender"]["settings"] = {key: value}
    if ok:
        jsonschema.validate(values, schema)
    else:
        refused = f"{key}|is not of type|maximum|minimum|too short|too long"
        with pytest.raises(jsonschema.ValidationError, match=refused):
            jsonschema.validate(values, schema)
