"""Pod sandboxes and the container launcher, for real: network namespaces, veth pairs, routes, mounts.

Addresses come from 10.244.250.0/24 with the host link tsc9 on 10.243.250.1, so a local cluster running at
the same time (tsc0, 10.244.0.0/16 from the start) is left alone; only `HostNetwork.down`, which removes
every tsc object, runs in a network and mount namespace of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest

from tidescale.contracts.errors import TidescaleError
from tidescale.devstack.node.launch import (
    CREATED_MOUNTPOINTS,
    ContainerLaunch,
    Mount,
    cleanup_mountpoints,
    launch_argv,
)
from tidescale.devstack.node.sandbox import NETNS_ETC_DIR, DnsConfig, HostNetwork, PodSandbox

if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
    pytest.skip("pod sandboxes need root, iproute2 (`ip`) and util-linux (`unshare`)", allow_module_level=True)

pytestmark = pytest.mark.integration

HOST_IP = IPv4Address("10.243.250.1")
POD_CIDR = IPv4Network("10.244.250.0/24")
TEST_LINK = "tsc9"
PATH_ENV = {"PATH": os.environ.get("PATH", os.defpath)}
DNS = DnsConfig(IPv4Address("10.96.0.10"), ("default.svc.cluster.local", "svc.cluster.local", "cluster.local"))


def pod_ip(n: int) -> IPv4Address:
    return POD_CIDR.network_address + n


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


class Pods:
    """Sandboxes and container processes made by one test, all removed after it."""

    def __init__(self, spec_root: Path) -> None:
        self.spec_root = spec_root
        self.sandboxes: list[PodSandbox] = []
        self.procs: list[subprocess.Popen[str]] = []

    def sandbox(self, n: int, name: str, dns: DnsConfig | None = DNS) -> PodSandbox:
        sb = PodSandbox.create(f"tidescale-test-{uuid.uuid4()}", pod_ip(n), name, dns)
        self.sandboxes.append(sb)
        return sb

    def argv(self, sb: PodSandbox, launch: ContainerLaunch) -> list[str]:
        spec_dir = self.spec_root / sb.netns
        return launch_argv(sb.netns, launch, spec_dir)

    def start(self, sb: PodSandbox, launch: ContainerLaunch) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.argv(sb, launch), start_new_session=True, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.procs.append(proc)
        return proc

    def run(self, sb: PodSandbox, launch: ContainerLaunch) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(sb, launch), capture_output=True, text=True, timeout=60,
                              start_new_session=True)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        for sb in self.sandboxes:
            sb.destroy()
        left = set(HostNetwork.leftovers())
        for sb in self.sandboxes:
            assert not sb.exists()
            assert {sb.netns, sb.host_veth, str(NETNS_ETC_DIR / sb.netns)}.isdisjoint(left)


@pytest.fixture(scope="module")
def host_net() -> Iterator[HostNetwork]:
    net = HostNetwork(HOST_IP, POD_CIDR, link=TEST_LINK)
    net.up()
    try:
        yield net
    finally:
        net.remove_link()
        assert TEST_LINK not in HostNetwork.leftovers()


@pytest.fixture()
def pods(host_net: HostNetwork, tmp_path: Path) -> Iterator[Pods]:
    made = Pods(tmp_path / "specs")
    try:
        yield made
    finally:
        made.close()


def http_get(url: str, timeout_s: float = 15.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return str(resp.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# Not `python -m http.server`: it looks up its own name (socket.getfqdn) between bind and listen, and the
# pods' DNS server (the cluster's, 10.96.0.10) is not there while these tests run.
SERVE_FILES = """
    import http.server, socketserver
    socketserver.ThreadingTCPServer(("0.0.0.0", 8080), http.server.SimpleHTTPRequestHandler).serve_forever()
"""

FETCH = """
    import sys, urllib.request
    print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
