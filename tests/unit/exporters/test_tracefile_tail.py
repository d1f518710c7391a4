"""Triton `mode=triton` trace files: stage durations, incremental tailing, rotation, bad input."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import threading
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.hostile import TIMESTAMPS
from tests.paths import FIXTURES
from tidescale.contracts.errors import UsageError
from tidescale.contracts.settings import load_settings
from tidescale.exporters import tracefile
from tidescale.exporters.settings import ExporterSettings
from tidescale.exporters.tracefile import JsonArrayStream, TraceEntries, TraceFileTailer

REAL = FIXTURES / "triton" / "real-2.51" / "trace_triton.json"
ROTATED = FIXTURES / "profiles" / "triton" / "trace_timestamps.json.0"


def test_real_trace_file_gives_every_stage_of_every_request(tmp_path: Path) -> None:
    shutil.copy(REAL, tmp_path / "trace.json")
    tailer = TraceFileTailer(tmp_path / "trace.json")
    samples = tailer.poll()
    assert Counter(s.stage for s in samples) == {
        s: 200 for s in ("request", "queue", "compute_input", "compute_infer", "compute_output")}
    assert len(tailer.entries) == 0  # late HTTP_SEND stamps do not leave requests behind
    entries = json.loads(REAL.read_text())
    stamps = {t["name"]: t["ns"] for e in entries if e["id"] == 1 for t in e.get("timestamps", [])}
    first = next(s for s in samples if s.stage == "queue")
    assert first.seconds == pytest.approx((stamps["COMPUTE_START"] - stamps["QUEUE_START"]) / 1e9)
    assert tailer.poll() == []  # nothing new


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=180_000), max_size=6))
def test_any_split_of_a_growing_file_gives_the_same_samples(cuts: list[int]) -> None:
    data = REAL.read_bytes()
    stream, entries = JsonArrayStream(), TraceEntries()
    samples = []
    last = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        for entry in stream.feed(data[last:cut]):
            samples += entries.add(entry)
        last = max(last, cut)
    whole = TraceEntries()
    expected = [s for e in json.loads(data) for s in whole.add(e)]
    assert samples == expected


def test_rotated_files_and_rewrites(tmp_path: Path) -> None:
    base = tmp_path / "trace.json"
    shutil.copy(ROTATED, tmp_path / "trace.json.0")
    (tmp_path / "trace.json.backup").write_text("[]")  # not a rotation
    tailer = TraceFileTailer(base)
    assert tailer.files() == [tmp_path / "trace.json.0"]
    first = tailer.poll()
    assert len(first) == 20 * 5 and {s.model for s in first} == {"ranker"}
    shutil.copy(REAL, tmp_path / "trace.json.1")
    assert len(tailer.poll()) == 200 * 5
    # Triton restarts and rewrites file .0 with fewer bytes: it is read again from the start.
    (tmp_path / "trace.json.0").write_text(json.dumps(json.loads(ROTATED.read_text())[:26]))
    again = tailer.poll()
    assert len(again) == 2 * 5 and {s.model for s in again} == {"ranker"}


def test_ensemble_children_are_their_own_model() -> None:
    entries = TraceEntries()
    out = []
    for e in (
        {"id": 1, "model_name": "pipeline", "model_version": 1},
        {"id": 2, "model_name": "tokenizer", "model_version": 3, "parent_id": 1},
        {"id": 2, "timestamps": [{"name": "REQUEST_START", "ns": 10}, {"name": "QUEUE_START", "ns": 11},
                                 {"name": "COMPUTE_START", "ns": 20}, {"name": "REQUEST_END", "ns": 40}]},
        {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 0}, {"name": "REQUEST_END", "ns": 100}]},
    ):
        out += entries.add(e)
    assert {(s.model, s.version, s.stage) for s in out} == {
        ("tokenizer", "3", "request"), ("tokenizer", "3", "queue"), ("pipeline", "1", "request")}


def test_pending_requests_are_bounded() -> None:
    drops: Counter[str] = Counter()
    entries = TraceEntries(max_pending=10, on_drop=lambda r, n: drops.update({r: n}))
    for i in range(100):
        entries.add({"id": i, "model_name": "m", "model_version": 1})
    assert len(entries) == 10 and drops["join_buffer_full"] == 90


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_stream_never_crashes(data: bytes) -> None:
    entries = TraceEntries()
    stream = JsonArrayStream()
    for entry in stream.feed(data):
        entries.add(entry)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["id", "model_name", "model_version", "timestamps", "name", "ns"]),
                                st.none() | st.integers() | st.text(max_size=5)
                                | st.lists(st.dictionaries(st.sampled_from(["name", "ns"]),
                                                           st.integers() | st.text(max_size=12), max_size=2),
                                           max_size=3), max_size=4), max_size=10))
def test_fuzz_entries_never_crash(items: list[dict[str, object]]) -> None:
    entries = TraceEntries()
    for item in items:
        for sample in entries.add(item):
            assert sample.seconds >= 0


def test_malformed_text_is_skipped_and_counted() -> None:
    drops: Counter[str] = Counter()
    stream = JsonArrayStream(on_drop=lambda r, n: drops.update({r: n}))
    junk = b'[{"id": 1, "model_name": ' + b"x" * 70_000 + b'}, {"id": 2}]'
    got = list(stream.feed(junk))
    assert got == [{"id": 2}] and drops["malformed_entry"] >= 1


@pytest.mark.parametrize(("name", "ns"), TIMESTAMPS)
def test_both_trace_readers_skip_the_same_hostile_stamps(name: str, ns: object) -> None:
    """The exporter's tailer and the fidelity benchmark's reader share one rule for entries and stamps."""
    from tidescale.benches.tracefile import parse_trace
    from tidescale.exporters.tracefile import TraceEntries, entry_stamps

    good = {"REQUEST_START": 1_000, "QUEUE_START": 2_000, "COMPUTE_START": 3_000}
    entries = [{"id": 1, "model_name": "m", "model_version": "1"},
               {"id": 1, "timestamps": [{"name": k, "ns": v} for k, v in good.items()]
                + [{"name": "REQUEST_END", "ns": ns}]}]
    valid = isinstance(ns, int) and 0 <= ns < 2**64 and ns >= 3_000
    a_stamp = isinstance(ns, int) and 0 <= ns < 2**64
    assert ("REQUEST_END" in entry_stamps(entries[1])) == a_stamp
    drops: Counter[str] = Counter()
    joined = TraceEntries(on_drop=lambda r, n: drops.update({r: n}))
    completed = [s for e in entries for s in joined.add(e)]
    # a stamp that is no uint64 is skipped (the request never ends); one that makes a stage longer
    # than an hour rejects the request whole, counted as the OTLP path counts it
    measurable = a_stamp and isinstance(ns, int) and 0 <= ns - 1_000 <= 3600 * 10**9
    assert bool(completed) == measurable
    assert drops == (Counter({"duration_too_long": 1}) if a_stamp and not measurable else Counter())
    assert len(parse_trace(json.dumps(entries))) == (1 if valid else 0)


def test_a_request_with_one_reversed_stage_is_rejected_whole_and_counted() -> None:
    drops: Counter[str] = Counter()
    entries = TraceEntries(on_drop=lambda r, n: drops.update({r: n}))
    out = []
    for e in ({"id": 1, "model_name": "m", "model_version": 1},
              {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 10}, {"name": "QUEUE_START", "ns": 12},
                                       {"name": "COMPUTE_START", "ns": 11}, {"name": "REQUEST_END", "ns": 40}]}):
        out += entries.add(e)
    assert out == [] and drops == {"end_before_start": 1} and len(entries) == 0


def test_a_boolean_id_is_not_an_entry() -> None:
    from tidescale.exporters.tracefile import entry_id

    assert entry_id({"id": True}) is None and entry_id({"id": 7}) == 7 and entry_id({"id": "a"}) == "a"


def _triton_text(entries: list[object]) -> bytes:
    """JSON as Triton writes its trace file: compact, one array."""
    return json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()


def _fed(data: bytes, cuts: list[int]) -> list[object]:
    """The samples of *data* fed to one stream in the pieces *cuts* make."""
    stream, entries = JsonArrayStream(), TraceEntries()
    samples: list[object] = []
    last = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        for entry in stream.feed(data[last:cut]):
            samples += entries.add(entry)
        last = max(last, cut)
    return samples


def test_triton_s_own_output_is_decoded_in_runs() -> None:
    from tidescale.exporters.tracefile import UsualEntry

    decoded = list(JsonArrayStream().feed(REAL.read_bytes()))
    assert decoded and all(type(e) is UsualEntry for e in decoded)
    assert len(decoded) == len(json.loads(REAL.read_text()))


_ODD_VALUES = st.sampled_from([None, True, -5, 2**64, 1.5, "12", [], {}, "},{\"id\":9}]", "\u00e9\u4e2d"])


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=2_599),
                          st.sampled_from(["id", "model_name", "model_version", "timestamps", "ns", "name"]),
                          _ODD_VALUES), max_size=4),
       st.lists(st.integers(min_value=1, max_value=180_000), max_size=5))
def test_odd_entries_give_what_the_general_reader_gives(edits: list[tuple[int, str, object]],
                                                        cuts: list[int]) -> None:
    """A run with any entry of another shape (a wrong type, a stamp out of range, a mark inside a
    string) falls back to the general reader: the samples are those of the decoded entries."""
    entries = json.loads(REAL.read_text())
    for index, key, value in edits:
        entry = entries[index]
        stamps = entry.get("timestamps")
        if key in ("ns", "name") and isinstance(stamps, list) and stamps and isinstance(stamps[0], dict):
            stamps[0][key] = value
        else:
            entry[key] = value
    whole = TraceEntries()
    expected = [s for e in entries for s in whole.add(e)]
    assert _fed(_triton_text(entries), cuts) == expected


def test_a_split_multibyte_name_survives_the_cut() -> None:
    entries = [{"id": 1, "model_name": "mod\u00e8le\u4e2d", "model_version": 1},
               {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 5}]},
               {"id": 1, "timestamps": [{"name": "REQUEST_END", "ns": 9}]}]
    data = _triton_text(entries)
    inside = data.index("\u4e2d".encode()) + 1  # between the bytes of one character
    assert [s.model for s in _fed(data, [inside])] == ["mod\u00e8le\u4e2d"]
    assert [s.model for s in _fed(data, [inside, inside + 1, len(data) - 1])] == ["mod\u00e8le\u4e2d"]


def test_frontend_stamps_alone_hold_nothing() -> None:
    """HTTP_* and INFER_RESPONSE_COMPLETE feed no stage, so they neither wait nor evict a request."""
    drops: Counter[str] = Counter()
    entries = TraceEntries(max_pending=10, on_drop=lambda r, n: drops.update({r: n}))
    for i in range(100):
        entries.add({"id": i, "timestamps": [{"name": "HTTP_RECV_START", "ns": i}]})
        entries.add({"id": i, "timestamps": [{"name": "INFER_RESPONSE_COMPLETE", "ns": i + 1}]})
    assert len(entries) == 0 and not drops


def test_files_with_nothing_new_are_not_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton never deletes a rotation: a second poll stats each file and opens only those that grew."""
    for i in range(30):
        shutil.copy(ROTATED, tmp_path / f"trace.json.{i}")
    base = tmp_path / "trace.json"
    base.write_bytes(b"[")  # Triton has opened it, no entry yet
    tailer = TraceFileTailer(base)
    assert len(tailer.poll()) == 30 * 20 * 5
    opened: list[str] = []

    open_regular = tracefile._open_regular

    def counting_open(path: str, follow_links: bool) -> object:
        opened.append(str(path))
        return open_regular(path, follow_links)

    monkeypatch.setattr(tracefile, "_open_regular", counting_open)
    assert tailer.poll() == [] and opened == []
    base.write_bytes(REAL.read_bytes())
    assert len(tailer.poll()) == 200 * 5 and opened == [str(base)]


