"""The one Prometheus and the one Alertmanager client: an answer is data or a named error, never a traceback."""

from __future__ import annotations

import httpx
import pytest

from tests.hostile import JSON_DOCUMENTS
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
