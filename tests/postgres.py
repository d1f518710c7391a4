"""A throwaway PostgreSQL server from Debian's `postgresql` package for the tests (`scripts/setup.sh`
installs it): initdb into a temp dir, listen on a free loopback port, trust auth, stop on exit.

PostgreSQL refuses to run as root; as root the cluster belongs to the package's `postgres` user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tidescale.devstack.ports import LOOPBACK, free_port

SUPERUSER = "tidescale"


def postgres_bin() -> Path | None:
    """The newest installed server's bin dir (Debian keeps them off PATH), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


def _as_owner(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@contextmanager
def running_postgres() -> Iterator[str]:
    """Start a cluster in a fresh temp dir (pytest's are private to root, which the server may not
    be); yields a SQLAlchemy URL prefix `postgresql+psycopg://user@host:port/`."""
    bindir = postgres_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed; run `bash scripts/setup.sh`")
    workdir = Path(tempfile.mkdtemp(prefix="tidescale-pg-"))
    data, sockets, log = workdir / "pgdata", workdir / "pgsock", workdir / "postgres.log"
    for d in (data, sockets):
        d.mkdir()
    log.touch()
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        for p in (workdir, data, sockets, log):
            os.chown(p, owner.pw_uid, owner.pw_gid)
    subprocess.run(_as_owner([str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
                              "--encoding=UTF8", "--no-sync"]), check=True, capture_output=True)
    port = free_port()
    options = f"-h {LOOPBACK} -p {port} -k {sockets} -c fsync=on"
    subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
                              "-w", "-t", "60", "start"]), check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://{SUPERUSER}@{LOOPBACK}:{port}/"
    finally:
        subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
                       capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)


def create_database(server_url: str, name: str) -> str:
    """A fresh database on the server; returns its SQLAlchemy URL."""
    import psycopg

    dsn = server_url.replace("postgresql+psycopg://", "postgresql://") + "postgres"
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')  # names come from the tests, not from input
            return server_url + name
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
