"""The file_sd targets file: parsed strictly, re-read on change, bad files keep the old targets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.contracts.errors import UsageError
from tidescale.exporters.targets import Target, TargetSet, parse_targets_file


def write(path: Path, groups: object, mtime: float) -> None:
    path.write_text(json.dumps(groups))
    os.utime(path, (mtime, mtime))


def test_targets_follow_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write(path, [{"targets": ["127.0.0.1:8000"], "labels": {"namespace": "ns", "pod": "a"}}], 1000)
    ts = TargetSet(targets_file=path)
    changes: list[tuple[list[Target], list[Target]]] = []
    ts.on_change(lambda added, removed: changes.append((added, removed)))
    assert ts.reload_targets_file()
    assert ts.targets() == [Target("http://127.0.0.1:8000", "ns", "a")]
    write(path, [{"targets": ["127.0.0.1:8001"], "labels": {"namespace": "ns", "pod": "b"}}], 1001)
    assert ts.reload_targets_file()
    assert ts.targets() == [Target("http://127.0.0.1:8001", "ns", "b")]
    assert changes[-1] == ([Target("http://127.0.0.1:8001", "ns", "b")], [Target("http://127.0.0.1:8000", "ns", "a")])
    assert not ts.reload_targets_file()  # unchanged mtime: nothing to do
    path.write_text("{broken")
    os.utime(path, (1002, 1002))
    assert not ts.reload_targets_file()
    assert ts.targets() == [Target("http://127.0.0.1:8001", "ns", "b")]  # a bad file keeps the old targets


@pytest.mark.parametrize(("text", "message"), [
    ("{}", "JSON list"),
    ('[{"labels": {}}]', "needs a 'targets' list"),
    ('[{"targets": [1]}]', "is not a string"),
    ('[{"targets": ["a:1"], "labels": []}]', "'labels' must be an object"),
])
def test_bad_targets_files_are_named(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_targets_file(text)


def test_target_count_is_capped() -> None:
    groups = [{"targets": [f"10.0.0.{i}:8000" for i in range(20)]}]
    with pytest.raises(UsageError, match="more than 10"):
        parse_targets_file(json.dumps(groups), max_targets=10)


@given(st.text(max_size=300))
@settings(max_examples=200)
def test_parser_only_raises_usage_errors(text: str) -> None:
    try:
        targets = parse_targets_file(text)
    except UsageError:
        return
    assert all(t.url.startswith(("http://", "https://")) for t in targets)
