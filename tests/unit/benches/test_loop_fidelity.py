"""`bench closed-loop`: reading a demo's record, measuring its cold start, replaying it, judging it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidescale import cli
from tidescale.benches import loop_fidelity as lf
from tidescale.contracts.errors import UsageError
from tidescale.devstack.demo import on_cluster
from tidescale.devstack.demo.settings import DemoSettings
from tidescale.devstack.fleet.loadgen import request_schedule

SETTINGS = DemoSettings(duration_s=60.0, base_rps=10.0)


def row(t: float, ready: int, total: int, p99: float | None = 0.2) -> dict[str, Any]:
    return {"t": t, "replicas_ready": ready, "replicas_total": total, "replicas_desired": total, "p99_s": p99,
            "offered_rps": 1.0, "completed_rps": 1.0, "firing": []}


def write_run(folder: Path, rows: list[dict[str, Any]], by_phase: dict[str, Any] | None = None,
              **summary: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    figures = by_phase or {p.name: {"sent": 10, "errors": 0, "requests_within_slo": 1.0, "latency_p99_s": 0.2}
                           for p in on_cluster.story_phases()}
    doc = {"on": "cluster", "scenario": "cluster-story", "autoscaling_mode": "keda",
           "kubernetes": {"server_version": "v1.test"}, "settings": SETTINGS.model_dump(mode="json"),
           "autoscaled_model": {"name": on_cluster.AUTOSCALED_MODEL, "by_phase": figures}, **summary}
    (folder / "summary.json").write_text(json.dumps(doc))
    (folder / "timeline.json").write_text(json.dumps(rows))
    (folder / "values.yaml").write_text(yaml.safe_dump(on_cluster.chart_values(SETTINGS, "keda", 40.0)))
    return folder


ROWS = [row(0, 1, 1), row(10, 1, 2), row(19, 2, 2), row(40, 2, 2), row(59, 2, 2)]


def test_the_cold_start_is_what_the_cluster_gave_each_added_replica() -> None:
    rows = [lf._Row.model_validate(r) for r in
            [row(0, 1, 1), row(10, 1, 3), row(15, 2, 3), row(20, 3, 3), row(30, 3, 4), row(31, 3, 3), row(40, 3, 3)]]
    # 1 -> 3 at 10 s: Ready at 15 and 20; the fourth, added at 30, was scaled away before it was Ready
    assert lf.pod_start_seconds(rows) == [5.0, 10.0]


@pytest.mark.parametrize(("text", "seconds"), [("5s", 5), ("1m30s", 90), ("500ms", 0.5), ("2h", 7200)])
def test_prometheus_durations(text: str, seconds: float) -> None:
    assert lf.prometheus_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5", "5x", "s", "5s ", "-5s", ""])
def test_a_bad_interval_is_named(text: str) -> None:
    with pytest.raises(UsageError, match="not a Prometheus duration"):
        lf.prometheus_seconds(text)


def test_a_record_is_read_with_the_charts_settings(tmp_path: Path) -> None:
    run = lf.load_recorded_run(write_run(tmp_path / "out", ROWS))
    assert run.settings.duration_s == 60.0 and run.mode == "keda" and run.kubernetes == "v1.test"
    assert run.target.capacityRps == 40.0 and run.target.maxReplicas == SETTINGS.max_replicas
    assert run.scrape_interval_s == 5.0  # the demo's chart scrapes every 5 s
    assert run.recommender_settings["tuning"] == on_cluster.DEMO_TUNING


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.unlink(), "summary.json: not found"),
    (lambda d: d.write_text("{nope"), "summary.json: not readable as JSON"),
    (lambda d: d.write_text(json.dumps({"on": "local"})), "not a demo on the cluster"),
    (lambda d: d.write_text(json.dumps({"on": "cluster", "scenario": "diurnal-surge"})), "only the told story"),
    (lambda d: d.write_text(json.dumps({"on": "cluster", "scenario": "cluster-story"})), "recorded by an older"),
    (lambda d: d.write_text(d.read_text().replace('"base_rps": 10.0', '"base_rps": -1')), "settings.base_rps"),
    (lambda d: d.write_text(d.read_text().replace('"steady"', '"warm"')), "lacks the phases steady"),
    (lambda d: d.with_name("timeline.json").write_text('[{"t": "soon"}]'), "timeline.json: 0.t"),
    (lambda d: d.with_name("timeline.json").write_text("[]"), "fewer than two samples"),
    (lambda d: d.with_name("timeline.json").write_text(json.dumps([row(0, 1, 1), row(1, 1, 10**9)])),
     "timeline.json: 1.replicas_total"),
    (lambda d: d.with_name("values.yaml").write_text(
        "autoscaling: {targets: [{minReplicas: 1, maxReplicas: 2, capacityRps: 1}]}\n"
        "recommender: {settings: {1: 2}}"), "recommender.settings keys must be setting names"),
    (lambda d: d.with_name("timeline.json").write_text(json.dumps([row(5, 1, 1), row(4, 1, 1)])), "out of time order"),
    (lambda d: d.with_name("timeline.json").write_text("x" * 10), "timeline.json: not readable as JSON"),
    (lambda d: d.with_name("values.yaml").write_text("autoscaling: {targets: []}"), "autoscaling.targets is empty"),
    (lambda d: d.with_name("values.yaml").write_text(
        "autoscaling: {targets: [{minReplicas: 1, maxReplicas: 2, capacityRps: 1}]}\n"
        "recommender: {settings: {interval_s: -1}}"), "recommender.settings.interval_s"),
    (lambda d: d.with_name("values.yaml").write_text(
        "autoscaling: {targets: [{minReplicas: 1, maxReplicas: 2, capacityRps: 1}]}\n"
        "recommender: {settings: [1]}"), "recommender.settings must be a mapping"),
    (lambda d: d.with_name("values.yaml").write_text(
        "autoscaling: {targets: [{minReplicas: 1, maxReplicas: 2, capacityRps: 1}]}\nmonitoring: {interval: soon}"),
     "monitoring.interval 'soon'"),
])
def test_a_record_a_replay_cannot_use_is_refused_by_name(tmp_path: Path, change: Any, message: str) -> None:
    folder = write_run(tmp_path / "out", ROWS)
    change(folder / "summary.json")
    with pytest.raises(UsageError, match=message.replace(".", r"\.")):
        lf.load_recorded_run(folder)


def test_draw_0_offers_the_requests_the_run_sent(tmp_path: Path) -> None:
    run = lf.load_recorded_run(write_run(tmp_path / "out", ROWS))
    sc = on_cluster.story(SETTINGS, on_cluster.overload_rate(SETTINGS, on_cluster.served_models(SETTINGS)))
    sent, models = request_schedule(sc, SETTINGS.model_mix, SETTINGS.seed)
    mine = sent[np.asarray(models) == on_cluster.AUTOSCALED_MODEL]
    assert 0 < len(mine) < len(sent)
    np.testing.assert_array_equal(lf.replay_arrivals(run, 0), mine)
    assert not np.array_equal(lf.replay_arrivals(run, 1)[:20], mine[:20])


def test_agreement_widens_the_draws_by_the_tolerance() -> None:
    assert lf.agreement("ready", 2.4, [2.0, 1.9])["agrees"] is True
    assert lf.agreement("ready", 2.6, [2.0, 1.9])["agrees"] is False
    assert lf.agreement("latency_p99_s", 1.2, [1.0, 0.9])["agrees"] is True  # 1.0 x 1.25
    assert lf.agreement("latency_p99_s", 1.3, [1.0, 0.9])["agrees"] is False
    assert lf.agreement("latency_p99_s", None, [1.0])["agrees"] is None
    assert lf.agreement("first_scale_up_s", 10.0, [None, None])["agrees"] is None


def test_a_run_that_behaves_as_simulated_agrees_and_one_that_does_not_is_a_miss(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "probe", ROWS)
    run = lf.load_recorded_run(folder)
    # a "cluster" that did exactly what draw 0 of the simulator did
    twin, _ = lf.replay(run, 0, 10.0)  # a multiple of the 2 s decision tick: its rows measure it back
    figures = lf.simulated_figures(twin, SETTINGS)
    rows = [row(t, ready, total) for t, ready, total in zip(twin.times, twin.ready, twin.replicas, strict=True)]
    rows.append(row(SETTINGS.duration_s, twin.ready[-1], twin.replicas[-1]))
    by_phase = {}
    for name, start, end in lf.phase_bounds(SETTINGS):
        inside = twin.latency[(twin.arrivals >= start) & (twin.arrivals < end)]
        by_phase[name] = {"sent": len(inside), "errors": int(np.sum(~np.isfinite(inside))),
                          "requests_within_slo": figures[name]["requests_within_slo"],
                          "latency_p99_s": figures[name]["latency_p99_s"]}
    same = lf.load_recorded_run(write_run(tmp_path / "same", rows, by_phase))
    doc, results = lf.compare(same, 2)
    assert len(results) == 2
    assert all(e["agrees"] is not False for p in doc["phases"].values() for e in p.values())
    # ... and one whose overload P99 was ten times what any draw shows
    slow = dict(by_phase)
    slow["beyond maxReplicas"] = {**by_phase["beyond maxReplicas"],
                                  "latency_p99_s": 10 * (by_phase["beyond maxReplicas"]["latency_p99_s"] or 1)}
    doc, _ = lf.compare(lf.load_recorded_run(write_run(tmp_path / "slow", rows, slow)), 2)
    assert doc["phases"]["beyond maxReplicas"]["latency_p99_s"]["agrees"] is False
    assert doc["goal_met"] is False
    assert "**no**" in lf.render(doc)


def test_the_command_refuses_a_missing_record_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "closed-loop", "--no-record", "--demo-out", str(tmp_path / "none")])
    assert exc.value.code == 2
    assert "summary.json: not found" in capsys.readouterr().err


def test_the_command_refuses_too_many_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "closed-loop", "--no-record", "--draws", "0", "--demo-out", str(tmp_path)])
    assert exc.value.code == 2
    assert "--draws 0" in capsys.readouterr().err


def test_on_a_recorded_cluster_run_the_simulated_loop_scales_as_the_cluster_did() -> None:
    """The real record (tests/fixtures/demo/): the replay reads it, and the replica measures (mean and
    Ready, per phase) and the first scale-up agree, as on the page; the latencies are the page's business."""
    from tidescale.devstack.tools import FIXTURES

    run = lf.load_recorded_run(FIXTURES / "demo" / "cluster-story")
    doc, _ = lf.compare(run, 3)
    assert doc["replay"]["pod_starts_s"] and 5 < doc["replay"]["cold_start_s"] < 60
    for phase, measures in doc["phases"].items():
        assert measures["replicas"]["agrees"] and measures["ready"]["agrees"], phase
    assert doc["first_scale_up_s"]["surge 3x"]["agrees"]
    # the Service as kube-proxy has it: through the surge the first pod keeps the load, as on the cluster
    surge = doc["load_spread"]["surge 3x"]
    assert surge["busiest_pod_share"] > 0.9 and surge["simulator_busiest_pod_share"] > 0.9


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part=st.sampled_from(["summary", "rows", "values", "settings", "by_phase", "load_generator", "kubernetes",
                            "recommender"]),
       junk=JSON)
