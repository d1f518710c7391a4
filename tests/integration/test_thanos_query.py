"""Two clusters behind a real Thanos Query (issue 46): a sidecar beside each Prometheus, an HA pair for
one cluster, and tidescale's readers pointed at the query layer as docs/install.md tells users to.

`west` and `east` run the **same** namespace, Deployment and model names; east carries three times
west's load. Each cluster's Prometheus scrapes its own synthetic fleet (the captured Triton 2.51 page,
dcgm-exporter, kube-state-metrics and the real exporter's page, as `tidescale bench cardinality` serves them) and
evaluates the chart's rules; its `cluster` external label is what Thanos adds to every series it
answers. West is an HA pair (`replica` a and b), which Thanos Query deduplicates.

What must hold: the recommender the chart configures for west, reading Thanos Query, asks for the
replicas it asks for reading west's own Prometheus (and not what the two clusters' summed load would
give); KEDA's query selects west's recommendation; every recorded series and alert carries its cluster;
the HA pair counts once.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidescale.autoscaler.service import RecommenderService
from tidescale.autoscaler.settings import RecommenderSettings, RecommenderTuning
from tidescale.benches.cardinality import NAMESPACE, Body, Fleet, SyntheticExporters, build_bodies
from tidescale.contracts import recorded
from tidescale.contracts.settings import load_settings
from tidescale.devstack import tools
from tidescale.devstack.ports import free_port
from tidescale.devstack.procs import stop_all
from tidescale.devstack.promstack import PrometheusServer, ScrapeTarget
from tidescale.devstack.rulecheck import filled_rule_files
from tidescale.devstack.thanos import ThanosQuery, ThanosSidecar

pytestmark = pytest.mark.integration
CHART = tools.REPO_ROOT / "deploy" / "helm" / "tidescale"
FLEET = Fleet(4)  # one Deployment of four pods, two models, in both clusters
[DEPLOYMENT] = FLEET.deployments()
MODEL = Fleet.models_of(DEPLOYMENT)[0]
LOAD = {"west": 1.0, "east": 3.0}  # east's counters grow three times as fast
DESIRED = {"west": 2.0, "east": 7.0}  # what each cluster's recommender exports (KEDA's query reads it)
PERIOD_S = 1.0  # a counter grows by its captured value every PERIOD_S


@dataclass
class ClockedBody:
    """A Body whose counters grow with the wall clock, not with scrapes: the two replicas of an HA
    pair scrape the same target and must see the same rates."""

    body: Body
    factor: float
    t0: float

    def render(self) -> bytes:
        k = 1 + (time.time() - self.t0) / PERIOD_S
        grown = "".join(f"{prefix} {value * self.factor * k:.17g}\n" for prefix, value in self.body.counters)
        return (self.body.static + grown).encode()


def attributed(body: Body) -> Body:
    """The exporter's page with each span attributed to the Deployment (a real exporter reads it from
    the span's sending pod; the benchmark's spans carry none)."""
    def fix(text: str) -> str:
        return text.replace('deployment=""', f'deployment="{DEPLOYMENT}"')

    return Body(fix(body.static), [(fix(prefix), value) for prefix, value in body.counters])


def recommender_page(desired: float) -> Body:
    """What the recommender's /metrics says of the target (the series KEDA's query reads)."""
    return Body(f'tidescale_desired_replicas{{namespace="{NAMESPACE}",deployment="{DEPLOYMENT}"}} {desired:g}\n', [])


@dataclass
class Layer:
    query: ThanosQuery
    prometheus: dict[str, PrometheusServer]  # "west-a", "west-b", "east-a"


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layer]:
    work = tmp_path_factory.mktemp("thanos")
    rules = filled_rule_files(work / "rules")
    t0 = time.time()
    sources, proms, thanos = [], {}, []  # thanos: the sidecars, then the query
    try:
        for cluster, factor in LOAD.items():
            bodies: dict[str, list[Any]] = {job: [ClockedBody(attributed(b), factor, t0) for b in found]
                                            for job, found in build_bodies(FLEET).items()}
            bodies["recommender"] = [recommender_page(DESIRED[cluster])]
            source = SyntheticExporters(bodies).__enter__()
            sources.append(source)
            targets = [*source.targets(FLEET),
                       ScrapeTarget("recommender", source.address, {"__metrics_path__": "/recommender/0"})]
            for replica in ("a", "b") if cluster == "west" else ("a",):
                name = f"{cluster}-{replica}"
                proms[name] = PrometheusServer(work / name, targets, rules, external_labels={
                    "cluster": cluster, "replica": replica}).start()
        for name, prom in proms.items():
            thanos.append(ThanosSidecar(prom, work / name).start())
        query = ThanosQuery([s.grpc_address for s in thanos], work / "query").start()
        thanos.append(query)
        # Every target up, the recorded P99 everywhere, and the recommender's rate window full of samples:
        # a rate over a window the data does not fill yet is extrapolated from whichever replica's
        # samples Thanos picked, and then the two views differ by that extrapolation, not by the layer.
        for prom in proms.values():
            prom.wait_for_targets_up(timeout=60)
            prom.wait_for(recorded.TARGET_P99, timeout=60)
            # Prometheus 2.42 shows a group's ALERTS from about its third 30 s round (measured: 60 s).
            prom.wait_for('ALERTS{alertname="Watchdog"}', timeout=120)
        time.sleep(max(0.0, t0 + RecommenderTuning().rate_window_s + 5 - time.time()))
        yield Layer(query, proms)
    finally:
        stop_all([p.proc for p in [*proms.values(), *thanos] if p.proc is not None])
        for source in sources:
            source.__exit__()


def chart_settings(tmp_path: Path, prometheus_url: str, cluster: str | None,
                   capacity_rps: float) -> RecommenderSettings:
    """The recommender's settings as the chart renders them for *cluster* (KEDA mode), read from *prometheus_url*."""
    values: dict[str, Any] = {
        "serving": {"namespace": NAMESPACE},
        "recommender": {"capacityRps": capacity_rps},
        "autoscaling": {"mode": "keda", "keda": {"source": "prometheus"}, "targets": [
            {"deployment": DEPLOYMENT, "model": MODEL, "minReplicas": 1, "maxReplicas": 40}]},
    }
    if cluster:
        values["autoscaling"]["cluster"] = cluster
    docs = render(tmp_path, values)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    data = yaml.safe_load(config["data"]["config.yaml"])
    data["recommender"].pop("prometheus_auth", None)
    data["recommender"].update(prometheus_url=prometheus_url, kube_events=False,
                               fast_path={"enabled": False})
    path = tmp_path / f"config-{cluster}-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_settings(RecommenderSettings, path)


