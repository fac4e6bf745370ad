"""Volumes in the tests: a PersistentVolume reserved for a claim on the real control plane
(which has no dynamic provisioner), and, for the emulator, the API server's answers to a
PVC expansion it refuses.

A real API server lets a claim's requested storage grow only when the claim is bound and
its storage class sets ``allowVolumeExpansion``; otherwise validation answers 422, or the
``PersistentVolumeClaimResize`` admission plugin 403. These stand-ins answer the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import aiohttp.web
from kmock._internal import rendering

from tests.support.cluster import Cluster
from tests.support.emulator import Resource

#: The admission plugin's words when the storage class does not allow expansion.
FORBIDDEN = (
    "only dynamically provisioned pvc can be resized and the storageclass that provisions "
    "the pvc must support resize"
)


def _storage(obj: Mapping[str, Any] | None) -> Any:
    return ((obj or {}).get("spec") or {}).get("resources", {}).get("requests", {}).get("storage")


def refuse_expansion(
    resource: Resource, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[str]:
    """An emulator validator: a claim's requested storage never changes (422)."""
    if resource.plural != "persistentvolumeclaims" or old is None:
        return []
    if _storage(obj) == _storage(old):
        return []
    return [f"spec.resources.requests.storage: Forbidden: {FORBIDDEN}"]


#: What the API server says to a resize it refuses for other reasons than the storage class:
#: a ResourceQuota, a LimitRange, validation of a claim not bound yet.
OVER_QUOTA = (
    "exceeded quota: storage, requested: requests.storage=10Gi, used: requests.storage=1Gi, "
    "limited: requests.storage=5Gi"
)
OVER_LIMIT = "maximum storage usage per PersistentVolumeClaim is 5Gi, but request is 10Gi"
UNBOUND = (
    "spec: Forbidden: spec is immutable after creation except resources.requests and "
    "volumeAttributesClassName for bound claims"
)

Hook = Callable[[rendering.Request], Awaitable[aiohttp.web.StreamResponse | None]]


def refuse_resize(code: int, words: str) -> Hook:
    """An emulator ``before_request`` hook: a patch of a claim's resources is refused with
    ``code`` (403 Forbidden or 422 Invalid) and ``words``, as the API server says them."""
    reason, says = {403: ("Forbidden", "is forbidden"), 422: ("Invalid", "is invalid")}[code]

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.resource is None or request.resource.plural != "persistentvolumeclaims":
            return None
        if request.method.value.upper() != "PATCH" or "resources" not in json.dumps(request.data):
            return None
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": f'persistentvolumeclaims "{request.name}" {says}: {words}',
            "reason": reason,
            "code": code,
        }
        text = json.dumps(body)
        return aiohttp.web.Response(status=code, text=text, content_type="application/json")

    return hook


#: An emulator ``before_request`` hook: a patch of a claim's resources is 403 Forbidden by
#: the PersistentVolumeClaimResize admission plugin (the class does not allow expansion).
forbid_expansion = refuse_resize(403, FORBIDDEN)


@contextlib.contextmanager
def reserved_volume(
    cluster: Cluster, namespace: str, claim: str, size: str = "1Gi"
) -> Iterator[str]:
    """What a platform engineer without a dynamic provisioner does: a PersistentVolume made
    beforehand and reserved (``claimRef``) for the claim the operator will make, a hostPath
    where the simulated kubelet keeps that claim's files. Its name; deleted afterwards."""
    name = f"{namespace}-{claim}"
    cluster.create(
        "/api/v1/persistentvolumes",
        None,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {
                    "path": str(cluster.plane.state / "volumes" / namespace / claim),
                    "type": "DirectoryOrCreate",
                },
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
    )
    try:
        yield name
    finally:
        cluster.delete("/api/v1/persistentvolumes", None, name)
