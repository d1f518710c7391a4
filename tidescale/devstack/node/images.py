"""Container images as host programs: what the node agent runs in place of pulling an image.

Only the kubelet's container runtime is simulated, so an image names a program already on this
machine: Triton's image is the tritonserver bundled in nvidia-pytriton, tidescale's is the venv's
``tidescale``, Alertmanager is Debian's, and the add-ons are the upstream binaries
that setup built into ``.tools/bin`` (Prometheus too: Debian's lacks Kubernetes service
discovery). An image that is not mapped fails the container the way a
failed pull does (``ErrImagePull``), with the list of known images in the message.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidescale.devstack.tools import TOOLS_BIN


class ImageNotMapped(Exception):
    """No host program stands for this image; the pod's container waits in ErrImagePull."""


@dataclass(frozen=True)
class HostImage:
    entrypoint: tuple[str, ...]
    binaries: dict[str, str] = field(default_factory=dict)  # command basename -> host executable
    env: dict[str, str] = field(default_factory=dict)
    path: tuple[str, ...] = ()  # searched before the host PATH
    files: tuple[tuple[str, str], ...] = ()  # (host path, path in the image): the image's own files

    def argv(self, command: Sequence[str] | None, args: Sequence[str] | None) -> list[str]:
        """Kubernetes' rule: command replaces the entrypoint, args replace its default args."""
        argv = list(command) if command else list(self.entrypoint)
        argv += list(args or [])
        if not argv:
            raise ImageNotMapped("the container has no command and its image no entrypoint")
        argv[0] = self.resolve(argv[0])
        return argv

    def resolve(self, program: str) -> str:
        base = os.path.basename(program)
        if base in self.binaries:
            return self.binaries[base]
        search = os.pathsep.join((*self.path, os.environ.get("PATH", "")))
        found = shutil.which(base if program.startswith("/") and not os.path.exists(program) else program,
                             path=search)
        if not found:
            raise ImageNotMapped(f"{program!r} is not a program of this image on this host")
        return found


def _tool(name: str) -> str:
    return str(TOOLS_BIN / name)


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def _triton() -> HostImage:
    from tidescale.devstack.tools import triton

    install = triton()
    env = install.env()
    libs = install.binary.parents[3] / "nvidia_pytriton.libs"
    return HostImage(
        entrypoint=("tritonserver",), binaries={"tritonserver": str(install.binary)},
        # The backend stub finds its CUDA runtime by an RPATH relative to where the wheel put it;
        # mounted at the image's path that misses, so the wheel's library folder is searched too.
        env={"LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(libs), env.get("LD_LIBRARY_PATH", "")) if p)},
        path=(str(_venv_bin()),),
        files=((str(install.backend_dir), "/opt/tritonserver/backends"),),  # where the image keeps them
    )


def _tidescale() -> HostImage:
    venv = _venv_bin()
    return HostImage(entrypoint=("tidescale",), binaries={"tidescale": str(venv / "tidescale")},
                     path=(str(venv),))


def _dcgm_exporter() -> HostImage:
    tidescale = _tidescale()
    return HostImage(entrypoint=(tidescale.binaries["tidescale"], "cluster", "dcgm-exporter"),
                     binaries={"dcgm-exporter": tidescale.binaries["tidescale"]}, path=tidescale.path)


def _simple(binary: str, *names: str) -> HostImage:
    return HostImage(entrypoint=(binary,), binaries={n: binary for n in (*names, os.path.basename(binary))})


def _debian(names: Sequence[str]) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return names[0]


# The last path element of the image repository -> how to run it here.
IMAGES = {
    "tritonserver": _triton,
    "tidescale": _tidescale,
    # Upstream Prometheus 3 built by setup: Debian's is built without Kubernetes service discovery.
    "prometheus": lambda: _simple(_tool("prometheus-v3"), "prometheus"),
    "alertmanager": lambda: _simple(_debian(["prometheus-alertmanager", "alertmanager"]), "alertmanager"),
    "prometheus-config-reloader": lambda: _simple(_tool("prometheus-config-reloader")),
    "prometheus-operator": lambda: _simple(_tool("prometheus-operator"), "operator"),
    "coredns": lambda: _simple(_tool("coredns")),
    "keda": lambda: _simple(_tool("keda"), "keda", "operator"),
    "keda-metrics-apiserver": lambda: _simple(_tool("keda-adapter"), "keda-adapter", "adapter"),
    "keda-admission-webhooks": lambda: _simple(_tool("keda-admission-webhooks"), "keda-admission-webhooks",
                                               "webhooks"),
    "kube-state-metrics": lambda: _simple(_tool("kube-state-metrics")),
    "prometheus-adapter": lambda: _simple(_tool("prometheus-adapter"), "adapter"),
    "busybox": lambda: HostImage(entrypoint=("sh",)),
    # CNCF distribution's OCI registry, built by setup (the e2e tests push the packaged chart to it).
    "registry": lambda: _simple(_tool("registry"), "registry"),
    # Thanos (sidecar and query), built only for the tests (`build-cluster.sh thanos`).
    "thanos": lambda: _simple(_tool("thanos"), "thanos"),
    # GPUs are simulated: dcgm-exporter's image is tidescale's simulation of it (devstack/cluster/dcgm.py).
    "dcgm-exporter": _dcgm_exporter,
}


def repository(image: str) -> str:
    """``ghcr.io/org/tidescale:0.1@sha256:…`` -> ``tidescale``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def host_image(image: str) -> HostImage:
    factory = IMAGES.get(repository(image))
    if factory is None:
        raise ImageNotMapped(f"image {image!r} has no host program here (known: {', '.join(sorted(IMAGES))})")
    return factory()
