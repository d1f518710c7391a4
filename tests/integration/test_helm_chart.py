"""The Helm chart with the real helm: lint, template (default and full values), schema validation of
every manifest, the values schema, and no second copy of the generated rules and dashboards."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.crds import openapi_schema
from tests.hostile import DIGIT_FIRST_RELEASE, LONGEST_RELEASE
from tests.paths import REPO
from tidescale.devstack import tools

pytestmark = pytest.mark.integration

CHART = REPO / "deploy" / "helm" / "tidescale"
K8S_VERSION = "1.35.0"
NAMESPACE = "tidescale"
# A cluster with prometheus-operator and KEDA, as helm sees it (discovery lists group/version/Kind too).
MONITORING_API = ("--api-versions", "monitoring.coreos.com/v1",
                  "--api-versions", "monitoring.coreos.com/v1alpha1/AlertmanagerConfig",
                  "--api-versions", "keda.sh/v1alpha1/ScaledObject")
SLO_GROUP = "tidescale.rules.slo"
FULL_VALUES: dict[str, Any] = {
    "serving": {"namespace": "serving", "selector": {"app.kubernetes.io/name": "triton-server"}, "metricsPort": 8002},
    "exporter": {"settings": {"poll_interval_s": 2.0}},
    "recommender": {"capacityRps": 50.0},
    "reviews": {"database": {"existingSecret": "reviews-db", "key": "url"}},
    "autoscaling": {"targets": [
        {"deployment": "triton-resnet", "model": "resnet50", "minReplicas": 2, "maxReplicas": 12},
        {"deployment": "triton-ctr", "model": "ctr", "minReplicas": 1, "maxReplicas": 20, "capacityRps": 120.0},
    ]},
    "monitoring": {"additionalLabels": {"release": "kps"}, "prometheusRule": {"additionalLabels": {"team": "ml"}}},
    "dashboards": {"namespace": "monitoring", "annotations": {"grafana_folder": "tidescale"}},
    "alertmanager": {"configSecret": {"enabled": True, "pagerUrl": "https://pager.example/hook",
                                      "ticketsUrl": "http://tickets.example/hook"},
                     "alertmanagerConfig": {"additionalLabels": {"alertmanager": "main"}}},
    "profileCapture": {"enabled": True, "target": "triton-ctr:6009", "model": "ctr", "version": "2"},
}
PEAK = {"timezone": "Europe/Berlin", "start": "50 8 * * 1-5", "end": "0 11 * * 1-5", "replicas": 6}
KEDA_VALUES: dict[str, Any] = {**FULL_VALUES, "autoscaling": {"mode": "keda", "targets": [
    {**FULL_VALUES["autoscaling"]["targets"][0], "prescale": [PEAK]}, FULL_VALUES["autoscaling"]["targets"][1]]}}
CORE_KINDS = {"Deployment", "Service", "ServiceAccount", "ConfigMap", "Secret", "Role", "RoleBinding",
              "NetworkPolicy", "PersistentVolumeClaim", "HorizontalPodAutoscaler", "CronJob"}
# Custom resource kinds validated against their CRDs' schemas (the pinned modules' CRDs: tests/crds.py).
CRDS = {"PrometheusRule", "ServiceMonitor", "PodMonitor", "ScaledObject", "AlertmanagerConfig", "TriggerAuthentication"}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tools.helm()), *args], capture_output=True, text=True, timeout=120, check=False)


def template(tmp: Path, values: dict[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
    args = ["template", "t", str(CHART), "--namespace", NAMESPACE, *extra]
    if values is not None:
        path = tmp / f"values-{len(list(tmp.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm")


@pytest.fixture(scope="module")
def default_docs(tmp: Path) -> list[dict[str, Any]]:
    return template(tmp)


@pytest.fixture(scope="module")
def full_docs(tmp: Path) -> list[dict[str, Any]]:
    return template(tmp, FULL_VALUES, *MONITORING_API)


@pytest.fixture(scope="module")
def keda_docs(tmp: Path) -> list[dict[str, Any]]:
    return template(tmp, KEDA_VALUES, *MONITORING_API)


def kinds(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def test_helm_lint_passes(tmp: Path) -> None:
    full = tmp / "lint-full.yaml"
    full.write_text(yaml.safe_dump(FULL_VALUES))
    for args in ([], ["-f", str(full)]):
        result = helm("lint", str(CHART), "--strict", *args)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0 chart(s) failed" in result.stdout


def test_core_kinds_validate_against_kubernetes(default_docs: list[dict[str, Any]],
                                                full_docs: list[dict[str, Any]],
                                                keda_docs: list[dict[str, Any]]) -> None:
    checked = set()
    for doc in [*default_docs, *full_docs, *keda_docs]:
        if doc["kind"] in CORE_KINDS:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            checked.add(doc["kind"])
    assert checked == CORE_KINDS


def _closed(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected (the API server would silently prune them)."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_closed(openapi_schema(kind)))


def test_custom_resources_validate_against_the_crds(full_docs: list[dict[str, Any]],
                                                    keda_docs: list[dict[str, Any]]) -> None:
    seen = set()
    for doc in [*full_docs, *keda_docs]:
        if doc["kind"] in CRDS:
            errors = [e.message for e in crd_validator(doc["kind"]).iter_errors(doc)]
            assert not errors, f"{doc['kind']} {doc['metadata']['name']}: {errors}"
            seen.add(doc["kind"])
    assert seen == CRDS - {"TriggerAuthentication"}  # only with an authenticated Prometheus: test_helm_references


def test_the_crd_check_catches_a_misspelt_field(full_docs: list[dict[str, Any]]) -> None:
    monitor = next(d for d in full_docs if d["kind"] == "ServiceMonitor")
    broken = json.loads(json.dumps(monitor))
    broken["spec"]["endpoints"][0]["intervall"] = "15s"
    assert list(crd_validator("ServiceMonitor").iter_errors(broken))


def test_monitors_and_rules_only_with_prometheus_operator(default_docs: list[dict[str, Any]],
                                                          full_docs: list[dict[str, Any]]) -> None:
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & set(kinds(default_docs))
    by_kind = kinds(full_docs)
    assert len(by_kind["ServiceMonitor"]) == 3 and len(by_kind["PodMonitor"]) == 1  # shared, recommender, dcgm-exporter
    for doc in by_kind["ServiceMonitor"] + by_kind["PodMonitor"] + by_kind["PrometheusRule"]:
        assert doc["metadata"]["labels"]["release"] == "kps"
    for rule in by_kind["PrometheusRule"]:
        assert rule["metadata"]["labels"]["team"] == "ml"
    # Next to the pods it scrapes (a hardened Prometheus ignores namespaceSelector): no selector needed.
    assert by_kind["PodMonitor"][0]["metadata"]["namespace"] == "serving"
    triton = by_kind["PodMonitor"][0]["spec"]
    assert "namespaceSelector" not in triton
    assert triton["podMetricsEndpoints"][0]["portNumber"] == 8002  # a number when the port has no name
    default_port = helm("template", "t", str(CHART), *MONITORING_API, "--show-only", "templates/monitors.yaml")
    assert "- port: \"metrics\"" in default_port.stdout
    assert triton["selector"]["matchLabels"] == {"app.kubernetes.io/name": "triton-server"}


def test_rendered_rules_equal_the_generated_rules(full_docs: list[dict[str, Any]]) -> None:
    from tidescale.alerts.config import default_config
    from tidescale.alerts.generate import rendered as generated

    rendered = [d["spec"]["groups"] for d in kinds(full_docs)["PrometheusRule"]]
    expected = [yaml.safe_load(text)["groups"] for name, text in generated(default_config()).items()
                if name != "alertmanager.yaml"]
    assert len(expected) == 2
    # FULL_VALUES scale through the HPA: no direct-mode alert; and the Watchdog is kube-prometheus-stack's.
    left_out = {"TidescaleRecommenderCannotScale", "Watchdog"}
    for groups in expected:
        for group in groups:
            group["rules"] = [r for r in group["rules"] if r.get("alert") not in left_out]
    def canonical(groups: Any) -> str:
        return json.dumps(groups, sort_keys=True)

    assert sorted(map(canonical, rendered)) == sorted(map(canonical, expected))


SLO_VALUES: dict[str, Any] = {
    "slo": {"latency": {"thresholdSeconds": 1.0, "objective": 0.95}, "models": [
        {"name": "rankers", "model": 'ctr_.*|a"b\\d', "latency": {"thresholdSeconds": 0.25, "objective": 0.995}},
        # null is "the default's", as a key left out is (Python reads None so; the template too).
        {"name": "offline", "model": "embedder", "namespace": "batch-.*", "availability": {"objective": 0.99},
         "latency": {"thresholdSeconds": None}},
    ]},
    "autoscaling": {"targets": [{"deployment": "triton-ctr", "model": "ctr_ranker", "capacityRps": 50},
                                {"deployment": "triton-emb", "model": "embedder", "capacityRps": 50}]},
}


def _slo_group(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(g for d in kinds(docs)["PrometheusRule"] for g in d["spec"]["groups"] if g["name"] == SLO_GROUP)


def test_the_slo_group_is_rendered_from_values_as_the_generator_renders_it(tmp: Path) -> None:
    """The chart fills the committed clause patterns; alerts/slo.py fills the same: equal output
    for the same SLOs, escaping of the user's patterns included."""
    from tidescale.alerts.config import AlertsConfig
    from tidescale.alerts.render import cluster_aware
    from tidescale.alerts.slo import slo_group

    cfg = AlertsConfig.model_validate({
        "slo_latency_threshold_s": 1.0, "latency_slo_target": 0.95, "slos": [
            {"name": "rankers", "model": 'ctr_.*|a"b\\d', "latency_threshold_s": 0.25, "latency_objective": 0.995},
            {"name": "offline", "model": "embedder", "namespace": "batch-.*", "availability_objective": 0.99}]})
    [expected] = cluster_aware([slo_group(cfg)], cfg)
    assert _slo_group(template(tmp, SLO_VALUES, *MONITORING_API)) == expected
    assert 'model=~"ctr_.*|a\\"b\\\\d"' in expected["rules"][0]["expr"]


def test_recommender_settings_pass_through_with_pythons_defaults(tmp: Path) -> None:
    """recommender.settings reaches the recommender as it is; the keys values had before it are still
    read, and settings wins over them; what is set nowhere takes RecommenderSettings' default."""
    from tidescale.autoscaler.settings import RecommenderSettings

    values = {**FULL_VALUES, "recommender": {
        "settings": {"interval_s": 5, "fast_path": {"interval_s": 1}, "tuning": {"down_delay_s": 30},
                     "stale_after_s": 60},
        "intervalSeconds": 9, "coldStartSeconds": 45, "fastPath": {"timeoutSeconds": 0.5}, "capacityRps": 50.0}}
    def recommender(docs: list[dict[str, Any]]) -> RecommenderSettings:
        [config] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config")]
        return RecommenderSettings.model_validate(yaml.safe_load(config["data"]["config.yaml"])["recommender"])

    settings = recommender(template(tmp, values))
    s = settings
    assert (s.interval_s, s.cold_start_s, s.stale_after_s, s.capacity_rps) == (5, 45, 60, 50)
    assert (settings.fast_path.interval_s, settings.fast_path.timeout_s) == (1, 0.5)
    assert settings.tuning.down_delay_s == 30
    defaults, fields = recommender(template(tmp, FULL_VALUES)), RecommenderSettings.model_fields
    assert (defaults.interval_s, defaults.cold_start_s, defaults.headroom) == (
        fields["interval_s"].default, fields["cold_start_s"].default, fields["headroom"].default)
    assert defaults.fast_path.enabled and defaults.kube_events


