"""Per-pod trace files (`<root>/<namespace>_<pod>/trace.json`): attribution to the watched pod, trust,
bounds, and the deletion of gone pods' directories once read."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.clocks import ManualClock
from tests.paths import FIXTURES
from tidescale.contracts.errors import UsageError
from tidescale.contracts.settings import load_settings
from tidescale.exporters.settings import ExporterSettings
from tidescale.exporters.stages import Sender, StageSample
from tidescale.exporters.targets import TargetSet
from tidescale.exporters.tracedir import POD_DIR, GoneLookups, PodTraceDirectory, open_for_writers

REAL = FIXTURES / "triton" / "real-2.51" / "trace_triton.json"  # 200 requests of one model
ROTATED = FIXTURES / "profiles" / "triton" / "trace_timestamps.json.0"  # 20 requests


def _watch(*pods: tuple[str, str, str]) -> dict[tuple[str, str], Sender]:
    return {(ns, pod): (ns, pod, deployment) for ns, pod, deployment in pods}


def _directory(root: Path, watched: dict[tuple[str, str], Sender], clock: ManualClock | None = None,
               **kwargs: object) -> PodTraceDirectory:
    return PodTraceDirectory(root, lambda ns, pod: watched.get((ns, pod)), clock=clock or ManualClock(1000.0),
                             **kwargs)  # type: ignore[arg-type]


def _pod_file(root: Path, name: str, source: Path = REAL, suffix: str = "") -> Path:
    (root / name).mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(source, root / name / f"trace.json{suffix}"))


def test_each_pods_requests_are_attributed_to_that_pod_and_its_deployment(tmp_path: Path) -> None:
    _pod_file(tmp_path, "prod_triton-7d9f-abcde")
    _pod_file(tmp_path, "prod_triton-7d9f-fghij", ROTATED, ".0")
    watched = _watch(("prod", "triton-7d9f-abcde", "triton"), ("prod", "triton-7d9f-fghij", "triton"))
    directory = _directory(tmp_path, watched)
    samples = directory.poll()
    assert Counter((s.namespace, s.pod, s.deployment) for s in samples) == {
        ("prod", "triton-7d9f-abcde", "triton"): 200 * 5, ("prod", "triton-7d9f-fghij", "triton"): 20 * 5}
    assert directory.pods() == ["prod_triton-7d9f-abcde", "prod_triton-7d9f-fghij"]
    assert directory.poll() == []  # nothing new


def test_directories_of_pods_not_watched_here_are_not_read_until_they_are(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Another node's pod (a shared directory), a pod not yet Ready, or a stale directory: left alone."""
    _pod_file(tmp_path, "prod_triton-a")
    watched: dict[tuple[str, str], Sender] = {}
    directory = _directory(tmp_path, watched)
    with caplog.at_level(logging.INFO, "tidescale.exporters.tracedir"):
        assert directory.poll() == [] and directory.poll() == []
    assert sum("not a pod this exporter watches" in r.message for r in caplog.records) == 1  # said once
    watched.update(_watch(("prod", "triton-a", "triton")))
    assert len(directory.poll()) == 200 * 5  # nothing written meanwhile was lost


@pytest.mark.parametrize("name", ["triton-a", "prod_", "_triton-a", "Prod_triton-a", "prod_triton_a", "prod_-a",
                                  "prod_triton-a.", "a" * 64 + "_triton-a", "prod_" + "a" * 254, ".._x", "prod/x"])
def test_names_that_are_not_a_namespace_and_a_pod_are_never_pods(name: str) -> None:
    assert POD_DIR.fullmatch(name) is None


@settings(max_examples=200)
@given(st.text(max_size=80))
def test_a_name_is_read_only_as_the_namespace_and_pod_it_spells(name: str) -> None:
    match = POD_DIR.fullmatch(name)
    if match is not None:
        assert f"{match.group(1)}_{match.group(2)}" == name and "_" not in match.group(1) + match.group(2)


