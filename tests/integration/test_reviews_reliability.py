"""kill -9 the real review service in the middle of 1,000 webhook posts with re-sends.

Like Alertmanager, the poster re-sends every notification that did not get a 2xx. After a
restart on the same SQLite (WAL) file, every acknowledged review must be there, once
(test_reviews_postgres.py runs the same on PostgreSQL).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.unit.alerts.reviews_helpers import AUTH, TOKEN, alert, payload
from tidescale.devstack.ports import free_port
from tidescale.devstack.procs import ManagedProcess

pytestmark = pytest.mark.integration

DISTINCT = 250
RESENDS = 4  # 250 distinct reviews x 4 sends = 1,000 posts
KILL_AFTER = 400


def start_service(tmp_path: Path, port: int, run: int, database: str) -> ManagedProcess:
    argv = [sys.executable, "-m", "tidescale.cli", "reviews", "serve", "--port", str(port), "--database", database]
    env = {**os.environ, "TIDESCALE_REVIEWS_TOKEN": TOKEN}
    proc = ManagedProcess(f"reviews-{run}", argv, tmp_path / f"reviews-{run}.log", env=env).start()
    proc.wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
    return proc


def test_kill_9_mid_stream_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    kill_9_mid_stream(tmp_path, f"sqlite:///{tmp_path / 'reviews.db'}")


def kill_9_mid_stream(workdir: Path, database: str) -> None:
    """Post with re-sends, kill -9 the service after KILL_AFTER acknowledgements, restart it on the
    same database until every post is acknowledged; then every review is there exactly once."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sends = [i % DISTINCT for i in range(DISTINCT * RESENDS)]  # interleaved re-sends
    acked: set[int] = set()
    pending = list(enumerate(sends))
    lock = threading.Lock()
    posted = 0
    killed = threading.Event()
    proc = start_service(workdir, port, 0, database)
    try:
        def worker(items: list[tuple[int, int]], failed: list[tuple[int, int]]) -> None:
            nonlocal posted
            with httpx.Client(timeout=5.0) as client:
                for idx, key in items:
                    body = payload(alert(model=f"model-{key % 10}", version=str(key)))
                    try:
                        resp = client.post(f"{url}/api/v1/alertmanager", json=body, headers=AUTH)
                        ok = resp.status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    with lock:
                        if ok:
                            acked.add(key)
                            posted += 1
                            if posted == KILL_AFTER:
                                proc.kill()  # SIGKILL while the other threads keep posting
                                killed.set()
                        else:
                            failed.append((idx, key))

        rounds = 0
        while pending and rounds < 5:
            failed: list[tuple[int, int]] = []
            chunks = [pending[i::4] for i in range(4)]
            threads = [threading.Thread(target=worker, args=(c, failed)) for c in chunks]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            pending = sorted(failed)
            rounds += 1
            if pending:  # Alertmanager would retry: bring the service back on the same file
                assert killed.is_set()
                proc.stop()
                proc = start_service(workdir, port, rounds, database)
        assert killed.is_set(), "the service was never killed"
        assert not pending, f"{len(pending)} posts never acknowledged"
        assert rounds >= 2, "the kill did not interrupt any post"
        items = httpx.get(f"{url}/api/v1/reviews", params={"limit": 5000}).json()["items"]
        keys = [(r["namespace"], r["model"], r["version"], r["reason"]) for r in items]
        assert len(keys) == len(set(keys)), "duplicated reviews"
        assert {int(r["version"]) for r in items} == acked == set(range(DISTINCT)), "lost reviews"
        assert all(r["state"] == "open" for r in items)
    finally:
        proc.stop()
