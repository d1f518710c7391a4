"""A hand-built XSpace (host nesting, a device plane) and the capture command's argument checks."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile import URLS_WITH_CREDENTIALS
from tests.protowire import varint
from tidescale.contracts.errors import MissingToolError, TidescaleError, UsageError
from tidescale.exporters.profiles.capture import capture, check_target, parse_duration_ms, post
from tidescale.exporters.profiles.ingest import parse_profile
from tidescale.exporters.profiles.xplane import op_of_host_event


def field(num: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(num << 3 | 2) + varint(len(data)) + data


def event(meta_id: int, offset_ps: int, dur_ps: int) -> bytes:
    return field(1, meta_id) + field(2, offset_ps) + field(3, dur_ps)


def plane(name: str, metadata: dict[int, str], lines: list[list[bytes]]) -> bytes:
    body = field(2, name)
    for i, events in enumerate(lines):
        body += field(3, field(1, i) + field(3, 1_000_000) + b"".join(field(4, e) for e in events))
    for meta_id, ev_name in metadata.items():
        body += field(4, field(1, meta_id) + field(2, field(1, meta_id) + field(2, ev_name)))
    return field(1, body)


US = 1_000_000  # picoseconds per microsecond


def test_hand_built_xspace_nesting_and_device_plane() -> None:
    host = plane("/host:CPU", {1: "outer/Call:StatefulPartitionedCall", 2: "f/hash:StringToHashBucketFast",
                               3: "ExecutorState::Process", 4: "f/parse:ParseExampleV2"},
                 [[event(1, 0, 100 * US), event(2, 10 * US, 30 * US), event(3, 50 * US, 40 * US),
                   event(4, 50 * US, 20 * US)]])
    device = plane("/device:GPU:0", {7: "volta_sgemm_128x64_nn", 8: "MemcpyH2D"},
                   [[event(7, 0, 50 * US), event(8, 60 * US, 50 * US)]])
    rep = parse_profile(host + device + field(4, "hostname"), "h.xplane.pb")
    top = {t.op: t for t in rep.top_ops}
    assert rep.format == "xplane"
    assert top["StatefulPartitionedCall"].self_time_us == pytest.approx(50)   # 100 - 30 - 20
    assert top["StringToHashBucketFast"].op_class == "string"
    assert "ExecutorState::Process" not in top
    assert top["volta_sgemm_128x64_nn"].op_class == "compute"
    assert top["MemcpyH2D"].op_class == "memcpy"
    assert rep.total_self_time_us == pytest.approx(200)
    assert rep.op_class_share["string"] == pytest.approx(30 / 200)


@pytest.mark.parametrize(("name", "op"), [("a/b:MatMul", "MatMul"), ("x:_TensorToHash", "_TensorToHash"),
                                          ("ExecutorState::Process", None), ("EagerLocalExecute: __inf", None),
                                          ("NoColon", None), (":Bare", None), ("a:b c", None)])
def test_host_event_op_types(name: str, op: str | None) -> None:
    assert op_of_host_event(name) == op


@pytest.mark.parametrize(("text", "ms"), [("2s", 2000), ("500ms", 500), ("1m", 60000), ("3", 3000), ("1.5s", 1500)])
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "2h", "0s", "11m", "-1s", "fast"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration_ms(text)


def test_targets() -> None:
    assert check_target("grpc://tf-serving:6009") == "tf-serving:6009"
    for bad in ("tf-serving", "host:port", ":6009", "h:70000"):
        with pytest.raises(UsageError):
            check_target(bad)


def test_capture_without_xprof_names_the_fix(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    monkeypatch.setitem(sys.modules, "xprof", None)
    monkeypatch.setitem(sys.modules, "xprof.convert", None)
    with pytest.raises(MissingToolError, match="xprof"):
        capture("localhost:6009", "1s", tmp_path)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_fuzz_duration_and_limit_parsing(text: str) -> None:
    from tidescale.exporters.profiles.report import parse_limits

    for parse in (parse_duration_ms, lambda t: parse_limits([t])):
        with contextlib.suppress(UsageError):
            parse(text)


@pytest.mark.parametrize(("name", "url", "secret"), [u for u in URLS_WITH_CREDENTIALS if "://" in u[1]],
                         ids=[n for n, u, _ in URLS_WITH_CREDENTIALS if "://" in u])
def test_a_failed_post_names_the_exporter_without_its_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 name: str, url: str, secret: str) -> None:
    import httpx

    def refused(target: str, **_: object) -> None:
        httpx.Request("POST", target)  # parsed as httpx.post parses it (InvalidURL quotes the port: a password)
        raise httpx.ConnectError(f"cannot connect to {target}")

    monkeypatch.setattr(httpx, "post", refused)
    capture_file = tmp_path / "host.xplane.pb"
    capture_file.write_bytes(b"\x0a\x00")
    with pytest.raises(TidescaleError) as exc:
        post([capture_file], url, "m", "1", None)
    assert secret not in str(exc.value) and exc.value.exit_code == 2


@pytest.mark.parametrize(("answers", "waits", "fails"), [
    ([(429, "3"), (429, None), (200, None)], [3.0, 10.0], False),  # Retry-After honoured, or 10 s
    ([(429, "99999")] * 3 + [(200, None)], [60.0] * 3, False),  # never more than a minute
    ([(429, "²")] * 4, [10.0] * 3, True),  # gives up after 4 attempts, naming the answer
    ([(503, "1")], [], True),  # only a 429 is retried
])
def test_post_retries_a_busy_exporter_a_bounded_number_of_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               answers: list[tuple[int, str | None]],
                                                               waits: list[float], fails: bool) -> None:
    import httpx

    left = list(answers)

    def answer(url: str, **_: object) -> httpx.Response:
        status, retry_after = left.pop(0)
        headers = [(b"retry-after", retry_after.encode())] if retry_after else []
        return httpx.Response(status, headers=headers, text="busy")

    monkeypatch.setattr(httpx, "post", answer)
    slept: list[float] = []
    capture_file = tmp_path / "host.xplane.pb"
    capture_file.write_bytes(b"\x0a\x00")
    with pytest.raises(TidescaleError) if fails else contextlib.nullcontext():
        post([capture_file], "http://exporter:9105", "m", "1", "token", sleep=slept.append)
    assert slept == waits and not left
