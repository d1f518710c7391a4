"""Triton model repositories whose Python-backend models emulate GPU batch latency.

Each model's `execute()` sleeps for the service curve's execution time of the dynamic batch it
received, so Triton's real scheduler, batcher, metrics and statistics see GPU-like behaviour on
a CPU-only machine. The generated `model.py` runs inside Triton's Python stub and cannot import
tidescale, so the curve travels as a per-batch-size table in `config.pbtxt` parameters.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from tidescale.contracts.errors import UsageError
from tidescale.sim.servicecurve import ServiceCurve

INPUT_NAME = "INPUT0"
OUTPUT_NAME = "OUTPUT0"
# Environment variable naming a per-replica file whose number multiplies execution times (GPU throttling).
SLOWDOWN_ENV = "TIDESCALE_SLOWDOWN_FILE"

# A small ranking model: ~2 ms at batch 1, ~14 ms at batch 32 (about 5x faster than resnet50).
CTR_RANKER_CURVE = ServiceCurve(((1, 0.002), (8, 0.005), (16, 0.008), (32, 0.014)), jitter_sigma=0.05)


@dataclass(frozen=True)
class ModelSpec:
    """One emulated model: batching policy, instances, latency curve, cold start and GPU memory."""

    name: str
    curve: ServiceCurve = field(default_factory=ServiceCurve.v100)
    max_batch_size: int = 32
    preferred_batch_sizes: tuple[int, ...] = (8, 16)
    max_queue_delay_us: int = 2000
    instance_count: int = 1
    load_seconds: float = 45.0  # cold start: initialize() sleeps this long
    input_dims: tuple[int, ...] = (16,)
    gpu_memory_mib: int = 2048  # what the simulated GPU shows as used once loaded
    # dynamic_batching.default_queue_policy: REJECT a request queued longer than this (None: wait forever)
    queue_timeout_us: int | None = None

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "_-" for c in self.name):
            raise UsageError(f"model name {self.name!r} must be non-empty letters, digits, '_' or '-'")
        if self.max_batch_size < 1:
            raise UsageError(f"model {self.name}: max_batch_size must be >= 1")
        if any(b < 1 or b > self.max_batch_size for b in self.preferred_batch_sizes):
            raise UsageError(f"model {self.name}: preferred batch sizes must lie in 1..{self.max_batch_size}")
        if self.max_queue_delay_us < 0 or self.instance_count < 1 or self.load_seconds < 0:
            raise UsageError(f"model {self.name}: queue delay and load seconds must be >= 0, instances >= 1")
        if self.queue_timeout_us is not None and self.queue_timeout_us < 1:
            raise UsageError(f"model {self.name}: queue_timeout_us must be >= 1")
        if not self.input_dims or any(d < 1 for d in self.input_dims):
            raise UsageError(f"model {self.name}: input dims must be positive")

    def exec_table(self) -> list[float]:
        """Mean execution seconds for batch sizes 1..max_batch_size (index 0 is batch 1)."""
        return [round(self.curve.exec_seconds(b), 9) for b in range(1, self.max_batch_size + 1)]

    def with_load_seconds(self, seconds: float) -> ModelSpec:
        return replace(self, load_seconds=seconds)


DEFAULT_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("resnet50", ServiceCurve.v100(), gpu_memory_mib=3072),
    ModelSpec("ctr_ranker", CTR_RANKER_CURVE, preferred_batch_sizes=(16, 32), max_queue_delay_us=1000,
              gpu_memory_mib=1024),
)


def sustainable_rps(spec: ModelSpec) -> float:
    """What one replica serves within the SLO: throughput at the preferred batch size, less 30 % headroom."""
    batch = max(spec.preferred_batch_sizes or (1,))
    return 0.7 * spec.curve.throughput(batch) * spec.instance_count


def with_load_seconds(specs: tuple[ModelSpec, ...] | list[ModelSpec], seconds: float) -> tuple[ModelSpec, ...]:
    """The same models with another cold-start time (0 in tests)."""
    return tuple(s.with_load_seconds(seconds) for s in specs)


def _pbtxt_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_config(spec: ModelSpec) -> str:
    """The model's complete `config.pbtxt`."""
    dims = ", ".join(str(d) for d in spec.input_dims)
    preferred = ", ".join(str(b) for b in spec.preferred_batch_sizes)
    queue_policy = "" if spec.queue_timeout_us is None else (
        "  default_queue_policy {\n    timeout_action: REJECT\n"
        f"    default_timeout_microseconds: {spec.queue_timeout_us}\n  }}\n")
    params = {
        "exec_seconds": json.dumps(spec.exec_table()),
        "jitter_sigma": repr(float(spec.curve.jitter_sigma)),
        "load_seconds": repr(float(spec.load_seconds)),
    }
    param_text = "".join(
        f"parameters {{\n  key: {_pbtxt_string(k)}\n  value: {{ string_value: {_pbtxt_string(v)} }}\n}}\n"
        for k, v in params.items()
    )
    return (
        f'name: "{spec.name}"\n'
        'backend: "python"\n'
        f"max_batch_size: {spec.max_batch_size}\n"
        f'input [\n  {{\n    name: "{INPUT_NAME}"\n    data_type: TYPE_FP32\n    dims: [ {dims} ]\n  }}\n]\n'
        f'output [\n  {{\n    name: "{OUTPUT_NAME}"\n    data_type: TYPE_FP32\n    dims: [ 1 ]\n  }}\n]\n'
        "dynamic_batching {\n"
        + (f"  preferred_batch_size: [ {preferred} ]\n" if preferred else "")
        + f"  max_queue_delay_microseconds: {spec.max_queue_delay_us}\n"
        + queue_policy
        + "}\n"
        f"instance_group [\n  {{\n    kind: KIND_CPU\n    count: {spec.instance_count}\n  }}\n]\n"
        + param_text
    )


