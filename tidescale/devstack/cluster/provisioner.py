"""A local-path volume provisioner: PersistentVolumes for claims of the default StorageClass.

Charts that keep state (tidescale's review service) claim a volume, and the scheduler will not
place a pod whose claim is unbound. A cloud provides a provisioner; this is the local cluster's,
in the manner of rancher's local-path-provisioner: one directory per claim under the cluster's
state directory, handed to the real PV controller as a hostPath PersistentVolume bound by claimRef.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
from pathlib import Path

from tidescale.devstack.node.kubeapi import ApiError, Json, KubeApi

log = logging.getLogger("tidescale.provisioner")
CLASS = "local-path"
PROVISIONER = "tidescale.dev/local-path"
STORAGE_CLASS: Json = {
    "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
    "metadata": {"name": CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
}


def volume_for(claim: Json, root: Path) -> Json:
    meta = claim["metadata"]
    name = f"pvc-{meta['uid']}"
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": claim["spec"].get("resources", {}).get("requests", {}).get("storage", "1Gi")},
            "accessModes": claim["spec"].get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": CLASS,
            "hostPath": {"path": str(root / name), "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"]},
        },
    }


def reconcile(api: KubeApi, root: Path) -> None:
    for claim in api.get("/api/v1/persistentvolumeclaims").get("items", []):
        klass = claim["spec"].get("storageClassName")
        if claim.get("status", {}).get("phase") != "Pending" or klass not in (CLASS, None):
            continue
        pv = volume_for(claim, root)
        (root / pv["metadata"]["name"]).mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(ApiError):
            api.create("/api/v1/persistentvolumes", pv)
            log.info("provisioned %s for %s/%s", pv["metadata"]["name"], claim["metadata"]["namespace"],
                     claim["metadata"]["name"])
    for pv in api.get("/api/v1/persistentvolumes").get("items", []):
        annotations = pv["metadata"].get("annotations") or {}
        if annotations.get("pv.kubernetes.io/provisioned-by") == PROVISIONER and \
                pv.get("status", {}).get("phase") == "Released":
            with contextlib.suppress(ApiError):
                api.delete(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidescale-local-provisioner", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    api = KubeApi(args.kubeconfig)
    with contextlib.suppress(ApiError):
        api.create("/apis/storage.k8s.io/v1/storageclasses", STORAGE_CLASS)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        try:
            reconcile(api, args.root)
        except (ApiError, OSError) as exc:
            log.warning("reconcile: %s", exc)
        stop.wait(1.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