"""


def test_two_pods_serve_the_same_port_to_each_other_and_to_the_host(pods: Pods, tmp_path: Path) -> None:
    servers = {}
    for n, name in ((11, "pod-a"), (12, "pod-b")):
        www = tmp_path / name
        www.mkdir()
        (www / "who").write_text(name)
        sb = pods.sandbox(n, name)
        pods.start(sb, ContainerLaunch(python(SERVE_FILES), PATH_ENV, [], working_dir=str(www)))
        servers[name] = sb
    for name, sb in servers.items():
        assert http_get(f"http://{sb.ip}:8080/who") == name
    a, b = servers["pod-a"], servers["pod-b"]
    for src, dst in ((a, b), (b, a)):
        got = pods.run(src, ContainerLaunch([*python(FETCH), f"http://{dst.ip}:8080/who"], PATH_ENV, []))
        assert got.returncode == 0, got.stderr
        assert got.stdout.strip() == ("pod-b" if dst is b else "pod-a")


def test_a_pod_reaches_servers_bound_on_the_host_ip(pods: Pods) -> None:
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"hello {self.client_address[0]}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((str(HOST_IP), 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sb = pods.sandbox(21, "client")
        got = pods.run(sb, ContainerLaunch([*python(FETCH), f"http://{HOST_IP}:{server.server_port}/"],
                                           PATH_ENV, []))
    finally:
        server.shutdown()
        server.server_close()
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == f"hello {sb.ip}"


INSPECT = """
    import errno, json, os, socket, sys
    report = {
        "config": open("/etc/tidescale-test/config/setting").read(),
        "model": open("/tidescale-test-models/model.txt").read(),
        "env": os.environ.get("TIDESCALE_TEST"),
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "resolv": open("/etc/resolv.conf").read(),
        "hosts": open("/etc/hosts").read(),
        "etc_kept": os.path.exists("/etc/passwd"),
        "run_kept": sorted(os.listdir("/run")) == sorted(sys.argv[1].split(",")[1:] + ["tidescale-test"]),
    }
    try:
        open("/etc/tidescale-test/config/new", "w")
        report["ro"] = "writable"
    except OSError as exc:
        report["ro"] = errno.errorcode[exc.errno]
    with open("/var/run/tidescale-test/data/out", "w") as f:
        f.write("from-the-pod")
    print(json.dumps(report), flush=True)
    sys.stdin.readline()
