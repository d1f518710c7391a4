"""What the kubelet derives from a pod spec before it starts a container: environment and volumes.

Volumes are written as directories under the pod's state directory and bind-mounted at their
container paths by the launcher. ConfigMap, Secret and projected volumes are rewritten in place
(atomic renames) when their sources change, as the kubelet's periodic sync does, which is what
prometheus-operator's config reloader relies on.
"""

from __future__ import annotations

import base64
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidescale.devstack.node.kubeapi import ApiError, Json, KubeApi
from tidescale.devstack.node.launch import Mount

TOKEN_SECONDS = 3607  # what the kubelet asks for on behalf of kube-api-access volumes


KUBELET_ROOT = Path("/var/lib/kubelet")


def kubelet_root(node_dir: Path) -> Path:
    """Where a node keeps what the kubelet keeps under KUBELET_ROOT (the nodes share one host)."""
    return node_dir / "kubelet"

# Where the simulated device plugin writes which GPUs each container holds (a JSON list), standing in for
# the kubelet's pod-resources gRPC socket that the real dcgm-exporter reads; relative to the kubelet root.
POD_RESOURCES = "pod-resources/pod-resources.json"


class PodSpecError(Exception):
    """A reference the pod makes cannot be resolved (the kubelet's CreateContainerConfigError)."""