def _general_only(data: bytes, cuts: list[int], monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """`_fed` with the run decoder switched off: the entry-by-entry reader alone."""
    with monkeypatch.context() as patch:
        patch.setattr(tracefile, "_usual_run_end", lambda buf: 0)
        return _fed(data, cuts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(edits=[(32, 0, b"\x80")], cuts=[])  # broken UTF-8 in a run: msgspec raises UnicodeDecodeError
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=40_000), st.integers(min_value=0, max_value=3),
                          st.binary(min_size=1, max_size=3)), max_size=4),
       st.lists(st.integers(min_value=1, max_value=45_000), max_size=5))
def test_corrupted_bytes_give_what_the_general_reader_gives(
        monkeypatch: pytest.MonkeyPatch, edits: list[tuple[int, int, bytes]], cuts: list[int]) -> None:
    """Bytes replaced, inserted or cut anywhere in Triton's text (a torn write, a bit flip, junk):
    never an exception, and the same samples as the entry-by-entry reader alone."""
    data = bytearray(REAL.read_bytes()[:40_000] + b"]")
    for at, how, junk in edits:
        at = min(at, len(data))
        if how == 0:
            data[at:at + len(junk)] = junk
        elif how == 1:
            data[at:at] = junk
        else:
            del data[at:at + len(junk) * how]
    assert _fed(bytes(data), cuts) == _general_only(bytes(data), cuts, monkeypatch)


