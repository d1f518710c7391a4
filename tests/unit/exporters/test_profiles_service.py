"""`/v1/profiles` under hostile uploads, the store's bounds and eviction, and models named with `/`."""

from __future__ import annotations

import asyncio
import errno
import gzip
import io
import math
import os
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.hostile import JSON_DOCUMENTS, LABEL_VALUES, NUMBERS
from tests.paths import FIXTURES
from tests.unit.exporters.test_profiles_hostile import (
    CAPTURE_PLACEMENTS,
    REFUSED_TIMES,
    as_chrome_dur,
    as_trtexec,
    chrome_trace,
    x_event,
    xplane_zero_bomb,
)
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles import upload
from tidescale.exporters.profiles.store import ProfileStore, report_bytes
from tidescale.exporters.service import create_app
from tidescale.exporters.settings import ExporterSettings

TOKEN = "s3cret-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
TRACE = (FIXTURES / "profiles" / "tensorflow" / "ctr_int_ids.trace_viewer.json.gz").read_bytes()
SMALL = chrome_trace(x_event(b"5"))


@pytest.fixture
def client() -> Iterator[TestClient]:
    settings = ExporterSettings(token=TOKEN, max_profile_bytes=1 << 20)  # type: ignore[call-arg]
    with TestClient(create_app(settings)) as c:
        yield c


def post(client: TestClient, body: bytes, model: str = "m", version: str = "1") -> tuple[int, str]:
    r = client.post("/v1/profiles", params={"model": model, "version": version}, content=body, headers=AUTH)
    return r.status_code, r.text


def assert_metrics_clean(client: TestClient) -> None:
    r = client.get("/metrics")
    assert r.status_code == 200
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            assert math.isfinite(s.value), s


# --- items 3 and 4: hostile bodies are 400, nothing is stored, /metrics stays clean ----------------


@pytest.mark.parametrize(("name", "value"), NUMBERS, ids=[n for n, _ in NUMBERS])
def test_hostile_durations_are_400_and_nothing_is_stored(client: TestClient, name: str, value: object) -> None:
    for body in (as_chrome_dur(value), as_trtexec(value)):
        status, text = post(client, body)
        assert status in (200, 400), text
        if name in REFUSED_TIMES:
            assert status == 400 and "finite" in text, text
            assert client.get("/v1/profiles/m/1").status_code == 404
        client.delete("/v1/profiles/m/1", headers=AUTH)
    assert_metrics_clean(client)


