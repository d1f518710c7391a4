"""The recommender's Prometheus client against an https Prometheus with a private CA and a bearer
token: the way Mimir, Thanos or kube-rbac-proxy front it. Real TLS (openssl-made CA), real server."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidescale.contracts.prometheus import PrometheusAuth, PrometheusClient, PrometheusUnavailable
from tidescale.devstack.cluster.pki import Pki
from tidescale.devstack.ports import free_port

BODY = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"3"]}]}}'


class _Prometheus(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.headers.get("Authorization") == "Bearer t0ken" and self.headers.get("X-Scope-OrgID") == "ml"
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(BODY if ok else b'{"status":"error","error":"unauthorized"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def https_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("pki")
    pki = Pki(root)
    ca = pki.ca("ca", "tidescale-test-ca")
    server = pki.leaf("prometheus", ca, "prometheus", dns=["localhost"], ips=["127.0.0.1"], server=True)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Prometheus)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server.cert, server.key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}", ca.cert
    httpd.shutdown()


def test_a_private_ca_a_token_and_a_tenant_reach_the_answer(https_prometheus: tuple[str, Path], tmp_path: Path) -> None:
    url, ca = https_prometheus
    token = tmp_path / "token"
    token.write_text("t0ken")
    auth = PrometheusAuth(ca_file=ca, bearer_token_file=token, tenant="ml")
    assert PrometheusClient(url, auth=auth).instant("up") == [(1.0, 3.0)]
    # Without the CA the certificate is refused; without the token the gateway says no.
    with pytest.raises(PrometheusUnavailable):
        PrometheusClient(url, auth=PrometheusAuth(bearer_token_file=token, tenant="ml")).instant("up")
    with pytest.raises(PrometheusUnavailable, match="401"):
        PrometheusClient(url, auth=PrometheusAuth(ca_file=ca, tenant="ml")).instant("up")