"""


def test_volumes_env_working_dir_hostname_and_dns_are_the_containers_alone(pods: Pods, tmp_path: Path) -> None:
    config, data, models, workdir = (tmp_path / n for n in ("config", "data", "models", "work"))
    for d in (config, data, models, workdir):
        d.mkdir()
    (config / "setting").write_text("from-the-host")
    (models / "model.txt").write_text("weights")
    # Targets whose parents the host lacks: under /etc, under /run (through the /var/run symlink), and at /.
    targets = ["/etc/tidescale-test", "/run/tidescale-test", "/tidescale-test-models"]
    assert not any(Path(t).exists() for t in targets)
    sb = pods.sandbox(31, "inspector")
    run_listing = ",".join(["", *os.listdir("/run")])
    proc = pods.start(sb, ContainerLaunch(
        [*python(INSPECT), run_listing], {**PATH_ENV, "TIDESCALE_TEST": "env-value"},
        [Mount(config, "/etc/tidescale-test/config", read_only=True),
         Mount(data, "/var/run/tidescale-test/data"),
         Mount(models / "model.txt", "/tidescale-test-models/model.txt", read_only=True)],
        working_dir=str(workdir), hostname="inspector"))
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    assert line, proc.communicate(timeout=10)[1]
    report = json.loads(line)
    # While the container runs, the host sees none of its mounts or mount points.
    assert not any(Path(t).exists() for t in targets)
    assert "tidescale-test" not in Path("/proc/self/mountinfo").read_text()
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""

    assert report["config"] == "from-the-host"
    assert report["model"] == "weights"
    assert report["ro"] == "EROFS"
    assert (data / "out").read_text() == "from-the-pod"
    assert report["env"] == "env-value"
    assert report["cwd"] == str(workdir)
    assert report["hostname"] == "inspector"
    assert report["etc_kept"] and report["run_kept"]
    assert report["resolv"] == ("nameserver 10.96.0.10\n"
                                "search default.svc.cluster.local svc.cluster.local cluster.local\n"
                                "options ndots:5\n")
    assert f"{sb.ip}\tinspector" in report["hosts"]
    assert not (pods.spec_root / sb.netns / CREATED_MOUNTPOINTS).exists()
    assert socket.gethostname() != "inspector"


def test_a_volume_inside_another_gets_its_mount_point_in_that_volume_and_cleanup_removes_it(
        pods: Pods, tmp_path: Path) -> None:
    outer, inner = tmp_path / "outer", tmp_path / "inner"
    outer.mkdir()
    inner.mkdir()
    (inner / "f").write_text("inner")
    sb = pods.sandbox(81, "nested")
    mounts = [Mount(inner, "/tidescale-test-outer/a/b"), Mount(outer, "/tidescale-test-outer")]
    got = pods.run(sb, ContainerLaunch(["cat", "/tidescale-test-outer/a/b/f"], PATH_ENV, mounts))
    assert got.returncode == 0, got.stderr
    assert got.stdout == "inner"
    # Like a runtime, the launcher made the mount point in the outer volume's source, and said so.
    assert (outer / "a" / "b").is_dir()
    spec_dir = pods.spec_root / sb.netns
    assert (spec_dir / CREATED_MOUNTPOINTS).read_text().split() == [str(outer / "a"), str(outer / "a" / "b")]
    (outer / "kept").write_text("the volume's own file")
    cleanup_mountpoints(spec_dir)
    assert sorted(p.name for p in outer.iterdir()) == ["kept"]
    assert not (spec_dir / CREATED_MOUNTPOINTS).exists()
    cleanup_mountpoints(spec_dir)


def test_a_volume_over_tmp_hides_neither_the_launch_spec_nor_the_checkout(pods: Pods, tmp_path: Path) -> None:
    # KEDA and the review service mount a scratch emptyDir at /tmp; CI may clone the checkout under /tmp,
    # and the spec directory (tmp_path here) is under it too.
    assert str(pods.spec_root).startswith("/tmp/")
    scratch, config = tmp_path / "scratch", tmp_path / "config"
    scratch.mkdir()
    config.mkdir()
    (config / "setting").write_text("kept")
    checkout = Path(__file__).resolve().parents[3]
    sb = pods.sandbox(91, "scratchy")
    mounts = [Mount(scratch, "/tmp"), Mount(config, "/etc/tidescale-test/config", read_only=True),
              Mount(config, "/tmp/nested/config", read_only=True),
              Mount(scratch, str(checkout.parent))]  # covers the checkout wherever it is
    got = pods.run(sb, ContainerLaunch(
        [*python("""
            import json, pathlib, sys, tidescale
            print(json.dumps({"etc": pathlib.Path("/etc/tidescale-test/config/setting").read_text(),
                              "nested": pathlib.Path("/tmp/nested/config/setting").read_text(),
                              "tmp": sorted(p.name for p in pathlib.Path("/tmp").iterdir()),
                              "checkout": pathlib.Path(sys.argv[1]).is_dir()}))
        """), str(checkout / "tidescale")], PATH_ENV, mounts))
    assert got.returncode == 0, got.stderr
    report = json.loads(got.stdout)
    assert report["etc"] == report["nested"] == "kept"
    assert "nested" in report["tmp"] and "pytest-of-root" not in report["tmp"]
    assert report["checkout"]
    # The mount point made inside the /tmp volume was recorded in the (hidden) spec directory.
    assert str(scratch / "nested") in (pods.spec_root / sb.netns / CREATED_MOUNTPOINTS).read_text().split()


def test_run_as_user_and_group(pods: Pods) -> None:
    sb = pods.sandbox(41, "nobody")
    got = pods.run(sb, ContainerLaunch(["sh", "-c", "id -u; id -g; id -G; echo $HOME"], PATH_ENV, [],
                                       run_as_user=65534))
    assert got.returncode == 0, got.stderr
    uid, gid, groups, home = got.stdout.split("\n")[:4]
    assert uid == "65534"
    assert gid == groups  # the user's own group, and no supplementary groups (root's are dropped)
    assert gid != "0"
    assert home
    got = pods.run(sb, ContainerLaunch(["sh", "-c", "id -u; id -g"], PATH_ENV, [], run_as_user=65534,
                                       run_as_group=4321))
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["65534", "4321"]


def test_the_started_pid_is_the_container_itself(pods: Pods) -> None:
    sb = pods.sandbox(51, "sleeper")
    proc = pods.start(sb, ContainerLaunch(["sleep", "300"], PATH_ENV, []))
    deadline = time.monotonic() + 15
    cmdline = b""
    while time.monotonic() < deadline:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        if cmdline == b"sleep\x00300\x00":
            break
        time.sleep(0.05)
    assert cmdline == b"sleep\x00300\x00"
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.parametrize(("launch", "needle"), [
    (ContainerLaunch(["tidescale-no-such-binary"], PATH_ENV, []), "tidescale-no-such-binary"),
    (ContainerLaunch(["true"], PATH_ENV, [Mount(Path("/nonexistent/tidescale-src"), "/x")]),
     "/nonexistent/tidescale-src"),
    (ContainerLaunch(["true"], PATH_ENV, [], working_dir="/nonexistent/tidescale-wd"), "/nonexistent/tidescale-wd"),
])
def test_a_container_that_cannot_start_exits_127_with_one_line(pods: Pods, launch: ContainerLaunch,
                                                               needle: str) -> None:
    sb = pods.sandbox(61, "broken")
    got = pods.run(sb, launch)
    assert got.returncode == 127
    assert len(got.stderr.splitlines()) == 1, got.stderr
    assert needle in got.stderr


def test_create_is_idempotent_and_destroy_leaves_nothing(host_net: HostNetwork) -> None:
    key = f"tidescale-test-{uuid.uuid4()}"
    sb = PodSandbox.create(key, pod_ip(71), "again", None)
    try:
        assert sb.exists()
        assert (NETNS_ETC_DIR / sb.netns / "resolv.conf").read_text() == Path("/etc/resolv.conf").read_text()
        again = PodSandbox.create(key, pod_ip(71), "again", DNS)
        assert again == sb
        assert "nameserver 10.96.0.10" in (NETNS_ETC_DIR / sb.netns / "resolv.conf").read_text()
        assert f"{pod_ip(71)} dev {sb.host_veth}" in subprocess.run(
            ["ip", "route", "show", f"{pod_ip(71)}/32"], capture_output=True, text=True, check=True).stdout
        with pytest.raises(TidescaleError, match=str(pod_ip(71))):
            PodSandbox.create(key, pod_ip(72), "again", None)
        assert sb.exists()
    finally:
        sb.destroy()
        sb.destroy()
    assert not sb.exists()
    assert {sb.netns, sb.host_veth, str(NETNS_ETC_DIR / sb.netns)}.isdisjoint(HostNetwork.leftovers())
    assert str(pod_ip(71)) not in subprocess.run(["ip", "route"], capture_output=True, text=True).stdout


ISOLATED_DOWN = """
    import subprocess
    from ipaddress import IPv4Address, IPv4Network
    from tidescale.contracts.errors import TidescaleError
    from tidescale.devstack.node.sandbox import HOST_LINK, HostNetwork, PodSandbox

    def ip(*args):
        subprocess.run(["ip", *args], check=True)

    def clash():
        try:
            net.up()
        except TidescaleError as exc:
            return str(exc)
        raise AssertionError("up() accepted a clash")

    net = HostNetwork(IPv4Address("10.243.250.1"), IPv4Network("10.244.250.0/24"))
    net.up()
    net.up()
    a = PodSandbox.create("a", IPv4Address("10.244.250.11"), "a", None)
    b = PodSandbox.create("b", IPv4Address("10.244.250.12"), "b", None)
    ip("link", "add", "keep0", "type", "bridge")
    ip("link", "add", "tsvorphan", "type", "bridge")
    expected = {HOST_LINK, "tsvorphan", a.netns, b.netns, a.host_veth, b.host_veth,
                f"/etc/netns/{a.netns}", f"/etc/netns/{b.netns}"}
    assert set(HostNetwork.leftovers()) == expected, HostNetwork.leftovers()
    net.down()
    assert HostNetwork.leftovers() == [], HostNetwork.leftovers()
    net.down()
    assert "keep0" in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout

    ip("link", "set", "keep0", "up")
    ip("addr", "add", "10.243.250.1/24", "dev", "keep0")
    msg = clash()
    assert "10.243.250.1" in msg and "keep0" in msg and "tidescale cluster down" in msg, msg
    ip("addr", "flush", "dev", "keep0")
    ip("route", "add", "10.244.250.128/25", "dev", "keep0")
    msg = clash()
    assert "10.244.250.128/25" in msg and "tidescale cluster down" in msg, msg
    print("isolated ok")
"""


def test_down_removes_every_tsc_object_and_nothing_else() -> None:
    # down() removes *every* tsc object, a running cluster's too: run it where only this test's exist,
    # a new network namespace with its own /run/netns and /etc/netns.
    NETNS_ETC_DIR.mkdir(exist_ok=True)  # iproute2's standard directory; sandboxes create it anyway
    script = f"mount -t tmpfs tsc-test /run && mount -t tmpfs tsc-test {NETNS_ETC_DIR} && exec \"$@\""
    got = subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c", script,
                          "sh", *python(ISOLATED_DOWN)], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "isolated ok"
