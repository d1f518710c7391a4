"""Pod network sandboxes made with iproute2: one network namespace per pod, routed, no bridge and no CNI.

Each pod gets a netns with ``eth0`` holding its address as a /32 and a default route via the link-local
gateway 169.254.1.1. The host end of the veth pair answers for that gateway (proxy ARP, plus a permanent
neighbour entry in the pod so it does not depend on the host having a route to 169.254.1.1), and the host
routes the pod's /32 to it. Pod to pod traffic is plain forwarding, so kube-proxy's NAT rules apply to it
as they would on a real node.

Everything made here is named with the ``tsc`` prefix (netns ``tsc-…``, host links ``tsc…``/``tsv…``,
``/etc/netns/tsc-…``), so ``HostNetwork.down`` finds all of it after a crash without any state file.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

from tidescale.contracts.errors import MissingToolError, TidescaleError

HOST_LINK = "tsc0"
NETNS_PREFIX = "tsc-"
VETH_PREFIX = "tsv"
LINK_PREFIXES = ("tsc", VETH_PREFIX)
GATEWAY = "169.254.1.1"
POD_IFNAME = "eth0"
# iproute2's own locations: `ip netns add` mounts the namespace under NETNS_RUN_DIR, and `ip netns exec`
# bind-mounts every file in NETNS_ETC_DIR/<name>/ over the same name in /etc.
NETNS_RUN_DIR = Path("/var/run/netns")
NETNS_ETC_DIR = Path("/etc/netns")
PROC_SYS = Path("/proc/sys")
HOST_RESOLV_CONF = Path("/etc/resolv.conf")
FREE_HINT = "run `tidescale cluster down` if an earlier cluster left it behind"


def _ip_binary() -> str:
    found = shutil.which("ip")
    if found is None:
        raise MissingToolError("`ip` (iproute2) is not installed; the local cluster needs it: apt-get install iproute2")
    return found


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [_ip_binary(), *(("-n", netns) if netns else ()), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if check and proc.returncode != 0:
        raise TidescaleError(f"`{' '.join(argv)}` failed: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc


def _ip_json(*args: str, netns: str | None = None) -> list[dict[str, Any]]:
    out = _ip("-j", *args, netns=netns).stdout.strip()
    return json.loads(out) if out else []


def _link(name: str, netns: str | None = None) -> dict[str, Any] | None:
    """The link called *name*, or None: asked by listing, since `ip link show NAME` fails for a missing one."""
    return next((link for link in _ip_json("link", "show", netns=netns) if link.get("ifname") == name), None)


def _ipv4_addresses(ifname: str, netns: str | None = None) -> list[IPv4Address]:
    for link in _ip_json("-4", "addr", "show", netns=netns):
        if link.get("ifname") == ifname:
            return [IPv4Address(a["local"]) for a in link.get("addr_info", []) if a.get("family") == "inet"]
    return []


def _write_sysctl(key: str, value: str) -> None:
    path = PROC_SYS / key.replace(".", "/")
    try:
        path.write_text(value)
    except OSError as exc:
        raise TidescaleError(f"cannot set {key}={value} ({exc.strerror}); the local cluster must run as root") from exc


def _ours(ifname: str | None) -> bool:
    return bool(ifname) and str(ifname).startswith(LINK_PREFIXES)


def _netns_names() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_RUN_DIR.iterdir())
    except FileNotFoundError:
        return []


class HostNetwork:
    """The host side shared by all pods: a dummy link holding the address host components bind to."""

    def __init__(self, host_ip: IPv4Address, pod_cidr: IPv4Network, link: str = HOST_LINK) -> None:
        if not link.startswith("tsc") or len(link) > 15:
            raise ValueError(f"host link {link!r} must start with 'tsc' (so teardown finds it) and fit in 15 chars")
        self.host_ip = host_ip
        self.pod_cidr = pod_cidr
        self.link = link

    def up(self) -> None:
        """Make the link and turn on forwarding; safe to call again on a network that is already up."""
        self._refuse_clashes()
        if _link(self.link) is None:
            self._add_link()
        for stale in _ipv4_addresses(self.link):
            if stale != self.host_ip:
                _ip("addr", "del", f"{stale}/32", "dev", self.link, check=False)
        _ip("addr", "replace", f"{self.host_ip}/32", "dev", self.link)
        _ip("link", "set", self.link, "up")
        _write_sysctl("net.ipv4.ip_forward", "1")

    def _add_link(self) -> None:
        """A dummy link; kernels built without the dummy driver get an empty bridge, which holds an address
        for local delivery just as well (nothing is ever routed out through it)."""
        for kind in ("dummy", "bridge"):
            proc = _ip("link", "add", self.link, "type", kind, check=False)
            if proc.returncode == 0:
                return
            if "Unknown device type" not in proc.stderr:
                break
        raise TidescaleError(f"cannot create the link {self.link}: {proc.stderr.strip()}")

    def _refuse_clashes(self) -> None:
        """The cluster only ever uses addresses nobody else has: stop before shadowing someone's network."""
        for link in _ip_json("-4", "addr", "show"):
            ifname = link.get("ifname")
            if ifname == self.link:
                continue
            for addr in link.get("addr_info", []):
                if addr.get("family") == "inet" and IPv4Address(addr["local"]) == self.host_ip:
                    raise TidescaleError(
                        f"{self.host_ip} is already assigned to {ifname}, but the local cluster needs it on its own "
                        f"link {self.link}: {FREE_HINT}, or free it with "
                        f"`ip addr del {self.host_ip}/{addr['prefixlen']} dev {ifname}`")
        for route in _ip_json("route", "show"):
            dst = route.get("dst", "default")
            if dst == "default" or _ours(route.get("dev")):
                continue
            net = IPv4Network(dst, strict=False)
            if net.overlaps(self.pod_cidr):
                how = f"dev {route['dev']}" if route.get("dev") else route.get("type", "route")
                raise TidescaleError(
                    f"the route {dst} ({how}) overlaps the pod range {self.pod_cidr}, so pod addresses would shadow "
                    f"it: {FREE_HINT}, or remove it with `ip route del {dst}`")

    def remove_link(self) -> None:
        """Remove only this instance's link (and with it host_ip); pods and other links are left alone."""
        _ip("link", "del", self.link, check=False)

    def down(self) -> None:
        """Remove everything with the cluster's prefix: every sandbox, every link, the host link."""
        for name in _netns_names():
            if name.startswith(NETNS_PREFIX):
                _ip("netns", "del", name, check=False)
        # A netns that processes still hold outlives its name; deleting the host end of its veth pair
        # takes the pod end and the pod's route with it.
        for link in _ip_json("link", "show"):
            if _ours(link.get("ifname")):
                _ip("link", "del", link["ifname"], check=False)
        for d in NETNS_ETC_DIR.glob(f"{NETNS_PREFIX}*"):
            shutil.rmtree(d, ignore_errors=True)
        left = self.leftovers()
        if left:
            raise TidescaleError(f"could not remove {', '.join(left)}; remove them by hand (`ip netns del`, "
                                 "`ip link del`, `rm -r`)")

    @staticmethod
    def leftovers() -> list[str]:
        """What the cluster made that still exists: netns names, link names and /etc/netns paths."""
        names = [n for n in _netns_names() if n.startswith(NETNS_PREFIX)]
        names += [link["ifname"] for link in _ip_json("link", "show") if _ours(link.get("ifname"))]
        names += sorted(str(d) for d in NETNS_ETC_DIR.glob(f"{NETNS_PREFIX}*"))
        return names


