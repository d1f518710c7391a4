"""The trace files of every Triton pod on a node, from one directory with a subdirectory per pod.

Why a directory per pod: Triton's trace file (`mode=triton`) costs Triton a fraction of what its
OpenTelemetry exporter does (docs/exporter.md), but the file names no pod. With the chart's
`exporter.traceFiles`, every node's exporter mounts one hostPath directory, and each Triton pod
mounts the same directory with `subPathExpr: $(POD_NAMESPACE)_$(POD_NAME)`. The kubelet makes
the pod's subdirectory, so the name reaches the exporter without Triton knowing it, and samples
are attributed to the pod (and its Deployment) as OTLP spans are by their sender's address.

Trust follows the OTLP path's rule: a subdirectory is read only once its pod is one this exporter
watches. Names that are not `<namespace>_<pod>`, other nodes' pods (where the directory is
shared), and the leftovers of pods gone before the exporter started are never read.

Cleanup: Triton never deletes its files, and the kubelet leaves a hostPath subdirectory behind
when its pod goes. Where the exporter may delete (`keep_rotations` set), a subdirectory it has
read, whose pod it no longer watches, and whose files are all read and unchanged for `idle_s`,
is deleted: nothing unread is lost, and a node that churns pods does not fill up. Once its pod has
been gone for `idle_s`, no writer will close its rotations, so one read to its end counts as
finished: a gone pod that left more unclosed rotations than a tailer follows at once is read and
pruned through to the end instead of holding its directory and its place for ever.

Leftovers: a subdirectory this exporter never read, because its pod came and went while no exporter
ran on the node (an exporter upgrade) or was never Ready, would stay for ever. With *gone* (the API
server's word that the pod does not exist) and `keep_rotations` set, one that no watched pod owns
is deleted unread once it has been seen for `idle_s` and its pod is gone. Unread, because its
traces read now would count as requests served now, under a pod that no longer exists. The API
server is asked on a thread of its own (`GoneLookups`): a slow or unreachable one never holds up
the reading of the live pods' traces.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tidescale.contracts import catalog
from tidescale.exporters.selfmetrics import labelled_counter
from tidescale.exporters.stages import Sender, StageSample
from tidescale.exporters.tracefile import TraceFileTailer

log = logging.getLogger(__name__)

# A namespace is a DNS label, a pod name a DNS subdomain; neither holds `_`, so the split is exact.
POD_DIR = re.compile(r"([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)_([a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)")
MAX_PODS = 1000  # pods tailed at once by one exporter (a node runs far fewer Triton pods)
MAX_NOTED = 1000  # subdirectories named in the log as not read (then no more are named)
MAX_LEFTOVERS = 1000  # unwatched subdirectories timed at once towards their deletion
MAX_GONE_CHECKS = 5  # API lookups asked per poll, and awaiting their answer at once
# Rotations followed at once per pod. Pruning keeps a pod's directory at a few files; a backlog
# (at log-frequency 100, Triton rotates once a second at 100 traced requests a second) is read
# oldest first, 100 at a time, as what was read is deleted. A pod that makes a million files costs
# one listing a poll, and no more memory than 100 files.
MAX_POD_FILES = 100
# Requests awaiting the rest of their entries, per pod. Triton writes each trace's entries together
# (in its real 2.51 files at most one request is ever open), so this bounds what a pod's writer can
# make the exporter hold: 1,000 pods x 200, not 1,000 x `join_max_pending`.
MAX_POD_PENDING = 200
IDLE_S = 600.0

Resolve = Callable[[str, str], Sender | None]
Gone = Callable[[str, str], bool]


@dataclass
class _PodFiles:
    tailer: TraceFileTailer
    alive: float  # monotonic time the pod was last watched or its files last grew
    watched: float  # monotonic time the pod was last watched


def pod_of(name: str) -> tuple[str, str]:
    """The (namespace, pod) a `<namespace>_<pod>` subdirectory names (`POD_DIR`: neither name can
    hold a `_`, so the pod's `subPathExpr` cannot be read two ways)."""
    namespace, pod = name.split("_", 1)
    return namespace, pod


class GoneLookups:
    """Asks *gone* about pods on one thread of its own, and hands the answers over when they have
    come. Why not ask in the poll: a lookup may take its whole timeout (an API server slow or away),
    and the poll that asks is the one that reads every live pod's traces. At most `per_poll` new
    questions a poll (`new_poll`) and `max_waiting` unanswered at once, so a node full of
    leftovers cannot flood the API server."""

    def __init__(self, gone: Gone, *, executor: Executor | None = None, per_poll: int = MAX_GONE_CHECKS,
                 max_waiting: int = MAX_GONE_CHECKS) -> None:
        """*executor*: where lookups run (None: a thread of its own, started at the first question)."""
        self._gone = gone
        self._executor = executor
        self._owned: ThreadPoolExecutor | None = None
        self.per_poll = per_poll
        self.max_waiting = max_waiting
        self._asked: dict[tuple[str, str], Future[bool]] = {}
        self._asks_left = per_poll
        self._closed = False

    def new_poll(self) -> None:
        self._asks_left = self.per_poll

    def answer(self, namespace: str, pod: str) -> bool | None:
        """Whether the pod is gone, once the answer has come (the question is then forgotten, so
        the next call asks again); None while it is awaited, or where no question can go out now
        (after `close` none ever does: a poll racing the shutdown must not start the thread again)."""
        key = (namespace, pod)
        asked = self._asked.get(key)
        if asked is None:
            if self._closed or self._asks_left <= 0 or len(self._asked) >= self.max_waiting:
                return None
            self._asks_left -= 1
            asked = self._asked[key] = self._run().submit(self._gone, namespace, pod)
        if not asked.done():
            return None
        del self._asked[key]
        try:
            return asked.result()
        except Exception as exc:  # *gone* should not raise; if it does, the pod is not known to be gone
            log.warning("cannot ask whether pod %s/%s exists: %s", namespace, pod, exc)
            return False

    def forget(self, namespace: str, pod: str) -> None:
        """Drop a question whose answer no longer matters (its directory went, or its pod is watched
        now); an answer given before a same-name pod appeared must not delete that pod's directory.
        One not yet started is cancelled, so forgotten questions do not queue behind a hung lookup."""
        asked = self._asked.pop((namespace, pod), None)
        if asked is not None:
            asked.cancel()

    def waiting(self) -> int:
        return len(self._asked)

    def close(self) -> None:
        """Stop the lookup thread without waiting for a lookup under way (it ends at its timeout)."""
        self._closed = True
        if self._owned is not None:
            self._owned.shutdown(wait=False, cancel_futures=True)
            self._owned = None
            self._asked.clear()

    def _run(self) -> Executor:
        if self._executor is not None:
            return self._executor
        if self._owned is None:
            self._owned = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-dir-pod-lookups")
        return self._owned


class PodTraceDirectory:
    """Tails `<root>/<namespace>_<pod>/<file_name>` (and rotations) of each watched pod. A
    collector too: how many subdirectories it reads, and how many it leaves waiting or ignores,
    so that a Triton pod whose files are not read shows (a subPathExpr naming it otherwise)."""

    def __init__(self, root: Path, resolve: Resolve, *, file_name: str = "trace.json", max_pending: int = 20_000,
                 on_drop: Callable[[str, int], None] | None = None, keep_rotations: int | None = None,
                 max_pods: int = MAX_PODS, idle_s: float = IDLE_S, gone: Gone | GoneLookups | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """*resolve(namespace, pod)*: the watched pod's (namespace, pod, deployment), or None.
        *gone(namespace, pod)*: True only where the pod surely no longer exists (None: never); it may
        block for seconds, so it is asked through `GoneLookups` (or pass one, to choose its thread)."""
        if not file_name or "/" in file_name or file_name in (".", ".."):
            raise ValueError(f"trace file name must be a plain file name, got {file_name!r}")
        self.root = root
        self.resolve = resolve
        self.file_name = file_name
        self.max_pending = max_pending
        self.on_drop = on_drop or (lambda reason, n: None)
        self.keep_rotations = keep_rotations
        self.max_pods = max_pods
        self.idle_s = idle_s
        self.clock = clock
        self.gone = gone if gone is None or isinstance(gone, GoneLookups) else GoneLookups(gone)
        self._pods: dict[str, _PodFiles] = {}
        # Unwatched subdirectories -> when first seen, or last found to be a live pod's.
        self._leftovers: dict[str, float] = {}
        self._undeletable: set[str] = set()  # subdirectories whose deletion failed (warned once each)
        self._noted: set[str] = set()
        self._counts = {"read": 0, "waiting": 0, "ignored": 0}
        self._deleted = {"read": 0, "gone_unread": 0}

    def pods(self) -> list[str]:
        """The subdirectories being tailed."""
        return sorted(self._pods)

    def poll(self) -> list[StageSample]:
        now = self.clock()
        present = self._listing()
        for gone in set(self._pods) - present:
            del self._pods[gone]  # removed by someone else: its unfinished requests go with it
        for gone in set(self._leftovers) - present:
            self._forget_leftover(gone)
        self._undeletable &= present
        samples: list[StageSample] = []
        waiting = 0
        if self.gone is not None:
            self.gone.new_poll()
        for name in sorted(present):
            namespace, pod_name = pod_of(name)
            sender = self.resolve(namespace, pod_name)  # once a poll: None when the pod is not watched
            pod = self._pods.get(name) or self._start(name, sender, now)
            if pod is None:
                deleted = sender is None and self._leftover(name, now)
                waiting += not deleted
                continue
            self._forget_leftover(name)
            watched = sender is not None
            if watched:
                pod.watched = now
            pod.tailer.writer_gone = now - pod.watched >= self.idle_s
            new = pod.tailer.poll()
            samples.extend(new)
            if new or watched:
                pod.alive = now
            elif self.keep_rotations is not None and name not in self._undeletable and now - pod.alive >= self.idle_s:
                self._remove(name, pod)
        self._counts.update(read=len(self._pods), waiting=waiting)
        return samples

    def close(self) -> None:
        """Stop asking the API server (the exporter's shutdown)."""
        if self.gone is not None:
            self.gone.close()

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        family = catalog.get("tidescale_exporter_trace_dirs")
        gauge = GaugeMetricFamily(family.name, family.help, labels=["state"])
        for state, n in self._counts.items():
            gauge.add_metric([state], n)
        yield gauge
        yield labelled_counter("tidescale_exporter_trace_dirs_deleted_total", ["reason"],
                               {(reason,): n for reason, n in self._deleted.items()})

    def _listing(self) -> set[str]:
        """The names of the subdirectories that can be pods' (no links: they lead out of the root)."""
        out: set[str] = set()
        ignored = 0
        try:
            with os.scandir(self.root) as listing:
                for entry in listing:
                    if POD_DIR.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                        out.add(entry.name)
                    else:
                        ignored += 1
                        self._note(entry.name, "not a <namespace>_<pod> directory")
        except OSError as exc:
            if "" not in self._noted:
                self._noted.add("")
                log.warning("cannot list the trace directory %s: %s", self.root, exc)
        self._counts["ignored"] = ignored
        return out

    def _start(self, name: str, sender: Sender | None, now: float) -> _PodFiles | None:
        """Tail a watched pod's subdirectory (*sender*: the pod as `resolve` named it, None if not watched)."""
        namespace, pod = pod_of(name)
        if sender is None:
            self._note(name, "not a pod this exporter watches")
            return None
        if len(self._pods) >= self.max_pods:
            self._note(name, f"over the limit of {self.max_pods} pods")
            return None
        self._noted.discard(name)
        tailer = TraceFileTailer(self.root / name / self.file_name, min(self.max_pending, MAX_POD_PENDING),
                                 self.on_drop, keep_rotations=self.keep_rotations, sender=sender,
                                 follow_links=False, max_files=MAX_POD_FILES, gone_quiet_s=self.idle_s)
        self._pods[name] = started = _PodFiles(tailer, now, now)
        log.info("tailing the trace files of pod %s/%s", namespace, pod)
        return started

    def _leftover(self, name: str, now: float) -> bool:
        """Time an unwatched subdirectory; once seen for `idle_s`, delete it once the API server
        says its pod is gone (`GoneLookups`: the answer may come polls later). Whether it was deleted."""
        if self.gone is None or self.keep_rotations is None or name in self._undeletable:
            return False
        since = self._leftovers.get(name)
        if since is None:
            if len(self._leftovers) < MAX_LEFTOVERS:
                self._leftovers[name] = now
            return False
        if now - since < self.idle_s:
            return False
        namespace, pod = pod_of(name)
        verdict = self.gone.answer(namespace, pod)
        if verdict is None:  # asked, not answered yet (or no more questions this poll)
            return False
        if not verdict:
            self._leftovers[name] = now  # a live pod's (not Ready, another node's): ask again later
            return False
        del self._leftovers[name]
        try:
            shutil.rmtree(self.root / name)
        except OSError as exc:
            self._undeletable.add(name)
            log.warning("cannot delete the trace directory of gone pod %s/%s, never read: %s", namespace, pod, exc)
            return False
        self._noted.discard(name)
        self._deleted["gone_unread"] += 1
        log.info("deleted the trace directory of pod %s/%s unread: the pod is gone and no exporter read it "
                 "while it ran (read now, its requests would count as served now)", namespace, pod)
        return True

    def _remove(self, name: str, pod: _PodFiles) -> None:
        """Delete a gone pod's subdirectory once every file in it has been read."""
        if not pod.tailer.caught_up():
            return
        try:
            shutil.rmtree(self.root / name)
        except OSError as exc:
            self._undeletable.add(name)
            log.warning("cannot delete the trace directory of a gone pod, %s: %s", self.root / name, exc)
            return
        del self._pods[name]
        self._deleted["read"] += 1
        log.info("deleted the trace directory of gone pod %s after reading it", name)

    def _forget_leftover(self, name: str) -> None:
        if self._leftovers.pop(name, None) is not None and self.gone is not None:
            self.gone.forget(*pod_of(name))

    def _note(self, name: str, why: str) -> None:
        """Say once per name why a subdirectory is not read (bounded: a hostile writer can make many)."""
        if name in self._noted or len(self._noted) >= MAX_NOTED:
            return
        self._noted.add(name)
        log.info("not reading %s in the trace directory: %s", name, why)


def open_for_writers(root: Path) -> int:
    """chmod 0777 *root* (made if missing) and its pod subdirectories; how many were changed.

    Why: the kubelet makes a hostPath directory root-owned 0755, and a pod's `subPathExpr`
    subdirectory with its parent's mode. Triton pods running as another user could not write there,
    and the exporter (non-root) could not delete the rotations it has read. Opened once, every
    subdirectory the kubelet makes afterwards is open too. Not sticky: the exporter deletes files
    that Triton owns."""
    root.mkdir(parents=True, exist_ok=True)
    changed = 0
    for path in [root, *(e for e in root.iterdir() if POD_DIR.fullmatch(e.name) and e.is_dir() and not e.is_symlink())]:
        if path.stat().st_mode & 0o7777 != 0o777:
            path.chmod(0o777)
            changed += 1
    return changed
