"""Start one container of a pod as a host process: the part a container runtime would do.

The agent writes a `ContainerLaunch` with `launch_argv` and runs the argv it gets back. That argv enters
the pod's network namespace (`ip netns exec`, which also bind-mounts the sandbox's resolv.conf, hosts and
hostname over /etc) and runs this module, which unshares a mount and a UTS namespace of its own, mounts the
volumes, sets the hostname, changes to the container's user and working directory and then execs the
container's argv. Every step execs in place, so the pid the agent started *is* the container's process:
signals go straight to it and its exit status is the container's.

Volumes are mounted at their container paths in the launcher's own mount namespace, never the host's.
When a mount target does not exist, the launcher does not create it on the host: it shadows the nearest
existing directory with a tmpfs that holds bind mounts of all that directory's entries (a "mimic", as
snapd calls it), creates the missing path in the tmpfs, and mounts there. The container sees the
directory as it was plus the new path; the host sees nothing. Only a target inside another volume is
created in that volume's source, as runtimes do; those paths are listed in `<spec_dir>/created-mountpoints`
for `cleanup_mountpoints`.

A real container has a root of its own; here the host's tree is the root, so a volume may cover what the
launcher itself needs (an emptyDir at /tmp over a checkout cloned under /tmp). The launcher therefore holds
its spec directory and its scratch tmpfs by file descriptor, and binds the checkout and the interpreter's
prefix back over any volume that covers them.

Failures before the exec print one line on stderr and exit 127, like a runtime that cannot start a container.
This module imports only the standard library: it runs once per container start.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

MODULE = "tidescale.devstack.node.launch"
LAUNCH_FAILED = 127
CREATED_MOUNTPOINTS = "created-mountpoints"

# <linux/mount.h> and <linux/sched.h>
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_UNBINDABLE = 0x20000
MS_PRIVATE = 0x40000
MS_SLAVE = 0x80000
MS_RELATIME = 0x200000
CLONE_NEWNS = 0x20000
CLONE_NEWUTS = 0x4000000
# A read-only remount of a bind mount replaces all its per-mount flags: carry these over from statvfs.
_KEPT_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC,
               os.ST_NOATIME: MS_NOATIME, os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}


@dataclass(frozen=True)
class Mount:
    """*source* (a directory or a single file on the host) appears at *target*, an absolute container path."""

    source: Path
    target: str
    read_only: bool = False


@dataclass
class ContainerLaunch:
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount] = field(default_factory=list)
    working_dir: str | None = None
    run_as_user: int | None = None
    run_as_group: int | None = None
    hostname: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "env": dict(self.env),
                "mounts": [{"source": str(m.source), "target": m.target, "read_only": m.read_only}
                           for m in self.mounts],
                "working_dir": self.working_dir, "run_as_user": self.run_as_user,
                "run_as_group": self.run_as_group, "hostname": self.hostname}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ContainerLaunch:
        return cls(argv=[str(a) for a in doc["argv"]], env={str(k): str(v) for k, v in doc["env"].items()},
                   mounts=[Mount(Path(m["source"]), str(m["target"]), bool(m.get("read_only", False)))
                           for m in doc.get("mounts", [])],
                   working_dir=doc.get("working_dir"), run_as_user=doc.get("run_as_user"),
                   run_as_group=doc.get("run_as_group"), hostname=doc.get("hostname"))


def launch_argv(sandbox_netns: str, launch: ContainerLaunch, spec_dir: Path) -> list[str]:
    """Write *launch* into a new 0600 file in *spec_dir* (it may hold secrets in env) and return the argv
    that starts it in the sandbox. Start that argv with ``start_new_session=True``: the pid is the container's.

    Each call writes a new file, left in place for the agent to remove with *spec_dir*. The launcher uses
    *spec_dir* as a scratch mount point in its own mount namespace, so it must be a directory of its own.
    """
    spec_dir.mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix="launch-", suffix=".json", dir=spec_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(launch.to_json(), f)
    # -P: `python -m` would otherwise put the working directory first on sys.path.
    return [shutil.which("ip") or "ip", "netns", "exec", sandbox_netns, sys.executable, "-P", "-m", MODULE, path]


def cleanup_mountpoints(spec_dir: Path) -> None:
    """Remove what launchers recorded creating on the host, deepest first, where still empty."""
    record = spec_dir / CREATED_MOUNTPOINTS
    try:
        lines = record.read_text().splitlines()
    except FileNotFoundError:
        return
    for path in sorted({Path(line) for line in lines if line}, key=lambda p: len(p.parts), reverse=True):
        try:
            if path.is_symlink():
                continue
            if path.is_dir():
                path.rmdir()
            elif path.is_file() and path.stat().st_size == 0:
                path.unlink()
        except OSError:
            pass  # not empty, or gone: leave it
    record.unlink(missing_ok=True)


class _Fail(Exception):
    """A reason the container cannot start, said in one line."""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]


def _mount(source: str | None, target: str | Path, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    if _libc.mount(enc(source), os.fsencode(str(target)), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise _Fail(f"cannot mount {source or fstype or ''} at {target}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        raise _Fail(f"cannot create the container's namespaces: {os.strerror(ctypes.get_errno())}")


class _Mounter:
    """Mounts volumes in this process's (private) mount namespace; see the module docstring for targets
    that do not exist."""

    def __init__(self, spec_dir: Path) -> None:
        # Held as file descriptors, not paths: a volume mounted at /tmp would hide a spec_dir under /tmp.
        try:
            self.spec_fd = os.open(spec_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise _Fail(f"the launch spec's directory {spec_dir}: {exc.strerror}") from exc
        # Shadow tmpfses are built under a scratch tmpfs of this namespace's own, stacked on spec_dir.
        _mount("tmpfs", spec_dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
        # Unbindable: when a shadowed directory is an ancestor of spec_dir, binding its entries
        # recursively must not copy the scratch tmpfs into itself.
        _mount(None, spec_dir, None, MS_UNBINDABLE)
        self.scratch_fd = os.open(spec_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.staged = 0
        self.shadowed: set[Path] = set()  # on a tmpfs of ours: free to create paths in
        self.bound: dict[Path, Path] = {}  # directory volumes: container path -> host path

    def _record_created(self, host_path: Path) -> None:
        fd = os.open(CREATED_MOUNTPOINTS, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600,
                     dir_fd=self.spec_fd)
        with os.fdopen(fd, "a") as record:
            record.write(f"{host_path}\n")

    def mount_all(self, mounts: list[Mount]) -> None:
        for m in mounts:
            if not PurePosixPath(m.target).is_absolute():
                raise _Fail(f"mount target {m.target!r} is not an absolute path")
        mounts = mounts + _kept_visible(mounts)
        # Open every source first: a later mount may cover the path a source was named by.
        sources: list[int] = []
        try:
            for m in mounts:
                try:
                    sources.append(os.open(m.source, os.O_PATH | os.O_CLOEXEC))
                except OSError as exc:
                    raise _Fail(f"mount source {m.source} for {m.target}: {exc.strerror}") from exc
            read_only: list[Path] = []
            # Parents before children, so a volume inside another volume lands on top of it.
            for m, fd in sorted(zip(mounts, sources, strict=True), key=lambda p: len(PurePosixPath(p[0].target).parts)):
                is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                target = self._mountpoint(m.target, is_dir)
                _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
                self.shadowed.discard(target)  # now the volume's directory, not the tmpfs one under it
                if is_dir:
                    self.bound[target] = Path(os.path.realpath(m.source))
                if m.read_only:
                    read_only.append(target)
        finally:
            for fd in sources:
                os.close(fd)
        # Read-only last: paths for nested volumes may have been created in a read-only volume's source.
        for target in read_only:
            kept = os.statvfs(target).f_flag
            flags = sum(ms for st, ms in _KEPT_FLAGS.items() if kept & st)
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)

    def _mountpoint(self, target: str, is_dir: bool) -> Path:
        path = Path(os.path.realpath(target))
        if path.exists():
            if path.is_dir() != is_dir:
                kinds = ("directory", "file") if is_dir else ("file", "directory")
                raise _Fail(f"cannot mount a {kinds[0]} over the {kinds[1]} {target}")
            return path
        missing: list[str] = []
        anchor = path
        while not anchor.exists():
            missing.append(anchor.name)
            anchor = anchor.parent
        if not anchor.is_dir():
            raise _Fail(f"cannot create the mount point {target}: {anchor} is not a directory")
        volume = None if anchor in self.shadowed else self._volume_of(anchor)
        if volume is None and anchor not in self.shadowed:
            self._shadow(anchor)
        current = anchor
        for i, name in enumerate(reversed(missing)):
            current = current / name
            if i == len(missing) - 1 and not is_dir:
                current.touch(mode=0o644, exist_ok=False)
            else:
                current.mkdir(mode=0o755)
            if volume is not None:
                target_dir, host_dir = volume
                self._record_created(host_dir / current.relative_to(target_dir))
            else:
                self.shadowed.add(current)
        return current

    def _volume_of(self, path: Path) -> tuple[Path, Path] | None:
        """The innermost directory volume holding *path*: (its container path, its host path)."""
        holders = [t for t in self.bound if t == path or t in path.parents]
        if not holders:
            return None
        target = max(holders, key=lambda t: len(t.parts))
        return target, self.bound[target]

    def _shadow(self, directory: Path) -> None:
        """Cover *directory* with a tmpfs holding bind mounts of all its entries."""
        st = directory.stat()
        entries = list(os.scandir(directory))
        self.staged += 1
        staging = Path(f"/proc/self/fd/{self.scratch_fd}/{self.staged}")
        staging.mkdir()
        _mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV,
               f"mode={st.st_mode & 0o7777:o},uid={st.st_uid},gid={st.st_gid}")
        for entry in entries:
            copy = staging / entry.name
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), copy)
                continue
            if entry.is_dir(follow_symlinks=False):
                copy.mkdir()
            else:
                copy.touch()
            _mount(entry.path, copy, None, MS_BIND | MS_REC)
        if directory == Path("/"):
            # A mount over / is only seen by a process whose root is the new mount (as switch_root does).
            os.chdir(staging)
            _mount(str(staging), "/", None, MS_MOVE)
            os.chroot(".")
        else:
            _mount(str(staging), directory, None, MS_MOVE)
        _mount(None, directory, None, MS_PRIVATE)
        self.shadowed.add(directory)


def _kept_visible(mounts: list[Mount]) -> list[Mount]:
    """The host trees the container's program runs from (this checkout: the venv, .tools, the
    cluster's state; the interpreter's prefix), bound back over any volume that would cover them.

    A real container has its own root; here a volume at, say, /tmp (KEDA's and the review
    service's scratch emptyDir) would otherwise hide a checkout cloned under /tmp, and with it
    the program and this spec file.
    """
    keep = {Path(__file__).resolve().parents[3], Path(os.path.realpath(sys.executable)).parents[1]}
    out = []
    for path in sorted(keep):
        covered = any(path == Path(m.target) or Path(m.target) in path.parents for m in mounts)
        if covered:
            out.append(Mount(source=path, target=str(path)))
    return out


def _drop_privileges(launch: ContainerLaunch, env: dict[str, str]) -> None:
    uid = launch.run_as_user if launch.run_as_user is not None else os.getuid()
    try:
        account: pwd.struct_passwd | None = pwd.getpwuid(uid)
    except KeyError:
        account = None
    # As a runtime does from the image's /etc/passwd (here the host's): HOME, and the user's own group
    # when no group is given, else root's group.
    env.setdefault("HOME", account.pw_dir if account else "/")
    if launch.run_as_user is None and launch.run_as_group is None:
        return
    gid = launch.run_as_group if launch.run_as_group is not None else (account.pw_gid if account else 0)
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError as exc:
        raise _Fail(f"cannot run as uid {uid} gid {gid}: {exc.strerror}") from exc


def _exec(launch: ContainerLaunch, env: dict[str, str]) -> NoReturn:
    if not launch.argv:
        raise _Fail("the container has no command")
    executable = launch.argv[0]
    if "/" not in executable:
        found = shutil.which(executable, path=env.get("PATH", os.environ.get("PATH", os.defpath)))
        if found is None:
            raise _Fail(f"executable {executable!r} not found in PATH")
        executable = found
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(executable, launch.argv, env)
    except OSError as exc:
        raise _Fail(f"cannot run {executable}: {exc.strerror}") from exc


def run(spec: Path) -> NoReturn:
    try:
        launch = ContainerLaunch.from_json(json.loads(spec.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _Fail(f"cannot read the launch spec {spec}: {exc}") from exc
    cwd = os.getcwd()
    _unshare(CLONE_NEWNS | CLONE_NEWUTS)
    # Nothing mounted from here on may propagate back to the host's namespace.
    _mount(None, "/", None, MS_REC | MS_SLAVE)
    _Mounter(spec.parent).mount_all(launch.mounts)
    if launch.hostname:
        socket.sethostname(launch.hostname)
    env = dict(launch.env)
    _drop_privileges(launch, env)
    workdir = launch.working_dir or cwd
    try:
        os.chdir(workdir)
    except OSError as exc:
        if launch.working_dir:
            raise _Fail(f"working directory {workdir}: {exc.strerror}") from exc
        os.chdir("/")  # the agent's own cwd is not there any more (e.g. a shadowed /)
    _exec(launch, env)


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) != 1:
            raise _Fail(f"usage: python -m {MODULE} SPEC.json")
        run(Path(args[0]))
    except (_Fail, OSError) as exc:
        message = " ".join(str(exc).split())
        print(f"tidescale-launch: {message}", file=sys.stderr, flush=True)
        sys.exit(LAUNCH_FAILED)


if __name__ == "__main__":
    main()