def test_any_json_in_a_record_is_read_or_refused_by_name(tmp_path: Path, part: str, junk: Any) -> None:
    folder = write_run(tmp_path / f"fuzz-{part}", ROWS)
    if part == "recommender":
        values = yaml.safe_load((folder / "values.yaml").read_text())
        values["recommender"] = {"settings": junk}
        (folder / "values.yaml").write_text(yaml.safe_dump(values))
    elif part in ("summary", "rows", "values"):
        name = {"summary": "summary.json", "rows": "timeline.json", "values": "values.yaml"}[part]
        (folder / name).write_text(yaml.safe_dump(junk) if name.endswith(".yaml") else json.dumps(junk))
    else:
        doc = json.loads((folder / "summary.json").read_text())
        if part == "by_phase":
            doc["autoscaled_model"]["by_phase"] = junk
        else:
            doc[part] = junk
        (folder / "summary.json").write_text(json.dumps(doc))
    try:
        lf.load_recorded_run(folder)
    except UsageError as e:
        assert str(folder) in str(e)


def test_the_replay_keeps_its_own_target_and_delivery_whatever_the_chart_set(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "out", ROWS)
    values = yaml.safe_load((folder / "values.yaml").read_text())
    values["recommender"]["settings"].update(kube_events=True, scale_mode="direct", targets=[])
    (folder / "values.yaml").write_text(yaml.safe_dump(values))
    result, _ = lf.replay(lf.load_recorded_run(folder), 0, 9.0)
    assert max(result.replicas) <= SETTINGS.max_replicas and len(result.times) > 10


