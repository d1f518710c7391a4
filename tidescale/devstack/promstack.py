"""A real Prometheus and a real Alertmanager for the local stack and the integration tests.

Targets go into a file_sd JSON file, so the fleet can add and remove replicas while
Prometheus runs (it watches the file), with Kubernetes-like `namespace`/`pod` target labels.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tidescale.contracts.alertmanager import active_alerts
from tidescale.contracts.errors import TidescaleError
from tidescale.contracts.prometheus import PrometheusClient
from tidescale.devstack import tools
from tidescale.devstack.ports import LOOPBACK, port_or_free
from tidescale.devstack.procs import ManagedProcess


@dataclass(frozen=True)
class ScrapeTarget:
    """One scrape target: a job, a host:port and the labels a Kubernetes SD would attach."""

    job: str
    address: str
    labels: dict[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class PrometheusServer:
    """`prometheus` on a loopback port with our scrape config, rule files and Alertmanager."""

    def __init__(
        self,
        workdir: Path,
        targets: Iterable[ScrapeTarget] = (),
        rule_files: Sequence[Path] = (),
        alertmanager_url: str | None = None,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        port: int | None = None,
        external_labels: dict[str, str] | None = None,
        alert_resend_delay: str = "2s",
    ) -> None:
        self.workdir = workdir.resolve()
        self.rule_files = [Path(p) for p in rule_files]
        self.alertmanager_url = alertmanager_url
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.port = port_or_free(port, "prometheus")
        self.external_labels = external_labels or {}
        # Prometheus drops notifications until it has discovered the Alertmanager and then waits a
        # whole resend delay (1m by default); short for the local stack so alerts arrive promptly.
        self.alert_resend_delay = alert_resend_delay
        self._targets: list[ScrapeTarget] = list(targets)
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    # --- configuration ---------------------------------------------------------------------------
    def _sd_path(self, job: str, metrics_path: str) -> Path:
        safe = "".join(c if c.isalnum() else "_" for c in f"{job}{metrics_path}")
        return self.workdir / "sd" / f"{safe}.json"

    def _jobs(self) -> dict[tuple[str, str], list[ScrapeTarget]]:
        jobs: dict[tuple[str, str], list[ScrapeTarget]] = {}
        for t in self._targets:
            jobs.setdefault((t.job, t.metrics_path), []).append(t)
        return jobs

    def config(self) -> dict[str, Any]:
        scrape_configs = []
        for (job, path), _ in sorted(self._jobs().items()):
            scrape_configs.append({
                "job_name": job if path == "/metrics" else f"{job}{path.replace('/', '_')}",
                "metrics_path": path,
                "honor_labels": False,
                "file_sd_configs": [{"files": [str(self._sd_path(job, path))], "refresh_interval": "1s"}],
            })
        cfg: dict[str, Any] = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval if self.scrape_interval.endswith("s")
                and int(self.scrape_interval[:-1] or 1) < 10 else "10s",
                "evaluation_interval": self.evaluation_interval,
                "external_labels": self.external_labels,
            },
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": scrape_configs,
        }
        if self.alertmanager_url:
            host = self.alertmanager_url.split("://", 1)[-1].rstrip("/")
            cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host]}]}]}
        return cfg

    def _write_sd(self) -> None:
        (self.workdir / "sd").mkdir(parents=True, exist_ok=True)
        for (job, path), targets in self._jobs().items():
            groups = [{"targets": [t.address], "labels": dict(t.labels)} for t in targets]
            _atomic_write(self._sd_path(job, path), json.dumps(groups, indent=1, sort_keys=True))

    def set_targets(self, targets: Iterable[ScrapeTarget]) -> None:
        """Replace the targets; new jobs need a reload, changed targets are picked up from file_sd."""
        old_jobs = set(self._jobs())
        self._targets = list(targets)
        # Jobs that vanished keep their file, emptied, so Prometheus drops their targets.
        for job, path in old_jobs - set(self._jobs()):
            _atomic_write(self._sd_path(job, path), "[]")
        self._write_sd()
        if self.proc is not None and set(self._jobs()) - old_jobs:
            self._write_config()
            self.reload()

    def _write_config(self) -> Path:
        path = self.workdir / "prometheus.yml"
        _atomic_write(path, yaml.safe_dump(self.config(), sort_keys=False))
        return path

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> PrometheusServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_sd()
        config_path = self._write_config()
        argv = [
            str(tools.prometheus()),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
            f"--rules.alert.resend-delay={self.alert_resend_delay}",
            "--log.level=warn",
        ]
        self.proc = ManagedProcess("prometheus", argv, self.workdir / "prometheus.log").start()
        self.proc.wait_http(f"{self.url}/-/ready", timeout=timeout)
        return self

    def reload(self) -> None:
        self._write_config()
        r = httpx.post(f"{self.url}/-/reload", timeout=10)
        if not r.is_success:
            raise TidescaleError(f"prometheus reload failed: {r.status_code} {r.text.strip()}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP API ----------------------------------------------------------------------------------
    def _api(self, path: str, params: dict[str, Any] | None = None) -> Any:
        with PrometheusClient(self.url, timeout_s=15) as client:
            return client.data(path, params)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the `result` list (vector/matrix/scalar normalised to a list)."""
        with PrometheusClient(self.url, timeout_s=15) as client:
            return client.query(expr, at)

    def query_value(self, expr: str) -> float | None:
        """The single value of an instant query, or None when it returns nothing."""
        res = self.query(expr)
        if not res:
            return None
        return float(res[0]["value"][1])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        with PrometheusClient(self.url, timeout_s=15) as client:
            return client.query_range(expr, start, end, step)

    def targets(self) -> list[dict[str, Any]]:
        return list(self._api("/api/v1/targets")["activeTargets"])

    def rules(self) -> list[dict[str, Any]]:
        return list(self._api("/api/v1/rules")["groups"])

    def tsdb_status(self) -> dict[str, Any]:
        """`/api/v1/status/tsdb`: the head block's series count and the top label cardinalities."""
        return dict(self._api("/api/v1/status/tsdb"))

    def alerts(self) -> list[dict[str, Any]]:
        return list(self._api("/api/v1/alerts")["alerts"])

    def wait_for_targets_up(self, count: int | None = None, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Wait until every target (or at least *count*) reports up; error lists the ones still down."""
        deadline = time.monotonic() + timeout
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            targets = self.targets()
            up = [t for t in targets if t.get("health") == "up"]
            want = count if count is not None else len(self._targets)
            if len(up) >= want and (count is not None or len(up) == len(targets)):
                return targets
            time.sleep(0.5)
        down = [f"{t['scrapeUrl']}: {t.get('lastError') or t.get('health')}" for t in targets
                if t.get("health") != "up"]
        raise TidescaleError("prometheus targets not up after "
                             f"{timeout:.0f}s: " + ("; ".join(down) or "no targets discovered"))

    def wait_for(self, expr: str, timeout: float = 30.0, interval: float = 0.5) -> list[dict[str, Any]]:
        """Wait until *expr* returns a non-empty result."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.query(expr)
            if res:
                return res
            time.sleep(interval)
        raise TidescaleError(f"no result for {expr!r} after {timeout:.0f}s")


class AlertmanagerServer:
    """`prometheus-alertmanager` on a loopback port, clustering off."""

    def __init__(self, workdir: Path, config_path: Path, port: int | None = None) -> None:
        self.workdir = workdir.resolve()
        self.config_path = config_path.resolve()
        self.port = port_or_free(port, "alertmanager")
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 30.0) -> AlertmanagerServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            str(tools.alertmanager()),
            f"--config.file={self.config_path}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]
        self.proc = ManagedProcess("alertmanager", argv, self.workdir / "alertmanager.log").start()
        self.proc.wait_http(f"{self.url}/-/ready", timeout=timeout)
        return self

    def alerts(self, active_only: bool = True) -> list[dict[str, Any]]:
        return active_alerts(self.url, active_only=active_only)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def __enter__(self) -> AlertmanagerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
