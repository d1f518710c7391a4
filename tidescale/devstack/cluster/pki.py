"""The local cluster's certificates, made once with openssl and reused by every `cluster up`.

The API server authenticates every component by a client certificate whose CN/O are the user and
groups that RBAC and the Node authorizer expect (``system:kube-controller-manager``,
``system:node:<name>`` in ``system:nodes`` ...), exactly as kubeadm lays them out, so the
control plane runs with its production authorization modes rather than an allow-all shortcut.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from tidescale.contracts.errors import TidescaleError

DAYS = "3650"


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise TidescaleError(f"openssl {args[0]} failed: {proc.stderr.strip()[-400:]}")


def _new_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", str(path))
    path.chmod(0o600)


def _subject(cn: str, orgs: Sequence[str]) -> str:
    return "".join(f"/O={o}" for o in orgs) + f"/CN={cn}"


class Pki:
    """A directory of CAs and leaf certificates; each file is made only if missing."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _pair(self, name: str) -> KeyPair:
        return KeyPair(self.root / f"{name}.crt", self.root / f"{name}.key")

    def ca(self, name: str, cn: str) -> KeyPair:
        pair = self._pair(name)
        if not pair.cert.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            _new_key(pair.key)
            _openssl("req", "-x509", "-new", "-key", str(pair.key), "-out", str(pair.cert), "-days", DAYS,
                     "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
        return pair

    def leaf(self, name: str, ca: KeyPair, cn: str, orgs: Sequence[str] = (), *,
             dns: Sequence[str] = (), ips: Sequence[IPv4Address | str] = (), server: bool = False) -> KeyPair:
        """A certificate signed by *ca*; server ones carry the SANs clients dial."""
        pair = self._pair(name)
        if pair.cert.exists():
            return pair
        self.root.mkdir(parents=True, exist_ok=True)
        _new_key(pair.key)
        usage = "serverAuth,clientAuth" if server else "clientAuth"
        ext = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
               f"extendedKeyUsage={usage}"]
        sans = [f"DNS:{d}" for d in dns] + [f"IP:{ip}" for ip in ips]
        if sans:
            ext.append("subjectAltName=" + ",".join(sans))
        with tempfile.TemporaryDirectory() as tmp:
            csr, extfile = Path(tmp) / "req.csr", Path(tmp) / "ext.cnf"
            extfile.write_text("\n".join(ext) + "\n")
            _openssl("req", "-new", "-key", str(pair.key), "-out", str(csr), "-subj", _subject(cn, orgs))
            _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
                     "-CAcreateserial", "-out", str(pair.cert), "-days", DAYS, "-extfile", str(extfile))
        return pair

    def service_account_key(self) -> KeyPair:
        """The key pair that signs service-account tokens (``sa.crt`` holds the public key)."""
        pair = KeyPair(self.root / "sa.pub", self.root / "sa.key")
        if not pair.cert.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            _new_key(pair.key)
            _openssl("pkey", "-in", str(pair.key), "-pubout", "-out", str(pair.cert))
        return pair