def test_the_pod_sampler_reads_each_pods_rate_over_its_window() -> None:
    class Fixed:
        name, period_s = "fixed", 2.0

        def decide(self, now: float, lag: Any, sim: Any) -> int:
            return 1

    class Counters:
        def __init__(self, n: int) -> None:
            self.replicas = [type("C", (), {"name": "a", "requests": n, "draining": False})()]

    class Sim:
        replicas_ready = 1

        def __init__(self) -> None:
            self.n = 0

        def counters(self) -> Counters:
            self.n += 20
            return Counters(self.n)

    sampler, sim = lf.PodSampler(Fixed()), Sim()  # type: ignore[arg-type]
    for t in range(0, 40, 2):
        sampler.decide(float(t), None, sim)  # type: ignore[arg-type]
    rates = sampler.rates()
    assert rates[0][0] == 2.0 and all(r[2]["a"] == pytest.approx(10.0) for r in rates)


def test_an_unknown_service_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--service 'mesh'"):
        lf.run_bench(write_run(tmp_path / "out", ROWS), 1, "mesh")


def test_an_unknown_scheduler_is_refused_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="--scheduler 'exact'"):
        lf.run_bench(write_run(tmp_path / "out", ROWS), 1, scheduler="exact")
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "closed-loop", "--no-record", "--scheduler", "exact",
                  "--demo-out", str(write_run(tmp_path / "cli", ROWS))])
    assert exc.value.code == 2
    assert "--scheduler 'exact'" in capsys.readouterr().err