def _rotations(tmp_path: Path, n: int) -> TraceFileTailer:
    for i in range(n):
        shutil.copy(ROTATED, tmp_path / f"trace.json.{i}")
    return TraceFileTailer(tmp_path / "trace.json", keep_rotations=2)


def test_finished_rotations_beyond_the_newest_n_are_deleted_once_read(tmp_path: Path) -> None:
    tailer = _rotations(tmp_path, 5)
    assert len(tailer.poll()) == 5 * 20 * 5  # every rotation read before any is deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.3", "trace.json.4"]
    shutil.copy(ROTATED, tmp_path / "trace.json.5")
    assert len(tailer.poll()) == 20 * 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.4", "trace.json.5"]
    assert set(tailer._files) == {str(tmp_path / "trace.json.4"), str(tmp_path / "trace.json.5")}


def test_an_unfinished_or_unread_rotation_is_never_deleted(tmp_path: Path) -> None:
    """A restarted Triton writes file.0 again while older rotations have higher numbers: an open
    array is not finished, whatever its number; and a rotation that could not be read stays."""
    tailer = _rotations(tmp_path, 4)
    (tmp_path / "trace.json.0").write_text(ROTATED.read_text().rstrip().removesuffix("]"))
    (tmp_path / "trace.json.1").unlink()
    (tmp_path / "trace.json.1").mkdir()  # cannot be read
    tailer.poll()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"trace.json.{i}" for i in range(4)]
    (tmp_path / "trace.json.0").write_text(ROTATED.read_text())  # Triton closes it (rewritten: read again)
    tailer.poll()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.1", "trace.json.2", "trace.json.3"]


