"""The chart next to what users already run (kube-prometheus-stack at its defaults or hardened, an
umbrella chart, a namespace-scoped installer, an HPA already on Triton), rendered with the real helm.
Each test here failed on the chart before the brownfield work; the cluster half is tests/e2e/test_brownfield.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_helm_chart import CHART, MONITORING_API, helm
from tidescale.devstack import tools

pytestmark = pytest.mark.integration

TARGET = {"deployment": "triton", "model": "resnet50", "capacityRps": 40.0}


def render(tmp: Path, values: dict[str, Any], *extra: str, release: str = "gpuobs",
           namespace: str = "platform-obs", chart: Path = CHART) -> list[dict[str, Any]]:
    path = tmp / f"values-{len(list(tmp.glob('values-*')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", release, str(chart), "--namespace", namespace, *extra, "-f", str(path))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def namespaces(docs: list[dict[str, Any]]) -> set[str]:
    return {d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]
    pod = (spec.get("jobTemplate", {}).get("spec", spec)).get("template", {}).get("spec", {})
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


# --- a default install writes only where it is told -------------------------------------------------

def test_a_default_render_creates_nothing_in_a_namespace_the_user_did_not_name(tmp_path: Path) -> None:
    """No autoscaling target, kps's APIs served: everything in the release namespace (no adapter
    ConfigMap in `monitoring`, no dcgm monitor in `gpu-operator`)."""
    assert namespaces(render(tmp_path, {}, *MONITORING_API)) == {"platform-obs"}
    named = render(tmp_path, {"serving": {"namespace": "serving"}}, *MONITORING_API)
    assert namespaces(named) == {"platform-obs", "serving"}


# --- umbrella charts --------------------------------------------------------------------------------

def umbrella(tmp: Path) -> Path:
    """A parent chart with tidescale as a dependency, as a platform team's umbrella chart has it."""
    parent = tmp / "platform"
    (parent / "charts").mkdir(parents=True)
    shutil.copytree(CHART, parent / "charts" / "tidescale")
    (parent / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "platform", "version": "1.0.0",
        "dependencies": [{"name": "tidescale", "version": ">=0.0.0-0", "condition": "tidescale.enabled"}]}))
    (parent / "values.yaml").write_text(yaml.safe_dump({"global": {"team": "ml"}, "tidescale": {"enabled": True}}))
    return parent


def test_tidescale_installs_as_a_subchart_and_takes_the_global_registry(tmp_path: Path) -> None:
    """Helm passes `global` to every dependency (with keys of other charts too), and the parent's
    `<name>.enabled` condition: the closed schema accepts both, and global.imageRegistry and
    global.imagePullSecrets reach every image and pod."""
    values = {"global": {"imageRegistry": "registry.corp.example:5000", "imagePullSecrets": ["corp-pull"],
                         "storageClass": "fast"},
              "tidescale": {"enabled": True, "imagePullSecrets": [{"name": "own-pull"}],
                            "autoscaling": {"targets": [TARGET]},
                            "profileCapture": {"enabled": True, "target": "t:6009", "model": "m"}}}
    docs = render(tmp_path, values, *MONITORING_API, chart=umbrella(tmp_path))
    workloads = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet", "CronJob")]
    assert len(workloads) == 4
    for doc in workloads:
        for c in containers(doc):
            assert c["image"].startswith("registry.corp.example:5000/tidescale/tidescale:"), (doc["kind"], c["image"])
        pod = doc["spec"].get("jobTemplate", {}).get("spec", doc["spec"])["template"]["spec"]
        assert pod["imagePullSecrets"] == [{"name": "own-pull"}, {"name": "corp-pull"}]


def test_the_image_registry_and_repository_compose(tmp_path: Path) -> None:
    [default] = [d for d in render(tmp_path, {}) if d["kind"] == "Deployment" and "exporter" in d["metadata"]["name"]]
    assert containers(default)[0]["image"] == "ghcr.io/tidescale/tidescale:0.1.0"
    [bare] = [d for d in render(tmp_path, {"image": {"registry": "", "repository": "mirror/ts", "tag": "x"}})
              if d["kind"] == "Deployment" and "exporter" in d["metadata"]["name"]]
    assert containers(bare)[0]["image"] == "mirror/ts:x"


