"""Model repository generation: config.pbtxt content and the emulated model's behaviour."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.model_repo import (
    DEFAULT_MODELS,
    MODEL_PY,
    SLOWDOWN_ENV,
    ModelSpec,
    model_names,
    render_config,
    with_load_seconds,
    write_model_repository,
)
from tidescale.sim.servicecurve import ServiceCurve


def test_default_models_have_stable_names_and_distinct_speeds() -> None:
    names = [m.name for m in DEFAULT_MODELS]
    assert names[:2] == ["resnet50", "ctr_ranker"]
    resnet, ranker = DEFAULT_MODELS[0], DEFAULT_MODELS[1]
    assert ranker.curve.exec_seconds(8) < resnet.curve.exec_seconds(8)


def test_config_carries_batching_instances_and_curve() -> None:
    spec = ModelSpec("m1", ServiceCurve.v100(), max_batch_size=16, preferred_batch_sizes=(4, 8),
                     max_queue_delay_us=500, instance_count=2, load_seconds=0)
    text = render_config(spec)
    assert 'name: "m1"' in text and 'backend: "python"' in text
    assert "max_batch_size: 16" in text
    assert "preferred_batch_size: [ 4, 8 ]" in text
    assert "max_queue_delay_microseconds: 500" in text
    assert re.search(r"kind: KIND_CPU\s+count: 2", text)
    table_raw = re.search(r'key: "exec_seconds"\s+value: \{ string_value: "(.*)" \}', text)
    assert table_raw is not None
    table = json.loads(table_raw.group(1).replace('\\"', '"'))
    assert len(table) == 16
    assert table[0] == pytest.approx(ServiceCurve.v100().exec_seconds(1))
    assert table[15] == pytest.approx(ServiceCurve.v100().exec_seconds(16))


@pytest.mark.parametrize("kwargs", [
    {"name": ""}, {"name": "bad/name"}, {"name": "m", "max_batch_size": 0},
    {"name": "m", "preferred_batch_sizes": (64,)}, {"name": "m", "instance_count": 0},
    {"name": "m", "load_seconds": -1.0}, {"name": "m", "input_dims": ()},
])
def test_invalid_specs_are_usage_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        ModelSpec(**kwargs)


def test_repository_layout_and_duplicates(tmp_path: Path) -> None:
    repo = write_model_repository(tmp_path / "repo", with_load_seconds(DEFAULT_MODELS, 0))
    assert model_names(repo) == sorted(m.name for m in DEFAULT_MODELS)
    for m in DEFAULT_MODELS:
        assert (repo / m.name / "1" / "model.py").read_text() == MODEL_PY
        assert 'string_value: "0.0"' in (repo / m.name / "config.pbtxt").read_text()
    with pytest.raises(UsageError, match="duplicate"):
        write_model_repository(tmp_path / "r2", [DEFAULT_MODELS[0], DEFAULT_MODELS[0]])
    with pytest.raises(UsageError):
        write_model_repository(tmp_path / "r3", [])


class _Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self.name, self.array = name, array

    def as_numpy(self) -> np.ndarray:
        return self.array


def _fake_pb_utils() -> types.ModuleType:
    mod = types.ModuleType("triton_python_backend_utils")
    mod.Tensor = _Tensor  # type: ignore[attr-defined]
    mod.get_input_tensor_by_name = lambda req, name: _Tensor(name, req[name])  # type: ignore[attr-defined]
    mod.InferenceResponse = lambda tensors: tensors  # type: ignore[attr-defined]
    return mod


def test_generated_model_sleeps_the_curve_time_of_the_whole_batch(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """execute() sums the batch over requests and sleeps exec_seconds(batch) (jitter off)."""
    slowdown = tmp_path / "gpu-slowdown"
    monkeypatch.setenv(SLOWDOWN_ENV, str(slowdown))
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _fake_pb_utils())
    namespace: dict[str, Any] = {}
    exec(compile(MODEL_PY, "model.py", "exec"), namespace)  # the file Triton's stub runs
    slept: list[float] = []
    monkeypatch.setattr(namespace["time"], "sleep", slept.append)
    spec = ModelSpec("m", ServiceCurve(((1, 0.01), (8, 0.03)), jitter_sigma=0.0), max_batch_size=8,
                     preferred_batch_sizes=(4,), load_seconds=2.5)
    params = {"exec_seconds": json.dumps(spec.exec_table()), "jitter_sigma": "0.0", "load_seconds": "2.5"}
    model = namespace["TritonPythonModel"]()
    model.initialize({"model_config": json.dumps({"parameters": {k: {"string_value": v}
                                                                  for k, v in params.items()}})})
    assert slept == [2.5]  # the cold start
    requests = [{"INPUT0": np.ones((1, 16), np.float32)}, {"INPUT0": np.ones((2, 16), np.float32)}]
    responses = model.execute(requests)
    assert slept[1] == pytest.approx(spec.curve.exec_seconds(3))
    assert len(responses) == 2
    assert responses[1][0].array.shape == (2, 1) and responses[1][0].array[0, 0] == 16.0
    slowdown.write_text("1.5")  # the pod's GPU is throttled
    model.execute(requests[:1])
    assert slept[2] == pytest.approx(1.5 * spec.curve.exec_seconds(1))
    slowdown.write_text("garbage")
    model.execute(requests[:1])
    assert slept[3] == pytest.approx(spec.curve.exec_seconds(1))
