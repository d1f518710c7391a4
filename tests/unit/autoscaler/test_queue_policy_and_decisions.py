"""The recommended queue policy (a config.pbtxt Triton accepts) and the recommender's decision words."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tidescale.autoscaler.decisions import DECISIONS, decision, event_message
from tidescale.autoscaler.queue_policy import recommended_queue_policy
from tidescale.contracts.errors import UsageError


def test_the_timeout_is_the_slo_minus_the_largest_batch_and_triton_parses_the_fragment() -> None:
    policy = recommended_queue_policy("ranker", 0.5, 0.12)
    assert policy.timeout_us == 380_000
    config = text_format.Parse(policy.pbtxt(), model_config_pb2.ModelConfig())
    queue = config.dynamic_batching.default_queue_policy
    assert queue.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert queue.default_timeout_microseconds == 380_000


@pytest.mark.parametrize(("slo", "batch", "message"), [
    (0.5, 0.5, "impossible queue policy for model m: the SLO of 500 ms minus .* 500 ms leaves no time"),
    (0.1, 0.25, "impossible queue policy"),
    (0.0, 0.1, "SLO P99 must be"),
    (0.5, float("nan"), "execution time must be"),
    (0.5, -1.0, "execution time must be"),
])
def test_an_impossible_queue_policy_is_a_usage_error(slo: float, batch: float, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        recommended_queue_policy("m", slo, batch)


@pytest.mark.parametrize(("desired", "current", "reason", "failsafe", "expected"), [
    (5, 3, "rate", None, "scale_up_rate"),
    (5, 3, "queue", None, "scale_up_queue"),
    (9, 3, "drain", None, "scale_up_drain"),
    (9, 3, "panic", None, "scale_up_panic"),
    (5, 3, "lookahead", None, "scale_up_lookahead"),
    (5, 3, "return", None, "scale_up_return"),
    (8, 3, "forecast", None, "scale_up_forecast"),
    (2, 1, "min", None, "scale_up_min"),
    (2, 5, "rate", None, "scale_down"),
    (3, 3, "hold-down", None, "hold_down_delay"),
    (3, 3, "rate", None, "hold_steady"),
    (8, 8, "max", None, "hold_at_max"),
    (3, 3, "rate", "prometheus_down", "hold_missing_data"),
    (1, 5, "rate", "stale", "hold_missing_data"),  # never a scale-down on missing data
])
def test_each_evaluation_has_one_decision_of_the_fixed_vocabulary(desired: int, current: int, reason: str,
                                                                   failsafe: str | None, expected: str) -> None:
    got = decision(desired, current, reason, failsafe)
    assert got == expected and got in DECISIONS


@pytest.mark.parametrize(("desired", "current", "reason", "expected"), [
    (8, 5, "rate", "wait_unschedulable"),  # asks for more while some cannot be placed: says so
    (5, 5, "rate", "wait_unschedulable"),
    (3, 5, "rate", "scale_down"),  # a scale-down removes the Pending pods first: nothing to wait for
    (5, 5, "hold-down", "hold_down_delay"),
])
def test_unschedulable_pods_are_said(desired: int, current: int, reason: str, expected: str) -> None:
    assert decision(desired, current, reason, None, unschedulable=2) == expected
    assert expected in DECISIONS


def test_the_event_message_says_the_change_and_why() -> None:
    message = event_message(3, 7, "scale_up_queue", "arrival 512 req/s, queue 40")
    assert message == "tidescale recommends 7 replicas (was 3): scale_up_queue; arrival 512 req/s, queue 40"
    assert len(event_message(None, 1, "hold_steady", "x" * 5000)) == 1024


def _render(*extra: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from tidescale.cli import app

    out = CliRunner().invoke(app, ["autoscale", "render", "--deployment", "triton", "--namespace", "ml",
                                   "--model", "resnet50", "--slo-p99", "0.5", *extra])
    return out.exit_code, out.output


def test_render_prints_the_models_queue_policy() -> None:
    code, text = _render("--max-batch-exec-ms", "84")
    assert code == 0
    lines = text.split("to merge into its config.pbtxt:\n", 1)[1].splitlines()
    fragment = "\n".join(line[4:] for line in lines[:lines.index("#   }") + 1])
    config = text_format.Parse(fragment, model_config_pb2.ModelConfig())
    assert config.dynamic_batching.default_queue_policy.default_timeout_microseconds == 416_000


def test_render_refuses_an_impossible_queue_policy_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from tidescale.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["autoscale", "render", "--deployment", "triton", "--namespace", "ml", "--model", "resnet50",
              "--slo-latency-threshold", "0.5", "--max-batch-exec-ms", "500"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: impossible queue policy for model resnet50") and "Traceback" not in err