MODEL_PY = '''"""Emulated GPU model (generated by tidescale): sleeps the service-curve time of each dynamic batch."""

import json
import os
import random
import time

import numpy as np
import triton_python_backend_utils as pb_utils

INPUT_NAME = "@INPUT@"
OUTPUT_NAME = "@OUTPUT@"


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.exec_seconds = [float(s) for s in json.loads(params["exec_seconds"])]
        self.sigma = float(params.get("jitter_sigma", "0"))
        self.rng = random.Random()
        # The pod's simulated GPU may be throttled: a factor in this file stretches every execution.
        self.slowdown_path = os.environ.get("@SLOWDOWN_ENV@", "")
        time.sleep(float(params.get("load_seconds", "0")))

    def _slowdown(self):
        # Read each execution (tens of microseconds against milliseconds of "GPU" time): no stale cache.
        if not self.slowdown_path:
            return 1.0
        try:
            with open(self.slowdown_path) as fh:
                return max(1.0, float(fh.read().strip() or "1"))
        except (OSError, ValueError):
            return 1.0

    def _sleep_for(self, batch):
        table = self.exec_seconds
        mean = table[min(batch, len(table)) - 1] * max(1.0, batch / len(table)) * self._slowdown()
        if self.sigma > 0:
            # Mean-preserving lognormal noise.
            mean *= self.rng.lognormvariate(-self.sigma * self.sigma / 2.0, self.sigma)
        return mean

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, INPUT_NAME).as_numpy() for r in requests]
        batch = sum(int(x.shape[0]) for x in inputs)
        time.sleep(self._sleep_for(max(batch, 1)))
        responses = []
        for x in inputs:
            out = x.reshape(x.shape[0], -1).sum(axis=1, keepdims=True).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(OUTPUT_NAME, out)]))
        return responses

    def finalize(self):
        pass
'''.replace("@INPUT@", INPUT_NAME).replace("@OUTPUT@", OUTPUT_NAME).replace(
    "@SLOWDOWN_ENV@", SLOWDOWN_ENV)


def write_model_repository(dest: Path, specs: tuple[ModelSpec, ...] | list[ModelSpec]) -> Path:
    """Write (replacing) a model repository with one directory per spec; returns *dest*."""
    names = [s.name for s in specs]
    if not specs:
        raise UsageError("a model repository needs at least one model")
    if len(set(names)) != len(names):
        raise UsageError(f"duplicate model names in {names}")
    dest.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        model_dir = dest / spec.name
        if model_dir.exists():
            shutil.rmtree(model_dir)
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(render_config(spec))
        (model_dir / "1" / "model.py").write_text(MODEL_PY)
    return dest


def model_names(repo: Path) -> list[str]:
    """Models in a repository: the directories that hold a config.pbtxt."""
    return sorted(p.parent.name for p in repo.glob("*/config.pbtxt"))
