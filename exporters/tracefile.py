"""Triton trace files (`mode=triton`, `level=TIMESTAMPS`) → stage samples, tailed incrementally.

Triton writes one JSON array per file: headers `{"id","model_name","model_version"[,"parent_id"]}`
and stamps `{"id","timestamps":[{"name","ns"}]}`, with `file.0`, `file.1`, … when rotating
(fixture `profiles/triton/trace_timestamps.json.0`). The tailer remembers a byte offset per
file and decodes complete objects as they appear, so a growing file is read once; a request
becomes samples when its REQUEST_END arrives. Ensemble/BLS children have their own id and
header (with `parent_id`), so each is attributed to its own model. Ids are scoped per file
(a rewritten file — a restarted server — starts its ids afresh).

Why two readers: Triton writes every entry in one shape, and decoding a whole run of complete
entries at once into `UsualEntry` records (msgspec, in C) costs a fraction of decoding them one by
one with the json module. `JsonArrayStream` takes that road for every complete run it finds; any
run that does not decode exactly (another shape, a wrong type, broken UTF-8, junk) goes to the
general reader, which skips what it cannot use entry by entry, so the two give the same samples.
"""

from __future__ import annotations

import codecs
import errno
import heapq
import json
import logging
import os
import stat as stat_mode
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from tidescale.exporters.stages import (
    MAX_STAMP_NS,
    NO_SENDER,
    STAMP_NAMES,
    Sender,
    StageSample,
    measure_stages,
    stage_samples,
)

log = logging.getLogger(__name__)

MAX_ENTRY_CHARS = 64 * 1024
READ_CHUNK_BYTES = 1 << 20
# What one poll reads of one file, at most: Triton writes about 1.5 kB per trace, so about 1.5 MB a
# second at 1,000 traced requests a second; 16 MiB a second per file is ten times that. Beyond it the
# rest waits for the next poll, so a huge (or sparse) file in a pod's directory slows its own reading
# and cannot hold the other pods' for hours.
READ_BUDGET_BYTES = 16 << 20
MAX_PROBLEMS_SAID = 10  # files not read that one tailer logs; the rest are counted only
NOT_REGULAR = "not_a_regular_file"
_SEPARATORS = " \t\r\n,[]"
_SEPARATOR_BYTES = _SEPARATORS.encode()
# Triton starts every entry with its id, and nested stamps with their name: a run of complete
# entries ends just before the last `,{"id"`, or at the `}]` that closes a finished file.
_NEXT_ENTRY = b'},{"id"'
_ARRAY_END = b"}]"


@dataclass
class _Request:
    model: str | None = None
    version: str = ""
    stamps: dict[str, int] = field(default_factory=dict)


class _UsualStamp(msgspec.Struct, gc=False):
    name: str
    ns: int


class UsualEntry(msgspec.Struct, gc=False):
    """A header or stamp entry in the shape Triton writes; decoding fails on any other type, so
    such a run goes to the general reader. Holds only decoded JSON, so it cannot be in a cycle."""

    id: int | str
    model_name: str | None = None
    model_version: Any = ""
    timestamps: list[_UsualStamp] | None = None


_USUAL_RUN = msgspec.json.Decoder(list[UsualEntry])


def entry_id(entry: Any) -> int | str | None:
    """The trace id of a header or stamp entry; None for anything else (the one rule for both readers)."""
    if isinstance(entry, dict):
        ident = entry.get("id")
        if isinstance(ident, int | str) and not isinstance(ident, bool):
            return ident
    return None


def entry_model(entry: dict[str, Any]) -> tuple[str, str] | None:
    """(model, version) of a header entry; None for a stamp entry."""
    if isinstance(entry.get("model_name"), str):
        return entry["model_name"], str(entry.get("model_version", ""))
    return None


def entry_stamps(entry: dict[str, Any]) -> dict[str, int]:
    """The well-formed `{name: ns}` stamps of one entry; malformed or out-of-range stamps are skipped."""
    stamps = entry.get("timestamps")
    if not isinstance(stamps, list):
        return {}
    return {s["name"]: s["ns"] for s in stamps
            if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("ns"), int)
            and not isinstance(s.get("ns"), bool) and 0 <= s["ns"] <= MAX_STAMP_NS}


