"""Child processes of the local stack: start, wait until ready, stop all of them in parallel."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import httpx

from tidescale.contracts.errors import TidescaleError

LOG_TAIL_MAX_BYTES = 256 * 1024  # a tail never reads more of a long log than this


class ManagedProcess:
    """A subprocess with a log file, an HTTP readiness check and a graceful stop."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self._log_offset = log.tell()  # a restart appends: the tail reads only this run's output
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, cwd=self.cwd, start_new_session=True,
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status once exited (negative: killed by that signal), else None."""
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            with self.log_path.open("rb") as f:
                end = f.seek(0, 2)
                f.seek(max(self._log_offset, end - LOG_TAIL_MAX_BYTES))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_http(self, url: str, timeout: float = 30.0, ok: Callable[[httpx.Response], bool] | None = None) -> None:
        """Poll *url* until it answers 2xx (or *ok*), or fail with the tail of the log."""
        deadline = time.monotonic() + timeout
        check = ok or (lambda r: r.is_success)
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if not self.alive():
                    raise TidescaleError(f"{self.name} exited early (see {self.log_path}):\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if check(client.get(url)):
                        return
                time.sleep(0.1)
        raise TidescaleError(f"{self.name} not ready at {url} after {timeout:.0f}s (see {self.log_path}):\n"
                             f"{self.log_tail()}")

    def terminate(self) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after *grace* seconds."""
        if self.proc is None:
            return
        self.terminate()
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(timeout=5)


def stop_all(procs: Iterable[ManagedProcess], grace: float = 10.0) -> None:
    """Stop every process at once: send all SIGTERMs first, then wait in parallel threads."""
    items = [p for p in procs if p is not None]
    for p in items:
        p.terminate()
    threads = [threading.Thread(target=p.stop, args=(grace,), daemon=True) for p in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join(grace + 10)
