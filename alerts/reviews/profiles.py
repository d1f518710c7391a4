"""The latest profiler report of a model version, from the exporter (`GET /v1/profiles/{m}/{v}`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from tidescale.contracts import jsonio, outbound
from tidescale.contracts.redact import redact_url

MAX_PROFILE_BYTES = 512 * 1024
MAX_TOP_OPS = 20


def trim_report(report: dict[str, Any]) -> dict[str, Any]:
    """Keep what a reviewer reads (shares, top ops, totals); drop anything large or nested."""
    out: dict[str, Any] = {}
    for key, value in report.items():
        if key == "top_ops" and isinstance(value, list):
            out[key] = value[:MAX_TOP_OPS]
        elif key == "op_class_share" and isinstance(value, dict):
            out[key] = {str(k): v for k, v in value.items() if isinstance(v, int | float)}
        elif isinstance(value, str | int | float | bool) or value is None:
            out[key] = value
    return out


def fetch_profile(
    exporter_url: str, model: str, version: str, timeout_s: float, client: httpx.Client | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """(report, None), or (None, why not): a review opens even when the exporter cannot answer.

    The whole fetch ends within *timeout_s* (a trickling exporter once held a worker for as long as
    it liked), the report is at most MAX_PROFILE_BYTES once decompressed, no redirect is followed,
    and no message names the exporter URL's credentials (`profile_error` is readable without a token)."""
    url = f"{exporter_url.rstrip('/')}/v1/profiles/{quote(model, safe='')}/{quote(version, safe='')}"
    shown = redact_url(exporter_url)
    try:
        if client is None:
            with outbound.client(timeout_s) as own:
                answer = outbound.get(own, url, deadline_s=timeout_s, max_bytes=MAX_PROFILE_BYTES)
        else:
            answer = outbound.get(client, url, deadline_s=timeout_s, max_bytes=MAX_PROFILE_BYTES)
    except outbound.AnswerTooLarge:
        return None, f"the exporter's profile report is larger than {MAX_PROFILE_BYTES} bytes"
    except outbound.DeadlineExceeded:
        return None, f"the exporter at {shown} gave no complete answer within {timeout_s:g} s"
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # the class only: its text may quote the URL
        return None, f"exporter unreachable at {shown}: {exc.__class__.__name__}"
    if answer.status == 404:
        return None, f"the exporter has no profile for {model} version {version}"
    if answer.status != 200:
        return None, f"the exporter at {shown} answered HTTP {answer.status} for {redact_url(url)}"
    try:
        report = jsonio.loads(answer.content)
    except ValueError:
        return None, "the exporter's profile report is not JSON"
    if not isinstance(report, dict):
        return None, "the exporter's profile report is not a JSON object"
    return trim_report(report), None