def test_links_files_and_bad_names_in_the_root_are_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    _pod_file(outside, "prod_triton-a")
    root = tmp_path / "root"
    root.mkdir()
    (root / "prod_triton-a").symlink_to(outside / "prod_triton-a")  # would lead out of the root
    (root / "prod_triton-b").write_text("[]")  # a file, not a directory
    _pod_file(root, "Prod_triton-c")
    directory = _directory(root, _watch(("prod", "triton-a", "d"), ("prod", "triton-b", "d"),
                                        ("Prod", "triton-c", "d")))
    assert directory.poll() == [] and directory.pods() == []


def test_pods_beyond_the_limit_wait_for_a_free_place(tmp_path: Path) -> None:
    for name in ("prod_a", "prod_b", "prod_c"):
        _pod_file(tmp_path, name, ROTATED, ".0")
    watched = _watch(("prod", "a", ""), ("prod", "b", ""), ("prod", "c", ""))
    directory = _directory(tmp_path, watched, max_pods=2)
    assert len(directory.poll()) == 2 * 20 * 5 and directory.pods() == ["prod_a", "prod_b"]
    shutil.rmtree(tmp_path / "prod_a")  # a place frees up
    assert len(directory.poll()) == 20 * 5 and directory.pods() == ["prod_b", "prod_c"]


