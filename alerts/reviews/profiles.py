"""The latest profiler report of a model version, from the exporter (`GET /v1/profiles/{m}/{v}`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

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
    """(report, None), or (None, why not): a review opens even when the exporter cannot answer."""
    url = f"{exporter_url.rstrip('/')}/v1/profiles/{quote(model, safe='')}/{quote(version, safe='')}"
    try:
        if client is None:
            with httpx.Client(timeout=timeout_s) as own:
                resp = own.get(url)
        else:
            resp = client.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return None, f"exporter unreachable at {exporter_url}: {exc.__class__.__name__}"
    if resp.status_code == 404:
        return None, f"the exporter has no profile for {model} version {version}"
    if resp.status_code != 200:
        return None, f"the exporter answered HTTP {resp.status_code} for {url}"
    if len(resp.content) > MAX_PROFILE_BYTES:
        return None, f"the exporter's profile report is larger than {MAX_PROFILE_BYTES} bytes"
    try:
        report = resp.json()
    except ValueError:
        return None, "the exporter's profile report is not JSON"
    if not isinstance(report, dict):
        return None, "the exporter's profile report is not a JSON object"
    return trim_report(report), None
