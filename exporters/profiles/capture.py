"""`tidescale profile capture`: a level-3 host trace from a TF Serving / TF-backend profiler service.

TF 2.21's own `tf.profiler.experimental.client.trace(..., ProfilerOptions(host_tracer_level=3))`
silently records at level 2, which drops inexpensive ops (string hashing reads ≈3.5 %
instead of ≈9 % in the fixtures). xprof's client passes the options dict through, so we call
it directly. The result is TF's usual `DIR/plugins/profile/<run>/<host>.xplane.pb`; with
`--post` each file is uploaded to the exporter's `/v1/profiles` (a sidecar or CronJob runs
this every N minutes).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from tidescale.contracts.errors import MissingToolError, TidescaleError, UsageError
from tidescale.contracts.redact import redact_url, redact_urls

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
MAX_CAPTURE_MS = 10 * 60 * 1000
POST_ATTEMPTS = 4
DEFAULT_RETRY_AFTER_S = 10.0
MAX_RETRY_AFTER_S = 60.0


class CaptureFailed(TidescaleError):
    """The capture or its upload failed: exit 2 with the message, as every CLI error does (1 is the
    release gate's "over the limit", which a CronJob's failure must not look like)."""

    exit_code = 2


def parse_duration_ms(text: str) -> int:
    """'2s', '500ms', '1m' or bare seconds → milliseconds; UsageError otherwise."""
    m = _DURATION.match(text)
    if not m:
        raise UsageError(f"--duration {text!r}: expected e.g. 2s, 500ms or 1m")
    value = float(m.group(1)) * {"ms": 1, "s": 1000, "m": 60000, None: 1000}[m.group(2)]
    if not 1 <= value <= MAX_CAPTURE_MS:
        raise UsageError(f"--duration {text!r}: must be between 1 ms and 10 minutes")
    return int(value)


def check_target(target: str) -> str:
    """HOST:PORT of the profiler gRPC service (`grpc://` prefix allowed)."""
    bare = target.removeprefix("grpc://")
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--target {target!r}: expected HOST:PORT of the profiler service")
    return bare


def capture(target: str, duration: str, out: Path, host_tracer_level: int = 3) -> list[Path]:
    """Run one capture into *out*; returns the new `.xplane.pb` files."""
    addr = check_target(target)
    duration_ms = parse_duration_ms(duration)
    try:
        from xprof.convert import _pywrap_profiler_plugin  # type: ignore[import-not-found]
    except ImportError:
        raise MissingToolError("profile capture needs xprof's client: pip install 'tidescale[profile]' "
                               "(PyPI xprof)") from None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureFailed(f"cannot create --out {out}: {exc.strerror or exc}") from None
    before = set(out.glob("plugins/profile/*/*.xplane.pb"))
    options = {"host_tracer_level": host_tracer_level, "device_tracer_level": 1,
               "python_tracer_level": 0, "delay_ms": 0}
    try:
        _pywrap_profiler_plugin.trace(addr, str(out), "", True, duration_ms, 3, options)
    except Exception as exc:  # the C API raises RuntimeError with the gRPC status text
        raise CaptureFailed(f"profile capture from {addr} failed: {exc}") from None
    return sorted(set(out.glob("plugins/profile/*/*.xplane.pb")) - before)


def post(files: list[Path], url: str, model: str, version: str, token: str | None,
         sleep: Callable[[float], None] = time.sleep) -> None:
    """Upload captures to the exporter (`POST {url}/v1/profiles?model=…&version=…`).

    The exporter parses `max_profile_uploads` (1) at a time and answers 429 with Retry-After to the
    rest: captures of several models scheduled alike are retried, `POST_ATTEMPTS` times at most.
    """
    import httpx

    headers = {"Content-Type": "application/x-protobuf"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    for path in files:
        for attempt in range(1, POST_ATTEMPTS + 1):
            try:
                resp = httpx.post(f"{url.rstrip('/')}/v1/profiles", params={"model": model, "version": version},
                                  content=path.read_bytes(), headers=headers, timeout=60)
            except httpx.InvalidURL:  # its message quotes the URL's parts ("Invalid port: 'pa'"): a password
                raise CaptureFailed(f"--post {redact_url(url)} is not a valid URL") from None
            except (httpx.HTTPError, OSError) as exc:
                raise CaptureFailed(f"upload of {path.name} to {redact_url(url)} failed: "
                                    f"{redact_urls(str(exc))}") from None
            if resp.status_code != 429 or attempt == POST_ATTEMPTS:
                break
            sleep(_retry_after(resp.headers.get("retry-after")))
        if resp.status_code >= 400:
            raise CaptureFailed(f"upload of {path.name} refused: HTTP {resp.status_code} {resp.text[:200]}")


def _retry_after(value: str | None) -> float:
    """Seconds a 429's Retry-After asks for (its delay form), within 1 s and `MAX_RETRY_AFTER_S`."""
    text = (value or "").strip()
    seconds = float(text) if text.isascii() and text.isdigit() else DEFAULT_RETRY_AFTER_S
    return min(max(seconds, 1.0), MAX_RETRY_AFTER_S)