@dataclass
class TokenCache:
    """Projected service-account tokens, asked for through TokenRequest and renewed at 80 % of life."""

    api: KubeApi
    entries: dict[tuple[str, str, int], tuple[str, float]]

    def token(self, pod: Json, audience: str, seconds: int) -> str:
        key = (pod["metadata"]["uid"], audience, seconds)
        cached = self.entries.get(key)
        if cached and time.time() < cached[1]:
            return cached[0]
        meta = pod["metadata"]
        sa = pod["spec"].get("serviceAccountName") or "default"
        spec: Json = {"expirationSeconds": seconds,
                      "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}}
        if audience:
            spec["audiences"] = [audience]
        resp = self.api.create(f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token",
                               {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        token = resp["status"]["token"]
        self.entries[key] = (token, time.time() + 0.8 * seconds)
        return str(token)


def field_value(pod: Json, path: str, node_name: str, host_ip: str) -> str:
    """The downward API's fieldRef paths."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    if path.startswith("metadata.labels['") or path.startswith("metadata.annotations['"):
        kind, key = path.split("['", 1)
        return str(meta.get(kind.split(".")[1], {}).get(key.rstrip("']"), ""))
    values = {
        "metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
        "spec.nodeName": node_name, "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": host_ip, "status.podIP": status.get("podIP", ""),
        "status.podIPs": status.get("podIP", ""), "status.hostIPs": host_ip,
    }
    if path in ("metadata.labels", "metadata.annotations"):
        return "\n".join(f'{k}="{v}"' for k, v in sorted(meta.get(path.split(".")[1], {}).items()))
    if path not in values:
        raise PodSpecError(f"unsupported fieldRef {path}")
    return str(values[path])


def resource_value(container: Json, ref: Json) -> str:
    resource = ref["resource"]
    kind, _, name = resource.partition(".")
    value = container.get("resources", {}).get(kind, {}).get(name)
    if value is None and kind == "limits":
        value = {"cpu": "16", "memory": str(64 << 30)}.get(name, "0")  # node allocatable, as the kubelet does
    return str(value if value is not None else 0)


class SourceReader:
    """ConfigMap and Secret data for the pod's namespace (the Node authorizer allows just these)."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api, self.namespace = api, namespace

    def data(self, kind: str, name: str, optional: bool = False) -> dict[str, bytes] | None:
        resource = "configmaps" if kind == "configMap" else "secrets"
        try:
            obj = self.api.get(f"/api/v1/namespaces/{self.namespace}/{resource}/{name}")
        except ApiError as exc:
            if exc.status == 404:
                if optional:
                    return None
                raise PodSpecError(f"{kind} {self.namespace}/{name} not found") from exc
            raise
        out: dict[str, bytes] = {}
        if kind == "configMap":
            out.update({k: v.encode() for k, v in (obj.get("data") or {}).items()})
            out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        else:
            out.update({k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()})
        return out


def container_env(pod: Json, container: Json, reader: SourceReader, node_name: str, host_ip: str,
                  service_env: dict[str, str]) -> dict[str, str]:
    env: dict[str, str] = {"HOSTNAME": pod["metadata"]["name"], **service_env}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind in ("configMap", "secret"):
            ref = source.get(f"{kind}Ref")
            if ref:
                data = reader.data(kind, ref["name"], ref.get("optional", False)) or {}
                env.update({prefix + k: v.decode(errors="replace") for k, v in data.items()})
    for item in container.get("env") or []:
        name, source = item["name"], item.get("valueFrom")
        if source is None:
            env[name] = _expand(item.get("value", ""), env)
        elif "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"]["fieldPath"], node_name, host_ip)
        elif "resourceFieldRef" in source:
            env[name] = resource_value(container, source["resourceFieldRef"])
        else:
            kind = "configMap" if "configMapKeyRef" in source else "secret"
            ref = source[f"{kind}KeyRef"]
            data = reader.data(kind, ref["name"], ref.get("optional", False)) or {}
            if ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise PodSpecError(f"key {ref['key']} missing from {kind} {ref['name']}")
            env[name] = data[ref["key"]].decode(errors="replace")
    return env


def _expand(value: str, env: dict[str, str]) -> str:
    """``$(VAR)`` references to earlier variables, ``$$`` escapes; unknown ones stay as written."""
    out, i = [], 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("$(", i) and ")" in value[i:]:
            end = value.index(")", i)
            name = value[i + 2:end]
            out.append(env.get(name, value[i:end + 1]))
            i = end + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def expand_args(args: list[str], env: dict[str, str]) -> list[str]:
    return [_expand(a, env) for a in args]


def write_atomic(path: Path, data: bytes, mode: int) -> bool:
    """Write only if changed; a rename so that watchers never see half a file."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == data and (path.stat().st_mode & 0o777) == mode:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


FileSet = dict[str, tuple[bytes, int]]  # relative path -> (content, mode)


def _items(data: dict[str, bytes], items: list[Json] | None, default_mode: int) -> FileSet:
    if not items:
        return {k: (v, default_mode) for k, v in data.items()}
    out: FileSet = {}
    for item in items:
        if item["key"] in data:
            out[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
    return out


class VolumeBuilder:
    def __init__(self, pod: Json, root: Path, reader: SourceReader, tokens: TokenCache, node_name: str,
                 host_ip: str, ca_pem: bytes, kubelet_root: Path | None = None) -> None:
        self.pod, self.root, self.reader, self.tokens = pod, root, reader, tokens
        self.node_name, self.host_ip, self.ca_pem = node_name, host_ip, ca_pem
        self.kubelet_root = kubelet_root

    def files(self, volume: Json) -> FileSet | None:
        """The files of a kubelet-managed volume, or None for a plain directory volume."""
        if "configMap" in volume or "secret" in volume:
            kind = "configMap" if "configMap" in volume else "secret"
            src = volume[kind]
            name = src.get("name") or src.get("secretName")
            data = self.reader.data(kind, name, src.get("optional", False)) or {}
            return _items(data, src.get("items"), src.get("defaultMode", 0o644))
        if "projected" in volume:
            proj = volume["projected"]
            mode = proj.get("defaultMode", 0o644)
            out: FileSet = {}
            for source in proj.get("sources") or []:
                out.update(self._projected(source, mode))
            return out
        if "downwardAPI" in volume:
            return self._downward(volume["downwardAPI"].get("items") or [], volume["downwardAPI"].get("defaultMode",
                                                                                                        0o644))
        return None

    def _projected(self, source: Json, mode: int) -> FileSet:
        if "serviceAccountToken" in source:
            sat = source["serviceAccountToken"]
            token = self.tokens.token(self.pod, sat.get("audience", ""), sat.get("expirationSeconds", TOKEN_SECONDS))
            return {sat["path"]: (token.encode(), mode)}
        if "downwardAPI" in source:
            return self._downward(source["downwardAPI"].get("items") or [], mode)
        for kind in ("configMap", "secret"):
            if kind in source:
                src = source[kind]
                if kind == "configMap" and src.get("name") == "kube-root-ca.crt":
                    data: dict[str, bytes] | None = {"ca.crt": self.ca_pem}
                else:
                    data = self.reader.data(kind, src["name"], src.get("optional", False))
                return _items(data or {}, src.get("items"), mode)
        if "clusterTrustBundle" in source or "podCertificate" in source:
            raise PodSpecError("clusterTrustBundle/podCertificate projections are not supported by the node agent")
        return {}

    def _downward(self, items: list[Json], mode: int) -> FileSet:
        out: FileSet = {}
        for item in items:
            if "fieldRef" in item:
                value = field_value(self.pod, item["fieldRef"]["fieldPath"], self.node_name, self.host_ip)
            else:
                name = item["resourceFieldRef"].get("containerName")
                container = next((c for c in self.pod["spec"]["containers"] if c["name"] == name),
                                 self.pod["spec"]["containers"][0])
                value = resource_value(container, item["resourceFieldRef"])
            out[item["path"]] = (value.encode(), item.get("mode", mode))
        return out

    def materialize(self) -> dict[str, Path]:
        """Every volume's directory (made or refreshed); hostPath volumes are the host path itself."""
        paths: dict[str, Path] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "hostPath" in volume:
                host = self._host_path(volume["hostPath"]["path"])
                if volume["hostPath"].get("type") in ("DirectoryOrCreate", None, ""):
                    host.mkdir(parents=True, exist_ok=True)
                paths[name] = host
                continue
            if "persistentVolumeClaim" in volume:
                paths[name] = self._claimed(volume["persistentVolumeClaim"]["claimName"])
                continue
            path = self.root / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            files = self.files(volume)
            if files is not None:
                self._sync(path, files)
            else:
                path.chmod(0o777)  # an emptyDir is world-writable, as the kubelet makes it
            paths[name] = path
        self._apply_fs_group(paths)
        return paths

    def _host_path(self, path: str) -> Path:
        """Paths under the kubelet's root are this node's own (the nodes share one host), as
        /var/lib/kubelet/pod-resources is each node's for dcgm-exporter; the rest are the host's."""
        host = Path(path)
        if self.kubelet_root is not None and (host == KUBELET_ROOT or KUBELET_ROOT in host.parents):
            return self.kubelet_root / host.relative_to(KUBELET_ROOT)
        return host

    def _claimed(self, claim: str) -> Path:
        """The hostPath of the PersistentVolume bound to *claim* (the scheduler only binds bound claims)."""
        ns = self.pod["metadata"]["namespace"]
        pvc = self.reader.api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}")
        volume = pvc.get("spec", {}).get("volumeName")
        if not volume:
            raise PodSpecError(f"PersistentVolumeClaim {ns}/{claim} is not bound")
        source = self.reader.api.get(f"/api/v1/persistentvolumes/{volume}").get("spec", {}).get("hostPath")
        if not source:
            raise PodSpecError(f"PersistentVolume {volume} is not a hostPath volume this node can mount")
        path = Path(source["path"])
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _apply_fs_group(self, paths: dict[str, Path]) -> None:
        """The kubelet gives volumes to the pod's fsGroup, so non-root containers can use them."""
        group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
        if group is None:
            return
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes") or []}
        for name, path in paths.items():
            if "hostPath" in volumes.get(name, {}):
                continue
            for item in [path, *path.rglob("*")]:
                with contextlib.suppress(OSError):
                    os.chown(item, -1, int(group))
                    if item.is_dir():
                        item.chmod(item.stat().st_mode | 0o2070)

    def refresh(self) -> None:
        """Re-read ConfigMaps, Secrets and tokens into existing volume directories."""
        for volume in self.pod["spec"].get("volumes") or []:
            with contextlib.suppress(PodSpecError, ApiError):
                files = self.files(volume)
                if files is not None:
                    self._sync(self.root / "volumes" / volume["name"], files)

    @staticmethod
    def _sync(path: Path, files: FileSet) -> None:
        group = path.stat().st_gid
        for rel, (data, mode) in files.items():
            if write_atomic(path / rel, data, mode) and group:
                with contextlib.suppress(OSError):
                    os.chown(path / rel, -1, group)
        wanted = {path / rel for rel in files}
        for existing in list(path.rglob("*")):
            if existing.is_file() and existing not in wanted and not existing.name.startswith("."):
                existing.unlink()


