"""The clients the overhead benches send their requests with: perf_analyzer (fixed concurrency, the
per-request stamps of its profile export) where it runs, else the project's open-loop load generator.

A client is asked every WATCH_S whether to stop (the server crashed); perf_analyzer's "gave up" from a
server that still runs is a failure of that attempt (`ClientGaveUp`), like a crash.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tidescale.contracts.errors import MissingToolError, TidescaleError, UsageError
from tidescale.devstack import tools
from tidescale.devstack.fleet.model_repo import ModelSpec

CONCURRENCY = 8  # perf_analyzer's concurrency, as in the hand measurement of issue 15
LOADGEN_RPS = 300.0  # the fallback client's fixed open-loop rate (a Python client on a small machine)

@dataclass(frozen=True)
class ClientRun:
    latencies_s: np.ndarray  # of the requests answered
    errors: int
    wall_s: float  # first request sent to last answer received, by the client's own clock


Abort = Callable[[], bool]  # asked every WATCH_S while a client runs: stop now (the server crashed)? (or raises)
WATCH_S = 1.0


class Aborted(TidescaleError):
    """The client was stopped because `abort()` said so."""


class Client(Protocol):
    name: str

    def settings(self) -> dict[str, Any]: ...

    def play(self, url: str, requests: int, workdir: Path, abort: Abort = lambda: False) -> ClientRun: ...


def profile_run(export: Mapping[str, Any]) -> ClientRun:
    """Latencies of perf_analyzer's `--profile-export-file` (2.51: experiments[].requests[] with a
    send `timestamp` and `response_timestamps`, nanoseconds)."""
    sent, done, errors = [], [], 0
    for experiment in export.get("experiments", []):
        for request in experiment.get("requests", []):
            responses = request.get("response_timestamps") or []
            if not responses:
                errors += 1
                continue
            sent.append(int(request["timestamp"]))
            done.append(int(responses[-1]))
    if not sent:
        return ClientRun(np.empty(0), errors, 0.0)
    latencies = (np.asarray(done, dtype=np.int64) - np.asarray(sent, dtype=np.int64)) / 1e9
    return ClientRun(latencies, errors, (max(done) - min(sent)) / 1e9)


# perf_analyzer 2.51 prints this when a worker thread got an error answer (seen: "Not Found" from a
# live tritonserver that had stopped serving while tracing at rate 1), then exits 99 or waits forever.
GAVE_UP = "Failed to maintain requested inference load"


class ServerStoppedAnswering(TidescaleError):
    """The server stopped serving while it still runs: a failure of that attempt, like a crash."""


class ClientGaveUp(ServerStoppedAnswering):
    """The client reported errors from a server that is still running, and stopped sending."""


def client_errors(output: str, most: int = 3) -> str:
    """perf_analyzer's distinct error lines (one per thread, mostly the same), or its last line."""
    found: list[str] = []
    for line in output.splitlines():
        text = re.sub(r"^Thread \[\d+\] had error: ", "", line.strip())
        if "error" in line.lower() and text and text not in found:
            found.append(text)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return "; ".join(found[:most]) or (lines[-1] if lines else "no output")


