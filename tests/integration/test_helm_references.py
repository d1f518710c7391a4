"""Every cross-object reference in the rendered chart resolves: the install defects that schema checks
cannot see (a webhook on the wrong port, a token in a Secret nobody creates, a rule on a job no
monitor produces). Rendered with default, full and KEDA values under a release name and namespace
other than `tidescale`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.integration.test_helm_chart import (
    CHART,
    FULL_VALUES,
    KEDA_VALUES,
    MONITORING_API,
    _write,
    helm,
    validate_manifest,
)

RELEASE, NAMESPACE = "obs", "mon"
APIS = MONITORING_API
AUTH_VALUES: dict[str, Any] = {**KEDA_VALUES, "autoscaling": {**KEDA_VALUES["autoscaling"], "keda": {
    "source": "prometheus"}}, "recommender": {
    **FULL_VALUES["recommender"], "replicas": 2, "prometheusUrl": "https://mimir-gateway.mimir.svc/prometheus",
    "prometheusAuth": {"basicAuthSecret": {"name": "mimir-basic"}, "caSecret": {"name": "mimir-ca"},
                       "tenant": "team-ml"}}}
CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "full": FULL_VALUES,
    "keda": KEDA_VALUES,
    "keda-mimir": AUTH_VALUES,  # an authenticated Prometheus and two recommenders
    # One exporter per GPU node, per-model SLOs.
    "daemonset": {**FULL_VALUES, "exporter": {**FULL_VALUES["exporter"], "mode": "daemonset",
                                              "nodeSelector": {"nvidia.com/gpu.present": "true"}},
                  "slo": {"latency": {"thresholdSeconds": 0.5, "objective": 0.99}, "availability": {"objective": 0.999},
                          "models": [{"name": "rankers", "model": "ctr_.*", "latency": {"thresholdSeconds": 0.25}}]}},
}
# A cluster-local URL: http(s)://<service>.<namespace>.svc[.cluster.local][:port][/path]
SERVICE_URL = re.compile(r"https?://([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?(?::(\d+))?")
SECRET_FILE = re.compile(r"/etc/alertmanager/secrets/([a-z0-9.-]+)/([A-Za-z0-9._-]+)")
RULE_JOB = re.compile(r'\bjob\s*=~?\s*"([^"]+)"')


def render(tmp_path: Any, values: dict[str, Any]) -> list[dict[str, Any]]:
    result = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *APIS, "-f", str(_write(tmp_path, values)))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module", params=sorted(CASES))
def docs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(tmp_path_factory.mktemp(request.param), CASES[request.param])


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_strict_under_another_release_and_namespace(tmp_path: Any, case: str) -> None:
    # helm lint has no --api-versions: it renders without the operator and KEDA (the rest does not).
    values = str(_write(tmp_path, CASES[case]))
    result = helm("lint", str(CHART), "--strict", "--namespace", NAMESPACE, "-f", values)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_object_validates_against_kubernetes_and_the_crds(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        assert validate_manifest(doc), f"no schema here for {doc['kind']}"


def strings(node: Any) -> Iterator[str]:
    """Every string in a document, and every string inside the YAML documents that ConfigMaps and
    Secrets carry as text (config.yaml, the adapter's rules, the Alertmanager config)."""
    if isinstance(node, str):
        yield node
        if "\n" in node:
            try:
                inner = yaml.safe_load(node)
            except yaml.YAMLError:
                return
            if isinstance(inner, dict | list):
                yield from strings(inner)
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["metadata"].get("namespace", NAMESPACE), doc["metadata"]["name"]


def external_secrets(values: dict[str, Any]) -> set[str]:
    """Secrets the user names in values and creates themselves."""
    auth = (values.get("recommender") or {}).get("prometheusAuth") or {}
    prometheus = ((auth.get(k) or {}).get("name") for k in ("bearerTokenSecret", "basicAuthSecret", "caSecret"))
    return {s for s in ((values.get("reviews") or {}).get("database", {}).get("existingSecret"),
                        (values.get("auth") or {}).get("existingSecret"), *prometheus) if s}


def container_ports(pod_spec: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for c in pod_spec["containers"] for p in c.get("ports", []) if "name" in p}


def workload_pods(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(namespace, pod labels, pod spec) of every Deployment, DaemonSet and CronJob."""
    out = []
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet"):
            template = d["spec"]["template"]
        elif d["kind"] == "CronJob":
            template = d["spec"]["jobTemplate"]["spec"]["template"]
        else:
            continue
        out.append((key(d)[0], template["metadata"].get("labels", {}), template["spec"]))
    return out


def test_every_url_to_a_chart_service_names_a_service_and_port_that_exist(docs: list[dict[str, Any]]) -> None:
    services = {key(s): {p["port"] for p in s["spec"]["ports"]} for s in of_kind(docs, "Service")}
    seen = 0
    for doc in docs:
        for text in strings(doc):
            for name, namespace, port in SERVICE_URL.findall(text):
                if not name.startswith(f"{RELEASE}-"):
                    continue  # someone else's Service, from values (Prometheus, the pager)
                seen += 1
                assert (namespace, name) in services, f"{doc['kind']} {doc['metadata']['name']}: {text}"
                assert int(port or 80) in services[(namespace, name)], f"{doc['kind']}: {text} (wrong port)"
    assert seen, "no chart URL found: the check checked nothing"


def test_keda_finds_the_recommender_pods_at_the_port_its_url_names(docs: list[dict[str, Any]],
                                                                  request: pytest.FixtureRequest) -> None:
    """KEDA's metrics-api trigger asks every Ready endpoint of the Service in its URL, at the URL's port
    number (it does not follow the Service's targetPort): the pods must listen on that number."""
    pods = workload_pods(docs)
    seen = 0
    for scaled in of_kind(docs, "ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            if trigger["type"] != "metrics-api":
                continue
            name, namespace, port = SERVICE_URL.findall(trigger["metadata"]["url"])[0]
            [service] = [s for s in of_kind(docs, "Service") if key(s) == (namespace, name)]
            [spec] = [spec for ns, labels, spec in pods
                      if ns == namespace and service["spec"]["selector"].items() <= labels.items()]
            assert int(port) in container_ports(spec).values(), trigger["metadata"]["url"]
            seen += 1
    autoscaling = CASES[request.node.callspec.params["docs"]].get("autoscaling") or {}
    source = (autoscaling.get("keda") or {}).get("source", "recommender")  # the chart's default
    assert bool(seen) == (autoscaling.get("mode") == "keda" and source == "recommender")


def test_every_service_selects_a_workload_and_its_target_port_exists(docs: list[dict[str, Any]]) -> None:
    pods = workload_pods(docs)
    for service in of_kind(docs, "Service"):
        selector = service["spec"]["selector"]
        matched = [(labels, spec) for ns, labels, spec in pods
                   if ns == key(service)[0] and selector.items() <= labels.items()]
        assert len(matched) == 1, f"Service {service['metadata']['name']} selects {len(matched)} workloads"
        ports = container_ports(matched[0][1])
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            assert target in ports or target in ports.values(), f"{service['metadata']['name']}: {target}"


def test_every_secret_and_configmap_reference_exists_with_its_key(docs: list[dict[str, Any]],
                                                                   request: pytest.FixtureRequest) -> None:
    values = CASES[request.node.callspec.params["docs"]]
    data: dict[tuple[str, str, str], set[str]] = {}
    for kind in ("Secret", "ConfigMap"):
        for d in of_kind(docs, kind):
            data[(kind, *key(d))] = set(d.get("data") or {}) | set(d.get("stringData") or {})
    external = external_secrets(values)
    checked = 0

    def check(kind: str, namespace: str, name: str, item: str | None, where: str) -> None:
        nonlocal checked
        if kind == "Secret" and name in external:
            return
        checked += 1
        assert (kind, namespace, name) in data, f"{where}: {kind} {namespace}/{name} is not rendered"
        assert item is None or item in data[(kind, namespace, name)], f"{where}: no key {item!r} in {name}"

    for namespace, _, spec in workload_pods(docs):
        for c in spec["containers"]:
            for env in c.get("env", []):
                ref = env.get("valueFrom", {})
                for kind, field in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                    if field in ref:
                        check(kind, namespace, ref[field]["name"], ref[field]["key"], f"env {env['name']}")
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                check("Secret", namespace, volume["secret"]["secretName"], None, f"volume {volume['name']}")
            for source in volume.get("projected", {}).get("sources", []):
                if "secret" in source:
                    check("Secret", namespace, source["secret"]["name"], None, f"volume {volume['name']}")
            if "configMap" in volume:
                check("ConfigMap", namespace, volume["configMap"]["name"], None, f"volume {volume['name']}")
                for item in volume["configMap"].get("items", []):
                    check("ConfigMap", namespace, volume["configMap"]["name"], item["key"], volume["name"])
    for auth in of_kind(docs, "TriggerAuthentication"):
        for ref in auth["spec"]["secretTargetRef"]:
            check("Secret", key(auth)[0], ref["name"], ref["key"], "TriggerAuthentication")
    for scaled in of_kind(docs, "ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            if "authenticationRef" in trigger:
                assert (key(scaled)[0], trigger["authenticationRef"]["name"]) in {
                    key(a) for a in of_kind(docs, "TriggerAuthentication")}
    for amc in of_kind(docs, "AlertmanagerConfig"):
        for receiver in amc["spec"]["receivers"]:
            for hook in receiver.get("webhookConfigs", []):
                credentials = hook["httpConfig"]["authorization"]["credentials"]
                check("Secret", key(amc)[0], credentials["name"], credentials["key"], "AlertmanagerConfig")
    # The plain Alertmanager config reads the token from a mounted Secret: that Secret and key exist
    # (docs/install.md says to make it mountable by Alertmanager).
    for doc in docs:
        for text in strings(doc):
            for name, item in SECRET_FILE.findall(text):
                secrets = {n for (kind, _, n) in data if kind == "Secret"}
                assert name in secrets or name in external, f"credentials_file names Secret {name}"
                [namespace] = [ns for (kind, ns, n) in data if kind == "Secret" and n == name] or [None]
                if namespace is not None:
                    check("Secret", namespace, name, item, "credentials_file")
    assert checked >= 3


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, and matchExpressions' In/NotIn/Exists/DoesNotExist)."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        present, value = expr["key"] in labels, labels.get(expr["key"])
        if not {"In": present and value in expr.get("values", []),
                "NotIn": not present or value not in expr.get("values", []),
                "Exists": present, "DoesNotExist": not present}[expr["operator"]]:
            return False
    return True


def scrapes(monitor: dict[str, Any], service: dict[str, Any]) -> bool:
    """Whether a ServiceMonitor selects a Service (its namespaces, default its own, and its selector)."""
    namespaces = monitor["spec"].get("namespaceSelector", {}).get("matchNames", [key(monitor)[0]])
    return key(service)[0] in namespaces and selects(monitor["spec"]["selector"], service["metadata"]["labels"])


def targets(monitor: dict[str, Any], services: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The (endpoint, Service) pairs prometheus-operator makes scrape targets of: each Service the
    monitor selects, for each endpoint whose port that Service has by name."""
    return [(endpoint, service) for service in services if scrapes(monitor, service)
            for endpoint in monitor["spec"]["endpoints"]
            if endpoint["port"] in {p.get("name") for p in service["spec"]["ports"]}]


def monitor_jobs(docs: list[dict[str, Any]]) -> set[str]:
    """The `job` label of every target the chart's monitors produce (prometheus-operator's rules: the
    Service name or the jobLabel's value, then the endpoint's relabelings)."""
    services = of_kind(docs, "Service")
    jobs: set[str] = set()
    for monitor in of_kind(docs, "ServiceMonitor"):
        # none for a monitor of Services the chart does not create (dcgm-exporter)
        for endpoint, s in targets(monitor, services):
            job = s["metadata"]["labels"].get(monitor["spec"].get("jobLabel", ""), s["metadata"]["name"])
            for relabel in endpoint.get("relabelings", []):
                if relabel.get("targetLabel") == "job":
                    [source] = relabel["sourceLabels"]
                    label = source.removeprefix("__meta_kubernetes_service_label_")
                    value = next(v for k, v in s["metadata"]["labels"].items()
                                 if re.sub(r"[^a-zA-Z0-9_]", "_", k) == label)
                    job = relabel.get("replacement", "$1").replace("$1", value)
            jobs.add(job)
    return jobs


def test_every_job_in_a_rule_is_one_the_monitors_produce(docs: list[dict[str, Any]]) -> None:
    jobs = monitor_jobs(docs)
    used = {job for rule in of_kind(docs, "PrometheusRule") for g in rule["spec"]["groups"] for r in g["rules"]
            for job in RULE_JOB.findall(r["expr"])}
    assert used, "no rule selects a job: the check checked nothing"
    assert used <= jobs, f"rules select {used - jobs}, the monitors produce {jobs}"


def test_each_service_of_the_chart_is_scraped_by_one_monitor_at_most(docs: list[dict[str, Any]]) -> None:
    """Two monitors selecting one Service would scrape it twice (duplicate series, two `up`)."""
    monitors = of_kind(docs, "ServiceMonitor")
    for service in of_kind(docs, "Service"):
        scraping = [m["metadata"]["name"] for m in monitors if scrapes(m, service)]
        assert len(scraping) <= 1, f"{key(service)} is scraped by {scraping}"


def test_every_service_monitor_endpoint_port_is_a_service_port(docs: list[dict[str, Any]]) -> None:
    """A port name no selected Service has would scrape nothing. (A selected Service may lack it on
    purpose: daemonset mode's span-only `-local` Service, see the test below.)"""
    services = of_kind(docs, "Service")
    for monitor in of_kind(docs, "ServiceMonitor"):
        made = targets(monitor, services)
        selected = any(scrapes(monitor, s) for s in services)
        for endpoint in monitor["spec"]["endpoints"]:
            assert not selected or any(e is endpoint for e, _ in made), (monitor["metadata"]["name"], endpoint["port"])


def test_each_workload_is_scraped_once_through_one_service(docs: list[dict[str, Any]]) -> None:
    """prometheus-operator makes a target per selected Service whose port matches an endpoint's, so two
    Services in front of the same pods, both matched, scrape each pod twice: every series stored twice
    (one per `service` label) and every sum over them doubled. Daemonset mode's span-only `-local`
    Service has the exporter's labels and selector; its port is named so that no endpoint matches."""
    paths: dict[str, list[str]] = {}
    for monitor in of_kind(docs, "ServiceMonitor"):
        for endpoint, service in targets(monitor, of_kind(docs, "Service")):
            pods = json.dumps(service["spec"]["selector"], sort_keys=True)
            paths.setdefault(pods, []).append(f"{monitor['metadata']['name']}:{endpoint['port']} via {key(service)[1]}")
    assert all(len(p) <= 1 for p in paths.values()), paths
    if of_kind(docs, "ServiceMonitor"):
        assert any("-exporter" in p[0] for p in paths.values() if p), paths  # the check saw the exporter


def test_every_rolebinding_binds_a_rendered_role_to_a_rendered_account(docs: list[dict[str, Any]]) -> None:
    roles = {key(r) for r in of_kind(docs, "Role")}
    accounts = {key(a) for a in of_kind(docs, "ServiceAccount")}
    pods = {spec.get("serviceAccountName") for _, _, spec in workload_pods(docs)}
    for binding in of_kind(docs, "RoleBinding"):
        assert (key(binding)[0], binding["roleRef"]["name"]) in roles
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts
            assert subject["name"] in pods, f"{subject['name']} is bound but no pod runs as it"
    for namespace, _, spec in workload_pods(docs):
        assert (namespace, spec.get("serviceAccountName")) in accounts