def test_a_gone_pods_directory_is_deleted_once_read_and_idle(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    _pod_file(tmp_path, "prod_triton-a", ROTATED, ".0")
    watched = _watch(("prod", "triton-a", "triton"))
    directory = _directory(tmp_path, watched, clock, keep_rotations=2, idle_s=600)
    assert len(directory.poll()) == 20 * 5
    del watched[("prod", "triton-a")]  # the pod is gone: its files are still read to the end
    shutil.copy(ROTATED, tmp_path / "prod_triton-a" / "trace.json.1")
    clock.now += 599
    assert len(directory.poll()) == 20 * 5  # growth restarts the idle time
    clock.now += 599
    directory.poll()
    assert (tmp_path / "prod_triton-a").exists()
    clock.now += 1
    directory.poll()
    assert not (tmp_path / "prod_triton-a").exists() and directory.pods() == []
    assert _deleted(directory) == {"read": 1, "gone_unread": 0}


def test_nothing_unread_is_deleted(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    _pod_file(tmp_path, "prod_triton-a", ROTATED, ".0")
    _pod_file(tmp_path, "prod_triton-b", ROTATED, ".0")
    watched = _watch(("prod", "triton-a", ""), ("prod", "triton-b", ""))
    directory = _directory(tmp_path, watched, clock, keep_rotations=2, idle_s=60)
    directory.poll()
    watched.clear()
    clock.now += 61
    # Pod a's file grows after the reader's last read of it: never deleted unread.
    stalled = directory._pods["prod_triton-a"].tailer
    stalled.poll = lambda: []  # type: ignore[method-assign]
    with open(tmp_path / "prod_triton-a" / "trace.json.0", "ab") as fh:
        fh.write(b" ")
    directory.poll()
    assert (tmp_path / "prod_triton-a").exists() and not (tmp_path / "prod_triton-b").exists()


def test_without_keep_rotations_nothing_is_ever_deleted(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    _pod_file(tmp_path, "prod_triton-a", ROTATED, ".0")
    watched = _watch(("prod", "triton-a", ""))
    directory = _directory(tmp_path, watched, clock, idle_s=60)
    directory.poll()
    watched.clear()
    clock.now += 3600
    directory.poll()
    assert (tmp_path / "prod_triton-a" / "trace.json.0").exists() and directory.pods() == ["prod_triton-a"]


def test_a_directory_that_cannot_be_deleted_is_warned_about_once_and_still_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(1000.0)
    _pod_file(tmp_path, "prod_triton-a", ROTATED, ".0")
    watched = _watch(("prod", "triton-a", ""))
    directory = _directory(tmp_path, watched, clock, keep_rotations=2, idle_s=60)
    directory.poll()
    watched.clear()

    def refuse(path: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(shutil, "rmtree", refuse)
    clock.now += 61
    with caplog.at_level(logging.WARNING, "tidescale.exporters.tracedir"):
        directory.poll()
        directory.poll()
    assert sum("cannot delete" in r.message for r in caplog.records) == 1
    shutil.copy(ROTATED, tmp_path / "prod_triton-a" / "trace.json.1")
    assert len(directory.poll()) == 20 * 5


def test_a_missing_root_reads_nothing_and_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = _directory(tmp_path / "absent", {})
    with caplog.at_level(logging.WARNING, "tidescale.exporters.tracedir"):
        assert directory.poll() == [] and directory.poll() == []
    assert sum("cannot list" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize("name", ["", "a/b", ".", ".."])
def test_a_file_name_with_a_path_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="plain file name"):
        _directory(tmp_path, {}, file_name=name)


def test_the_target_set_resolves_watched_pods_with_their_deployment_and_labelled_file_targets(
        tmp_path: Path) -> None:
    targets = tmp_path / "targets.json"
    targets.write_text('[{"targets": ["10.0.0.9:8000"], "labels": {"namespace": "bench", "pod": "replica-0"}}]')
    found = TargetSet(targets_file=targets)
    found.reload_targets_file()
    assert found.pod_sender("bench", "replica-0") == ("bench", "replica-0", "")
    assert found.pod_sender("bench", "replica-1") is None


def test_trace_dir_needs_a_way_to_know_the_pods(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="trace_dir reads the subdirectories of watched pods only"):
        load_settings(ExporterSettings, None, trace_dir=tmp_path)
    ok = load_settings(ExporterSettings, None, trace_dir=tmp_path, kube_namespace="prod", kube_selector="app=triton")
    assert ok.trace_dir == tmp_path and ok.trace_file_name == "trace.json"
    with pytest.raises(UsageError, match="trace_file_name"):
        load_settings(ExporterSettings, None, trace_dir=tmp_path, kube_namespace="p", kube_selector="a=b",
                      trace_file_name="../x")


@pytest.mark.skipif(os.geteuid() != 0, reason="chmod of a root-owned directory needs its owner")
def test_open_for_writers_opens_the_root_and_the_pod_directories_only(tmp_path: Path) -> None:
    root = tmp_path / "traces"
    (root / "prod_triton-a").mkdir(parents=True, mode=0o755)
    (root / "prod_triton-a").chmod(0o755)
    (root / "notes").mkdir(mode=0o700)
    (root / "notes").chmod(0o700)
    assert open_for_writers(root) == 2
    assert (root.stat().st_mode & 0o7777, (root / "prod_triton-a").stat().st_mode & 0o7777) == (0o777, 0o777)
    assert (root / "notes").stat().st_mode & 0o7777 == 0o700
    assert open_for_writers(root) == 0  # idempotent


def test_it_exports_how_many_pod_directories_it_reads_leaves_waiting_and_ignores(tmp_path: Path) -> None:
    """What on-call reads when a pod's latency is missing: its directory waiting, or not a pod's name."""
    _pod_file(tmp_path, "prod_triton-a", ROTATED, ".0")
    _pod_file(tmp_path, "prod_triton-b", ROTATED, ".0")  # not watched here
    _pod_file(tmp_path, "triton-c", ROTATED, ".0")  # a subPathExpr that does not name the namespace
    directory = _directory(tmp_path, _watch(("prod", "triton-a", "")))
    directory.poll()
    family = next(f for f in directory.collect() if f.name == "tidescale_exporter_trace_dirs")
    assert {s.labels["state"]: s.value for s in family.samples} == {"read": 1, "waiting": 1, "ignored": 1}
    assert _deleted(directory) == {"read": 0, "gone_unread": 0}


def _deleted(directory: PodTraceDirectory) -> dict[str, float]:
    """tidescale_exporter_trace_dirs_deleted_total by reason, as exported."""
    family = next(f for f in directory.collect() if f.name == "tidescale_exporter_trace_dirs_deleted")
    return {s.labels["reason"]: s.value for s in family.samples if s.name.endswith("_total")}


def test_open_trace_dir_on_the_command_line_says_what_failed_without_a_traceback(tmp_path: Path) -> None:
    """The chart's init container: a path that cannot be a directory fails with its name, exit 1;
    a missing argument is a usage error, exit 2."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidescale.cli", "exporter", "open-trace-dir", *args],
                              capture_output=True, text=True, timeout=60)

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    failed = run(str(blocker / "traces"))
    assert failed.returncode == 1 and f"cannot open {blocker / 'traces'} to writers" in failed.stderr
    assert "Traceback" not in failed.stderr
    usage = run()
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    done = run(str(tmp_path / "traces"))
    assert done.returncode == 0 and (tmp_path / "traces").is_dir(), done.stderr


def test_a_pods_links_fifos_and_devices_are_refused_and_the_other_pods_still_read(tmp_path: Path) -> None:
    """A pod writes its own directory, so nothing there is trusted: a link would be read from the
    exporter's view of the filesystem (its token, another pod's file), a FIFO's open would wait for
    ever and `/dev/zero` never ends, each stopping every pod's tail on the node for good."""
    clock = ManualClock(1000.0)
    other = _pod_file(tmp_path, "prod_triton-b")
    (tmp_path / "prod_triton-a").mkdir()
    (tmp_path / "prod_triton-a" / "trace.json").symlink_to(other)  # a link, even to a real trace file
    (tmp_path / "prod_triton-a" / "trace.json.0").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "prod_triton-a" / "trace.json.1")
    drops: Counter[str] = Counter()
    watched = _watch(("prod", "triton-a", "triton"), ("prod", "triton-b", "triton"))
    directory = _directory(tmp_path, watched, clock, keep_rotations=2, idle_s=600,
                           on_drop=lambda reason, n: drops.update({reason: n}))
    samples = _poll_within(directory)
    assert Counter(s.pod for s in samples) == {"triton-b": 200 * 5}
    assert drops == {"not_a_regular_file": 3}
    del watched[("prod", "triton-a")]
    clock.now += 600
    _poll_within(directory)  # what can never be read does not keep a gone pod's directory
    assert not (tmp_path / "prod_triton-a").exists() and other.exists()  # the link went, not its target


def test_a_pod_that_makes_a_thousand_files_holds_no_more_than_the_cap(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from tidescale.exporters import tracedir

    monkeypatch.setattr(tracedir, "MAX_POD_FILES", 20)
    (tmp_path / "prod_triton-a").mkdir()
    for i in range(1000):
        (tmp_path / "prod_triton-a" / f"trace.json.{i}").write_bytes(b"[")  # opened, never finished
    _pod_file(tmp_path, "prod_triton-b")
    drops: Counter[str] = Counter()
    directory = _directory(tmp_path, _watch(("prod", "triton-a", "t"), ("prod", "triton-b", "t")),
                           keep_rotations=2, on_drop=lambda reason, n: drops.update({reason: n}))
    assert Counter(s.pod for s in _poll_within(directory)) == {"triton-b": 200 * 5}
    assert len(directory._pods["prod_triton-a"].tailer._files) == 20 and drops == {"too_many_files": 1}


def test_a_pods_requests_held_open_are_bounded_per_pod(tmp_path: Path) -> None:
    """Headers whose stamps never come: each pod holds at most MAX_POD_PENDING, oldest dropped first."""
    from tidescale.exporters.tracedir import MAX_POD_PENDING

    (tmp_path / "prod_triton-a").mkdir()
    headers = ",".join(f'{{"id":{i},"model_name":"m","model_version":1}}' for i in range(1, 1001))
    (tmp_path / "prod_triton-a" / "trace.json").write_text(f"[{headers}]")
    _pod_file(tmp_path, "prod_triton-b")
    directory = _directory(tmp_path, _watch(("prod", "triton-a", "t"), ("prod", "triton-b", "t")))
    assert Counter(s.pod for s in _poll_within(directory)) == {"triton-b": 200 * 5}
    assert len(directory._pods["prod_triton-a"].tailer.entries) == MAX_POD_PENDING < 1000


def _poll_within(directory: PodTraceDirectory, seconds: float = 30.0) -> list[StageSample]:
    """`directory.poll()` in a thread, failing the test (not hanging the suite) if it never returns."""
    result: list[list[StageSample]] = []
    worker = threading.Thread(target=lambda: result.append(directory.poll()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert result, "poll() did not return"
    return result[0]


def test_a_gone_pods_unclosed_backlog_is_read_through_and_its_directory_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod that left more unclosed rotations than a tailer follows at once: while it runs they
    wait (a writer may still close them); once it has been gone for idle_s they count as finished
    when read, so the backlog is read in order, pruned, and the directory deleted with nothing
    unread lost."""
    from tidescale.exporters import tracedir

    monkeypatch.setattr(tracedir, "MAX_POD_FILES", 10)
    clock = ManualClock(1000.0)
    pod = tmp_path / "prod_triton-a"
    pod.mkdir()
    for i in range(50):
        (pod / f"trace.json.{i}").write_bytes(b"[")  # opened, never closed: the pod was killed
    shutil.copy(ROTATED, pod / "trace.json.50")  # the newest holds requests that must be read
    _age(*pod.iterdir())  # written before the pod went (the tailer judges quiet by the files' mtime)
    watched = _watch(("prod", "triton-a", "t"))
    directory = _directory(tmp_path, watched, clock, keep_rotations=2, idle_s=60)
    assert _poll_within(directory) == []
    del watched[("prod", "triton-a")]
    for _ in range(20):  # gone, but not for idle_s yet: nothing unclosed is deleted
        clock.now += 1
        _poll_within(directory)
    assert len(list(pod.iterdir())) == 51
    read: list[StageSample] = []
    for _ in range(30):
        clock.now += 10
        read.extend(_poll_within(directory))
        if not pod.exists():
            break
    assert len(read) == 20 * 5 and not pod.exists() and directory.pods() == []


def _age(*paths: Path, seconds: float = 3600) -> None:
    """Set the files' mtime *seconds* back."""
    then = time.time() - seconds
    for path in paths:
        os.utime(path, (then, then))


def test_a_gone_pods_unclosed_rotation_written_to_lately_is_kept(tmp_path: Path) -> None:
    """Once the pod has been gone for idle_s an unclosed rotation read to its end counts as
    finished, but not one modified within idle_s: a same-name pod (a StatefulSet's) may be writing
    it before the exporter's watch has seen that pod (a restarted Triton starts at `.0` again)."""
    clock = ManualClock(1000.0)
    pod = tmp_path / "prod_triton-0"
    pod.mkdir()
    for i in (2, 3):
        (pod / f"trace.json.{i}").write_bytes(b"[")  # the old pod's, never closed: it was killed
    _age(*pod.iterdir())
    watched = _watch(("prod", "triton-0", "t"))
    directory = _directory(tmp_path, watched, clock, keep_rotations=1, idle_s=60)
    directory.poll()
    del watched[("prod", "triton-0")]
    clock.now += 60
    (pod / "trace.json.0").write_bytes(ROTATED.read_bytes().rstrip()[:-1])  # the new pod's, open
    (pod / "trace.json.1").write_bytes(b"[")
    assert len(directory.poll()) == 20 * 5
    assert sorted(p.name for p in pod.iterdir()) == ["trace.json.0", "trace.json.1", "trace.json.3"]
    _age(pod / "trace.json.1")
    directory.poll()
    assert sorted(p.name for p in pod.iterdir()) == ["trace.json.0", "trace.json.3"]  # .3: the newest is kept


class Lookups:
    """The API server's word on pods: those in *gone* do not exist; every question is recorded.
    `answered`: a GoneLookups that asks it at once, so each answer is there in the poll that asked."""

    def __init__(self, *gone: str) -> None:
        self.gone = set(gone)
        self.asked: list[str] = []
        self.answered = GoneLookups(self, executor=AtOnce())

    def __call__(self, namespace: str, pod: str) -> bool:
        self.asked.append(f"{namespace}_{pod}")
        return f"{namespace}_{pod}" in self.gone


class AtOnce(Executor):
    """Runs each call as it is submitted, on the caller's thread."""

    def submit(self, fn: Callable[..., bool], /, *args: object, **kwargs: object) -> Future[bool]:  # type: ignore[override]
        done: Future[bool] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as exc:
            done.set_exception(exc)
        return done


def test_a_leftover_of_a_gone_pod_is_deleted_unread_after_idle_s_and_a_live_pods_is_kept(tmp_path: Path) -> None:
    """Pods that came and went while no exporter ran here: their directories go once the API server
    says so; a pod that exists (not Ready, or on another node sharing the directory) keeps its own."""
    clock = ManualClock(1000.0)
    _pod_file(tmp_path, "prod_gone-a", ROTATED, ".0")
    _pod_file(tmp_path, "prod_unready-b", ROTATED, ".0")
    lookups = Lookups("prod_gone-a")
    directory = _directory(tmp_path, {}, clock, keep_rotations=2, idle_s=600, gone=lookups.answered)
    assert directory.poll() == [] and lookups.asked == []  # first seen: timed, nothing asked
    clock.now += 599
    directory.poll()
    assert lookups.asked == [] and (tmp_path / "prod_gone-a").exists()
    clock.now += 1
    assert directory.poll() == []  # never read: its requests would count as served now
    assert not (tmp_path / "prod_gone-a").exists() and (tmp_path / "prod_unready-b").exists()
    assert sorted(lookups.asked) == ["prod_gone-a", "prod_unready-b"]
    assert _deleted(directory) == {"read": 0, "gone_unread": 1}
    assert directory._counts["waiting"] == 1
    clock.now += 599
    directory.poll()
    assert len(lookups.asked) == 2  # a live pod's is asked about again only after idle_s
    clock.now += 1
    directory.poll()
    assert lookups.asked[2:] == ["prod_unready-b"] and (tmp_path / "prod_unready-b").exists()


@pytest.mark.parametrize("how", ["no lookup", "no pruning"])
def test_leftovers_stay_without_the_api_servers_word_or_without_leave_to_delete(tmp_path: Path, how: str) -> None:
    clock = ManualClock(1000.0)
    _pod_file(tmp_path, "prod_gone-a", ROTATED, ".0")
    lookups = Lookups("prod_gone-a")
    kwargs: dict[str, object] = {"keep_rotations": 2} if how == "no lookup" else {"gone": lookups.answered}
    directory = _directory(tmp_path, {}, clock, idle_s=60, **kwargs)
    for _ in range(3):
        directory.poll()
        clock.now += 3600
    assert (tmp_path / "prod_gone-a").exists() and lookups.asked == []


def test_api_lookups_per_poll_are_bounded(tmp_path: Path) -> None:
    from tidescale.exporters.tracedir import MAX_GONE_CHECKS

    clock = ManualClock(1000.0)
    for i in range(12):
        (tmp_path / f"prod_gone-{i}").mkdir()
    lookups = Lookups(*(f"prod_gone-{i}" for i in range(12)))
    directory = _directory(tmp_path, {}, clock, keep_rotations=2, idle_s=60, gone=lookups.answered)
    directory.poll()
    clock.now += 60
    left = []
    for _ in range(3):
        directory.poll()
        left.append(len(list(tmp_path.iterdir())))
    assert left == [12 - MAX_GONE_CHECKS, 12 - 2 * MAX_GONE_CHECKS, 0] and len(lookups.asked) == 12


class HungApiServer:
    """A lookup that waits until `release` is set, as one does on an API server slow or away;
    then the pods in *gone* are gone."""

    def __init__(self, *gone: str) -> None:
        self.gone = set(gone)
        self.started: list[str] = []
        self.release = threading.Event()

    def __call__(self, namespace: str, pod: str) -> bool:
        self.started.append(f"{namespace}_{pod}")
        self.release.wait(30)
        return f"{namespace}_{pod}" in self.gone


def _poll_until(directory: PodTraceDirectory, done: Callable[[], bool]) -> None:
    """Poll until *done* (the lookup thread answers within milliseconds once released)."""
    for _ in range(500):
        directory.poll()
        if done():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the lookup thread never answered")


def test_a_hung_api_server_never_holds_up_the_live_pods_traces(tmp_path: Path) -> None:
    """The poll that finds a leftover due asks about it and returns at once with the live pods'
    samples; the leftover goes at a later poll, once the answer has come."""
    clock = ManualClock(1000.0)
    (tmp_path / "prod_gone-a").mkdir()
    api = HungApiServer("prod_gone-a")
    directory = _directory(tmp_path, _watch(("prod", "triton-a", "triton")), clock, keep_rotations=2,
                           idle_s=60, gone=api)
    try:
        directory.poll()
        clock.now += 60
        _pod_file(tmp_path, "prod_triton-a")
        polled: list[list[StageSample]] = []
        poll = threading.Thread(target=lambda: polled.append(directory.poll()), daemon=True)
        poll.start()
        poll.join(10)  # a poll waiting on the lookup would wait the whole 30 s
        assert polled and len(polled[0]) == 200 * 5, "the poll waited for the API server"
        assert (tmp_path / "prod_gone-a").exists() and directory.gone is not None and directory.gone.waiting() == 1
    finally:
        api.release.set()
    _poll_until(directory, lambda: not (tmp_path / "prod_gone-a").exists())
    assert api.started == ["prod_gone-a"] and _deleted(directory)["gone_unread"] == 1
    directory.close()


def test_unanswered_lookups_are_bounded_and_asked_on_one_thread(tmp_path: Path) -> None:
    from tidescale.exporters.tracedir import MAX_GONE_CHECKS

    clock = ManualClock(1000.0)
    for i in range(12):
        (tmp_path / f"prod_gone-{i}").mkdir()
    api = HungApiServer(*(f"prod_gone-{i}" for i in range(12)))
    directory = _directory(tmp_path, {}, clock, keep_rotations=2, idle_s=60, gone=api)
    assert directory.gone is not None
    try:
        directory.poll()
        clock.now += 60
        for _ in range(3):
            directory.poll()
            assert directory.gone.waiting() == MAX_GONE_CHECKS
        assert len(api.started) <= 1  # one lookup at a time, however many wait
    finally:
        api.release.set()
    _poll_until(directory, lambda: not any(tmp_path.iterdir()))
    assert sorted(api.started) == sorted(f"prod_gone-{i}" for i in range(12))
    directory.close()


def test_an_answer_about_a_pod_watched_meanwhile_is_dropped(tmp_path: Path) -> None:
    """A same-name pod (a StatefulSet's) that became watched while the API server was asked about
    its predecessor: the old 404 must not delete the new pod's directory."""
    clock = ManualClock(1000.0)
    _pod_file(tmp_path, "prod_triton-0", ROTATED, ".0")
    api = HungApiServer("prod_triton-0")
    watched: dict[tuple[str, str], Sender] = {}
    directory = _directory(tmp_path, watched, clock, keep_rotations=2, idle_s=60, gone=api)
    assert directory.gone is not None
    try:
        directory.poll()
        clock.now += 60
        directory.poll()
        assert directory.gone.waiting() == 1
        watched.update(_watch(("prod", "triton-0", "triton")))
        assert len(directory.poll()) == 20 * 5 and directory.gone.waiting() == 0
    finally:
        api.release.set()
    watched.clear()  # unwatched again: a started pod's directory is judged by its files, not the old answer
    for _ in range(3):
        clock.now += 1
        directory.poll()
    assert (tmp_path / "prod_triton-0").exists() and _deleted(directory)["gone_unread"] == 0
    directory.close()


def test_a_forgotten_question_not_yet_started_is_cancelled() -> None:
    api = HungApiServer()
    lookups = GoneLookups(api)
    try:
        assert lookups.answer("prod", "a") is None and lookups.answer("prod", "b") is None
        waiting_b = lookups._asked[("prod", "b")]
        lookups.forget("prod", "b")  # queued behind a's hung lookup
        assert waiting_b.cancelled() and lookups.waiting() == 1
    finally:
        api.release.set()
        lookups.close()
    assert "prod_b" not in api.started


def test_a_lookup_that_raises_counts_as_not_gone(caplog: pytest.LogCaptureFixture) -> None:
    def broken(namespace: str, pod: str) -> bool:
        raise RuntimeError("no client")

    lookups = GoneLookups(broken, executor=AtOnce())
    with caplog.at_level(logging.WARNING, "tidescale.exporters.tracedir"):
        assert lookups.answer("prod", "a") is False
    assert "cannot ask whether pod prod/a exists: no client" in caplog.text and lookups.waiting() == 0


def test_no_question_goes_out_after_close() -> None:
    """A poll racing the exporter's shutdown must not start the lookup thread again."""
    api = HungApiServer()
    api.release.set()
    lookups = GoneLookups(api)
    lookups.close()
    assert lookups.answer("prod", "a") is None and lookups.waiting() == 0
    assert lookups._owned is None and api.started == []