@dataclass
class PerfAnalyzerClient:
    install: tools.PerfAnalyzerInstall
    model: str
    concurrency: int = CONCURRENCY
    name: str = "perf_analyzer"
    version: str = ""

    def settings(self) -> dict[str, Any]:
        binary = self.install.binary
        shown = binary.relative_to(tools.REPO_ROOT) if binary.is_relative_to(tools.REPO_ROOT) else binary
        return {"binary": str(shown), "version": self.version, "protocol": "http",
                "concurrency": self.concurrency, "input_data": "zero"}

    def check(self) -> PerfAnalyzerClient:
        """Runs `--version`; TidescaleError with its output when it cannot run (a missing library)."""
        try:
            out = subprocess.run([str(self.install.binary), "--version"], env=self.install.env(),
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TidescaleError(f"perf_analyzer does not run: {exc}") from exc
        if out.returncode != 0:
            raise TidescaleError(f"perf_analyzer does not run: {(out.stderr or out.stdout).strip()[-300:]}")
        found = re.search(r"Version (\S+)", out.stdout + out.stderr)  # 2.51 prints it on stderr
        self.version = found.group(1) if found else ""
        return self

    def play(self, url: str, requests: int, workdir: Path, abort: Abort = lambda: False) -> ClientRun:
        export, log = workdir / "perf_analyzer.json", workdir / "perf_analyzer.log"
        export.unlink(missing_ok=True)
        argv = [str(self.install.binary), "-u", url.removeprefix("http://"), "-i", "http", "-m", self.model,
                "--concurrency-range", str(self.concurrency), "--request-count", str(requests),
                "--input-data", "zero", "--profile-export-file", str(export)]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, env=self.install.env(), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        try:
            while True:
                try:
                    code = proc.wait(timeout=WATCH_S)
                    break
                except subprocess.TimeoutExpired:
                    if abort():
                        raise Aborted("perf_analyzer stopped: the server crashed") from None
                    output = log.read_text(errors="replace")
                    if GAVE_UP in output:
                        raise ClientGaveUp(f"perf_analyzer gave up: {client_errors(output)}") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if code != 0:
            output = log.read_text(errors="replace")
            if GAVE_UP in output:  # error answers from the server, which may still run: its failure
                raise ClientGaveUp(f"perf_analyzer gave up ({code}): {client_errors(output)}")
            raise TidescaleError(f"perf_analyzer failed ({code}): {client_errors(output)}")
        return profile_run(json.loads(export.read_text()))


@dataclass
class LoadgenClient:
    spec: ModelSpec
    rps: float = LOADGEN_RPS
    name: str = "loadgen"

    def settings(self) -> dict[str, Any]:
        return {"rps": self.rps, "open_loop": True, "body": "JSON"}

    def play(self, url: str, requests: int, workdir: Path, abort: Abort = lambda: False) -> ClientRun:
        from tidescale.devstack.fleet.loadgen import LoadGenerator
        from tidescale.sim.traffic import Scenario

        arrivals = np.arange(requests) / self.rps
        duration = float(arrivals[-1]) + 1e-6
        gen = LoadGenerator(Scenario("overhead", duration, lambda t: 0.0, timestamps=arrivals), lambda: [url],
                            models=[self.spec.name], max_in_flight=4096, input_dims=self.spec.input_dims,
                            timeout_s=60.0)
        gen.start()
        deadline = time.monotonic() + duration + 120.0
        try:
            while not (finished := gen.wait(WATCH_S)) and time.monotonic() < deadline:
                if abort():
                    raise Aborted("the load generator stopped: the server crashed")
        finally:
            gen.stop()
        if not finished or gen.error is not None:
            raise TidescaleError(f"the load generator did not finish: {gen.error!r}")
        records = gen.records()
        ok = [r for r in records if r.ok]
        wall = max(r.t_send + r.latency_s for r in records) - min(r.t_send for r in records) if records else 0.0
        return ClientRun(np.asarray([r.latency_s for r in ok]), len(records) - len(ok), wall)


def choose_client(kind: str, spec: ModelSpec, concurrency: int = CONCURRENCY) -> tuple[Client, str | None]:
    """(client, why perf_analyzer was not used) for load on the model *spec*: `auto` falls back to the
    load generator."""
    if kind not in ("auto", "perf_analyzer", "loadgen"):
        raise UsageError(f"unknown client {kind!r}: use auto, perf_analyzer or loadgen")
    if concurrency < 1:
        raise UsageError(f"--concurrency must be >= 1, got {concurrency}")
    if kind == "loadgen":
        return LoadgenClient(spec), "asked for the load generator"
    try:
        return PerfAnalyzerClient(tools.perf_analyzer(), spec.name, concurrency).check(), None
    except (MissingToolError, TidescaleError) as exc:
        if kind == "perf_analyzer":
            raise MissingToolError(f"{exc} ({tools.SETUP_HINT})") from exc
        return LoadgenClient(spec), str(exc)