def render(tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    path = tmp_path / f"values-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(values))
    result = subprocess.run([str(tools.helm()), "template", "t", str(CHART), "--namespace", "tidescale", "-f",
                             str(path), "--api-versions", "monitoring.coreos.com/v1",
                             "--api-versions", "keda.sh/v1alpha1/ScaledObject"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def desired(settings: RecommenderSettings) -> int:
    service = RecommenderService(settings)
    try:
        [state] = service.evaluate().values()
        assert state.failsafe is None, (state.failsafe, state.detail)
        assert state.published is not None
        return state.published
    finally:
        service.close()


def by_cluster(rows: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for row in rows:
        cluster = row["metric"].get("cluster", "")
        assert cluster not in out, f"two series of cluster {cluster!r}: {rows}"
        out[cluster] = float(row["value"][1])
    return out


def test_the_recommender_reads_its_own_cluster_through_thanos(layer: Layer, tmp_path: Path) -> None:
    """Same desired replicas through Thanos Query (scoped by `autoscaling.cluster`) as from west's own
    Prometheus; unscoped through Thanos, the summed load asks for more: the scope is what keeps it right."""
    west = layer.prometheus["west-a"]
    rate = west.query_value(f'sum(rate(nv_inference_request_success{{model="{MODEL}"}}[1m]))')
    assert rate and rate > 0
    capacity = rate / 2.5  # west alone needs a few replicas; west and east together four times as many
    own = desired(chart_settings(tmp_path, west.url, None, capacity))
    through_thanos = desired(chart_settings(tmp_path, layer.query.url, "west", capacity))
    summed = desired(chart_settings(tmp_path, layer.query.url, None, capacity))
    assert 1 < own == through_thanos < summed, (own, through_thanos, summed)


def test_keda_reads_its_own_clusters_recommendation(layer: Layer, tmp_path: Path) -> None:
    """KEDA's prometheus trigger, as the chart renders it for west, answers west's recommendation only."""
    values = {"serving": {"namespace": NAMESPACE}, "autoscaling": {
        "mode": "keda", "cluster": "west", "keda": {"source": "prometheus"},
        "targets": [{"deployment": DEPLOYMENT, "model": MODEL, "minReplicas": 1, "maxReplicas": 40}]}}
    [scaled] = [d for d in render(tmp_path, values) if d["kind"] == "ScaledObject"]
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert [float(r["value"][1]) for r in layer.query.query(query)] == [DESIRED["west"]]
    unscoped = query.replace(',cluster="west"', "")
    assert unscoped != query and [float(r["value"][1]) for r in layer.query.query(unscoped)] == [DESIRED["east"]]


def test_recorded_series_and_alerts_carry_their_cluster(layer: Layer) -> None:
    """Each cluster's recorded rates and P99 reach the global view under its own `cluster`, east's rate
    three times west's; the always-firing Watchdog once per cluster."""
    rates = by_cluster(layer.query.query(f'{recorded.REQUEST_SUCCESS_RATE5M}{{model="{MODEL}"}}'))
    assert set(rates) == {"west", "east"}
    assert rates["east"] == pytest.approx(3 * rates["west"], rel=0.1)
    p99 = by_cluster(layer.query.query(f'{recorded.TARGET_P99}{{deployment="{DEPLOYMENT}",model="{MODEL}"}}'))
    assert set(p99) == {"west", "east"} and all(v > 0 for v in p99.values())
    watchdog = by_cluster(layer.query.query('ALERTS{alertname="Watchdog",alertstate="firing"}'))
    assert set(watchdog) == {"west", "east"}


def test_an_ha_pair_counts_once(layer: Layer) -> None:
    """Deduplicated on `replica`, west's pair gives the figures of one of its Prometheus; without
    deduplication the same query shows both replicas (the pair is really there)."""
    expr = f'sum by (cluster) ({recorded.REQUEST_SUCCESS_RATE5M}{{model="{MODEL}"}})'
    deduped = by_cluster(layer.query.query(expr))
    own = layer.prometheus["west-a"].query_value(f'sum({recorded.REQUEST_SUCCESS_RATE5M}{{model="{MODEL}"}})')
    assert own and deduped["west"] == pytest.approx(own, rel=0.1)
    raw = layer.query.query(f'{recorded.REQUEST_SUCCESS_RATE5M}{{model="{MODEL}",cluster="west"}}', dedup=False)
    assert sorted(r["metric"].get("replica", "") for r in raw) == ["a", "b"]




def test_the_fleet_board_through_thanos_draws_each_cluster(layer: Layer, tmp_path: Path) -> None:
    """The fleet board's preview made through Thanos Query, with "All" clusters selected: its panels
    draw west and east apart (their legends end with the cluster), never their sum under one name."""
    from tidescale.devstack.preview import collect, legend, render_dashboard

    end = time.time()
    panels = collect(layer.query.url, window_s=120, end=end)["tidescale-fleet"]
    drawn = [(r.legend, s.labels) for p in panels for r in p.results for s in r.series]
    assert drawn and all(labels.get("cluster") in LOAD for _, labels in drawn), drawn[:5]
    by_cluster_label = {labels["cluster"] for _, labels in drawn}
    assert by_cluster_label == set(LOAD)
    assert all(legend(fmt, labels).endswith(labels["cluster"]) for fmt, labels in drawn if fmt)
    path = render_dashboard("tidescale / Fleet overview (Thanos Query, all clusters)", panels,
                            tmp_path / "fleet.png", end)
    assert path.stat().st_size > 10_000


def test_a_query_layer_that_finds_no_store_fails_by_name_and_leaves_no_process(tmp_path: Path) -> None:
    """Thanos Query that never gets ready, or never connects its store, is an error that says which,
    and its process is stopped before the error goes up (the caller has no handle to stop it with)."""
    from tidescale.contracts.errors import TidescaleError

    query = ThanosQuery([f"127.0.0.1:{free_port()}"], tmp_path)
    with pytest.raises(TidescaleError, match="thanos-query not ready|thanos query found 0 of 1 stores"):
        query.start(timeout=5)
    assert query.proc is not None and not query.proc.alive()