def container_mounts(container: Json, volume_paths: dict[str, Path], env: dict[str, str] | None = None,
                     on_missing: Callable[[str], None] | None = None) -> list[Mount]:
    mounts: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        base = volume_paths.get(vm["name"])
        if base is None:
            raise PodSpecError(f"volumeMount {vm['name']} names no volume of the pod")
        sub = _sub_path(vm, env or {})
        source = base / sub if sub else base
        if sub and not source.exists():
            # As the kubelet: made now, with the volume root's mode (umask would narrow it later).
            source.mkdir(parents=True, exist_ok=True)
            source.chmod(base.stat().st_mode & 0o7777)
        mounts.append(Mount(source=source, target=vm["mountPath"], read_only=bool(vm.get("readOnly"))))
    return mounts


def _sub_path(mount: Json, env: dict[str, str]) -> str:
    """`subPath`, or `subPathExpr` with the container's `$(VAR)`s expanded; the kubelet refuses one
    that is absolute or climbs out of the volume, and a variable it cannot expand."""
    if mount.get("subPath") and mount.get("subPathExpr"):
        raise PodSpecError(f"volumeMount {mount['name']}: subPath and subPathExpr are mutually exclusive")
    if not mount.get("subPathExpr"):
        return str(mount.get("subPath") or "")
    sub = _expand(mount["subPathExpr"], env)
    if "$(" in sub:
        raise PodSpecError(f"volumeMount {mount['name']}: subPathExpr {mount['subPathExpr']!r} names a "
                           "variable the container does not have")
    if sub.startswith("/") or ".." in Path(sub).parts:
        raise PodSpecError(f"volumeMount {mount['name']}: subPathExpr must be a relative path inside the "
                           f"volume, got {sub!r}")
    return sub


def as_json(value: Any) -> Json:
    return value if isinstance(value, dict) else {}