def test_each_target_is_sized_for_its_models_slo(tmp: Path) -> None:
    [config] = [d for d in template(tmp, SLO_VALUES)
                if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config")]
    from tidescale.autoscaler.settings import RecommenderSettings

    recommender = yaml.safe_load(config["data"]["config.yaml"])["recommender"]
    assert recommender["slo"]["models"] == SLO_VALUES["slo"]["models"]  # the values as they are: Python resolves them
    settings = RecommenderSettings.model_validate(recommender)
    # ctr_ranker is a ranker (0.25 s); embedder matches `offline` only in batch-* namespaces, so the default.
    assert {t.model: settings.slo_for(t) for t in settings.targets} == {"ctr_ranker": 0.25, "embedder": 1.0}


def test_the_exporter_places_a_boundary_on_every_slo_threshold(tmp: Path) -> None:
    """A custom exporter bucket layout that leaves out an SLO's threshold still gets a boundary on it:
    the exporter reads the chart's `slo` as the recommender does (no template compares the two)."""
    from tidescale.exporters.settings import ExporterSettings

    fast = {"name": "fast", "model": "m", "latency": {"thresholdSeconds": 0.25}}
    docs = template(tmp, {"exporter": {"settings": {"slo_thresholds_s": [0.5, 1.0]}}, "slo": {"models": [fast]}})
    [config] = [d for d in kinds(docs)["ConfigMap"] if d["metadata"]["name"] == "t-tidescale-config"]
    settings = ExporterSettings.model_validate(yaml.safe_load(config["data"]["config.yaml"])["exporter"])
    assert settings.slo_thresholds_s == [0.5, 1.0]
    assert settings.boundary_thresholds_s() == [0.25, 0.5, 1.0]


def test_the_schema_offers_exactly_the_thresholds_the_rules_record() -> None:
    from tidescale.alerts.config import default_config
    from tidescale.contracts.slo import SLO_THRESHOLDS_S, le_value

    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["slo"]["properties"]
    models = schema["models"]["items"]["properties"]
    group_threshold = models["latency"]["properties"]["thresholdSeconds"]  # a number of the enum, or null
    assert group_threshold["anyOf"][1] == {"type": "null"}
    for threshold in (schema["latency"]["properties"]["thresholdSeconds"], group_threshold["anyOf"][0]):
        assert threshold["enum"] == list(SLO_THRESHOLDS_S)
    assert [le_value(t) for t in SLO_THRESHOLDS_S] == default_config().threshold_les()


def test_no_placeholder_is_left_in_any_rendered_object(tmp: Path) -> None:
    """Every token of files/placeholders.yaml is filled, whatever the mode and cluster values."""
    elsewhere = {**KEDA_VALUES, "clusterLabel": "kc", "autoscaling": {**KEDA_VALUES["autoscaling"], "cluster": "w"}}
    for values in ({}, FULL_VALUES, KEDA_VALUES, {**SLO_VALUES, "clusterLabel": "k8s_cluster"}, elsewhere):
        text = yaml.safe_dump_all(template(tmp, values, *MONITORING_API))
        assert "tidescale_placeholder" not in text and "tidescale-placeholder" not in text


def test_daemonset_mode_runs_one_exporter_per_node_for_the_pods_on_its_node(tmp: Path) -> None:
    docs = template(tmp, {"exporter": {"mode": "daemonset", "nodeSelector": {"nvidia.com/gpu.present": "true"},
                                       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}})
    by_kind = kinds(docs)
    assert not [d for d in by_kind["Deployment"] if d["metadata"]["name"].endswith("-exporter")]
    [ds] = by_kind["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    [container] = spec["containers"]
    node = next(e for e in container["env"] if e["name"] == "TIDESCALE_EXPORTER_KUBE_NODE_NAME")
    assert node["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    services = {s["metadata"]["name"]: s["spec"] for s in by_kind["Service"]}
    assert services["t-tidescale-exporter-local"]["internalTrafficPolicy"] == "Local"
    assert services["t-tidescale-exporter-local"]["selector"] == services["t-tidescale-exporter"]["selector"]
    # The other components keep the global scheduling.
    assert all("nodeSelector" not in d["spec"]["template"]["spec"] for d in by_kind["Deployment"])


def test_trace_files_mount_the_hostpath_opened_by_a_root_init_container_without_capabilities(tmp: Path) -> None:
    """exporter.traceFiles: the DaemonSet mounts the node directory, an init container (root, the
    directory's owner, no capabilities) opens it to the Triton pods' and the exporter's users, and
    the exporter's settings point at it; the exporter itself stays non-root."""
    from tidescale.contracts.settings import load_settings
    from tidescale.exporters.settings import ExporterSettings

    docs = template(tmp, {"exporter": {"mode": "daemonset", "traceFiles": {
        "enabled": True, "hostPath": "/data/triton-traces", "fileName": "t.json", "keepRotations": 3}}})
    [ds] = kinds(docs)["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "traces"]
    assert volume["hostPath"] == {"path": "/data/triton-traces", "type": "DirectoryOrCreate"}
    [init] = spec["initContainers"]
    [[mount]] = [[m for m in c["volumeMounts"] if m["name"] == "traces"] for c in spec["containers"]]
    assert init["volumeMounts"] == [{"name": "traces", "mountPath": mount["mountPath"]}]
    assert init["args"] == ["exporter", "open-trace-dir", mount["mountPath"]]
    assert init["securityContext"]["runAsUser"] == 0 and init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert init["securityContext"]["readOnlyRootFilesystem"] and not init["securityContext"]["allowPrivilegeEscalation"]
    assert "runAsUser" not in spec["containers"][0]["securityContext"] and spec["securityContext"]["runAsUser"] > 0
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    path = tmp / "trace-files.yaml"
    path.write_text(config["data"]["config.yaml"])
    settings = load_settings(ExporterSettings, path)
    assert (str(settings.trace_dir), settings.trace_file_name, settings.trace_file_keep_rotations) == (
        mount["mountPath"], "t.json", 3)
    # Off by default, and refused by name outside daemonset mode.
    assert "initContainers" not in kinds(template(tmp, {"exporter": {"mode": "daemonset"}}))["DaemonSet"][0][
        "spec"]["template"]["spec"]
    path = tmp / "trace-files-deployment.yaml"
    path.write_text(yaml.safe_dump({"exporter": {"traceFiles": {"enabled": True}}}))
    refused = helm("template", "t", str(CHART), "-f", str(path))
    assert refused.returncode != 0 and "exporter.traceFiles.enabled needs exporter.mode: daemonset" in refused.stderr


def test_deployment_mode_has_no_node_local_service(default_docs: list[dict[str, Any]]) -> None:
    assert not [s for s in kinds(default_docs)["Service"] if s["metadata"]["name"].endswith("-local")]
    assert "DaemonSet" not in kinds(default_docs)


def test_the_cluster_label_is_a_value_for_rules_and_dashboards(tmp: Path) -> None:
    """A Thanos or Mimir whose external label is not `cluster`: every by/on of every rule keeps that
    label instead, the dashboards match and list it, and the rules stay promtool-clean."""
    import re

    from tidescale.devstack import rulecheck

    docs = template(tmp, {"clusterLabel": "k8s_cluster"}, *MONITORING_API)
    exprs = [r["expr"] for d in kinds(docs)["PrometheusRule"] for g in d["spec"]["groups"] for r in g["rules"]]
    assert all(not re.search(r"\b(by|on) \(cluster\b", e) for e in exprs)
    assert sum("(k8s_cluster, namespace" in e for e in exprs) > 50
    boards = [json.loads(v) for d in kinds(docs)["ConfigMap"] if "dashboard" in d["metadata"]["name"]
              for v in d["data"].values()]
    text = json.dumps(boards)
    assert 'k8s_cluster=~\\"$cluster\\"' in text and 'cluster=~\\"$cluster' not in text.replace("k8s_cluster", "")
    variables = [v for b in boards for v in b["templating"]["list"] if v["name"] == "cluster"]
    assert variables and all(v["query"].endswith(", k8s_cluster)") for v in variables)
    work = tmp / "cluster-label-rules"
    work.mkdir()
    files = []
    for d in kinds(docs)["PrometheusRule"]:
        path = work / f"{d['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump({"groups": d["spec"]["groups"]}))
        files.append(path)
    run = rulecheck.check_rules(files)
    assert run.ok, run.output


def test_dashboards_are_configmaps_with_the_generated_json(default_docs: list[dict[str, Any]],
                                                           full_docs: list[dict[str, Any]]) -> None:
    from tidescale.dashboards.registry import build_all

    boards = {uid: json.loads(json.dumps(board)) for uid, board in build_all().items()}
    for docs, namespace in ((default_docs, NAMESPACE), (full_docs, "monitoring")):
        maps = [d for d in docs if d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"]]
        assert len(maps) == 5
        for cm in maps:
            assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
            assert cm["metadata"]["namespace"] == namespace
            [(key, text)] = cm["data"].items()
            assert json.loads(text) == boards[key.removesuffix(".json")]


def test_hpa_and_scaledobject_match_the_autoscaler_manifests(tmp: Path, full_docs: list[dict[str, Any]],
                                                             keda_docs: list[dict[str, Any]]) -> None:
    from tidescale.autoscaler.manifests import PreScale, Target, hpa_manifest, keda_manifest

    targets = {t["deployment"]: Target(t["deployment"], "serving", t["model"], t["minReplicas"], t["maxReplicas"],
                                       prescale=tuple(PreScale(**p) for p in t.get("prescale", [])))
               for t in KEDA_VALUES["autoscaling"]["targets"]}
    hpas = kinds(full_docs)["HorizontalPodAutoscaler"]
    assert sorted(h["metadata"]["name"] for h in hpas) == sorted(targets)
    for hpa in hpas:
        expected = hpa_manifest(targets[hpa["metadata"]["name"]])
        assert hpa["spec"] == expected["spec"] and hpa["metadata"]["namespace"] == "serving"
    scaled = kinds(keda_docs)["ScaledObject"]
    assert "HorizontalPodAutoscaler" not in kinds(keda_docs)
    recommender = f"http://t-tidescale-recommender.{NAMESPACE}.svc:9106"  # keda.source=recommender, the default
    for obj in scaled:
        expected = keda_manifest(targets[obj["metadata"]["name"]], "unused", recommender_url=recommender)
        assert obj["spec"] == expected["spec"]
    resnet = next(o for o in scaled if o["metadata"]["name"] == "triton-resnet")
    assert [t["type"] for t in resnet["spec"]["triggers"]] == ["metrics-api", "cron"]  # the known peak
    values = {**KEDA_VALUES, "autoscaling": {**KEDA_VALUES["autoscaling"], "keda": {"source": "prometheus"}}}
    for obj in kinds(template(tmp, values, *MONITORING_API))["ScaledObject"]:
        expected = keda_manifest(targets[obj["metadata"]["name"]], "http://prometheus-operated.monitoring.svc:9090")
        assert obj["spec"] == expected["spec"]


def test_keda_reading_the_recommender_lets_keda_in_and_needs_no_prometheus_credentials(tmp: Path) -> None:
    """keda.source=recommender: the recommender's NetworkPolicy admits KEDA's namespace (its operator
    asks), and the Prometheus TriggerAuthentication is not rendered; keda.source=prometheus: the reverse."""
    auth = {"bearerTokenSecret": {"name": "prom-token"}}
    for source, keda_in in (("recommender", True), ("prometheus", False)):
        values = {**KEDA_VALUES, "autoscaling": {**KEDA_VALUES["autoscaling"], "keda": {"source": source}},
                  "recommender": {**FULL_VALUES["recommender"], "prometheusAuth": auth},
                  "networkPolicy": {"kedaNamespaceSelector": {"kubernetes.io/metadata.name": "keda-system"}}}
        by_kind = kinds(template(tmp, values, *MONITORING_API))
        [policy] = [p for p in by_kind["NetworkPolicy"] if p["metadata"]["name"] == "t-tidescale-recommender"]
        sources = [peer.get("namespaceSelector") for rule in policy["spec"]["ingress"] for peer in rule["from"]]
        assert ({"matchLabels": {"kubernetes.io/metadata.name": "keda-system"}} in sources) == keda_in, source
        assert ("TriggerAuthentication" in by_kind) != keda_in, source
        [trigger, *_] = by_kind["ScaledObject"][0]["spec"]["triggers"]
        assert ("authenticationRef" in trigger) != keda_in, source
    values = {**KEDA_VALUES, "recommender": {"enabled": False}}
    path = tmp / "keda-no-recommender.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0 and "keda.source=recommender needs recommender.enabled" in result.stderr


@pytest.mark.parametrize("mode", ["keda", "adapter"])
def test_the_cluster_value_scopes_the_recommender_keda_and_the_hpa_to_this_cluster(tmp: Path, mode: str) -> None:
    """autoscaling.cluster, for a Prometheus API holding several clusters: the recommender's series, KEDA's
    query and the HPA's external-metric selector all match <clusterLabel>="<cluster>"."""
    from tidescale.autoscaler.settings import RecommenderSettings
    from tidescale.contracts.settings import load_settings

    values = {**FULL_VALUES, "clusterLabel": "k8s_cluster",  # KEDA's cluster matcher: on its Prometheus query
              "autoscaling": {**FULL_VALUES["autoscaling"], "mode": mode, "cluster": "prod-eu",
                              "keda": {"source": "prometheus"}}}
    by_kind = kinds(template(tmp, values, *MONITORING_API))
    config = next(d for d in by_kind["ConfigMap"] if d["metadata"]["name"].endswith("-config"))
    path = tmp / f"cluster-{mode}.yaml"
    path.write_text(config["data"]["config.yaml"])
    assert load_settings(RecommenderSettings, path).series_matchers == {"k8s_cluster": "prod-eu"}
    if mode == "keda":
        [resnet] = [o for o in by_kind["ScaledObject"] if o["metadata"]["name"] == "triton-resnet"]
        assert resnet["spec"]["triggers"][0]["metadata"]["query"] == (
            'max(tidescale_desired_replicas{namespace="serving",deployment="triton-resnet",k8s_cluster="prod-eu"})')
    else:
        [resnet] = [h for h in by_kind["HorizontalPodAutoscaler"] if h["metadata"]["name"] == "triton-resnet"]
        [metric] = resnet["spec"]["metrics"]
        assert metric["external"]["metric"]["selector"]["matchLabels"] == {"deployment": "triton-resnet",
                                                                           "k8s_cluster": "prod-eu"}
    path = tmp / "cluster-bad.yaml"
    path.write_text(yaml.safe_dump({**values, "autoscaling": {**values["autoscaling"], "cluster": 'eu"}'}}))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0 and "cluster" in result.stderr  # the schema refuses what PromQL would need escaped


@pytest.mark.parametrize("mode", ["adapter", "keda"])
def test_autoscaling_behavior_is_merged_over_the_generated_one(tmp: Path, mode: str) -> None:
    """The escape hatch: a user's scale-down window and policies; lists replace, the rest stays."""
    from tidescale.autoscaler.manifests import Target, hpa_manifest

    mine = {"stabilizationWindowSeconds": 120, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}
    values = {**FULL_VALUES, "autoscaling": {**FULL_VALUES["autoscaling"], "mode": mode,
                                             "behavior": {"scaleDown": mine}}}
    docs = template(tmp, values, *MONITORING_API)
    if mode == "adapter":
        [behavior, _] = [d["spec"]["behavior"] for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    else:
        [behavior, _] = [d["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
                         for d in docs if d["kind"] == "ScaledObject"]
    generated = hpa_manifest(Target("triton-resnet", "serving", "resnet50", 2, 12))["spec"]["behavior"]
    assert behavior["scaleUp"] == generated["scaleUp"]
    assert behavior["scaleDown"] == {**generated["scaleDown"], **mine}


@pytest.mark.parametrize(("behavior", "mode", "problem"), [
    ({"scaleDown": {"stabilizationWindowSeconds": 4000}}, "adapter", "stabilizationWindowSeconds"),
    ({"scaleDwn": {"stabilizationWindowSeconds": 60}}, "adapter", "scaleDwn"),
    ({"scaleUp": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}}, "keda", "value"),
    ({"scaleDown": {"stabilizationWindowSeconds": 60}}, "direct", "mode direct has none"),
])
def test_a_behavior_that_cannot_apply_is_refused_by_name(tmp: Path, behavior: dict[str, Any], mode: str,
                                                         problem: str) -> None:
    values = {**FULL_VALUES, "autoscaling": {**FULL_VALUES["autoscaling"], "mode": mode, "behavior": behavior}}
    path = tmp / "behavior.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0 and problem in result.stderr


def test_prescale_outside_keda_mode_is_refused(tmp: Path) -> None:
    values = {**KEDA_VALUES, "autoscaling": {**KEDA_VALUES["autoscaling"], "mode": "adapter"}}
    path = tmp / "prescale-adapter.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0 and "prescale needs autoscaling.mode=keda" in result.stderr
    bad = {**KEDA_VALUES, "autoscaling": {**KEDA_VALUES["autoscaling"], "targets": [
        {"deployment": "d", "model": "m", "prescale": [{**PEAK, "start": "every morning"}]}]}}
    path.write_text(yaml.safe_dump(bad))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0 and "prescale" in result.stderr  # the values schema names the field


def test_a_panic_that_waits_through_an_hpa_may_read_only_the_targets_hpas(tmp: Path) -> None:
    """`panic_confirm_readings` above 1 (recommender.tuning, or recommender.settings.tuning, which
    wins): the recommender reads each target's HPA for its lastScaleTime (autoscaler/hpaclock.py),
    by name, hpaName included, and has an account for it even without Events. As shipped: no such Role."""
    from tidescale.autoscaler.settings import RecommenderSettings
    from tidescale.contracts.settings import load_settings

    targets = [{**FULL_VALUES["autoscaling"]["targets"][0], "hpaName": "resnet-hpa"},
               FULL_VALUES["autoscaling"]["targets"][1]]
    values = {**FULL_VALUES, "autoscaling": {"targets": targets},
              "recommender": {**FULL_VALUES["recommender"], "kubeEvents": False,
                              "tuning": {"panic_confirm_readings": 2}}}
    by_kind = kinds(template(tmp, values, *MONITORING_API))
    roles = {r["metadata"]["name"]: r for r in by_kind["Role"]}
    assert roles["t-tidescale-recommender-hpa-read"]["rules"] == [
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"],
         "resourceNames": ["resnet-hpa", "triton-ctr"], "verbs": ["get"]}]
    assert roles["t-tidescale-recommender-hpa-read"]["metadata"]["namespace"] == "serving"
    assert "t-tidescale-recommender-events" not in roles
    recommender = next(d for d in by_kind["Deployment"] if d["metadata"]["name"] == "t-tidescale-recommender")
    assert recommender["spec"]["template"]["spec"]["serviceAccountName"] == "t-tidescale-recommender"
    assert "t-tidescale-recommender" in {a["metadata"]["name"] for a in by_kind["ServiceAccount"]}
    config = next(d for d in by_kind["ConfigMap"] if d["metadata"]["name"].endswith("-config"))
    path = tmp / "hpa-read-config.yaml"
    path.write_text(config["data"]["config.yaml"])
    settings = load_settings(RecommenderSettings, path)
    assert [t.hpa_name for t in settings.targets] == ["resnet-hpa", None]
    assert settings.tuning.panic_confirm_readings == 2
    overruled = {**values, "recommender": {**values["recommender"],
                                           "settings": {"tuning": {"panic_confirm_readings": 1}}}}
    for shipped in (FULL_VALUES, overruled):
        roles = {r["metadata"]["name"] for r in kinds(template(tmp, shipped, *MONITORING_API)).get("Role", [])}
        assert "t-tidescale-recommender-hpa-read" not in roles


def test_direct_mode_renders_no_hpa_and_lets_one_recommender_patch_only_the_targets_scale(tmp: Path) -> None:
    from tidescale.autoscaler.settings import RecommenderSettings
    from tidescale.contracts.settings import load_settings

    values = {**FULL_VALUES, "autoscaling": {**FULL_VALUES["autoscaling"], "mode": "direct"},
              "recommender": {**FULL_VALUES["recommender"], "kubeEvents": False}}
    by_kind = kinds(template(tmp, values, *MONITORING_API))
    assert "HorizontalPodAutoscaler" not in by_kind and "ScaledObject" not in by_kind
    roles = {r["metadata"]["name"]: r for r in by_kind["Role"]}
    assert roles["t-tidescale-recommender-scale"]["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments/scale"], "resourceNames": ["triton-resnet", "triton-ctr"],
         "verbs": ["get", "patch"]}]
    assert roles["t-tidescale-recommender-scale"]["metadata"]["namespace"] == "serving"
    recommender = next(d for d in by_kind["Deployment"] if d["metadata"]["name"] == "t-tidescale-recommender")
    spec = recommender["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "t-tidescale-recommender" and spec["automountServiceAccountToken"] is True
    assert recommender["spec"]["replicas"] == 1
    config = next(d for d in by_kind["ConfigMap"] if d["metadata"]["name"].endswith("-config"))
    path = tmp / "direct-config.yaml"
    path.write_text(config["data"]["config.yaml"])
    assert load_settings(RecommenderSettings, path).scale_mode == "direct"
    path = tmp / "direct-two.yaml"
    path.write_text(yaml.safe_dump({**values, "recommender": {**values["recommender"], "replicas": 2}}))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0 and "autoscaling.mode=direct needs recommender.replicas=1" in result.stderr


def test_legacy_tolerance_leaves_the_field_out(tmp: Path) -> None:
    from tidescale.autoscaler.manifests import Target, hpa_manifest

    values = {**FULL_VALUES, "autoscaling": {**FULL_VALUES["autoscaling"], "legacyTolerance": True}}
    hpa = next(d for d in template(tmp, values) if d["kind"] == "HorizontalPodAutoscaler")
    expected = hpa_manifest(Target("triton-resnet", "serving", "resnet50", 2, 12), legacy=True)
    assert hpa["spec"] == expected["spec"]
    assert "tolerance" not in json.dumps(hpa["spec"]["behavior"])


def _pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for d in docs:
        if d["kind"] == "Deployment":
            out.append(d["spec"]["template"]["spec"])
        elif d["kind"] == "CronJob":
            out.append(d["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return out


def test_production_defaults_on_every_pod(full_docs: list[dict[str, Any]]) -> None:
    specs = _pod_specs(full_docs)
    assert len(specs) == 4
    for spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] > 0
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"] and c["resources"]["limits"]
            assert c["image"].startswith("ghcr.io/tidescale/tidescale:")
    services = [s for s in specs if "restartPolicy" not in s]
    for spec in services:
        [c] = spec["containers"]
        # Only the exporter has a separate readiness endpoint (its background tasks running).
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"  # every service answers it (not only the exporter)
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_probes_use_a_health_port_that_no_service_exposes(full_docs: list[dict[str, Any]]) -> None:
    """Client connections fill the service port's cap, never the probes' listener (1,100 idle
    connections used to make /healthz answer 503 and the liveness probe restart the pod)."""
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in kinds(full_docs)["Deployment"]}
    for component, (port, health) in {"exporter": (9105, 10105), "recommender": (9106, 10106),
                                      "reviews": (9107, 10107)}.items():
        [c] = deployments[component]["spec"]["template"]["spec"]["containers"]
        assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": port, "health": health}
        assert c["args"][c["args"].index("--health-port") + 1] == str(health)
        assert c["readinessProbe"]["httpGet"]["port"] == c["livenessProbe"]["httpGet"]["port"] == "health"
    assert {p["targetPort"] for s in kinds(full_docs)["Service"] for p in s["spec"]["ports"]} == {"http"}


def test_a_health_port_equal_to_the_service_port_is_refused(tmp: Path) -> None:
    path = tmp / "same-ports.yaml"
    path.write_text(yaml.safe_dump({"reviews": {"healthPort": 9107}}))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0 and "reviews.healthPort must differ from reviews.port" in result.stderr


def test_least_privilege_rbac(full_docs: list[dict[str, Any]]) -> None:
    by_kind = kinds(full_docs)
    assert "ClusterRole" not in by_kind and "ClusterRoleBinding" not in by_kind
    roles = {r["metadata"]["name"]: r for r in by_kind["Role"]}
    assert {r["metadata"]["namespace"] for r in roles.values()} == {"serving"}
    assert roles["t-tidescale-exporter"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    # Reviews only create; the recommender's replicas share one Event per change (read, then patch).
    for poster, verbs in (("reviews", ["create"]), ("recommender", ["create", "get", "patch"])):
        assert roles[f"t-tidescale-{poster}-events"]["rules"] == [
            {"apiGroups": [""], "resources": ["events"], "verbs": verbs}]
    bound = {b["roleRef"]["name"]: b["subjects"][0]["name"] for b in by_kind["RoleBinding"]}
    assert bound.keys() == roles.keys()
    # Each account with a permission belongs to exactly one component; the rest get no token at all.
    accounts = {"exporter": bound["t-tidescale-exporter"], "reviews": bound["t-tidescale-reviews-events"],
                "recommender": bound["t-tidescale-recommender-events"]}
    assert len(set(accounts.values())) == 3
    for d in by_kind["Deployment"]:
        spec = d["spec"]["template"]["spec"]
        component = d["metadata"]["labels"]["app.kubernetes.io/component"]
        assert (spec["serviceAccountName"] in accounts.values()) == (component in accounts)
        assert spec["automountServiceAccountToken"] is (component in accounts)


def test_the_review_service_keys_reviews_by_the_cluster_label_and_knows_its_own_cluster(tmp: Path) -> None:
    from tidescale.alerts.reviews.settings import ReviewsSettings

    def reviews_settings(values: dict[str, Any]) -> ReviewsSettings:
        [reviews] = [d for d in template(tmp, values)
                     if d["kind"] == "Deployment" and d["metadata"]["name"] == "t-tidescale-reviews"]
        env = {e["name"]: e["value"] for e in reviews["spec"]["template"]["spec"]["containers"][0]["env"]
               if e["name"] in ("TIDESCALE_REVIEWS_CLUSTER_LABEL", "TIDESCALE_REVIEWS_CLUSTER")}
        return ReviewsSettings(**{k.removeprefix("TIDESCALE_REVIEWS_").lower(): v for k, v in env.items()})

    default = reviews_settings(FULL_VALUES)
    assert (default.cluster_label, default.cluster) == ("cluster", "")
    named = reviews_settings({**FULL_VALUES, "clusterLabel": "k8s_cluster",
                              "autoscaling": {**FULL_VALUES["autoscaling"], "cluster": "west"}})
    assert (named.cluster_label, named.cluster) == ("k8s_cluster", "west")


def test_review_events_name_each_model_deployment_and_are_granted_where_it_runs(tmp: Path) -> None:
    from tidescale.alerts.reviews.settings import ReviewsSettings

    values = {**FULL_VALUES, "reviews": {"kubeEvents": {"modelDeployments": {"bert": "nlp/bert", "ctr": "ctr-v2"}}}}
    docs = template(tmp, values)
    [reviews] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "t-tidescale-reviews"]
    env = {e["name"]: e.get("value") for e in reviews["spec"]["template"]["spec"]["containers"][0]["env"]}
    settings = ReviewsSettings(kube_events=env["TIDESCALE_REVIEWS_KUBE_EVENTS"],
                               model_deployments=json.loads(env["TIDESCALE_REVIEWS_MODEL_DEPLOYMENTS"]))
    # autoscaling.targets in the serving namespace, then the explicit map (a bare name: the serving namespace).
    assert settings.kube_events and settings.model_deployments == {
        "resnet50": "serving/triton-resnet", "ctr": "serving/ctr-v2", "bert": "nlp/bert"}
    review_roles = [d for d in docs if d["kind"] == "Role" and "reviews-events" in d["metadata"]["name"]]
    assert {d["metadata"]["namespace"] for d in review_roles} == {"serving", "nlp"}
    off = template(tmp, {**FULL_VALUES, "reviews": {"kubeEvents": {"enabled": False}},
                         "recommender": {**FULL_VALUES["recommender"], "kubeEvents": False}})
    assert not [d for d in off if d["kind"] in ("Role", "RoleBinding") and "events" in d["metadata"]["name"]]
    assert len([d for d in off if d["kind"] == "ServiceAccount"]) == 2
    [spec] = [d["spec"]["template"]["spec"] for d in off if d["metadata"]["name"] == "t-tidescale-reviews"
              and d["kind"] == "Deployment"]
    assert spec["automountServiceAccountToken"] is False


def test_commands_tokens_and_storage(default_docs: list[dict[str, Any]], full_docs: list[dict[str, Any]]) -> None:
    def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]["spec"]["containers"][0]
                for d in docs if d["kind"] == "Deployment"}

    default = containers(default_docs)
    assert default["exporter"]["args"][:4] == ["exporter", "serve", "--port", "9105"]
    # No targets, no recommender: with none it has nothing to compute and would crash-loop.
    assert "recommender" not in default
    assert containers(full_docs)["recommender"]["args"][:4] == ["autoscale", "recommend", "--port", "9106"]
    assert default["reviews"]["args"] == ["reviews", "serve", "--port", "9107", "--database", "sqlite:////data/reviews.db",
                                          "--health-port", "10107"]
    env = {e["name"]: e for e in default["exporter"]["env"] + default["reviews"]["env"]}
    assert env["TIDESCALE_EXPORTER_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "exporter-token"
    assert env["TIDESCALE_REVIEWS_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "reviews-token"
    assert "PersistentVolumeClaim" in kinds(default_docs)
    # With a PostgreSQL URL from a Secret: no PVC, no sqlite flag, the URL from the Secret.
    full = containers(full_docs)
    assert "--database" not in full["reviews"]["args"] and "PersistentVolumeClaim" not in kinds(full_docs)
    exporter_url = next(e for e in full["reviews"]["env"] if e["name"] == "TIDESCALE_REVIEWS_EXPORTER_URL")
    assert exporter_url["value"] == "http://t-tidescale-exporter.tidescale.svc:9105"
    db = next(e for e in full["reviews"]["env"] if e["name"] == "TIDESCALE_REVIEWS_DATABASE")
    assert db["valueFrom"]["secretKeyRef"] == {"name": "reviews-db", "key": "url"}
    config = next(d for d in full_docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    settings = yaml.safe_load(config["data"]["config.yaml"])
    assert settings["exporter"]["kube_namespace"] == "serving"
    assert settings["exporter"]["kube_selector"] == "app.kubernetes.io/name=triton-server"
    assert settings["exporter"]["poll_interval_s"] == 2.0
    assert [t["deployment"] for t in settings["recommender"]["targets"]] == ["triton-resnet", "triton-ctr"]


def test_the_configmap_sections_load_with_the_components_settings(full_docs: list[dict[str, Any]],
                                                                    tmp: Path) -> None:
    """The chart's `exporter:` and `recommender:` sections are accepted by the services' own settings."""
    from tidescale.autoscaler.settings import RecommenderSettings
    from tidescale.contracts.settings import load_settings
    from tidescale.exporters.settings import ExporterSettings

    config = next(d for d in full_docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    path = tmp / "config.yaml"
    path.write_text(config["data"]["config.yaml"])
    exporter = load_settings(ExporterSettings, path)
    assert exporter.host == "0.0.0.0" and exporter.kube_selector == "app.kubernetes.io/name=triton-server"
    assert exporter.trace_sample_rate == 10  # exporter.traceSampleRate: the advised Triton rate=N
    recommender = load_settings(RecommenderSettings, path)
    assert recommender.port == 9106 and recommender.host == "0.0.0.0" and recommender.headroom == 1.0
    assert recommender.scale_mode == "hpa" and recommender.fast_path.enabled  # the HPA applies; the fast path reads
    assert (recommender.fast_path.interval_s, recommender.fast_path.timeout_s) == (2.0, 1.0)
    assert [recommender.capacity_for(t) for t in recommender.targets] == [50.0, 120.0]
    assert {t.namespace for t in recommender.targets} == {"serving"}


def test_network_policies_and_no_pdb(default_docs: list[dict[str, Any]], full_docs: list[dict[str, Any]]) -> None:
    assert len(kinds(default_docs)["NetworkPolicy"]) == 3
    # Pods are admitted to the service port only; the kubelet's probes come from the node, which a
    # NetworkPolicy always admits, so the health port needs (and has) no rule.
    for policy in kinds(full_docs)["NetworkPolicy"]:
        assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] in ([9105], [9106], [9107])
    # One exporter replica, always: a PDB of the singleton would only block node drains.
    assert "PodDisruptionBudget" not in kinds(default_docs) and "PodDisruptionBudget" not in kinds(full_docs)


@pytest.mark.parametrize(("values", "message"), [
    ({"unknownKey": 1}, "additional properties 'unknownKey' not allowed"),
    ({"exporter": {"port": "9105"}}, "/exporter/port"),
    ({"exporter": {"prot": 9105}}, "additional properties 'prot' not allowed"),
    ({"exporter": {"traceSampleRate": 0}}, "/exporter/traceSampleRate"),
    ({"exporter": {"traceSampleRate": 2.5}}, "/exporter/traceSampleRate"),
    ({"autoscaling": {"mode": "hpa"}}, "/autoscaling/mode"),
    ({"autoscaling": {"targets": [{"deployment": "Bad_Name", "model": "m"}]}}, "/autoscaling/targets/0/deployment"),
    ({"autoscaling": {"targets": [{"model": "m"}]}}, "deployment"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot"),
    ({"monitoring": {"interval": "soon"}}, "/monitoring/interval"),
    ({"recommender": {"prometheusUrl": "prometheus:9090"}}, "/recommender/prometheusUrl"),
    # The values this session added, each refused by name.
    ({"serving": {"httpPort": 0}}, "/serving/httpPort"),
    ({"recommender": {"replicas": 4}}, "/recommender/replicas"),
    ({"recommender": {"fastPath": {"intervalSeconds": 0.1}}}, "/recommender/fastPath/intervalSeconds"),
    ({"recommender": {"fastPath": {"every": 2}}}, "/recommender/fastPath"),
    ({"recommender": {"settings": {"intervall_s": 5}}}, "/recommender/settings"),
    ({"recommender": {"settings": {"port": 9000}}}, "/recommender/settings"),  # the chart's own
    ({"recommender": {"settings": {"fast_path": {"interval_s": 0.1}}}}, "/recommender/settings/fast_path/interval_s"),
    ({"recommender": {"settings": {"tuning": {"down_delay": 30}}}}, "/recommender/settings/tuning"),
    ({"recommender": {"settings": {"tuning": {"replace_crash_looping": "yes"}}}},
     "/recommender/settings/tuning/replace_crash_looping"),
    ({"recommender": {"tuning": {"replace_crash_looping": 1}}}, "/recommender/tuning/replace_crash_looping"),
    ({"reviews": {"replicas": 0}}, "/reviews/replicas"),
    ({"reviews": {"kubeEvents": {"modelDeployments": {"m": "Bad_Name"}}}}, "/reviews/kubeEvents/modelDeployments/m"),
    ({"recommender": {"prometheusAuth": {"headers": {"X Bad": "1"}}}}, "/recommender/prometheusAuth/headers"),
    ({"recommender": {"prometheusAuth": {"bearerTokenSecret": {"name": "Bad_Secret"}}}},
     "/recommender/prometheusAuth/bearerTokenSecret/name"),
    ({"autoscaling": {"keda": {"authenticationRef": {"kind": "Secret"}}}}, "/autoscaling/keda/authenticationRef/kind"),
    ({"monitoring": {"triton": {"portNumber": "yes"}}}, "/monitoring/triton/portNumber"),
    ({"monitoring": {"recommender": {"interval": "often"}}}, "/monitoring/recommender/interval"),
    ({"monitoring": {"recommender": {"every": "5s"}}}, "/monitoring/recommender"),
    ({"defaultRules": {"runbookUrl": "wiki/runbooks"}}, "/defaultRules/runbookUrl"),
    ({"defaultRules": {"additionalRuleLabels": {"bad-label": "x"}}}, "/defaultRules/additionalRuleLabels"),
    ({"slo": {"latency": {"thresholdSeconds": 0.3}}}, "/slo/latency/thresholdSeconds"),
    ({"exporter": {"mode": "statefulset"}}, "/exporter/mode"),
    ({"clusterLabel": "k8s-cluster"}, "/clusterLabel"),
    ({"exporter": {"mode": "daemonset", "replicas": 2}}, "/exporter/replicas"),
    ({"slo": {"availability": {"objective": 1}}}, "/slo/availability/objective"),
    ({"slo": {"models": [{"name": "default", "model": "x"}]}}, "/slo/models/0/name"),
    ({"slo": {"models": [{"name": "a", "model": "x", "latency": {"thresholdSeconds": 2}}]}},
     "/slo/models/0/latency/thresholdSeconds"),
    ({"slo": {"models": [{"name": "a"}]}}, "model"),
    ({"recommender": {"sloP99Seconds": 0.5}}, "sloP99Seconds"),
    ({"exporter": {"traceFiles": {"hostPath": "traces"}}}, "/exporter/traceFiles/hostPath"),
    ({"exporter": {"traceFiles": {"hostPath": "/"}}}, "/exporter/traceFiles/hostPath"),
    ({"exporter": {"traceFiles": {"fileName": "../trace.json"}}}, "/exporter/traceFiles/fileName"),
    ({"exporter": {"traceFiles": {"keepRotations": 0}}}, "/exporter/traceFiles/keepRotations"),
    ({"exporter": {"traceFiles": {"path": "/x"}}}, "/exporter/traceFiles"),
])
def test_schema_rejects_bad_values(tmp: Path, values: dict[str, Any], message: str) -> None:
    path = tmp / "bad.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr


def test_profile_capture_requires_a_target(tmp: Path) -> None:
    path = tmp / "capture.yaml"
    path.write_text(yaml.safe_dump({"profileCapture": {"enabled": True, "model": "ctr"}}))
    result = helm("template", "t", str(CHART), "-f", str(path))
    assert result.returncode != 0 and "profileCapture.target" in result.stderr


def test_notes_explain_rules_and_dashboards() -> None:
    result = helm("install", "t", str(CHART), "--dry-run=client", "--namespace", NAMESPACE)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "does not serve monitoring.coreos.com/v1" in notes
    assert "grafana_dashboard" in notes and "tidescale-fleet" in notes
    # With prometheus-operator the notes say how to check that Prometheus loaded the rules.
    with_operator = (CHART / "templates" / "NOTES.txt").read_text()
    assert "get servicemonitors,podmonitors,prometheusrules" in with_operator and "/rules" in with_operator
    assert "Trace files" not in notes
    traced = helm("install", "t", str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
                  "--set", "exporter.mode=daemonset", "--set", "exporter.traceFiles.enabled=true")
    assert "mount hostPath /var/lib/tidescale/triton-traces with subPathExpr" in traced.stdout.split("NOTES:", 1)[1]


def test_adapter_values_and_alertmanager_secret_carry_the_generated_files(full_docs: list[dict[str, Any]],
                                                                          keda_docs: list[dict[str, Any]]) -> None:
    adapter_file = CHART / "files" / "adapter" / "prometheus-adapter-config.yaml"
    [values_cm] = [d for d in full_docs
                   if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-adapter-values")]
    values = yaml.safe_load(values_cm["data"]["values.yaml"])
    assert values["prometheus"] == {"url": "http://prometheus-operated.monitoring.svc", "port": 9090, "path": ""}
    [config_cm] = [d for d in full_docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == values["rules"]
                   ["existing"]]
    assert config_cm["metadata"]["namespace"] == "monitoring"  # the adapter's namespace: rules.existing reads it
    assert yaml.safe_load(config_cm["data"]["config.yaml"]) == yaml.safe_load(adapter_file.read_text())
    assert not [d for d in keda_docs if d["metadata"]["name"].endswith("-adapter-values")]  # KEDA: no adapter
    [secret] = [d for d in full_docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-alertmanager")]
    expected = yaml.safe_load((CHART / "files" / "alertmanager" / "alertmanager.yaml").read_text())
    rendered = yaml.safe_load(secret["stringData"]["alertmanager.yaml"])
    assert secret["metadata"]["namespace"] == "monitoring"  # where the operator reads configSecret
    assert rendered["route"] == expected["route"] and rendered["inhibit_rules"] == expected["inhibit_rules"]
    hooks = {r["name"]: r.get("webhook_configs", [{}])[0] for r in rendered["receivers"]}
    assert hooks["pager"]["url"] == "https://pager.example/hook"
    assert hooks["tickets"]["url"] == "http://tickets.example/hook"
    assert hooks["model-reviews"]["url"] == f"http://t-tidescale-reviews.{NAMESPACE}.svc:9107/api/v1/alertmanager"
    token = hooks["model-reviews"]["http_config"]["authorization"]["credentials_file"]
    assert token == "/etc/alertmanager/secrets/t-tidescale-auth/reviews-token"


def _alerts(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for d in kinds(docs)["PrometheusRule"] for g in d["spec"]["groups"] for r in g["rules"] if "alert" in r]


def test_exporter_job_is_stable_for_any_release_name(tmp: Path) -> None:
    """`up{job=…}` in the rules matches the job the ServiceMonitor gives the exporter, whatever the release."""
    from tidescale.alerts.config import default_config

    result = helm("template", "observability", str(CHART), "--namespace", "mon", *MONITORING_API)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    [monitor] = [d for d in kinds(docs)["ServiceMonitor"] if d["metadata"]["name"] == "observability-tidescale"]
    relabel = monitor["spec"]["endpoints"][0]["relabelings"]
    job = {"sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_component"], "targetLabel": "job",
           "replacement": "tidescale-$1"}
    assert relabel[0] == job
    # The exporter Service's component label gives exactly the job the rules select.
    [service] = [d for d in kinds(docs)["Service"] if d["metadata"]["name"] == "observability-tidescale-exporter"]
    component = service["metadata"]["labels"]["app.kubernetes.io/component"]
    assert job["replacement"].replace("$1", component) == default_config().exporter_job
    [down] = [r for r in _alerts(docs) if r["alert"] == "TidescaleExporterDown"]
    assert f'up{{job="{default_config().exporter_job}"}}' in down["expr"]


DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def test_the_longest_release_name_gives_every_object_a_name_of_its_own(tmp: Path) -> None:
    """Each object keeps its component in a name Kubernetes takes (a Service's at most 63 characters, a
    CronJob's 52), and every URL the chart writes reaches one of its Services. Cutting
    `<release>-tidescale-<component>` at 63 characters gave every component the one name
    `<release>-tidescale`: two Deployments, Services and dashboards of one name."""
    values = {**KEDA_VALUES, "exporter": {**FULL_VALUES["exporter"], "mode": "daemonset"}}
    docs = render(tmp, values, release=LONGEST_RELEASE)
    names = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    services = {d["metadata"]["name"] for d in kinds(docs)["Service"]}
    assert len(services) == 4 and all(DNS_1035_LABEL.fullmatch(s) for s in services), services
    assert {s.rsplit("-", 1)[-1] for s in services} == {"exporter", "local", "recommender", "reviews"}
    [cron] = kinds(docs)["CronJob"]  # each Job's name adds 11 characters: Kubernetes takes 52 at most
    assert len(cron["metadata"]["name"]) <= 52 and cron["metadata"]["name"].endswith("-profile-capture")
    urls = set(re.findall(r"http://([^./:]+)\.[^./:]+\.svc", yaml.safe_dump_all(docs))) - {"prometheus-operated"}
    assert len(urls) == 3 and urls <= services, (urls, services)  # the exporter's, the recommender's, the reviews
    # A release whose name differs in its last character only gets names of its own.
    other = render(tmp, values, release=LONGEST_RELEASE[:-1] + "c")
    assert not services & {d["metadata"]["name"] for d in kinds(other)["Service"]}
    # The review history's claim keeps the name it had (the joined name cut at 63), the one claim it is.
    sqlite = render(tmp, {}, release=LONGEST_RELEASE)
    [claim] = kinds(sqlite)["PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == f"{LONGEST_RELEASE}-tidescale-reviews"[:63]
    volumes = _deployments(sqlite)["reviews"]["spec"]["template"]["spec"]["volumes"]
    assert {"claimName": claim["metadata"]["name"]} in [v.get("persistentVolumeClaim") for v in volumes]


@pytest.mark.parametrize(("release", "kube_version", "problem"), [
    ("ml.prod", "1.36.3", "no dots"),
    (DIGIT_FIRST_RELEASE, "1.35.0", "a letter first before Kubernetes 1.36"),
])
def test_a_release_name_no_service_can_carry_is_refused_with_the_way_out(
        tmp: Path, release: str, kube_version: str, problem: str) -> None:
    """Kubernetes takes a Service name only as a DNS label. helm allows release names with dots (and
    digits first), which fail half-way through `helm install`; the chart refuses them before anything
    is applied, naming the Service and the value that fixes it."""
    result = helm("template", release, str(CHART), "--namespace", "mon", "--kube-version", kube_version)
    assert result.returncode != 0
    assert f'the Service name "{release}-tidescale-' in result.stderr and problem in result.stderr
    assert "fullnameOverride" in result.stderr
    fixed = helm("template", release, str(CHART), "--namespace", "mon", "--kube-version", kube_version,
                 "--set", "fullnameOverride=ml-prod")
    assert fixed.returncode == 0, fixed.stderr


def test_a_digit_first_release_name_is_a_service_name_from_kubernetes_1_36(tmp: Path) -> None:
    result = helm("template", DIGIT_FIRST_RELEASE, str(CHART), "--namespace", "mon", "--kube-version", "1.36.3")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("values", [{"exporter": {"enabled": False}},
                                    {"monitoring": {"exporter": {"enabled": False}}}])
def test_exporter_down_stays_silent_without_an_exporter(tmp: Path, values: dict[str, Any]) -> None:
    names = {r["alert"] for r in _alerts(template(tmp, values, *MONITORING_API))}
    assert "TidescaleExporterDown" not in names and "TritonLatencyBudgetBurn" in names


RECOMMENDER_ALERTS = {"TidescaleRecommenderDown", "TidescaleRecommenderStale", "TidescaleRecommenderCannotScale"}
TARGETS = [{"deployment": "triton", "model": "resnet50", "capacityRps": 40.0}]


@pytest.mark.parametrize(("values", "expected"), [
    ({}, set()),  # no targets, no recommender
    ({"autoscaling": {"targets": TARGETS}}, RECOMMENDER_ALERTS - {"TidescaleRecommenderCannotScale"}),
    ({"autoscaling": {"mode": "direct", "targets": TARGETS}}, RECOMMENDER_ALERTS),
    ({"autoscaling": {"mode": "direct", "targets": TARGETS}, "monitoring": {"recommender": {"enabled": False}}}, set()),
    # the recommender has a monitor of its own: still scraped, still alerted on, without the exporter's
    ({"autoscaling": {"mode": "direct", "targets": TARGETS}, "monitoring": {"exporter": {"enabled": False}}},
     RECOMMENDER_ALERTS),
])
def test_the_recommenders_alerts_render_only_where_a_recommender_runs_and_is_scraped(
        tmp: Path, values: dict[str, Any], expected: set[str]) -> None:
    names = {r["alert"] for r in _alerts(template(tmp, values, *MONITORING_API))}
    assert names & RECOMMENDER_ALERTS == expected and "TritonLatencyBudgetBurn" in names


def test_the_recommender_is_scraped_by_a_monitor_of_its_own_at_its_own_interval(tmp: Path) -> None:
    """Its answer reaches prometheus-adapter one scrape late at most: 2 s, not the 15 s of the rest."""
    docs = template(tmp, {"autoscaling": {"targets": TARGETS}}, *MONITORING_API)
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    shared, own = monitors["t-tidescale"], monitors["t-tidescale-recommender"]
    assert shared["spec"]["selector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/component", "operator": "NotIn", "values": ["recommender"]}]
    assert shared["spec"]["endpoints"][0]["interval"] == "15s"
    [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "t-tidescale-recommender"]
    assert own["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = own["spec"]["endpoints"]
    assert endpoint["interval"] == "2s" and endpoint["honorLabels"] is True
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert {"sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_component"], "targetLabel": "job",
            "replacement": "tidescale-$1"} in endpoint["relabelings"]  # tidescale-recommender
    assert own["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    faster = template(tmp, {"autoscaling": {"targets": TARGETS}, "monitoring": {"recommender": {"interval": "2s"}}},
                      *MONITORING_API)
    [endpoint] = next(d for d in faster if d["metadata"]["name"] == "t-tidescale-recommender"
                  and d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["interval"] == "2s"
    assert not any(d["kind"] == "ServiceMonitor" and d["metadata"]["name"] == "t-tidescale-recommender"
                   for d in template(tmp, {}, *MONITORING_API))  # no targets, no recommender, no monitor


def test_default_rules_can_be_disabled_by_name(tmp: Path, default_docs: list[dict[str, Any]]) -> None:
    everything = {r["alert"] for r in _alerts(template(tmp, {}, *MONITORING_API))}
    kept = {r["alert"] for r in _alerts(template(tmp, {"defaultRules": {"disabled": {"TritonQueueBacklog": True}}},
                                                 *MONITORING_API))}
    assert everything - kept == {"TritonQueueBacklog"}


@pytest.mark.parametrize("mode", ["keda", "adapter"])
def test_the_cluster_demos_values_render_its_story(tmp: Path, mode: str) -> None:
    """The demo installs the chart with values only: short alert windows, the review route, its target."""
    from tidescale.devstack.demo.on_cluster import SHORT_WINDOWS, chart_values
    from tidescale.devstack.demo.settings import DemoSettings

    docs = template(tmp, chart_values(DemoSettings(on="cluster"), mode, 30.0),
                    *MONITORING_API)
    shortened = {r["alert"] for r in _alerts(docs) if r.get("for") == "30s"}
    assert shortened == set(SHORT_WINDOWS)
    assert any(d["kind"] == "AlertmanagerConfig" for d in docs)
    scaler = "ScaledObject" if mode == "keda" else "HorizontalPodAutoscaler"
    [obj] = [d for d in docs if d["kind"] == scaler]
    assert obj["metadata"]["namespace"] == "inference"
    # The profile review's Event lands on the Deployment that serves the reviewed model.
    [reviews] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-reviews")]
    env = {e["name"]: e.get("value") for e in reviews["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["TIDESCALE_REVIEWS_MODEL_DEPLOYMENTS"])["ctr_ranker"] == "inference/triton"


@pytest.mark.parametrize("keep", [False, True])
def test_uninstall_removes_the_review_claim_unless_asked_to_keep_it(tmp: Path, keep: bool) -> None:
    docs = template(tmp, {"reviews": {"persistence": {"keepOnUninstall": keep}}})
    policies = {d["kind"]: (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") for d in docs}
    assert policies["PersistentVolumeClaim"] == ("keep" if keep else None)
    assert {k for k, v in policies.items() if v} == ({"PersistentVolumeClaim"} if keep else set())


def test_default_rules_take_for_and_severity_overrides_by_name(tmp: Path) -> None:
    def rules(values: dict[str, Any]) -> list[dict[str, Any]]:
        return [r for r in _alerts(template(tmp, values, *MONITORING_API)) if r["alert"] == "TritonLatencyBudgetBurn"]

    before = rules({})
    after = rules({"defaultRules": {"overrides": {"TritonLatencyBudgetBurn": {"for": "30s", "severity": "warning"}}}})
    assert {r["for"] for r in before} == {"2m", "15m"}  # the page and the ticket
    assert {r["for"] for r in after} == {"30s"} and {r["labels"]["severity"] for r in after} == {"warning"}
    assert [r["expr"] for r in after] == [r["expr"] for r in before]
    assert [set(r["labels"]) for r in after] == [set(r["labels"]) for r in before]


def test_default_rule_overrides_are_validated(tmp: Path) -> None:
    bad = {"defaultRules": {"overrides": {"TritonQueueBacklog": {"for": "soon"}}}}
    result = helm("template", "obs", str(CHART), "-f", str(_write(tmp, bad)))
    assert result.returncode != 0 and "for" in result.stderr


def test_alertmanager_config_routes_reviews_to_this_release(tmp: Path) -> None:
    """The operator route: in the serving namespace (every review alert carries it, so the operator's
    default OnNamespace strategy lets it through), this release's review Service and port, the generated
    matcher, and the reviews token copied where the operator reads it, equal to the chart's own."""
    values = {"alertmanager": {"alertmanagerConfig": {"enabled": True}}, "reviews": {"port": 9200},
              "serving": {"namespace": "serving"}}
    result = helm("template", "obs", str(CHART), "--namespace", "mon", *MONITORING_API, "-f", str(_write(tmp, values)))
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    [amc] = [d for d in docs if d["kind"] == "AlertmanagerConfig"]
    assert amc["metadata"]["namespace"] == "serving"
    route = amc["spec"]["route"]
    assert route["matchers"] == [{"name": "alertname", "matchType": "=", "value": "TritonModelReviewRequired"}]
    [hook] = amc["spec"]["receivers"][0]["webhookConfigs"]
    assert hook["url"] == "http://obs-tidescale-reviews.mon.svc:9200/api/v1/alertmanager"
    token = hook["httpConfig"]["authorization"]["credentials"]
    assert token == {"name": "obs-tidescale-reviews-webhook", "key": "reviews-token"}
    secrets = {(d["metadata"]["namespace"], d["metadata"]["name"]): d["data"] for d in docs if d["kind"] == "Secret"}
    copied, own = secrets[("serving", token["name"])], secrets[("mon", "obs-tidescale-auth")]
    assert copied["reviews-token"] == own["reviews-token"]
    services = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "obs-tidescale-reviews"]
    assert services and services[0]["spec"]["ports"][0]["port"] == 9200


@pytest.mark.parametrize(("values", "secret"), [
    ({}, ("mon", "obs-tidescale-auth", "reviews-token")),  # serving in the release namespace: the chart's own
    ({"auth": {"existingSecret": "tokens"}, "serving": {"namespace": "serving"}},
     ("serving", "tokens", "reviews-token")),
    ({"serving": {"namespace": "serving"},
      "alertmanager": {"alertmanagerConfig": {"tokenSecret": {"name": "am-token", "key": "t"}}}},
     ("serving", "am-token", "t")),
])
def test_the_alertmanager_config_token_is_read_in_its_own_namespace(
        tmp: Path, values: dict[str, Any], secret: tuple[str, str, str]) -> None:
    result = helm("template", "obs", str(CHART), "--namespace", "mon", *MONITORING_API, "-f", str(_write(tmp, values)))
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    [amc] = [d for d in docs if d["kind"] == "AlertmanagerConfig"]
    credentials = amc["spec"]["receivers"][0]["webhookConfigs"][0]["httpConfig"]["authorization"]["credentials"]
    assert (amc["metadata"]["namespace"], credentials["name"], credentials["key"]) == secret
    # No copy of the token where the operator reads the chart's own, the user's, or a named one.
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-reviews-webhook")]


def test_the_alertmanager_config_follows_the_api_the_cluster_serves(tmp: Path) -> None:
    """auto (the default): rendered where the operator's AlertmanagerConfig API is served, left out
    elsewhere; true where it is not served: a clear error instead of a route that never exists."""
    with_api = helm("template", "t", str(CHART), *MONITORING_API)
    assert "kind: AlertmanagerConfig" in with_api.stdout
    without = helm("template", "t", str(CHART))
    assert without.returncode == 0 and "kind: AlertmanagerConfig" not in without.stdout
    required = helm("template", "t", str(CHART), "--set", "alertmanager.alertmanagerConfig.enabled=true")
    assert required.returncode != 0 and "AlertmanagerConfig API" in required.stderr


def test_config_secret_needs_its_receivers(tmp: Path) -> None:
    values = {"alertmanager": {"configSecret": {"enabled": True}}}
    result = helm("template", "t", str(CHART), "-f", str(_write(tmp, values)))
    assert result.returncode != 0 and "alertmanager.configSecret.pagerUrl is required" in result.stderr


def _write(tmp: Path, values: dict[str, Any]) -> Path:
    path = tmp / f"values-{len(list(tmp.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.parametrize(("url", "expected"), [
    ("http://prometheus-operated.monitoring.svc:9090", ("http://prometheus-operated.monitoring.svc", 9090, "")),
    ("http://mimir-gateway.mimir.svc/prometheus", ("http://mimir-gateway.mimir.svc", 80, "/prometheus")),
    ("https://prom.example.com/", ("https://prom.example.com", 443, "")),
    ("https://thanos.example:10902/api/prom/", ("https://thanos.example", 10902, "/api/prom")),
])
def test_adapter_prometheus_url_port_and_path(tmp: Path, url: str, expected: tuple[str, int, str]) -> None:
    docs = template(tmp, {"recommender": {"prometheusUrl": url, "capacityRps": 50.0},
                          "autoscaling": FULL_VALUES["autoscaling"]})
    [values_cm] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-adapter-values")]
    prom = yaml.safe_load(values_cm["data"]["values.yaml"])["prometheus"]
    assert (prom["url"], prom["port"], prom["path"]) == expected


# --- Escape hatches (issue 12): rendered under a release and namespace other than `tidescale`. -------------------

DIGEST = "sha256:" + "0123456789abcdef" * 4
ZONE_SPREAD = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
EXTRA_PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "{{ include \"tidescale.fullname\" . }}-reviews",
                          "namespace": "{{ include \"tidescale.namespace\" . }}"},
             "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {
                 "app.kubernetes.io/instance": "{{ .Release.Name }}", "app.kubernetes.io/component": "reviews"}}}}
# A string item: a template that is not YAML before rendering (an unquoted {{ }} as a value).
EXTRA_STRING = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ include \"tidescale.fullname\" . }}-extra\n" \
               "data:\n  priority: {{ .Values.priorityClassName }}\n"
RELABEL = {"targetLabel": "cluster", "replacement": "eu-1"}
DROP_GO = {"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}
HATCH_VALUES: dict[str, Any] = {
    **FULL_VALUES,
    "nameOverride": "ts",
    "namespaceOverride": "observability",
    "image": {"digest": DIGEST},
    "podLabels": {"team": "ml", "tier": "global"},
    "podAnnotations": {"owner": "platform", "tier": "global"},
    "priorityClassName": "tidescale-normal",
    "topologySpreadConstraints": [ZONE_SPREAD],
    "serviceAccount": {"name": "ts-sa"},
    "exporter": {**FULL_VALUES["exporter"], "podLabels": {"tier": "exporter"}, "podAnnotations": {"tier": "exporter"},
                 "priorityClassName": "tidescale-critical",
                 "extraEnv": [{"name": "OTEL_SDK_DISABLED", "value": "true"}], "extraArgs": ["--log-level", "debug"],
                 "extraVolumes": [{"name": "ca", "configMap": {"name": "ca-bundle"}}],
                 "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/custom", "readOnly": True}],
                 "resources": {"requests": {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "1Gi"},
                               "limits": {"memory": "512Mi", "nvidia.com/gpu": 1}}},
    "recommender": {**FULL_VALUES["recommender"], "extraEnv": [{"name": "TZ", "value": "UTC"}],
                    "topologySpreadConstraints": [{**ZONE_SPREAD, "maxSkew": 2}]},
    "reviews": {**FULL_VALUES["reviews"], "extraArgs": ["--verbose"],
                "extraVolumes": [{"name": "scratch", "emptyDir": {}}],
                "extraVolumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
    "monitoring": {**FULL_VALUES["monitoring"],
                   "triton": {"relabelings": [RELABEL], "metricRelabelings": [DROP_GO], "scrapeTimeout": "5s"},
                   "exporter": {"relabelings": [RELABEL], "metricRelabelings": [DROP_GO], "scrapeTimeout": "10s"},
                   "dcgmExporter": {"relabelings": [RELABEL], "metricRelabelings": [DROP_GO], "scrapeTimeout": "7s"}},
    "extraObjects": [EXTRA_PDB, EXTRA_STRING],
}
# Objects that live in a namespace of their own on purpose (FULL_VALUES sets them), not namespaceOverride.
ELSEWHERE = {("HorizontalPodAutoscaler", "serving"), ("Role", "serving"), ("RoleBinding", "serving"),
             ("PodMonitor", "serving"), ("AlertmanagerConfig", "serving"), ("Secret", "serving"),
             ("Secret", "monitoring"), ("ConfigMap", "monitoring")}


def render(tmp: Path, values: dict[str, Any], release: str = "obs", namespace: str = "mon") -> list[dict[str, Any]]:
    result = helm("template", release, str(CHART), "--namespace", namespace, *MONITORING_API,
                  "-f", str(_write(tmp, values)))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def hatch_docs(tmp: Path) -> list[dict[str, Any]]:
    return render(tmp, HATCH_VALUES)


def _deployments(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs if d["kind"] == "Deployment"}


def _endpoint(monitor: dict[str, Any]) -> dict[str, Any]:
    [endpoint] = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
    return endpoint


def validate_manifest(doc: dict[str, Any]) -> bool:
    """Validate a core kind against Kubernetes' schema or a custom resource against its CRD's;
    False for a kind with neither here."""
    if doc["kind"] in CORE_KINDS | {"PodDisruptionBudget", "DaemonSet"}:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    elif doc["kind"] in CRDS:
        errors = [e.message for e in crd_validator(doc["kind"]).iter_errors(doc)]
        assert not errors, f"{doc['kind']} {doc['metadata']['name']}: {errors}"
    else:
        return False
    return True


def test_every_hatch_renders_valid_manifests(hatch_docs: list[dict[str, Any]]) -> None:
    for doc in hatch_docs:
        validate_manifest(doc)


def test_namespace_override_moves_the_release_objects_only(hatch_docs: list[dict[str, Any]]) -> None:
    elsewhere = []
    for doc in hatch_docs:
        namespace = doc["metadata"].get("namespace")
        if namespace != "observability" and not (doc["kind"] == "ConfigMap" and namespace is None):
            elsewhere.append((doc["kind"], namespace))
    # The dashboards stay in dashboards.namespace, the adapter's config and the Alertmanager Secret in theirs,
    # the HPAs, the exporter's Role, the Triton PodMonitor and the review route (with its token) in the
    # serving namespace.
    assert set(elsewhere) == ELSEWHERE and "mon" not in {ns for _, ns in elsewhere}
    by_kind = kinds(hatch_docs)
    own = [m for m in by_kind["ServiceMonitor"] if "dcgm" not in m["metadata"]["name"]]  # exporter's, recommender's
    assert len(own) == 2 and all(m["spec"]["namespaceSelector"]["matchNames"] == ["observability"] for m in own)
    assert len(by_kind["RoleBinding"]) == 3  # the exporter's pod watch, the reviews' and recommender's Events
    assert {b["subjects"][0]["namespace"] for b in by_kind["RoleBinding"]} == {"observability"}
    reviews_env = {e["name"]: e.get("value") for e in _deployments(hatch_docs)["reviews"]["spec"]["template"]["spec"]
                   ["containers"][0]["env"]}
    assert reviews_env["TIDESCALE_REVIEWS_EXPORTER_URL"] == "http://obs-ts-exporter.observability.svc:9105"
    [amc] = by_kind["AlertmanagerConfig"]
    assert amc["spec"]["receivers"][0]["webhookConfigs"][0]["url"].startswith("http://obs-ts-reviews.observability.svc")


def test_name_overrides(tmp: Path, hatch_docs: list[dict[str, Any]]) -> None:
    names = {d["metadata"]["name"] for d in hatch_docs if d["kind"] == "Deployment"}
    assert names == {"obs-ts-exporter", "obs-ts-recommender", "obs-ts-reviews"}
    for d in _deployments(hatch_docs).values():
        assert d["metadata"]["labels"]["app.kubernetes.io/name"] == "ts"
        assert d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "ts"
    full = render(tmp, {"fullnameOverride": "gpu-obs"})
    assert {d["metadata"]["name"] for d in full if d["kind"] == "Deployment"} == \
        {"gpu-obs-exporter", "gpu-obs-reviews"}  # no targets: no recommender
    # No autoscaling target: nothing in a namespace the values do not name (no adapter ConfigMap in monitoring).
    assert {d["metadata"]["namespace"] for d in full if "namespace" in d["metadata"]} == {"mon"}


def test_pod_labels_and_annotations_merge_with_the_component_winning(hatch_docs: list[dict[str, Any]]) -> None:
    deployments = _deployments(hatch_docs)
    exporter = deployments["exporter"]["spec"]["template"]["metadata"]
    assert exporter["labels"]["team"] == "ml" and exporter["labels"]["tier"] == "exporter"
    assert exporter["annotations"]["owner"] == "platform" and exporter["annotations"]["tier"] == "exporter"
    assert "checksum/config" in exporter["annotations"]  # the chart's own annotation stays
    for component in ("recommender", "reviews"):
        meta = deployments[component]["spec"]["template"]["metadata"]
        assert meta["labels"]["tier"] == "global" and meta["annotations"]["tier"] == "global"
    [cron] = kinds(hatch_docs)["CronJob"]
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]["team"] == "ml"


def test_pod_labels_never_detach_a_pod_from_its_deployment(tmp: Path) -> None:
    docs = render(tmp, {"podLabels": {"app.kubernetes.io/component": "other", "app.kubernetes.io/instance": "x"}})
    for d in _deployments(docs).values():
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert d["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_extra_env_args_volumes_and_mounts_per_component(hatch_docs: list[dict[str, Any]]) -> None:
    deployments = _deployments(hatch_docs)
    exporter = deployments["exporter"]["spec"]["template"]["spec"]
    [container] = exporter["containers"]
    assert container["args"][:2] == ["exporter", "serve"] and container["args"][-2:] == ["--log-level", "debug"]
    assert container["env"][0]["name"] == "TIDESCALE_EXPORTER_TOKEN"  # the chart's own first
    assert container["env"][-1] == {"name": "OTEL_SDK_DISABLED", "value": "true"}
    assert container["volumeMounts"][-1] == {"name": "ca", "mountPath": "/etc/ssl/custom", "readOnly": True}
    assert exporter["volumes"][-1] == {"name": "ca", "configMap": {"name": "ca-bundle"}}
    recommender = deployments["recommender"]["spec"]["template"]["spec"]["containers"][0]
    assert recommender["env"] == [{"name": "TZ", "value": "UTC"}] and "--log-level" not in recommender["args"]
    reviews = deployments["reviews"]["spec"]["template"]["spec"]
    assert reviews["containers"][0]["args"][-1] == "--verbose"
    assert reviews["containers"][0]["volumeMounts"][-1] == {"name": "scratch", "mountPath": "/scratch"}
    assert reviews["volumes"][-1] == {"name": "scratch", "emptyDir": {}}


def test_scheduling_and_service_account(hatch_docs: list[dict[str, Any]]) -> None:
    deployments = {c: d["spec"]["template"]["spec"] for c, d in _deployments(hatch_docs).items()}
    assert deployments["exporter"]["priorityClassName"] == "tidescale-critical"
    assert deployments["reviews"]["priorityClassName"] == "tidescale-normal"
    [recommender_spread] = deployments["recommender"]["topologySpreadConstraints"]
    assert recommender_spread["maxSkew"] == 2  # the component's list replaces the global one
    for component, spec in deployments.items():
        [spread] = spec["topologySpreadConstraints"]
        selector = spread["labelSelector"]["matchLabels"]
        assert selector["app.kubernetes.io/component"] == component and selector["app.kubernetes.io/instance"] == "obs"
    accounts = {d["metadata"]["name"] for d in kinds(hatch_docs)["ServiceAccount"]}
    assert accounts == {"ts-sa", "ts-sa-exporter", "ts-sa-reviews", "ts-sa-recommender"}
    assert deployments["exporter"]["serviceAccountName"] == "ts-sa-exporter"
    assert deployments["reviews"]["serviceAccountName"] == "ts-sa-reviews"
    assert deployments["recommender"]["serviceAccountName"] == "ts-sa-recommender"
    assert {b["subjects"][0]["name"] for b in kinds(hatch_docs)["RoleBinding"]} == {
        "ts-sa-exporter", "ts-sa-reviews", "ts-sa-recommender"}


def test_an_existing_service_account(tmp: Path) -> None:
    docs = render(tmp, {"serviceAccount": {"create": False, "name": "platform-sa"}})
    assert "ServiceAccount" not in kinds(docs)
    assert {d["spec"]["template"]["spec"]["serviceAccountName"] for d in kinds(docs)["Deployment"]} == {"platform-sa"}
    assert kinds(docs)["RoleBinding"][0]["subjects"][0]["name"] == "platform-sa"


def test_monitor_relabelings_metric_relabelings_and_timeouts(hatch_docs: list[dict[str, Any]]) -> None:
    from tidescale.alerts.config import default_config

    by_kind = kinds(hatch_docs)
    monitors = {m["metadata"]["name"]: _endpoint(m) for m in by_kind["ServiceMonitor"] + by_kind["PodMonitor"]}
    triton, exporter, dcgm = monitors["obs-ts-triton"], monitors["obs-ts"], monitors["obs-ts-dcgm-exporter"]
    assert exporter["relabelings"][0]["targetLabel"] == "job"  # tidescale-<component>, before the user's
    assert exporter["relabelings"][0]["replacement"].replace("$1", "exporter") == default_config().exporter_job
    assert exporter["relabelings"][1:] == [RELABEL]
    assert [r.get("targetLabel") for r in triton["relabelings"]] == ["pod", "namespace", "cluster"]
    assert dcgm["relabelings"] == [RELABEL]
    for endpoint, timeout in ((triton, "5s"), (exporter, "10s"), (dcgm, "7s")):
        assert endpoint["metricRelabelings"] == [DROP_GO] and endpoint["scrapeTimeout"] == timeout


def test_image_digest_and_free_form_resources(hatch_docs: list[dict[str, Any]],
                                              default_docs: list[dict[str, Any]]) -> None:
    for spec in _pod_specs(hatch_docs):
        for c in spec["containers"]:
            assert c["image"] == f"ghcr.io/tidescale/tidescale@{DIGEST}"
    for spec in _pod_specs(default_docs):
        assert spec["containers"][0]["image"] == "ghcr.io/tidescale/tidescale:0.1.0"
    resources = _deployments(hatch_docs)["exporter"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["ephemeral-storage"] == "1Gi" and resources["limits"]["nvidia.com/gpu"] == 1


def test_extra_objects_render_with_tpl(hatch_docs: list[dict[str, Any]]) -> None:
    [pdb] = kinds(hatch_docs)["PodDisruptionBudget"]
    assert pdb["metadata"] == {"name": "obs-ts-reviews", "namespace": "observability"}
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "obs"
    [extra] = [d for d in hatch_docs if d["metadata"]["name"] == "obs-ts-extra"]
    assert extra["kind"] == "ConfigMap" and extra["data"] == {"priority": "tidescale-normal"}


@pytest.mark.parametrize(("values", "message"), [
    ({"namespaceOverides": "mon"}, "additional properties 'namespaceOverides' not allowed"),
    ({"podLabel": {"team": "ml"}}, "additional properties 'podLabel' not allowed"),
    ({"exporter": {"extraEnvs": [{"name": "A", "value": "b"}]}}, "additional properties 'extraEnvs' not allowed"),
    ({"reviews": {"extraVolumeMount": []}}, "additional properties 'extraVolumeMount' not allowed"),
    ({"recommender": {"resources": {"limit": {"cpu": 1}}}}, "additional properties 'limit' not allowed"),
    ({"exporter": {"extraEnv": [{"name": "A", "vaule": "b"}]}}, "additional properties 'vaule' not allowed"),
    ({"monitoring": {"exporter": {"relabelings": [{"sourcelabels": ["pod"]}]}}},
     "additional properties 'sourcelabels' not allowed"),
    ({"monitoring": {"dcgmExporter": {"scrapeTimout": "5s"}}}, "additional properties 'scrapeTimout' not allowed"),
    ({"monitoring": {"triton": {"scrapeTimeout": "five"}}}, "/monitoring/triton/scrapeTimeout"),
    ({"serviceAccount": {"nmae": "sa"}}, "additional properties 'nmae' not allowed"),
    ({"image": {"digest": "latest"}}, "/image/digest"),
    ({"exporter": {"extraArgs": "--debug"}}, "/exporter/extraArgs"),
    ({"topologySpreadConstraints": [{"maxSkew": 1}]}, "/topologySpreadConstraints/0"),
    ({"extraObjects": {"kind": "ConfigMap"}}, "/extraObjects"),
])
def test_schema_refuses_a_mistyped_hatch_naming_it(tmp: Path, values: dict[str, Any], message: str) -> None:
    result = helm("template", "obs", str(CHART), "--namespace", "mon", "-f", str(_write(tmp, values)))
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr


@pytest.mark.parametrize("replicas", [0, 2, 3])
def test_exporter_replicas_other_than_one_are_refused(tmp: Path, replicas: int) -> None:
    """The exporter is a stateful singleton: two replicas double-count series and split span joins."""
    result = helm("template", "obs", str(CHART), "--namespace", "mon",
                  "-f", str(_write(tmp, {"exporter": {"replicas": replicas}})))
    assert result.returncode != 0 and "/exporter/replicas" in result.stderr
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert "singleton" in schema["properties"]["exporter"]["properties"]["replicas"]["description"]


@pytest.mark.parametrize(("monitoring", "refused"), [
    ({"triton": {"scrapeTimeout": "20s"}}, "monitoring.triton.scrapeTimeout (20s) is longer than monitoring.interval"),
    ({"interval": "1m", "dcgmExporter": {"scrapeTimeout": "1m500ms"}}, "monitoring.dcgmExporter.scrapeTimeout"),
    ({"interval": "1m30s", "exporter": {"scrapeTimeout": "90s"}}, None),
])
def test_scrape_timeout_longer_than_the_interval_is_refused(tmp: Path, monitoring: dict[str, Any],
                                                            refused: str | None) -> None:
    """Prometheus rejects a scrape config whose timeout exceeds its interval: the chart says so at render time."""
    result = helm("template", "obs", str(CHART), "--namespace", "mon", *MONITORING_API,
                  "-f", str(_write(tmp, {"monitoring": monitoring})))
    if refused is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0 and refused in result.stderr


def test_a_recommender_scrape_timeout_longer_than_its_own_interval_is_refused_by_that_name(tmp: Path) -> None:
    values = {"autoscaling": {"targets": TARGETS}, "monitoring": {"recommender": {"scrapeTimeout": "10s"}}}
    result = helm("template", "obs", str(CHART), "--namespace", "mon", *MONITORING_API, "-f", str(_write(tmp, values)))
    assert result.returncode != 0
    assert ("monitoring.recommender.scrapeTimeout (10s) is longer than monitoring.recommender.interval (2s)"
            in result.stderr)


def test_helm_lint_passes_with_every_hatch(tmp: Path) -> None:
    result = helm("lint", str(CHART), "--strict", "--namespace", "mon", "-f", str(_write(tmp, HATCH_VALUES)))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("kube", "override", "legacy"), [
    ("1.33.0", None, True), ("1.34.0", None, False), ("1.35.0", None, False),
    ("1.35.0", True, True), ("1.33.0", False, False),
])
def test_hpa_tolerance_follows_the_cluster_version(tmp: Path, kube: str, override: bool | None, legacy: bool) -> None:
    """behavior.*.tolerance needs HPAConfigurableTolerance (on from 1.34); below, the recommender rounds."""
    from tidescale.autoscaler.manifests import Target, hpa_manifest

    values: dict[str, Any] = {**FULL_VALUES, "autoscaling": {**FULL_VALUES["autoscaling"], "legacyTolerance": override}}
    docs = template(tmp, values, "--kube-version", kube)
    hpa = next(d for d in docs if d["kind"] == "HorizontalPodAutoscaler" and d["metadata"]["name"] == "triton-resnet")
    assert hpa["spec"] == hpa_manifest(Target("triton-resnet", "serving", "resnet50", 2, 12), legacy=legacy)["spec"]
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    assert yaml.safe_load(config["data"]["config.yaml"])["recommender"]["hpa_tolerance_rounding"] is legacy


def test_the_triton_http_port_reaches_the_exporters_pod_discovery(tmp: Path) -> None:
    from tidescale.exporters.service import build_state
    from tidescale.exporters.settings import ExporterSettings

    docs = template(tmp, {"serving": {"httpPort": 9000}})
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    section = yaml.safe_load(config["data"]["config.yaml"])["exporter"]
    state = build_state(ExporterSettings(**section))
    assert state.targets is not None and state.targets.port == 9000


RULE_VALUES: dict[str, Any] = {"defaultRules": {
    "runbookUrl": "https://wiki.example/sre/runbooks/",
    "additionalRuleLabels": {"team": "ml-platform", "severity": "ignored"},
    "disabled": {"GPUThrottling": True, "Watchdog": False},  # the chart leaves the Watchdog out by default
    "overrides": {"TritonQueueBacklog": {"severity": "critical"}},
    # An SLO group for models the suite does not serve: the rest keep the default SLO the suite expects.
}, "slo": {"latency": {"thresholdSeconds": 0.5, "objective": 0.99}, "availability": {"objective": 0.999},
           "models": [{"name": "other", "model": "not_in_the_suite_.*", "latency": {"thresholdSeconds": 0.1}}]},
    # A recommender in direct mode, so that every alert the suite tests is rendered.
    "autoscaling": {"mode": "direct", "targets": [{"deployment": "triton", "model": "resnet50", "capacityRps": 40.0}]}}


def _as_rendered(test: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A promtool test of the committed rules, with the expectations the rendered values imply."""
    rules = values["defaultRules"]
    out = {**test, "alert_rule_test": []}
    for case in test.get("alert_rule_test", []):
        if rules["disabled"].get(case["alertname"]):
            continue
        for alert in case.get("exp_alerts") or []:
            labels = {**rules["additionalRuleLabels"], **alert["exp_labels"]}
            if "severity" in rules["overrides"].get(case["alertname"], {}):
                labels["severity"] = rules["overrides"][case["alertname"]]["severity"]
            alert["exp_labels"] = labels
            annotations = alert.get("exp_annotations") or {}
            if "runbook_url" in annotations:
                annotations["runbook_url"] = f"https://wiki.example/sre/runbooks/{case['alertname'].lower()}.md"
        out["alert_rule_test"].append(case)
    return out


def test_promtool_tests_pass_on_the_rules_rendered_from_non_default_values(tmp: Path) -> None:
    """The chart renders the rules from values (labels, runbooks, overrides, disabled alerts): the
    promtool suite, its expectations changed exactly as the values say, passes on what it renders."""
    from tidescale.devstack import rulecheck

    work = tmp / "rendered-rules"
    work.mkdir()
    rule_files = []
    for doc in template(tmp, RULE_VALUES, *MONITORING_API):
        if doc["kind"] == "PrometheusRule":
            path = work / f"{doc['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}))
            rule_files.append(str(path))
    assert len(rule_files) == 2
    checked = 0
    for source in rulecheck.test_files():
        suite = yaml.safe_load(source.read_text())
        suite["rule_files"] = rule_files
        suite["tests"] = [_as_rendered(t, RULE_VALUES) for t in suite["tests"]]
        checked += sum(len(t["alert_rule_test"]) for t in suite["tests"])
        (work / source.name).write_text(yaml.safe_dump(suite))
    files = sorted(work.glob("*.yaml"))
    run = rulecheck.test_rules([f for f in files if str(f) not in rule_files])
    assert run.ok, run.output
    assert checked > 40


@pytest.mark.parametrize(("choice", "field"), [("auto", "portNumber"), (True, "portNumber"), (False, "targetPort")])
def test_a_numeric_triton_port_uses_the_field_the_operator_has(tmp: Path, choice: Any, field: str) -> None:
    """auto reads the installed PodMonitor CRD (`lookup`); `helm template` cannot, and assumes portNumber."""
    docs = template(tmp, {"serving": {"metricsPort": 8002}, "monitoring": {"triton": {"portNumber": choice}}},
                    *MONITORING_API)
    [monitor] = [d for d in docs if d["kind"] == "PodMonitor"]
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint[field] == 8002 and not ({"portNumber", "targetPort"} - {field}) & set(endpoint)


def test_the_recommender_reaches_an_authenticated_prometheus_with_what_the_chart_mounts(tmp: Path) -> None:
    from tidescale.autoscaler.settings import RecommenderSettings

    values = {**FULL_VALUES, "recommender": {**FULL_VALUES["recommender"], "replicas": 2, "prometheusAuth": {
        "basicAuthSecret": {"name": "mimir-basic", "usernameKey": "user", "passwordKey": "pass"},
        "caSecret": {"name": "mimir-ca"}, "tenant": "team-ml", "headers": {"X-Source": "tidescale"}}}}
    docs = template(tmp, values)
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-recommender")]
    spec = deployment["spec"]["template"]["spec"]
    [container] = spec["containers"]
    [username] = [e for e in container["env"] if e["name"].endswith("BASIC_AUTH_USERNAME")]
    assert username["valueFrom"]["secretKeyRef"] == {"name": "mimir-basic", "key": "user"}
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "prometheus-auth"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "prometheus-auth"]
    files = {f"{mount['mountPath']}/{item['path']}": (s["secret"]["name"], item["key"])
             for s in volume["projected"]["sources"] for item in s["secret"]["items"]}
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    section = yaml.safe_load(config["data"]["config.yaml"])["recommender"]
    section["prometheus_auth"]["basic_auth_username"] = "from-the-secret"  # the env var the chart sets
    settings = RecommenderSettings(**section)
    auth = settings.prometheus_auth
    assert files == {str(auth.basic_auth_password_file): ("mimir-basic", "pass"),
                     str(auth.ca_file): ("mimir-ca", "ca.crt")}
    assert auth.request_headers() == {"X-Source": "tidescale", "X-Scope-OrgID": "team-ml"}
    # Two replicas: both write their answer, KEDA and the adapter read the max; a PDB keeps one.
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    [pdb] = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 1


def test_review_replicas_need_postgresql_and_then_roll(tmp: Path) -> None:
    refused = helm("template", "t", str(CHART), "--set", "reviews.replicas=2")
    assert refused.returncode != 0 and "reviews.replicas > 1 needs PostgreSQL" in refused.stderr
    docs = template(tmp, {"reviews": {"replicas": 3, "database": {"existingSecret": "reviews-db"}}})
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "t-tidescale-reviews"]
    assert deployment["spec"]["replicas"] == 3 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    [pdb] = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["metadata"]["name"] == "t-tidescale-reviews" and pdb["spec"]["minAvailable"] == 1