# --- hardened kube-prometheus-stack: monitors next to what they scrape ------------------------------

def test_every_monitor_sits_next_to_what_it_scrapes(tmp_path: Path) -> None:
    """A Prometheus with ignoreNamespaceSelectors scrapes only what a monitor finds in its own
    namespace: the Triton PodMonitor is in the serving namespace, the dcgm monitor in dcgm-exporter's
    once it is named, the chart's own ServiceMonitors in the release namespace."""
    values = {"serving": {"namespace": "serving"}, "autoscaling": {"targets": [TARGET]},
              "monitoring": {"dcgmExporter": {"namespace": "gpu-operator"}}}
    docs = render(tmp_path, values, *MONITORING_API)
    monitors = [d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor")]
    where = {d["metadata"]["name"]: d["metadata"]["namespace"] for d in monitors}
    assert where == {"gpuobs-tidescale-triton": "serving", "gpuobs-tidescale-dcgm-exporter": "gpu-operator",
                     "gpuobs-tidescale": "platform-obs", "gpuobs-tidescale-recommender": "platform-obs"}
    for monitor in monitors:
        selector = monitor["spec"].get("namespaceSelector")
        assert selector in (None, {"matchNames": [monitor["metadata"]["namespace"]]}), monitor["metadata"]["name"]


def test_an_unnamed_dcgm_namespace_is_searched_from_the_release_namespace(tmp_path: Path) -> None:
    [dcgm] = [d for d in render(tmp_path, {}, *MONITORING_API) if d["metadata"]["name"].endswith("-dcgm-exporter")]
    assert dcgm["metadata"]["namespace"] == "platform-obs" and dcgm["spec"]["namespaceSelector"] == {"any": True}
    off = render(tmp_path, {"monitoring": {"dcgmExporter": {"enabled": False}}}, *MONITORING_API)
    assert not [d for d in off if d["metadata"]["name"].endswith("-dcgm-exporter")]


# --- Alertmanager -----------------------------------------------------------------------------------

def test_uninstall_keeps_the_alertmanager_config_secret(tmp_path: Path) -> None:
    """The Secret is the whole Alertmanager configuration: deleting it on uninstall would leave the
    operator's Alertmanager with one empty receiver, silencing every alert in the cluster."""
    values = {"alertmanager": {"configSecret": {"enabled": True, "pagerUrl": "https://p.example/h",
                                                "ticketsUrl": "https://t.example/h"}}}
    [secret] = [d for d in render(tmp_path, values) if d["metadata"]["name"] == "gpuobs-tidescale-alertmanager"]
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_the_review_route_lives_where_review_alerts_are(tmp_path: Path) -> None:
    """Under the operator's default matcher strategy (OnNamespace) a route sees only alerts labelled with
    its own namespace: the route is in the serving namespace, which every review alert carries."""
    docs = render(tmp_path, {"serving": {"namespace": "serving"}}, *MONITORING_API)
    [amc] = [d for d in docs if d["kind"] == "AlertmanagerConfig"]
    assert amc["metadata"]["namespace"] == "serving"
    rules = [r for d in docs if d["kind"] == "PrometheusRule" for g in d["spec"]["groups"] for r in g["rules"]]
    [share] = [r for r in rules if r.get("record") == "namespace_model_version_op_class:tidescale_op_time_share:max"]
    assert "by (cluster, namespace, model, version, op_class)" in share["expr"]


def test_kube_prometheus_stacks_own_watchdog_is_not_doubled(tmp_path: Path) -> None:
    rules = [r for d in render(tmp_path, {}, *MONITORING_API) if d["kind"] == "PrometheusRule"
             for g in d["spec"]["groups"] for r in g["rules"]]
    assert "Watchdog" not in {r.get("alert") for r in rules}
    back = [r for d in render(tmp_path, {"defaultRules": {"disabled": {"Watchdog": False}}}, *MONITORING_API)
            if d["kind"] == "PrometheusRule" for g in d["spec"]["groups"] for r in g["rules"]]
    assert "Watchdog" in {r.get("alert") for r in back}


# --- autoscaled already: takeover, and the APIs the objects need -----------------------------------

@pytest.mark.parametrize("hpa_name", [None, "triton-hpa"])
def test_keda_takes_over_the_hpa_of_the_same_name_in_place(tmp_path: Path, hpa_name: str | None) -> None:
    """KEDA's webhook refuses a ScaledObject for a Deployment another HPA scales unless the object asks
    to take it over by name: the user's (hpaName), or the adapter mode's own on an upgrade to keda."""
    target = {**TARGET, **({"hpaName": hpa_name} if hpa_name else {})}
    docs = render(tmp_path, {"autoscaling": {"mode": "keda", "targets": [target]}}, *MONITORING_API)
    [so] = [d for d in docs if d["kind"] == "ScaledObject"]
    assert so["metadata"]["annotations"]["scaledobject.keda.sh/transfer-hpa-ownership"] == "true"
    assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["name"] == (hpa_name or "triton")
    adapter = render(tmp_path, {"autoscaling": {"mode": "adapter", "targets": [target]}}, *MONITORING_API)
    [hpa] = [d for d in adapter if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["metadata"]["name"] == (hpa_name or "triton")  # adapter -> keda keeps one HPA, renamed by none


def test_custom_resources_need_their_api(tmp_path: Path) -> None:
    keda = helm("template", "t", str(CHART), "--set", "autoscaling.mode=keda", "--set", "recommender.capacityRps=4",
                "--set", "autoscaling.targets[0].deployment=triton", "--set", "autoscaling.targets[0].model=m")
    assert keda.returncode != 0 and "KEDA's ScaledObject API" in keda.stderr


# --- escape hatches the anchors have ----------------------------------------------------------------

def test_the_anchors_escape_hatches(tmp_path: Path) -> None:
    values = {
        "commonLabels": {"team": "ml", "app.kubernetes.io/name": "not-allowed-to-move"},
        "revisionHistoryLimit": 3,
        "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]}, "dnsPolicy": "ClusterFirst",
        "exporter": {"readinessProbe": {"periodSeconds": 30, "timeoutSeconds": 5},
                     "livenessProbe": {"failureThreshold": 6},
                     "service": {"annotations": {"cloud.example/internal": "true"}},
                     "extraContainers": [{"name": "proxy", "image": "envoy:1"}]},
        "autoscaling": {"targets": [TARGET]}}
    docs = render(tmp_path, values, *MONITORING_API)
    for doc in docs:
        assert doc["metadata"]["labels"]["team"] == "ml", doc["metadata"]["name"]
        assert doc["metadata"]["labels"].get("app.kubernetes.io/name", "tidescale") == "tidescale"
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert {d["spec"]["revisionHistoryLimit"] for d in deployments.values()} == {3}
    exporter = deployments["gpuobs-tidescale-exporter"]["spec"]["template"]["spec"]
    assert exporter["dnsConfig"] == {"options": [{"name": "ndots", "value": "2"}]}
    main, proxy = exporter["containers"]
    assert proxy == {"name": "proxy", "image": "envoy:1"}
    assert main["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 30,
                                      "timeoutSeconds": 5}
    assert main["livenessProbe"]["failureThreshold"] == 6 and main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    [svc] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "gpuobs-tidescale-exporter"]
    assert svc["metadata"]["annotations"] == {"cloud.example/internal": "true"}


def test_exporter_settings_are_checked_by_the_schema(tmp_path: Path) -> None:
    """The exporter refuses unknown settings and would crash-loop: helm refuses them first, naming the key."""
    bad = tmp_path / "bad.yaml"
    for settings, message in [({"poll_intervall_s": 5}, "poll_intervall_s"),
                              ({"poll_interval_s": -1}, "poll_interval_s"), ({"port": 1234}, "port")]:
        bad.write_text(yaml.safe_dump({"exporter": {"settings": settings}}))
        result = helm("template", "t", str(CHART), "-f", str(bad))
        assert result.returncode != 0 and message in result.stderr, result.stderr
    render(tmp_path, {"exporter": {"settings": {"poll_interval_s": 2.5, "max_series": 4000}}})


def test_the_largest_profile_upload_fits_the_exporters_tmp(tmp_path: Path) -> None:
    from tidescale.exporters.settings import ExporterSettings

    def tmp_mib(values: dict[str, Any]) -> int:
        [exporter] = [d for d in render(tmp_path, values) if d["metadata"]["name"] == "gpuobs-tidescale-exporter"
                      and d["kind"] == "Deployment"]
        [tmp] = [v for v in exporter["spec"]["template"]["spec"]["volumes"] if v["name"] == "tmp"]
        return int(tmp["emptyDir"]["sizeLimit"].removesuffix("Mi"))

    fields = ExporterSettings.model_fields
    assert tmp_mib({}) * 2**20 > fields["max_profile_uploads"].default * fields["max_profile_bytes"].default
    assert tmp_mib({"exporter": {"settings": {"max_profile_bytes": 1 << 30}}}) * 2**20 > 1 << 30
    # every upload the exporter takes at once may hold max_profile_bytes
    assert tmp_mib({"exporter": {"settings": {"max_profile_bytes": 1 << 30, "max_profile_uploads": 3}}}) \
        * 2**20 > 3 << 30


def test_notes_print_the_trace_url_and_the_serving_commands() -> None:
    result = subprocess.run([str(tools.helm()), "install", "gpuobs", str(CHART), "--dry-run=client",
                             "-n", "platform-obs", "--set", "serving.namespace=serving"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "url=http://gpuobs-tidescale-exporter.platform-obs.svc:9105/v1/traces" in notes
    assert "kubectl -n serving get pods -l app.kubernetes.io/name=triton" in notes


# --- the label-selector logic the lookups use, on its own ------------------------------------------

SELECTS_CASES = [
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchLabels": {"a": "1"}}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}, {"a": "3"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {"b": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
    # Istio's istio-component-monitor selects by expression only: not "everything".
    ({"matchExpressions": [{"key": "istio", "operator": "In", "values": ["pilot"]}]},
     {"app": "nvidia-dcgm-exporter"}, False),
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
]


def test_the_label_selector_logic_of_the_lookups(tmp_path: Path) -> None:
    """The chart's selector helper (what decides whether another ServiceMonitor already scrapes
    dcgm-exporter, and whether a Prometheus loads that monitor) against Kubernetes' semantics, in a
    scratch chart that calls it with each case."""
    scratch = tmp_path / "scratch"
    (scratch / "templates").mkdir(parents=True)
    shutil.copy(CHART / "templates" / "_helpers.tpl", scratch / "templates" / "_helpers.tpl")
    (scratch / "Chart.yaml").write_text("apiVersion: v2\nname: scratch\nversion: 0.0.1\n")
    (scratch / "templates" / "cases.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cases}\ndata:\n'
        '{{- range $i, $c := .Values.cases }}\n'
        '  "{{ $i }}": {{ include "tidescale.selects" (dict "selector" $c.selector "labels" $c.labels) | quote }}\n'
        '{{- end }}\n')
    cases = [{"selector": s, "labels": labels} for s, labels, _ in SELECTS_CASES]
    (scratch / "values.yaml").write_text(yaml.safe_dump({"cases": cases}))
    result = helm("template", "s", str(scratch))
    assert result.returncode == 0, result.stderr
    got = yaml.safe_load(result.stdout)["data"]
    assert [got[str(i)] == "true" for i in range(len(SELECTS_CASES))] == [want for *_, want in SELECTS_CASES], \
        json.dumps(got)