def test_the_page_sets_the_other_scheduler_beside_the_one_asked(tmp_path: Path) -> None:
    doc, _, _ = lf.run_bench(write_run(tmp_path / "out", ROWS), 1, scheduler="triton-2.51")
    assert doc["replay"]["scheduler"] == "triton-2.51" and set(doc["other_schedulers"]) == {"stepped"}
    assert doc["other_schedulers"]["stepped"]["agreeing"][1] == doc["agreeing"][1]
    page = lf.render(doc)
    assert "The same replay with the stepped scheduler" in page and "`bench autoscale` runs the stepped one" in page


def test_on_the_recorded_run_triton_251s_batcher_serves_the_surge_slower_than_the_stepped_model() -> None:
    """Triton's batcher thread runs a lone early request alone and makes the rest wait for the next batch:
    at the surge's load on one pod its P99 is above the stepped model's, nearer the cluster's 0.46 s
    (the page's table); the replica measures agree under both."""
    from tidescale.devstack.tools import FIXTURES

    run = lf.load_recorded_run(FIXTURES / "demo" / "cluster-story")
    stepped, _ = lf.compare(run, 2)
    triton, _ = lf.compare(run, 2, scheduler="triton-2.51")
    p99 = {name: doc["phases"]["surge 3x"]["latency_p99_s"] for name, doc in (("s", stepped), ("t", triton))}
    assert p99["t"]["simulator_range"][0] > p99["s"]["simulator_range"][1]
    assert all(m["replicas"]["agrees"] for m in triton["phases"].values())
