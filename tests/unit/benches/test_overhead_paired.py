"""`tidescale bench overhead-paired`'s pure parts: the slot order, the interval, the judged goal, the
page, the plot and bad input (the real replicas run in tests/integration/test_bench_overhead.py)."""

from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tidescale import cli
from tidescale.benches import overhead as ov
from tidescale.benches import overhead_paired as op
from tidescale.contracts.errors import UsageError


def pair(traced: tuple[float, float], untraced: tuple[float, float], slot: int = 0) -> op.PairRound:
    """A round from (CPU s, requests) per side."""
    return op.PairRound(op.Side(*traced), op.Side(*untraced), 25.0, slot, "2.51.0")


def test_the_traced_slot_alternates_abba() -> None:
    assert [op.traced_slot(r) for r in range(8)] == [0, 1, 1, 0, 0, 1, 1, 0]


def test_a_rounds_added_cpu_is_the_difference_of_the_sides_per_request() -> None:
    r = pair((5.5, 25_000), (5.0, 25_000))
    assert r.traced.cpu_us_per_request == pytest.approx(220.0)
    assert r.added_us == pytest.approx(20.0)
    assert pair((5.5, 25_000), (5.0, 0)).added_us is None  # a side that served nothing says nothing


def test_the_interval_is_students_t_over_the_rounds() -> None:
    mean, half = op.interval([10.0, 12.0, 14.0])  # sd 2, sem 2/sqrt(3), t(2) 4.303
    assert mean == pytest.approx(12.0)
    assert half == pytest.approx(4.303 * 2 / math.sqrt(3))
    assert op.interval([5.0]) is None
    _, wide = op.interval([float(v) for v in range(20)])  # beyond the table: t(10), a little wider
    assert wide == pytest.approx(2.228 * float(np.std(range(20), ddof=1)) / math.sqrt(20))


@pytest.mark.parametrize(("added", "met"), [
    ([4.0, 5.0, 6.0, 5.0], True),     # 5 ± 1.3: under 10
    ([14.0, 15.0, 16.0, 15.0], False),  # 15 ± 1.3: over
    ([2.0, 18.0, 6.0, 14.0], None),   # 10 ± 11.6: straddles
])
def test_the_goal_is_judged_on_the_whole_interval(added: list[float], met: bool | None) -> None:
    rounds = [pair((0.200 + a * 1e-6, 1.0), (0.200, 1.0), op.traced_slot(k)) for k, a in enumerate(added)]
    out = op.summarise(rounds, [])
    assert out["added_cpu_us_per_request"] == pytest.approx(sum(added) / len(added), abs=0.01)
    assert out["met"] is met
    assert [r["traced_slot"] for r in out["rounds"]] == [0, 1, 1, 0]


def test_a_summary_without_two_rounds_judges_nothing_and_keeps_the_crashes() -> None:
    failure = ov.ModeFailure("tritonserver 2.51.0 died (signal 11); perf_analyzer stopped during the run.", 0.0)
    out = op.summarise([pair((5.5, 25_000), (5.0, 25_000))], [failure])
    assert out["added_cpu_us_per_request"] is None and out["met"] is None
    assert out["crashes"] == 1 and "signal 11" in out["crash_errors"][0]


def result_of(rounds: list[op.PairRound], failures: list[ov.ModeFailure] | None = None,
              more: dict[str, list[op.PairRound]] | None = None) -> dict[str, object]:
    """A run's result: otlp-10 from *rounds*, and *more* modes by name."""
    by_mode = {"otlp-10": rounds, **(more or {})}
    modes = [{"mode": name, "trace_rate": mode.rate, "tracing": mode.tracing,
              **op.summarise(done, failures or [] if name == "otlp-10" else [])}
             for name, done in by_mode.items() for mode in [op.check_paired_mode(name)]]
    return {"benchmark": "overhead-paired", "client": "perf_analyzer",
            "client_settings": {"version": "2.51.0", "concurrency": 8}, "client_fallback_reason": None,
            "requests_per_replica_per_round": 25_000, "rounds_asked": len(rounds), "warmup_requests": 500,
            "model": "ctr_ranker", "cpu_count": 2, "triton_version": "2.51.0", "wall_s": 300.0,
            "goal_mode": "otlp-10", "goal_us": 10.0, "modes": modes}


def test_the_page_lists_every_round_and_the_verdict_with_its_interval() -> None:
    rounds = [pair((5.0 + 0.375 * k / 4, 25_000), (5.0, 25_000), op.traced_slot(k)) for k in range(1, 5)]
    cheap = [pair((5.0 + a / 1e6 * 25_000, 25_000), (5.0, 25_000), op.traced_slot(k)) for k, a in enumerate([2, 3])]
    page = op.markdown(result_of(rounds, more={"otlp-100": cheap}))
    assert page.count("\n| ") == 1 + 2 + 1 + 6  # the summary (header, two modes), the rounds (header, six)
    assert "| otlp-10 | 4 | 209.4 | 200.0 | +9.4 ± 7.7 µs |" in page
    assert "| otlp-100 | 2 | 202.5 | 200.0 | +2.5 ± 6.3 µs |" in page
    assert "| otlp-10 | 1 | 1 | 25.0 | 25,000 | 203.8 | 25,000 | 200.0 | +3.8 |" in page
    assert "Triton's added CPU ≤ 10 µs per request: +9.4 ± 7.7 µs: not judged (the interval straddles 10 µs)" in page
    doc = json.loads(page.split("```json\n")[1].split("```")[0])
    assert doc["modes"][0]["met"] is None and len(doc["modes"][0]["rounds"]) == 4