def test_an_open_rotation_beyond_the_newest_n_is_not_reopened_each_poll(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a rotation is finished comes from what was read: polls that find no new bytes open nothing."""
    tailer = _rotations(tmp_path, 4)
    (tmp_path / "trace.json.0").write_text(ROTATED.read_text().rstrip().removesuffix("]") + "\n")
    tailer.poll()
    opened: list[str] = []
    real_open = tracefile._open_regular
    monkeypatch.setattr(tracefile, "_open_regular", lambda path, *a: opened.append(path) or real_open(path, *a))
    for _ in range(3):
        assert tailer.poll() == []
    assert opened == [] and (tmp_path / "trace.json.0").exists()
    with (tmp_path / "trace.json.0").open("a") as fh:
        fh.write("]")  # Triton closes it: read once, then deleted
    tailer.poll()
    assert opened == [str(tmp_path / "trace.json.0")] and not (tmp_path / "trace.json.0").exists()


def test_without_a_limit_every_rotation_stays(tmp_path: Path) -> None:
    for i in range(4):
        shutil.copy(ROTATED, tmp_path / f"trace.json.{i}")
    TraceFileTailer(tmp_path / "trace.json").poll()
    assert len(list(tmp_path.iterdir())) == 4


def test_a_failed_deletion_is_warned_once_and_the_tail_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    tried: list[str] = []

    def read_only(path: str) -> None:
        tried.append(path)
        raise OSError(errno.EROFS, "Read-only file system", path)

    monkeypatch.setattr(tracefile.os, "unlink", read_only)
    tailer = _rotations(tmp_path, 3)
    assert len(tailer.poll()) == 3 * 20 * 5
    shutil.copy(REAL, tmp_path / "trace.json")
    assert len(tailer.poll()) == 200 * 5
    for i in (3, 4):  # more rotations: a directory that refuses deletions is not asked again
        shutil.copy(ROTATED, tmp_path / f"trace.json.{i}")
    assert len(tailer.poll()) == 2 * 20 * 5
    warned = [r for r in caplog.records if "cannot delete the finished trace rotation" in r.getMessage()]
    assert len(warned) == 1 and "Read-only" in warned[0].getMessage() and "write access" in warned[0].getMessage()
    assert len(tried) == 1 and len(list(tmp_path.iterdir())) == 6


def test_a_rotation_that_cannot_be_deleted_for_its_own_reason_does_not_stop_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_unlink = os.unlink

    def busy_first(path: str) -> None:
        if path.endswith(".0"):
            raise OSError(errno.EBUSY, "Device or resource busy", path)
        real_unlink(path)

    monkeypatch.setattr(tracefile.os, "unlink", busy_first)
    tailer = _rotations(tmp_path, 4)
    tailer.poll()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.0", "trace.json.2", "trace.json.3"]


def test_keeping_no_rotation_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_rotations must be at least 1"):
        TraceFileTailer(tmp_path / "trace.json", keep_rotations=0)
    cfg = tmp_path / "exporter.yaml"
    for bad in ("0", "-3", "many"):
        cfg.write_text(f"exporter:\n  trace_file_keep_rotations: {bad}\n")
        with pytest.raises(UsageError, match="exporter.trace_file_keep_rotations"):
            load_settings(ExporterSettings, cfg)


def test_a_rotation_that_grew_since_it_was_read_is_read_again_before_it_goes(tmp_path: Path) -> None:
    tailer = _rotations(tmp_path, 3)
    first = tmp_path / "trace.json.0"
    entries = json.loads(ROTATED.read_text())
    first.write_text(json.dumps(entries[:26]))
    read_new, grown = tailer._read_new, []

    def then_grows(path: str) -> list[object]:
        out = read_new(path)
        if path == str(first) and not grown:
            with first.open("a") as fh:  # more bytes after the read (same inode, still a closed array)
                fh.write(" " * 10 + "]")
            grown.append(path)
        return out  # type: ignore[return-value]

    tailer._read_new = then_grows  # type: ignore[method-assign]
    tailer.poll()
    assert first.exists()  # not read to its last byte: kept
    tailer.poll()
    assert not first.exists()


def test_a_fifo_or_a_device_is_refused_not_waited_on_for_ever(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A FIFO's open waits for a writer, and /dev/zero never ends: either would stop every trace file's
    tail for good. Links are followed here (the operator's own path), to a regular file only."""
    os.mkfifo(tmp_path / "trace.json.0")
    (tmp_path / "trace.json.1").symlink_to("/dev/zero")
    (tmp_path / "trace.json.2").mkdir()
    (tmp_path / "elsewhere.json").write_bytes(ROTATED.read_bytes())
    (tmp_path / "trace.json.3").symlink_to(tmp_path / "elsewhere.json")
    shutil.copy(REAL, tmp_path / "trace.json")
    drops: Counter[str] = Counter()
    tailer = TraceFileTailer(tmp_path / "trace.json", on_drop=lambda reason, n: drops.update({reason: n}))
    with caplog.at_level("WARNING", "tidescale.exporters.tracefile"):
        assert len(_poll_within(tailer)) == (20 + 200) * 5
        assert _poll_within(tailer) == []
    assert drops == {"not_a_regular_file": 3}  # once each, not once a poll
    assert sum("not a regular file" in r.getMessage() for r in caplog.records) == 3
    assert tailer.caught_up()  # what can never be read does not hold the rest back
    (tmp_path / "trace.json.0").unlink()
    shutil.copy(ROTATED, tmp_path / "trace.json.0")  # a regular file now: read
    assert len(_poll_within(tailer)) == 20 * 5


def test_a_million_fifos_flood_no_log_and_are_forgotten_once_gone(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from tidescale.exporters.tracefile import MAX_PROBLEMS_SAID

    for i in range(MAX_PROBLEMS_SAID + 5):
        os.mkfifo(tmp_path / f"trace.json.{i}")
    drops: Counter[str] = Counter()
    tailer = TraceFileTailer(tmp_path / "trace.json", on_drop=lambda reason, n: drops.update({reason: n}))
    with caplog.at_level("WARNING", "tidescale.exporters.tracefile"):
        _poll_within(tailer)
    assert drops == {"not_a_regular_file": MAX_PROBLEMS_SAID + 5}
    said = [r.getMessage() for r in caplog.records if "not reading" in r.getMessage()]
    assert len(said) == MAX_PROBLEMS_SAID and "only counted" in said[-1]
    for i in range(MAX_PROBLEMS_SAID + 5):
        (tmp_path / f"trace.json.{i}").unlink()
    _poll_within(tailer)
    assert tailer._problems == {}


def test_an_unreadable_file_is_counted_once_and_read_once_it_can_be(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "trace.json"
    shutil.copy(REAL, path)
    drops: Counter[str] = Counter()
    tailer = TraceFileTailer(path, on_drop=lambda reason, n: drops.update({reason: n}))
    real_open = tracefile._open_regular

    def refused(*args: object) -> object:
        raise PermissionError(errno.EACCES, "Permission denied")

    with caplog.at_level("WARNING", "tidescale.exporters.tracefile"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(tracefile, "_open_regular", refused)  # (root reads a mode-000 file regardless)
        assert tailer.poll() == [] and tailer.poll() == []
    assert drops == {"unreadable_file": 1}  # once, not once a poll
    assert [r.getMessage() for r in caplog.records] == [
        f"not reading the trace file {path}: it cannot be read (Permission denied)"]
    assert not tailer.caught_up()  # unlike a FIFO, it may yet be read: its directory is kept
    assert tracefile._open_regular is real_open and len(tailer.poll()) == 200 * 5
    assert tailer.caught_up()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(st.integers(min_value=0, max_value=10**20), max_size=30), st.integers(min_value=1, max_value=35),
       st.booleans(), st.booleans())
def test_a_limited_listing_is_the_oldest_or_newest_slice_of_the_whole(tmp_path_factory: pytest.TempPathFactory,
                                                                      indices: set[int], limit: int, newest: bool,
                                                                      base: bool) -> None:
    folder = tmp_path_factory.mktemp("rotations")
    for i in indices:
        (folder / f"trace.json.{i}").touch()
    if base:
        (folder / "trace.json").touch()
    whole = tracefile.trace_files(folder / "trace.json")
    rotations, tail = (whole[:-1], whole[-1:]) if base else (whole, [])
    expected = (rotations[-limit:] if newest else rotations[:limit]) + tail
    assert tracefile.trace_files(folder / "trace.json", limit, newest=newest) == expected


def test_a_backlog_beyond_max_files_is_read_in_order_as_what_was_read_is_deleted(tmp_path: Path) -> None:
    drops: Counter[str] = Counter()
    for i in range(25):
        shutil.copy(ROTATED, tmp_path / f"trace.json.{i}")
    tailer = TraceFileTailer(tmp_path / "trace.json", keep_rotations=2, max_files=10,
                             on_drop=lambda reason, n: drops.update({reason: n}))
    assert len(tailer.poll()) == 10 * 20 * 5  # the oldest ten; eight of them deleted once read
    assert not tailer.caught_up() and len(tailer._files) <= 10
    total = 10
    while len(list(tmp_path.iterdir())) > 2:
        total += len(tailer.poll()) // (20 * 5)
    assert total == 25 and sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.23", "trace.json.24"]
    assert tailer.caught_up() and drops == {"too_many_files": 1}  # said once while over


def test_without_pruning_max_files_follows_the_newest(tmp_path: Path) -> None:
    for i in range(25):
        shutil.copy(ROTATED, tmp_path / f"trace.json.{i}")
    tailer = TraceFileTailer(tmp_path / "trace.json", max_files=10)
    assert len(tailer.poll()) == 10 * 20 * 5
    assert sorted(tailer._files) == sorted(str(tmp_path / f"trace.json.{i}") for i in range(15, 25))


def test_something_swapped_in_between_the_stat_and_the_open_is_refused_too(tmp_path: Path) -> None:
    from tidescale.exporters.tracefile import _NotRegular, _open_regular

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(REAL)
    with pytest.raises(_NotRegular, match="not a regular file"):
        _open_regular(str(tmp_path / "fifo"), follow_links=True)
    with pytest.raises(_NotRegular) as refused:
        _open_regular(str(tmp_path / "link"), follow_links=False)
    assert refused.value.mode == stat.S_IFLNK
    with _open_regular(str(tmp_path / "link"), follow_links=True) as fh:
        assert fh.read(1) == b"["


def test_a_poll_reads_no_further_than_the_size_the_file_had_when_opened(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer faster than the reader cannot keep one poll going for ever."""
    path = tmp_path / "trace.json"
    path.write_bytes(REAL.read_bytes()[:20_000])
    monkeypatch.setattr(tracefile, "READ_CHUNK_BYTES", 4096)
    tailer = TraceFileTailer(path)
    real_feed = tracefile.JsonArrayStream.feed

    def feed_and_grow(self: tracefile.JsonArrayStream, chunk: bytes) -> list[object]:
        with path.open("ab") as fh:  # the writer appends a chunk for every chunk read
            fh.write(b" " * len(chunk))
        return real_feed(self, chunk)

    monkeypatch.setattr(tracefile.JsonArrayStream, "feed", feed_and_grow)
    _poll_within(tailer)
    assert tailer._files[str(path)].offset == 20_000  # this poll's share; the rest is the next one's


def test_a_huge_file_is_read_a_budget_a_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sparse terabyte in a pod's directory slows that pod's reading, not every pod's for hours."""
    path = tmp_path / "trace.json"
    shutil.copy(REAL, path)
    monkeypatch.setattr(tracefile, "READ_CHUNK_BYTES", 4096)
    monkeypatch.setattr(tracefile, "READ_BUDGET_BYTES", 50_000)
    tailer = TraceFileTailer(path)
    samples = _poll_within(tailer)
    assert tailer._files[str(path)].offset == 50_000 and not tailer.caught_up()
    while not tailer.caught_up():
        samples += _poll_within(tailer)
    assert len(samples) == 200 * 5  # all of it, over several polls


def _poll_within(tailer: TraceFileTailer, seconds: float = 30.0) -> list[object]:
    """`tailer.poll()` in a thread, failing the test (not hanging the suite) if it never returns."""
    result: list[list[object]] = []
    worker = threading.Thread(target=lambda: result.append(list(tailer.poll())), daemon=True)
    worker.start()
    worker.join(seconds)
    assert result, "poll() did not return"
    return result[0]
