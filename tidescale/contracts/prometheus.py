"""The one client of Prometheus' HTTP API: the recommender, the dev stack, the previews and the tests.

Whatever Prometheus (or something pretending to be it) answers, a caller gets either data or
`PrometheusUnavailable` naming the problem: a deeply nested body, a number too large for a float
or an error payload never escape as a traceback, and error text never prints a hostile value nor a
password from the URL. Each call has an overall deadline and a cap on the answer, decompressed size
included, and follows no redirect (`tidescale.contracts.outbound`).
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Generator
from pathlib import Path
from typing import Any, Protocol

import httpx
from pydantic import Field, model_validator

from tidescale.contracts import jsonio, outbound
from tidescale.contracts.errors import TidescaleError, UsageError
from tidescale.contracts.redact import redact_url, redact_urls
from tidescale.contracts.settings import SettingsModel

MAX_DETAIL_CHARS = 200
# An instant vector of a few thousand series is well under a megabyte; a range query for a preview
# a few megabytes. Decoded into Python objects an answer takes about 20 times its size.
MAX_ANSWER_BYTES = 16 << 20
# Where Prometheus answers by default: kube-prometheus-stack at its defaults, the operator's governing
# Service `prometheus-operated` in the `monitoring` namespace. The chart's `prometheusUrl` defaults to
# the same (tests/unit/helm holds the two equal).
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"


class PrometheusUnavailable(TidescaleError):
    """Prometheus could not answer (down, timeout, HTTP error, bad body)."""


class PrometheusUnreachable(PrometheusUnavailable):
    """No answer at all (connection refused, timeout): unlike a bad answer, retrying later may help."""


class PrometheusAuth(SettingsModel):
    """How to reach a Prometheus that is not open: Mimir, Thanos or Cortex behind a gateway, or
    Prometheus behind kube-rbac-proxy. Secrets are read from files (mounted Secrets), never from
    settings, and re-read on every request, so a rotated token is used without a restart."""

    bearer_token_file: Path | None = None
    basic_auth_username: str | None = None
    basic_auth_password_file: Path | None = None
    ca_file: Path | None = None  # a PEM bundle to trust for https:// (else the system's)
    tenant: str | None = Field(default=None, description="X-Scope-OrgID: the tenant of a Mimir or Cortex gateway")
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_scheme(self) -> PrometheusAuth:
        if self.bearer_token_file and (self.basic_auth_username or self.basic_auth_password_file):
            raise ValueError("give a bearer token or basic auth, not both")
        if bool(self.basic_auth_username) != bool(self.basic_auth_password_file):
            raise ValueError("basic auth needs both basic_auth_username and basic_auth_password_file")
        return self

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.tenant:
            headers["X-Scope-OrgID"] = self.tenant
        return headers

    def verify(self) -> ssl.SSLContext | bool:
        if self.ca_file is None:
            return True
        try:
            return ssl.create_default_context(cafile=str(self.ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"Prometheus CA file {self.ca_file}: {type(exc).__name__}: {exc}") from None


class _FileAuth(httpx.Auth):
    """Bearer or basic credentials read from their files at each request."""

    def __init__(self, auth: PrometheusAuth) -> None:
        self.auth = auth

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise PrometheusUnavailable(f"cannot read the Prometheus credentials file {path}: "
                                        f"{type(exc).__name__}") from None

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.auth.bearer_token_file is not None:
            request.headers["Authorization"] = f"Bearer {self._read(self.auth.bearer_token_file)}"
        elif self.auth.basic_auth_username and self.auth.basic_auth_password_file is not None:
            pair = f"{self.auth.basic_auth_username}:{self._read(self.auth.basic_auth_password_file)}"
            request.headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        yield request


class InstantQueries(Protocol):
    """The instant queries a decision path reads: `PrometheusClient`, or the simulator's model of
    Prometheus (the benchmark runs the recommender service on it)."""

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]: ...

    def instant(self, expr: str) -> list[tuple[float, float]]: ...

    def close(self) -> None: ...


class PrometheusClient:
    """Queries over Prometheus' HTTP API (`/api/v1/…`)."""

    def __init__(self, url: str, timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None,
                 auth: PrometheusAuth | None = None, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        """*timeout_s*: the deadline of each call as a whole (connect, headers, body)."""
        self.url = url.rstrip("/")
        self.shown_url = redact_url(self.url)  # what messages name: never a password
        self.timeout_s, self.max_answer_bytes = timeout_s, max_answer_bytes
        auth = auth or PrometheusAuth()
        self.http = outbound.client(timeout_s, transport=transport, headers=auth.request_headers(),
                                    verify=auth.verify(), auth=_FileAuth(auth))

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> tuple[int, Any]:
        """(HTTP status, decoded body) of GET *path*; PrometheusUnavailable when there is no JSON answer."""
        try:
            answer = outbound.get(self.http, f"{self.url}{path}", deadline_s=self.timeout_s,
                                  max_bytes=self.max_answer_bytes, params=params)
            if 300 <= answer.status < 400:
                raise PrometheusUnavailable(f"HTTP {answer.status} from {self.shown_url}: a redirect, not followed")
            return answer.status, jsonio.loads(answer.content)
        except jsonio.NestedTooDeeply:
            raise PrometheusUnavailable("response body nested too deeply") from None
        except outbound.DeadlineExceeded as exc:
            raise PrometheusUnreachable(f"Prometheus at {self.shown_url}: {exc}") from None
        except httpx.TransportError as exc:
            raise PrometheusUnreachable(f"cannot reach Prometheus at {self.shown_url}: {type(exc).__name__}") from None
        except outbound.AnswerTooLarge as exc:
            raise PrometheusUnavailable(f"Prometheus at {self.shown_url}: {exc}") from None
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            detail = redact_urls(str(exc))[:MAX_DETAIL_CHARS]
            raise PrometheusUnavailable(f"{type(exc).__name__}: {detail}") from None

    def data(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """The `data` of a successful API answer."""
        status, body = self.get_json(path, params)
        if not isinstance(body, dict) or status != 200 or body.get("status") != "success":
            detail = body.get("error", "") if isinstance(body, dict) else ""
            shown = detail[:MAX_DETAIL_CHARS] if isinstance(detail, str) else type(detail).__name__
            raise PrometheusUnavailable(f"HTTP {status}: {shown}")  # never str() a deep value
        return body.get("data")

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query: the `result` list (a scalar or string normalised to one unlabelled sample)."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self.data("/api/v1/query", params)
        if not isinstance(data, dict) or not isinstance(data.get("result"), list | tuple):
            raise PrometheusUnavailable("unexpected response body (no result list)")
        if data.get("resultType") in ("scalar", "string"):
            return [{"metric": {}, "value": list(data["result"])}]
        return list(data["result"])

    def instant(self, expr: str) -> list[tuple[float, float]]:
        """[(sample timestamp, value)] of an instant vector."""
        try:
            return [(float(item["value"][0]), float(item["value"][1])) for item in self.query(expr)]
        except (KeyError, IndexError, TypeError, ValueError, OverflowError) as exc:
            raise PrometheusUnavailable(f"unexpected response body ({type(exc).__name__})") from None

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self.data("/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step})
        if not isinstance(data, dict) or not isinstance(data.get("result"), list):
            raise PrometheusUnavailable("unexpected response body (no result list)")
        return list(data["result"])

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
