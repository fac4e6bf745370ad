"""A pool pod's shape: the parts of its spec that decide what runs in it and where a token
written into it goes, kept by the cache so that a claim can check a pod is as built.

A pool pod's labels and controller reference say which pool it belongs to, but whoever
creates a pod sets both: the API server checks neither against who made it. A pod made by
someone else, with a pool's labels and owner, could mount its ``/run/onyx`` from a volume
that outlives it, run another command, or share the token's volume with a container of its
own, and a claim would write the user's PAT into it. So a claim compares the pod's shape
with the shape of the spec the operator builds for the pool's template: the containers
(names, images, commands, environment, mounts, security contexts, probes and hooks), init
and ephemeral containers, the volumes, and the pod's host namespaces, security context and
service account token. Scheduling and resources are left to the template hash: they decide
where and how big, not where the token goes.

What the API server adds as defaults is left out of a shape (``imagePullPolicy``, a probe's
thresholds, an env ``fieldRef``'s ``apiVersion``, a volume's ``defaultMode``), so the
shape of a pod as stored equals the shape of the spec it was created from; anything else
added (a container, a volume, a command) makes a difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Where a compacted pool pod's spec keeps its shape in the cache (never a real field).
SHAPE = "craft.onyx.app/shape"
#: Pod fields in a shape (unset counts as false or empty).
POD_FIELDS = (
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "shareProcessNamespace",
    "automountServiceAccountToken",
    "securityContext",
)
#: Container fields in a shape.
CONTAINER_FIELDS = (
    "image",
    "command",
    "args",
    "env",
    "envFrom",
    "volumeMounts",
    "volumeDevices",
    "securityContext",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
)
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
#: A probe's fields the API server defaults, with their defaults.
PROBE_DEFAULTS = {
    "timeoutSeconds": 1,
    "periodSeconds": 10,
    "successThreshold": 1,
    "failureThreshold": 3,
}
#: The mode the API server gives a configMap, secret, projected or downwardAPI volume.
DEFAULT_MODE = 0o644


def shape_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The shape of a pod ``spec`` (as created or as stored: the same for both)."""
    shape: dict[str, Any] = {field: spec.get(field) or None for field in POD_FIELDS}
    for field in ("initContainers", "ephemeralContainers", "containers"):
        shape[field] = [_container(c) for c in spec.get(field) or ()] or None
    shape["volumes"] = [_volume(v) for v in spec.get("volumes") or ()] or None
    return shape


def first_difference(live: Mapping[str, Any], built: Mapping[str, Any]) -> str | None:
    """Where shape ``live`` differs from shape ``built`` (a field's path, such as
    ``spec.volumes[onyx-credentials]``), or ``None`` if they are the same."""
    for field in POD_FIELDS:
        if live.get(field) != built.get(field):
            return f"spec.{field}"
    for field in ("initContainers", "ephemeralContainers", "containers", "volumes"):
        ours, theirs = built.get(field) or [], live.get(field) or []
        if [item.get("name") for item in ours] != [item.get("name") for item in theirs]:
            return f"spec.{field}"
        for mine, yours in zip(ours, theirs, strict=True):
            for key in sorted(set(mine) | set(yours)):
                if mine.get(key) != yours.get(key):
                    where = f"spec.{field}[{mine.get('name')}]"
                    return where if field == "volumes" else f"{where}.{key}"
    return None


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    shape: dict[str, Any] = {"name": container.get("name")}
    for field in CONTAINER_FIELDS:
        value = container.get(field)
        if not value:
            continue
        if field == "env":
            value = [_env(item) for item in value]
        elif field == "volumeMounts":
            value = [{k: v for k, v in mount.items() if v} for mount in value]
        elif field in PROBES:
            value = {k: v for k, v in value.items() if PROBE_DEFAULTS.get(k) != v}
        shape[field] = value
    return shape


def _env(item: Mapping[str, Any]) -> Mapping[str, Any]:
    field_ref = (item.get("valueFrom") or {}).get("fieldRef")
    if not field_ref or field_ref.get("apiVersion") != "v1":
        return item
    return {
        **item,
        "valueFrom": {"fieldRef": {k: v for k, v in field_ref.items() if k != "apiVersion"}},
    }


def _volume(volume: Mapping[str, Any]) -> dict[str, Any]:
    shape: dict[str, Any] = {}
    for key, source in volume.items():
        if isinstance(source, Mapping) and source.get("defaultMode") == DEFAULT_MODE:
            source = {k: v for k, v in source.items() if k != "defaultMode"}
        shape[key] = source
    return shape
