"""The one Prometheus and the one Alertmanager client: an answer is data or a named error, never a traceback."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.hostile import HTTP_ANSWERS, JSON_DOCUMENTS, URLS_WITH_CREDENTIALS, HostileServer
from tidescale.contracts.alertmanager import AlertmanagerUnavailable, active_alerts
from tidescale.contracts.errors import TidescaleError
from tidescale.contracts.prometheus import PrometheusClient, PrometheusUnavailable, PrometheusUnreachable
from tidescale.devstack.ports import free_port


def answering(content: bytes, status: int = 200) -> PrometheusClient:
    return PrometheusClient("http://prom", transport=httpx.MockTransport(lambda _r: httpx.Response(status,
                                                                                                  content=content)))


@pytest.mark.parametrize(("name", "body"), JSON_DOCUMENTS)
def test_hostile_answers_are_data_or_unavailable(name: str, body: bytes) -> None:
    client = answering(body)
    for call in (lambda: client.query("up"), lambda: client.instant("up"), lambda: client.query_range("up", 0, 1, 1)):
        try:
            call()
        except PrometheusUnavailable as exc:
            assert len(str(exc)) < 400


def test_a_refused_connection_is_unreachable_and_a_tidescale_error() -> None:
    client = PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(PrometheusUnreachable) as info:
        client.query("up")
    assert isinstance(info.value, TidescaleError)


def test_a_vector_answer_is_read() -> None:
    body = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"2.5"]}]}}'
    assert answering(body).instant("up") == [(1.0, 2.5)]


def test_an_unreachable_alertmanager_is_a_named_error() -> None:
    with pytest.raises(AlertmanagerUnavailable, match="unreachable"):
        active_alerts(f"http://127.0.0.1:{free_port()}", timeout_s=2)


OK_BODY = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


def recording(auth: object) -> tuple[PrometheusClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=OK_BODY)

    return PrometheusClient("https://mimir/prometheus", transport=httpx.MockTransport(answer), auth=auth), seen


def test_a_bearer_token_is_read_from_its_file_at_every_query_and_the_tenant_header_sent(tmp_path) -> None:
    from tidescale.contracts.prometheus import PrometheusAuth

    token = tmp_path / "token"
    token.write_text("first\n")
    client, seen = recording(PrometheusAuth(bearer_token_file=token, tenant="team-ml", headers={"X-Extra": "1"}))
    client.query("up")
    token.write_text("rotated")  # a projected or rotated token: no restart needed
    client.query("up")
    assert [r.headers["authorization"] for r in seen] == ["Bearer first", "Bearer rotated"]
    assert seen[0].headers["x-scope-orgid"] == "team-ml" and seen[0].headers["x-extra"] == "1"
    assert seen[0].url.path == "/prometheus/api/v1/query"


def test_basic_auth_and_a_missing_credentials_file_is_a_named_error(tmp_path) -> None:
    from tidescale.contracts.prometheus import PrometheusAuth

    password = tmp_path / "password"
    password.write_text("s3cret")
    client, seen = recording(PrometheusAuth(basic_auth_username="tidescale", basic_auth_password_file=password))
    client.query("up")
    assert seen[0].headers["authorization"] == "Basic dGlkZXNjYWxlOnMzY3JldA=="
    password.unlink()
    with pytest.raises(PrometheusUnavailable, match="credentials file") as info:
        client.query("up")
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("fields", [
    {"bearer_token_file": "/t", "basic_auth_username": "u", "basic_auth_password_file": "/p"},
    {"basic_auth_username": "u"},
    {"basic_auth_password_file": "/p"},
    {"unknown": 1},
])
def test_auth_settings_that_cannot_work_are_refused(fields: dict[str, object]) -> None:
    from pydantic import ValidationError

    from tidescale.contracts.prometheus import PrometheusAuth

    with pytest.raises(ValidationError):
        PrometheusAuth(**fields)  # type: ignore[arg-type]


def test_a_ca_file_that_is_not_a_certificate_is_a_usage_error(tmp_path) -> None:
    from tidescale.contracts.errors import UsageError
    from tidescale.contracts.prometheus import PrometheusAuth

    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(UsageError, match="CA file"):
        PrometheusClient("https://prom", auth=PrometheusAuth(ca_file=bad))


# --- issue 43: an overall deadline, a cap on the answer (decompressed), no redirect, no password shown ---

HOSTILE_OUTCOMES: dict[str, tuple[type[Exception], str]] = {
    "trickle": (PrometheusUnreachable, "no complete answer within 0.5 s"),
    "gzip-bomb": (PrometheusUnavailable, "larger than 1048576 bytes once decompressed"),
    "huge-content-length": (PrometheusUnavailable, "larger than 1048576 bytes"),
    "redirect-elsewhere": (PrometheusUnavailable, "HTTP 302"),
    "unasked-encoding": (PrometheusUnavailable, "Content-Encoding 'br' was not asked for"),
    "corrupt-gzip": (PrometheusUnavailable, "gzip stream is corrupt"),
}


@pytest.mark.parametrize("name", [n for n, _ in HTTP_ANSWERS])
def test_a_hostile_server_is_a_named_error_within_the_deadline_and_the_cap(name: str) -> None:
    """A Prometheus that trickles its answer (one byte per 50 ms: no read ever times out) ends at
    the call's deadline; a gzip bomb at the cap on the decompressed answer; a redirect is not
    followed (one request, to the server asked)."""
    error, says = HOSTILE_OUTCOMES[name]
    server = HostileServer(name)
    with server as url:
        client = PrometheusClient(url, timeout_s=0.5, max_answer_bytes=1 << 20)
        with pytest.raises(error, match=re.escape(says)):
            client.query("up")
    assert server.requests == 1


def test_every_hostile_answer_has_an_expected_outcome() -> None:
    assert set(HOSTILE_OUTCOMES) == {n for n, _ in HTTP_ANSWERS}


def test_a_password_in_the_url_never_reaches_an_error_message() -> None:
    client = PrometheusClient(f"http://tidescale:s3cret@127.0.0.1:{free_port()}/prometheus", timeout_s=2)
    with pytest.raises(PrometheusUnreachable) as info:
        client.query("up")
    assert "s3cret" not in str(info.value) and "***@127.0.0.1" in str(info.value)
    bad = PrometheusClient("http://tidescale:s3cret@[::1/prometheus", timeout_s=2)
    with pytest.raises(PrometheusUnavailable) as info:
        bad.query("up")
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(("name", "says"), [
    ("trickle", "unreachable: DeadlineExceeded"),
    ("gzip-bomb", "unreachable: AnswerTooLarge"),
    ("redirect-elsewhere", "failed (302)"),
])
def test_a_hostile_alertmanager_is_a_named_error_within_the_deadline(name: str, says: str) -> None:
    with HostileServer(name) as url, pytest.raises(AlertmanagerUnavailable, match=re.escape(says)):
        active_alerts(url, timeout_s=0.5)


@pytest.mark.parametrize(("name", "url", "secret"), URLS_WITH_CREDENTIALS, ids=[n for n, *_ in URLS_WITH_CREDENTIALS])
def test_no_credential_of_the_prometheus_url_reaches_an_error(name: str, url: str, secret: str) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"connection refused for url {request.url}", request=request)

    with pytest.raises(PrometheusUnavailable) as info:
        PrometheusClient(url, transport=httpx.MockTransport(refuse)).query("up")
    assert secret not in str(info.value)
