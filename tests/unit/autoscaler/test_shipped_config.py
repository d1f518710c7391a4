"""What is measured is what ships: the benchmark runs the recommender the service builds, and the
service feeds it every input the recommender reads."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from typer.testing import CliRunner

from tests.paths import REPO
from tidescale.autoscaler.recommend import BURST_KNOBS, FALL_KNOBS, Observation, RecommenderConfig
from tidescale.autoscaler.service import RecommenderService
from tidescale.autoscaler.settings import (
    NOT_TUNING,
    RecommenderSettings,
    RecommenderTuning,
    TargetSettings,
    promql_range,
)
from tidescale.benches.autoscale.policies import TidescalePolicy
from tidescale.benches.autoscale.scenarios import PUBLISH_DELAY_S
from tidescale.cli import app


def printed_config() -> dict[str, object]:
    out = CliRunner().invoke(app, ["autoscale", "recommend", "--print-config"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)  # type: ignore[no-any-return]


def test_every_recommender_knob_is_a_setting() -> None:
    knobs = {f.name for f in dataclasses.fields(RecommenderConfig)} - set(NOT_TUNING)
    assert set(RecommenderTuning.model_fields) == knobs


def test_tuning_defaults_are_the_recommenders() -> None:
    defaults = RecommenderConfig(capacity_rps=1.0)
    for name, value in RecommenderTuning().model_dump().items():
        assert getattr(defaults, name) == value, name


def test_the_benchmark_builds_the_recommender_the_service_builds() -> None:
    policy = TidescalePolicy(2, 1, 40, 375.9, 60.0, 0.5, publish_delay_s=PUBLISH_DELAY_S["adapter"])
    target = TargetSettings(deployment="d", namespace="n", model="m", min_replicas=1, max_replicas=40,
                            capacity_rps=375.9)
    shipped = RecommenderSettings(targets=[target]).config_for(target)
    assert policy.state.recommender.config == shipped  # the service's own target state, run by its tick
    assert policy.service.settings.fast_path.enabled and policy.service.settings.scale_mode == "hpa"


def test_recorded_benchmark_ran_the_printed_defaults() -> None:
    page = (REPO / "docs" / "benchmarks" / "autoscale.md").read_text()
    found = re.search(r"tidescale tuning, the service's shipped defaults .*?: `(\{.*?\})`", page)
    assert found, "docs/benchmarks/autoscale.md does not record the tuning it ran: re-run `tidescale bench autoscale`"
    recorded, printed = json.loads(found.group(1)), printed_config()["tuning"]
    # Knobs added since the page ran may be missing from it only while they cannot act: burst sizing's
    # while the shipped sizing is the fixed share, the steady fall's while its window is infinite (off),
    # the return window while 0 (off), the panic's confirmation while 1 (the first reading: as before it),
    # the crash loops' replacements while off or while none of the page's scenarios has a pod that
    # crash-loops (each that has says CrashLoopBackOff in its title).
    # Every knob it recorded must still hold its value.
    newer = set(printed) - set(recorded)
    idle = (set(BURST_KNOBS) if printed["sizing"] == "fixed" else set()) | \
        (set(FALL_KNOBS) if printed["fall_window_s"] == "Infinity" else set()) | \
        ({"return_window_s"} if printed["return_window_s"] == 0 else set()) | \
        ({"panic_confirm_readings"} if printed["panic_confirm_readings"] == 1 else set()) | \
        ({"replace_crash_looping"} if printed["replace_crash_looping"] is False or "CrashLoopBackOff" not in page
         else set())
    assert newer <= idle, newer - idle
    assert recorded == {k: v for k, v in printed.items() if k not in newer}


def test_recorded_benchmark_charged_the_adapter_mode_the_scrape_interval_the_chart_deploys() -> None:
    """The chart's interval is held equal to PUBLISH_DELAY_S elsewhere; this holds the page to both."""
    page = (REPO / "docs" / "benchmarks" / "autoscale.md").read_text()
    found = re.search(r"tidescale's answer is applied .*?([0-9.]+) s later in adapter mode", page)
    assert found, "docs/benchmarks/autoscale.md does not record the adapter delay: re-run `tidescale bench autoscale`"
    assert float(found.group(1)) == PUBLISH_DELAY_S["adapter"]


class AllInputsProm:
    """A Prometheus that answers every query with a distinct value, keyed by query shape."""
    def query(self, expr: str) -> list[dict[str, object]]:
        return []  # the fast path's pod discovery: no pods (the fast path stays idle)


    def instant(self, expr: str) -> list[tuple[float, float]]:
        if "time()" in expr:
            return [(0.0, 1.0)]
        if "[30s]" in expr:
            return [(0.0, 7.0 if "REJECTED" in expr else 300.0)]
        if "[60s]" in expr:
            return [(0.0, 5.0 if "REJECTED" in expr else 200.0)]
        if "sum by (pod)" in expr:
            return [(0.0, 9.0)]
        if "pending" in expr:
            return [(0.0, 12.0)]
        return [(0.0, 3.0)]

    def close(self) -> None:
        pass


def test_the_service_supplies_every_input_the_recommender_reads() -> None:
    target = TargetSettings(deployment="d", namespace="n", model="m")
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0)
    service = RecommenderService(settings, AllInputsProm())  # type: ignore[arg-type]
    obs: Observation = service.observe(next(iter(service.states.values())), now=0.0)
    assert (obs.arrival_rps, obs.fast_arrival_rps) == (200.0, 300.0)
    assert (obs.rejected_rps, obs.fast_rejected_rps) == (5.0, 7.0)
    assert (obs.queue_depth, obs.max_pod_queue) == (12.0, 9.0)
    assert None not in dataclasses.astuple(obs)


@pytest.mark.parametrize(("seconds", "text"), [(60.0, "60s"), (30, "30s"), (2.5, "2500ms")])
def test_promql_range(seconds: float, text: str) -> None:
    assert promql_range(seconds) == text


def test_tuning_is_validated() -> None:
    with pytest.raises(ValueError, match="fast_jump"):
        RecommenderTuning(fast_jump=0.5)
    with pytest.raises(ValueError, match="no_such_knob"):
        RecommenderTuning(no_such_knob=1.0)  # type: ignore[call-arg]


def test_the_recommender_app_counts_unexpected_errors() -> None:
    """Like every tidescale service: an unexpected exception is a counted 500, not a traceback."""
    from fastapi.testclient import TestClient

    from tidescale.autoscaler.app import make_app

    target = TargetSettings(deployment="d", namespace="n", model="m")
    service = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=1.0), AllInputsProm())  # type: ignore[arg-type]
    app = make_app(service)

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/boom").status_code == 500
    assert 'tidescale_http_unhandled_errors_total{route="/boom",service="recommender"} 1.0' in client.get(
        "/metrics").text
