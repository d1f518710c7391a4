"""The config.pbtxt `model_metrics` snippet, parsed with Triton's own ModelConfig proto (tritonclient)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from typer.testing import CliRunner

from tidescale.cli import app, main
from tidescale.contracts.errors import UsageError
from tidescale.exporters.model_metrics import FAMILY, first_response_buckets_ms, model_metrics_snippet


def test_the_snippet_is_a_valid_model_config_with_the_slo_thresholds_as_boundaries() -> None:
    config = text_format.Parse(model_metrics_snippet([0.25, 0.5]), model_config_pb2.ModelConfig())
    [control] = config.model_metrics.metric_control
    assert control.metric_identifier.family == FAMILY
    buckets = list(control.histogram_options.buckets)
    assert {250.0, 500.0} <= set(buckets) and buckets == sorted(buckets) and len(buckets) <= 29


@pytest.mark.parametrize("threshold", [0.0005, 30.0])
def test_a_threshold_that_cannot_be_a_boundary_is_refused_by_name(threshold: float) -> None:
    with pytest.raises(UsageError, match=f"SLO threshold {threshold:g} s"):
        first_response_buckets_ms([threshold])


def test_the_cli_prints_it_and_exits_2_on_a_bad_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    ok = CliRunner().invoke(app, ["exporter", "model-metrics", "--slo-threshold", "0.5"])
    assert ok.exit_code == 0 and "500" in ok.output and FAMILY in ok.output
    with pytest.raises(SystemExit) as exited:
        main(["exporter", "model-metrics", "--slo-threshold", "99"])
    assert exited.value.code == 2 and "cannot be a bucket boundary" in capsys.readouterr().err