@dataclass(frozen=True)
class DnsConfig:
    nameserver: IPv4Address
    search: tuple[str, ...]
    options: tuple[str, ...] = ("ndots:5",)

    def resolv_conf(self) -> str:
        lines = [f"nameserver {self.nameserver}"]
        if self.search:
            lines.append("search " + " ".join(self.search))
        if self.options:
            lines.append("options " + " ".join(self.options))
        return "\n".join(lines) + "\n"


def _hosts_file(ip: IPv4Address, hostname: str) -> str:
    return ("# written by the tidescale node agent\n"
            "127.0.0.1\tlocalhost\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\n"
            f"{ip}\t{hostname}\n")


@dataclass(frozen=True)
class PodSandbox:
    """A pod's network namespace. Names derive from the pod UID, so an agent restart finds it again."""

    netns: str
    ip: IPv4Address
    host_veth: str

    @staticmethod
    def names_for(key: str) -> tuple[str, str]:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return f"{NETNS_PREFIX}{digest[:12]}", f"{VETH_PREFIX}{digest[:11]}"

    @property
    def etc_dir(self) -> Path:
        return NETNS_ETC_DIR / self.netns

    @classmethod
    def create(cls, key: str, ip: IPv4Address, hostname: str, dns: DnsConfig | None) -> PodSandbox:
        """Make the sandbox, or finish and reuse one left by an earlier run with the same address."""
        netns, host_veth = cls.names_for(key)
        sandbox = cls(netns, ip, host_veth)
        made = not sandbox.exists()
        try:
            if made:
                _ip("netns", "add", netns)
            sandbox._wire(key)
            sandbox._write_etc(hostname, dns)
        except (TidescaleError, OSError) as exc:
            if made:
                sandbox.destroy()
            if isinstance(exc, TidescaleError):
                raise
            raise TidescaleError(f"cannot set up the sandbox {netns} for pod {key}: {exc}") from exc
        return sandbox

    def _wire(self, key: str) -> None:
        ns = self.netns
        held = [a for a in _ipv4_addresses(POD_IFNAME, netns=ns) if a != self.ip]
        if held:
            raise TidescaleError(f"the sandbox {ns} for pod {key} already has {held[0]}, not {self.ip}; "
                                 "destroy it before creating it with another address")
        _ip("link", "set", "lo", "up", netns=ns)
        if _link(POD_IFNAME, netns=ns) is None or _link(self.host_veth) is None:
            # Half a pair (a crash mid-create): start the pair over. Deleting either end removes both.
            _ip("link", "del", self.host_veth, check=False)
            _ip("link", "del", POD_IFNAME, netns=ns, check=False)
            _ip("link", "add", self.host_veth, "type", "veth", "peer", "name", POD_IFNAME, "netns", ns)
        host_end = _link(self.host_veth)
        assert host_end is not None
        _ip("addr", "replace", f"{self.ip}/32", "dev", POD_IFNAME, netns=ns)
        _ip("link", "set", POD_IFNAME, "up", netns=ns)
        _ip("route", "replace", GATEWAY, "dev", POD_IFNAME, "scope", "link", netns=ns)
        _ip("route", "replace", "default", "via", GATEWAY, "dev", POD_IFNAME, netns=ns)
        _ip("neigh", "replace", GATEWAY, "lladdr", host_end["address"], "dev", POD_IFNAME, "nud", "permanent",
            netns=ns)
        _ip("link", "set", self.host_veth, "up")
        _write_sysctl(f"net.ipv4.conf.{self.host_veth}.proxy_arp", "1")
        for route in _ip_json("route", "show", "exact", f"{self.ip}/32"):
            if route.get("dev") != self.host_veth:
                raise TidescaleError(f"{self.ip} is already routed to {route.get('dev')} (another pod's sandbox?); "
                                     f"pod {key} cannot have it too")
        _ip("route", "replace", f"{self.ip}/32", "dev", self.host_veth)

    def _write_etc(self, hostname: str, dns: DnsConfig | None) -> None:
        self.etc_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        resolv = dns.resolv_conf() if dns is not None else HOST_RESOLV_CONF.read_text()
        (self.etc_dir / "resolv.conf").write_text(resolv)
        (self.etc_dir / "hosts").write_text(_hosts_file(self.ip, hostname))
        (self.etc_dir / "hostname").write_text(hostname + "\n")

    def exists(self) -> bool:
        return (NETNS_RUN_DIR / self.netns).exists()

    def destroy(self) -> None:
        """Delete the netns (its veth and route go with it) and its /etc files; a no-op once gone."""
        _ip("netns", "del", self.netns, check=False)
        # Processes still inside keep the namespace alive without its name: cut its link from the host too.
        _ip("link", "del", self.host_veth, check=False)
        shutil.rmtree(self.etc_dir, ignore_errors=True)
        if self.exists() or _link(self.host_veth) is not None or self.etc_dir.exists():
            raise TidescaleError(f"could not remove the sandbox {self.netns} ({self.host_veth}, {self.etc_dir})")