def test_the_page_says_met_and_tells_crashes() -> None:
    rounds = [pair((5.0 + a / 1e6 * 25_000, 25_000), (5.0, 25_000), op.traced_slot(k))
              for k, a in enumerate([4.0, 5.0, 6.0])]
    failure = ov.ModeFailure("tritonserver 2.51.0 died (signal 6, corrupted double-linked list); the run.", 0.0)
    page = op.markdown(result_of(rounds, [failure]))
    assert "+5.0 ± 2.5 µs: met" in page
    assert "`otlp-10`: Triton crashed or stopped answering in 1 attempt(s) (tritonserver 2.51.0 died (signal 6" in page


def test_plot_draws_the_rounds_and_the_interval(tmp_path: Path) -> None:
    rounds = [pair((5.0 + a / 1e6 * 25_000, 25_000), (5.0, 25_000), op.traced_slot(k))
              for k, a in enumerate([4.0, 9.0, 6.0])]
    op.plot(result_of(rounds, more={"tracefile-10": rounds[:2]}), tmp_path / "paired.png")
    assert (tmp_path / "paired.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_only_traced_modes_can_be_paired_with_none() -> None:
    assert op.check_paired_mode("OTLP-100").name == "otlp-100"
    assert op.check_paired_mode("tracefile-10").tracing == "tracefile"
    assert [m.name for m in op.check_paired_modes(["otlp-10,otlp-100", "otlp-10", "tracefile-10"])] == [
        "otlp-10", "otlp-100", "tracefile-10"]
    with pytest.raises(UsageError, match="traces nothing"):
        op.check_paired_mode("summaries")
    with pytest.raises(UsageError, match="traces nothing"):
        op.check_paired_modes(["otlp-10", "none"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--mode", "none"], "mode 'none' traces nothing"),
    (["--mode", "otlp-x"], "the trace rate 'x' is not a whole number"),
    (["--rounds", "1"], "--rounds must be >= 2"),
    (["--requests", "0"], "--requests must be >= 1, got 0"),
    (["--client", "curl"], "unknown client 'curl'"),
    (["--concurrency", "0"], "--concurrency must be >= 1"),
])
def test_paired_bad_input_exits_2_before_starting_anything(argv: list[str], message: str,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def no_servers(*_: object, **__: object) -> None:
        raise AssertionError("started a server on bad input")

    monkeypatch.setattr(op, "pair_round", no_servers)
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "overhead-paired", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


class FakeReplica:
    """A replica seen through the functions `_both` calls: its client serves *step* requests every 10 ms,
    and with *dies_after* it stops answering after that many served."""

    def __init__(self, name: str, step: float, dies_after: float | None = None) -> None:
        self.name, self.step, self.dies_after = name, step, dies_after
        self.served = 0.0
        self.process = None
        self.stop = threading.Event()  # ends its client early (the test is over)

    @property
    def dead(self) -> bool:
        return self.dies_after is not None and self.served >= self.dies_after


def fake_io(monkeypatch: pytest.MonkeyPatch) -> None:
    def completed(replica: FakeReplica) -> float:
        if replica.dead:
            raise httpx.ConnectError("connection refused")
        return replica.served

    def play(_client: object, replica: FakeReplica, requests: int, _workdir: Path) -> None:
        while not replica.stop.wait(0.01) and replica.served < requests:
            if replica.dead:
                time.sleep(0.2)  # the client's watch notices a little after the metrics stop answering
                raise ov.TritonDied(f"tritonserver died (signal 11); {replica.name}")
            replica.served += replica.step

    monkeypatch.setattr(ov, "completed_requests", completed)
    monkeypatch.setattr(ov, "play", play)
    monkeypatch.setattr(ov, "tree_cpu_seconds", lambda pids: [1.0, 2.0])
    monkeypatch.setattr(op, "WATCH_S", 0.01)


def both(replicas: list[FakeReplica], requests: int, tmp_path: Path) -> op._Reading | None:
    pool = ThreadPoolExecutor(2)
    try:
        return op._both(pool, None, replicas, requests, tmp_path,  # type: ignore[arg-type]
                        op._Reading(0.0, (0.0, 0.0), (0.0, 0.0)))
    finally:
        for replica in replicas:
            replica.stop.set()
        pool.shutdown(wait=True)


def test_the_window_closes_when_either_replica_has_served_its_share(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    fake_io(monkeypatch)
    reading = both([FakeReplica("a", 20.0), FakeReplica("b", 10.0)], 1_000, tmp_path)
    assert reading is not None
    assert reading.requests[0] >= op.WINDOW_SHARE * 1_000 and reading.requests[1] < reading.requests[0]
    assert reading.cpu_s == (1.0, 2.0)


def test_a_replica_that_dies_mid_round_fails_it_as_triton_dying_not_as_a_read_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_io(monkeypatch)
    with pytest.raises(ov.TritonDied, match="signal 11"):
        both([FakeReplica("a", 10.0), FakeReplica("b", 10.0, dies_after=50.0)], 1_000_000, tmp_path)