@pytest.mark.parametrize("place", CAPTURE_PLACEMENTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("value", [10**400, "²", float("nan")], ids=["400-digits", "superscript-two", "nan"])
def test_a_bad_capture_time_is_400_naming_it(client: TestClient, place: Callable[[object], bytes],
                                             value: object) -> None:
    status, text = post(client, place(value))
    assert status == 400 and ("baseTimeNanoseconds" in text or "profile_start_time" in text), text
    assert client.get("/v1/profiles/m/1").status_code == 404  # nothing stored
    assert_metrics_clean(client)


@pytest.mark.parametrize(("name", "doc"), JSON_DOCUMENTS, ids=[n for n, _ in JSON_DOCUMENTS])
def test_hostile_json_is_4xx_never_500(client: TestClient, name: str, doc: bytes) -> None:
    for body in (doc, chrome_trace(x_event(b"1", args=doc)) if doc else doc):
        status, text = post(client, body, version=name)
        assert status < 500, text
        if status != 200:
            assert client.get(f"/v1/profiles/m/{name}").status_code == 404
    assert_metrics_clean(client)


def test_deep_args_name_the_problem(client: TestClient) -> None:
    doc = dict(JSON_DOCUMENTS)["deep-array"]
    status, text = post(client, chrome_trace(x_event(b"1", args=doc)))
    assert status == 400 and "deep" in text


def test_the_zero_plane_bomb_is_400(client: TestClient) -> None:
    status, text = post(client, xplane_zero_bomb())
    assert status == 400 and "field number 0" in text


# --- item 2: format from the first bytes, streamed to disk with the cap enforced ---------------------


async def chunks_of(data: bytes, size: int, read: list[int]) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        read.append(i)
        yield data[i:i + size]


def spool(data: bytes, max_bytes: int = 1 << 20, chunk: int = 1000) -> tuple[str, list[int]]:
    read: list[int] = []

    async def run() -> str:
        async with upload.spooled_upload(chunks_of(data, chunk, read), max_bytes) as (fh, size):
            assert fh.read() == data and size == len(data)
            return "ok"

    try:
        return asyncio.run(run()), read
    except BadInput as exc:
        return f"bad:{exc.status_code}", read
    except OSError as exc:
        return type(exc).__name__, read


def test_unknown_format_is_refused_from_the_first_chunk() -> None:
    got, read = spool(b"<html>" + b"x" * 100_000)
    assert got == "bad:415" and len(read) == 1


def test_the_size_cap_is_enforced_while_streaming() -> None:
    got, read = spool(b"{" + b" " * 100_000, max_bytes=10_000)
    assert got == "bad:413" and len(read) == 11


@pytest.mark.parametrize("head", [b"\x1f\x8b", b"\x0a\x05", b"   \n{", b"["])
def test_profile_magics_are_accepted(head: bytes) -> None:
    assert spool(head + b"x" * 5000, chunk=1)[0] == "ok"


def test_empty_upload_is_400() -> None:
    assert spool(b"")[0] == "bad:400"
    assert spool(b" " * 10)[0] == "bad:400"


def test_the_upload_is_not_buffered_in_memory(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store gets a file, never the body as bytes."""
    from tidescale.exporters.profiles import store as store_module

    seen: list[type] = []
    real = store_module.parse_profile

    def spy(raw: object, *args: object) -> object:
        seen.append(type(raw))
        return real(raw, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "parse_profile", spy)
    assert post(client, TRACE)[0] == 200
    assert seen and bytes not in seen


def test_oversized_upload_is_413(client: TestClient) -> None:
    assert post(client, b"{" + b" " * (2 << 20))[0] == 413


# --- item 5: the store evicts, has a byte budget and a DELETE --------------------------------------


def test_a_full_store_evicts_the_least_recently_updated() -> None:
    store = ProfileStore(max_models=3)
    for v in ("1", "2", "3"):
        store.ingest(SMALL, model="m", version=v)
    store.ingest(SMALL, model="m", version="1")  # updated: now the most recent
    store.ingest(SMALL, model="m", version="4")
    assert store.report("m", "2") is None
    assert all(store.report("m", v) is not None for v in ("1", "3", "4"))
    assert store.evicted == 1


def test_the_byte_budget_evicts_and_is_exported() -> None:
    one = report_bytes(ProfileStore().ingest(SMALL, model="m", version="0"))
    store = ProfileStore(max_store_bytes=3 * one + one // 2)
    reg = CollectorRegistry()
    reg.register(store)
    for v in ("0", "1", "2", "3", "4"):
        store.ingest(SMALL, model="m", version=v)
    assert [store.report("m", v) is not None for v in "01234"] == [False, False, True, True, True]
    assert reg.get_sample_value("tidescale_exporter_profile_store_bytes") == store.stored_bytes
    assert 2 * one < store.stored_bytes <= store.max_store_bytes


def test_a_report_over_the_whole_budget_is_413() -> None:
    with pytest.raises(BadInput) as exc:
        ProfileStore(max_store_bytes=100).ingest(SMALL, model="m", version="1")
    assert exc.value.status_code == 413


def test_delete_frees_the_slot_and_needs_the_token(client: TestClient) -> None:
    assert post(client, TRACE, "m", "1")[0] == 200
    assert client.delete("/v1/profiles/m/1").status_code == 401
    assert client.delete("/v1/profiles/m/1", headers={"authorization": "Bearer nope"}).status_code == 401
    assert client.delete("/v1/profiles/m/1", headers=AUTH).status_code == 204
    assert client.get("/v1/profiles/m/1").status_code == 404
    assert client.delete("/v1/profiles/m/1", headers=AUTH).status_code == 404
    assert 'model="m"' not in client.get("/metrics").text


# --- item 6: model names with `/` round-trip ------------------------------------------------------


@pytest.mark.parametrize("model", ["org/team/model", "a/b", "x//y", "trailing/"])
def test_models_with_slashes_can_be_fetched_and_deleted(client: TestClient, model: str) -> None:
    status, text = post(client, SMALL, model=model, version="7")
    assert status == 200, text
    got = client.get(f"/v1/profiles/{model}/7")
    assert got.status_code == 200 and got.json()["model"] == model
    assert client.get(f"/v1/profiles/{model}/8").status_code == 404
    assert client.delete(f"/v1/profiles/{model}/7", headers=AUTH).status_code == 204


@pytest.mark.parametrize(("name", "label"), [(n, v) for n, v in LABEL_VALUES if len(v) < 200 and v.strip()
                                             and v.isprintable() and "/" not in v and v not in ("..",)],
                         ids=lambda x: x if isinstance(x, str) and len(x) < 30 else "")
def test_printable_model_names_round_trip(client: TestClient, name: str, label: str) -> None:
    assert post(client, SMALL, model=label, version="1")[0] == 200
    from urllib.parse import quote

    got = client.get(f"/v1/profiles/{quote(label, safe='')}/1")
    assert got.status_code == 200 and got.json()["model"] == label


def test_gzip_upload_through_the_route(client: TestClient) -> None:
    status, text = post(client, gzip.compress(SMALL))
    assert status == 200, text


# --- issue 43 #16: uploads at once are bounded; a full disk is a 507 --------------------------------


async def asgi_post(app: object, body: AsyncIterator[bytes], token: str = TOKEN) -> tuple[int, dict[str, str]]:
    """POST /v1/profiles?model=m&version=1 straight through the ASGI app, the body sent as *body* yields it."""
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        chunk = await anext(body, None)
        return {"type": "http.request", "body": chunk or b"", "more_body": chunk is not None}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/profiles", "raw_path": b"/v1/profiles",
             "query_string": b"model=m&version=1", "root_path": "", "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 9105), "headers": [(b"authorization", f"Bearer {token}".encode())]}
    await app(scope, receive, send)  # type: ignore[operator]
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}  # type: ignore[attr-defined]
    return int(start["status"]), headers  # type: ignore[call-overload]


def test_uploads_beyond_max_profile_uploads_are_429_until_a_slot_frees() -> None:
    app = create_app(ExporterSettings(token=TOKEN, max_profile_uploads=1))  # type: ignore[call-arg]
    release = asyncio.Event()

    async def held() -> AsyncIterator[bytes]:
        yield SMALL[:10]
        await release.wait()  # the first upload stays in progress until the others are answered
        yield SMALL[10:]

    async def whole() -> AsyncIterator[bytes]:
        yield SMALL

    async def main() -> None:
        first = asyncio.create_task(asgi_post(app, held()))
        while app.state.exporter.profile_uploads == 0 and not first.done():  # type: ignore[attr-defined]
            await asyncio.sleep(0)
        status, headers = await asgi_post(app, whole())
        assert status == 429 and int(headers["retry-after"]) > 0
        assert (await asgi_post(app, whole(), token="wrong"))[0] == 401  # no token: refused before a slot
        release.set()
        assert (await first)[0] == 200
        assert app.state.exporter.profile_uploads == 0  # type: ignore[attr-defined]
        assert (await asgi_post(app, whole()))[0] == 200  # the slot is free again

    asyncio.run(main())


def test_a_refused_or_failed_upload_frees_its_slot(client: TestClient) -> None:
    for body in (b"<html>", b"{" + b" " * (2 << 20), chrome_trace(x_event(b"1e308"))):  # 415, 413, 400
        assert post(client, body)[0] in (400, 413, 415)
    assert post(client, SMALL)[0] == 200


class FullDisk(io.BytesIO):
    """A spool on a full volume: the first write that reaches the disk fails."""

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_507_never_500(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upload.tempfile, "TemporaryFile", lambda **_: FullDisk())
    status, text = post(client, SMALL)
    assert status == 507 and "No space left on device" in text and "room" in text
    assert spool(SMALL)[0] == "bad:507"
    monkeypatch.setattr(upload.tempfile, "TemporaryFile", _refuses(errno.ENOSPC))  # no room for the file itself
    assert post(client, SMALL)[0] == 507
    monkeypatch.setattr(upload.tempfile, "TemporaryFile", _refuses(errno.EACCES))  # not a full disk: a defect
    assert spool(SMALL)[0] == "PermissionError"


def _refuses(code: int) -> Callable[..., object]:
    def temporary_file(**_: object) -> object:
        raise OSError(code, os.strerror(code))

    return temporary_file