class TraceEntries:
    """Joins header and timestamp entries by trace id; bounded, oldest requests evicted first."""

    def __init__(self, max_pending: int = 20_000, on_drop: Callable[[str, int], None] | None = None,
                 sender: Sender = NO_SENDER) -> None:
        """*sender*: (namespace, pod, deployment) that every sample is attributed to (a pod's own file)."""
        self.max_pending = max_pending
        self.on_drop = on_drop or (lambda reason, n: None)
        self.sender = sender
        self._pending: OrderedDict[Any, _Request] = OrderedDict()
        # Ids completed recently: frontend stamps (HTTP_SEND_*) may follow REQUEST_END.
        self._done: OrderedDict[Any, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def forget(self, source: Any) -> None:
        """Forget the ids of *source*: a restarted Triton numbers its traces from 1 again."""
        for table in (self._pending, self._done):
            for key in [k for k in table if k[0] == source]:
                del table[key]

    def add(self, entry: Any, source: Any = None) -> list[StageSample]:
        """Samples of the request this entry completes (usually none); ids are scoped by *source*.
        *entry* is a `UsualEntry` or any decoded JSON value (what is not an entry is counted)."""
        if type(entry) is UsualEntry:
            ident: int | str | None = entry.id
            header = None if entry.model_name is None else (entry.model_name, str(entry.model_version))
            stamps = {s.name: s.ns for s in entry.timestamps
                      if s.name in STAMP_NAMES and 0 <= s.ns <= MAX_STAMP_NS} if entry.timestamps else {}
        else:
            ident = entry_id(entry)
            if ident is None:
                self.on_drop("malformed_entry", 1)
                return []
            header = entry_model(entry)
            stamps = {name: ns for name, ns in entry_stamps(entry).items() if name in STAMP_NAMES}
        if header is None and not stamps:
            return []  # the frontend's stamps only (5 of Triton 2.51's 13 entries): no stage reads them
        key = (source, ident)
        if key in self._done:
            return []
        request = self._pending.get(key)
        if request is None:
            request = self._pending[key] = _Request()
            if len(self._pending) > self.max_pending:
                self._pending.popitem(last=False)
                self.on_drop("join_buffer_full", 1)
        if header is not None:
            request.model, request.version = header
        request.stamps.update(stamps)
        if request.model is not None and "REQUEST_END" in request.stamps:
            del self._pending[key]
            self._done[key] = None
            if len(self._done) > self.max_pending:
                self._done.popitem(last=False)
            measured = measure_stages(request.stamps)
            if isinstance(measured, str):  # as the OTLP path: the request is rejected whole, and counted
                self.on_drop(measured, 1)
                return []
            return stage_samples(request.model, request.version, measured, *self.sender)
        return []


class JsonArrayStream:
    """Decodes the entries of a JSON array as its bytes arrive in pieces: each complete run of
    entries at once as `UsualEntry` records where it decodes exactly, otherwise (and for the rest)
    one JSON value at a time."""

    def __init__(self, on_drop: Callable[[str, int], None] | None = None) -> None:
        self._decoder = json.JSONDecoder()
        self._rest = b""  # bytes not yet decoded: a partial entry, usually
        self.on_drop = on_drop or (lambda reason, n: None)

    def feed(self, data: bytes) -> Iterator[Any]:
        buf = self._rest + data
        start = _skip_separators(buf)
        end = _usual_run_end(buf)
        if end > start:
            try:
                run = _USUAL_RUN.decode(b"[" + buf[start:end] + b"]")
            except (ValueError, RecursionError):  # msgspec.DecodeError, or UnicodeDecodeError on broken UTF-8
                pass  # not exactly Triton's shape, or not UTF-8: the general reader takes all of it
            else:
                yield from run
                buf = buf[end:]
        yield from self._general(buf)

    def _general(self, buf: bytes) -> Iterator[Any]:
        """JSON values one at a time; what cannot be decoded is skipped once it is too long to be
        an entry still being written. Keeps the undecoded rest (and any split UTF-8 character)."""
        text, used = codecs.utf_8_decode(buf, "replace", False)
        pos = 0
        while True:
            while pos < len(text) and text[pos] in _SEPARATORS:
                pos += 1
            if pos >= len(text):
                break
            try:
                obj, end = self._decoder.raw_decode(text, pos)
            except (json.JSONDecodeError, RecursionError):
                if len(text) - pos <= MAX_ENTRY_CHARS:
                    break  # probably an object still being written
                nxt = text.find("{", pos + 1)
                self.on_drop("malformed_entry", 1)
                pos = nxt if nxt >= 0 else len(text)
                continue
            pos = end
            yield obj
        self._rest = text[pos:].encode("utf-8") + buf[used:]


def _skip_separators(buf: bytes) -> int:
    return len(buf) - len(buf.lstrip(_SEPARATOR_BYTES))


def _usual_run_end(buf: bytes) -> int:
    """Where the last complete entry ends if the text is Triton's (0 when none is complete); the
    decode checks it, since the marks can also sit inside a string."""
    closed = buf.rstrip()
    if closed.endswith(_ARRAY_END):
        return len(closed) - 1
    return buf.rfind(_NEXT_ENTRY) + 1


@dataclass
class _FileState:
    offset: int = 0
    inode: int = -1
    stream: JsonArrayStream | None = None
    closed: bool = False  # the last non-blank byte read is the `]` that closes Triton's array


class TraceFileTailer:
    """Follows `path` and its rotations `path.0`, `path.1`, …; `poll()` returns new samples."""

    def __init__(self, path: Path, max_pending: int = 20_000,
                 on_drop: Callable[[str, int], None] | None = None, *, keep_rotations: int | None = None,
                 sender: Sender = NO_SENDER, follow_links: bool = True, max_files: int | None = None,
                 gone_quiet_s: float = 0.0) -> None:
        """*keep_rotations*: None keeps every rotation, as Triton does; N deletes finished rotations
        beyond the newest N once they are read (`_prune`). *sender*: the pod the file belongs to.
        *follow_links*: False where the files' writer is not trusted (a pod's own directory), so a
        link there is refused instead of read from this process' view of the filesystem.
        *max_files*: how many rotations to follow at once, where the writer is not trusted: the
        oldest, so a backlog is read in order as pruning deletes what was read (the newest where
        nothing is pruned); beyond it, nothing is read or deleted until the rest is.
        *gone_quiet_s*: once `writer_gone`, how long a rotation must have gone unmodified to count
        as finished without its closing `]`."""
        if keep_rotations is not None and keep_rotations < 1:
            raise ValueError(f"keep_rotations must be at least 1, got {keep_rotations}")
        self.path = path
        self.on_drop = on_drop or (lambda reason, n: None)
        self.entries = TraceEntries(max_pending, self.on_drop, sender)
        self.keep_rotations = keep_rotations
        self._files: dict[str, _FileState] = {}  # by path
        self._unprunable: set[str] = set()  # rotations whose deletion failed (warned once each)
        self._follow_links = follow_links
        # Paths there now that could not be read, and why (`not_a_regular_file`, `unreadable_file`):
        # each counted once until it is read, and said for the first MAX_PROBLEMS_SAID only.
        self._problems: dict[str, str] = {}
        self._problems_said = 0
        self.max_files = max_files
        self._over_files = False  # the last listing held more rotations than max_files (said once)
        self._prune_refused = False  # the directory refuses deletions: pruning is off
        # No writer will add to these files again (their pod is gone): a rotation read to its end and
        # unmodified for gone_quiet_s is finished, closed or not. Otherwise a gone pod's unclosed
        # rotations beyond max_files would wait unseen for ever, and so would its directory
        # (`PodTraceDirectory`). The quiet time guards against a writer the caller does not know of:
        # a same-name pod (a StatefulSet's) writing before the exporter's watch has seen it.
        self.writer_gone = False
        self.gone_quiet_s = gone_quiet_s

    def files(self) -> list[Path]:
        """The trace file and its rotations, oldest rotation first, the base file last."""
        return [Path(name) for name in self._present()]

    def _present(self) -> list[str]:
        if self.max_files is None:
            return trace_files(self.path)
        newest = self.keep_rotations is None
        listed = trace_files(self.path, self.max_files + 1, newest=newest)
        base = [listed.pop()] if listed and listed[-1] == str(self.path) else []
        over = len(listed) > self.max_files
        if over:
            del listed[0 if newest else -1]
            if not self._over_files:
                self.on_drop("too_many_files", 1)
                log.warning("more than %d rotations of %s: following the %s %d only", self.max_files,
                            self.path, "newest" if newest else "oldest", self.max_files)
        self._over_files = over
        return listed + base

    def caught_up(self) -> bool:
        """Every file there is has been read to its last byte (what a poll just saw); a file that
        vanishes meanwhile counts as not read, so the answer errs towards keeping files."""
        present = self._present()  # (also says whether rotations beyond max_files wait unseen)
        return not self._over_files and all(self._finished_with(path) for path in present)

    def _finished_with(self, path: str) -> bool:
        """Read to its end, or never to be read: not a regular file."""
        if self._problems.get(path) == NOT_REGULAR:
            return True
        state = self._files.get(path)
        return state is not None and _read_to_end(path, state)

    def poll(self) -> list[StageSample]:
        samples: list[StageSample] = []
        present = self._present()
        there = set(present)
        for gone in set(self._files) - there:
            self._forget_file(gone)
        for gone in set(self._problems) - there:  # bounded by what is there now
            del self._problems[gone]
        for path in present:
            samples.extend(self._read_new(path))
        if self.keep_rotations is not None:
            self._prune([p for p in present if p != str(self.path)])
        return samples

    def _prune(self, rotations: list[str]) -> None:
        """Delete the rotations older than the newest `keep_rotations` that are finished: read to
        their last byte, and their JSON array closed (a restarted Triton writes `file.0` again
        while older, higher-numbered rotations remain, so the index alone does not say finished);
        once `writer_gone`, read to their last byte and quiet for `gone_quiet_s` is enough (an unclosed
        rotation written to since is some writer's still). Nothing unread is ever deleted; a
        failed deletion is warned about once and left. Where the directory refuses deletions (no
        write access, a read-only mount), pruning stops at the first refusal: every later rotation
        would be refused too, and each warned about and remembered."""
        assert self.keep_rotations is not None
        if self._prune_refused:
            return
        for path in rotations[:-self.keep_rotations]:
            state = self._files.get(path)
            if state is None or path in self._unprunable:
                continue
            if not (_read_to_end(path, state, self.gone_quiet_s) if self.writer_gone else _finished(path, state)):
                continue
            try:
                os.unlink(path)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    self._prune_refused = True
                    log.warning("cannot delete the finished trace rotation %s: %s; no rotation of %s is deleted "
                                "from now on: give the exporter write access to %s", path, exc, self.path,
                                self.path.parent)
                    return
                self._unprunable.add(path)
                log.warning("cannot delete the finished trace rotation %s: %s", path, exc)
                continue
            self._forget_file(path)

    def _forget_file(self, path: str) -> None:
        """Drop a file that is gone (deleted by anyone, or pruned here) and its unfinished requests."""
        del self._files[path]
        self.entries.forget(path)

    def _read_new(self, path: str) -> list[StageSample]:
        try:
            stat = os.stat(path) if self._follow_links else os.lstat(path)
        except OSError:
            return []
        if not stat_mode.S_ISREG(stat.st_mode):
            self._problem(path, NOT_REGULAR, _not_regular_kind(stat.st_mode))
            return []
        state = self._files.get(path)
        if state is None:
            state = self._files[path] = _FileState()
        elif stat.st_ino == state.inode and stat.st_size == state.offset:
            return []  # nothing new (every finished rotation, each second): not even opened
        if stat.st_ino != state.inode or stat.st_size < state.offset:
            if state.stream is not None:
                self.entries.forget(path)
            state.offset, state.inode, state.stream = 0, stat.st_ino, JsonArrayStream(self.on_drop)
            state.closed = False
        assert state.stream is not None
        samples: list[StageSample] = []
        try:
            with _open_regular(path, self._follow_links) as fh:
                fh.seek(state.offset)
                # Up to the size seen at open (a file that grows faster than it is read still ends a
                # poll), and no more than the budget.
                left = min(os.fstat(fh.fileno()).st_size - state.offset, READ_BUDGET_BYTES)
                while left > 0 and (chunk := fh.read(min(READ_CHUNK_BYTES, left))):
                    left -= len(chunk)
                    state.offset += len(chunk)
                    if tail := chunk[-64:].rstrip() or chunk.rstrip():  # (the whole chunk only when blank-ended)
                        state.closed = tail.endswith(b"]")
                    for entry in state.stream.feed(chunk):
                        samples.extend(self.entries.add(entry, path))
        except _NotRegular as exc:
            self._problem(path, NOT_REGULAR, _not_regular_kind(exc.mode))
        except OSError as exc:
            self._problem(path, "unreadable_file", f"it cannot be read ({exc.strerror})")
        else:
            self._problems.pop(path, None)
        return samples

    def _problem(self, path: str, reason: str, why: str) -> None:
        """A file not read: counted and said once per path and reason, not once a poll. A FIFO (whose
        open would wait for a writer for ever), a device (`/dev/zero` never ends), a directory or,
        where links are not followed, a link is never opened at all."""
        if self._problems.get(path) == reason:
            return
        self._problems[path] = reason
        self.on_drop(reason, 1)
        self._problems_said += 1
        if self._problems_said > MAX_PROBLEMS_SAID:
            return  # a writer that makes a million FIFOs floods no log: they are still counted
        more = (f"; further files beside {self.path} that cannot be read are only counted (spans_dropped_total)"
                if self._problems_said == MAX_PROBLEMS_SAID else "")
        log.warning("not reading the trace file %s: %s%s", path, why, more)


def _not_regular_kind(mode: int) -> str:
    return "it is a link" if stat_mode.S_ISLNK(mode) else f"it is not a regular file (mode {stat_mode.filemode(mode)})"


class _NotRegular(OSError):
    """The path turned into something else than a regular file between its stat and its open."""

    def __init__(self, mode: int) -> None:
        super().__init__(f"not a regular file (mode {stat_mode.filemode(mode)})")
        self.mode = mode


def _open_regular(path: str, follow_links: bool) -> BinaryIO:
    """*path* opened for binary reading only if it is a regular file: without blocking (a FIFO
    swapped in after the stat would wait for a writer for ever) and, unless *follow_links*, without
    following a link (`_NotRegular` for either)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a link, and links are not followed
            raise _NotRegular(stat_mode.S_IFLNK) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat_mode.S_ISREG(mode):
        os.close(fd)
        raise _NotRegular(mode)
    return os.fdopen(fd, "rb")


def trace_files(path: Path, limit: int | None = None, *, newest: bool = False) -> list[str]:
    """*path* and its rotations `path.0`, `path.1`, … that exist, oldest rotation first, the base
    file last, from one directory listing: Triton never deletes a rotation, so there can be
    thousands, and a tailer lists them every second. With *limit*, only that many rotations, the
    oldest (or the *newest*): kept in a heap while listing, so a directory of a million names costs
    one pass and never a list of a million."""
    base, prefix = path.name, path.name + "."
    rotated: list[tuple[int, str]] = []  # with a limit, a heap whose top is the first to give up
    sign = 1 if newest else -1
    has_base = False
    try:
        with os.scandir(path.parent) as listing:
            for entry in listing:
                name = entry.name
                if name == base:
                    has_base = True
                elif name.startswith(prefix):
                    index = name[len(prefix):]
                    if index.isascii() and index.isdigit():
                        if limit is None:
                            rotated.append((int(index), entry.path))
                        elif len(rotated) < limit:
                            heapq.heappush(rotated, (sign * int(index), entry.path))
                        else:
                            heapq.heappushpop(rotated, (sign * int(index), entry.path))
    except OSError:
        return []
    if limit is not None:
        rotated = [(sign * index, name) for index, name in rotated]
    out = [p for _, p in sorted(rotated)]
    if has_base:
        out.append(str(path))
    return out


def _read_to_end(path: str, state: _FileState, quiet_s: float | None = None) -> bool:
    """The file the reads saw (its inode), with no byte beyond them, and (*quiet_s*) not modified
    for that long: judged by a stat, without opening it."""
    try:
        stat = os.stat(path)
    except OSError:
        return False
    return (stat.st_ino == state.inode and stat.st_size == state.offset
            and (quiet_s is None or time.time() - stat.st_mtime >= quiet_s))


def _finished(path: str, state: _FileState) -> bool:
    """Read to its last byte, and ending with the `]` that closes Triton's array: a rotation that
    stays open (a restarted Triton's `file.0`, beyond the newest N) is checked every poll."""
    return state.closed and _read_to_end(path, state)
