"""A pool pod's shape: its spec but for where it runs and how big it is, and but for what
the API server fills in as defaults; kept by the cache so that a claim can check a pod is
as the operator built it.

A pool pod's labels and controller reference say which pool it belongs to, but whoever
creates a pod sets both: the API server checks neither against who made it. A pod made by
someone else, with a pool's labels and owner, could mount its ``/run/onyx`` from a volume
that outlives it, put a host file there (a termination message path), run another command,
resolve the Onyx server's name elsewhere, or share the token's volume with a container of
its own, and a claim would write the user's PAT into it. So a claim compares the pod's
shape with the shape of the spec the operator builds for the pool's template.

The comparison fails closed: every field of the spec is compared, those of future
Kubernetes versions too, except the few that only say where the pod runs and how big it is
(:data:`PLACEMENT`: they cannot reach the token, and the API server and its admission
plugins rewrite them), and except what the API server sets as a default when a field is
unset (:data:`POD_DEFAULTS`, :data:`CONTAINER_DEFAULTS`, a probe's thresholds, an env
``fieldRef``'s ``apiVersion``, a volume's ``defaultMode``): a spec and the pod the API
server stores from it have the same shape (``tests/cluster/test_pod_shape.py`` shows it on
the real API server).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

#: Where a compacted pool pod's spec keeps its shape and its digest in the cache (never
#: real fields).
SHAPE = "craft.onyx.app/shape"
DIGEST = "craft.onyx.app/shape-digest"
#: Pod fields of where the pod runs, how big it is and how its image is pulled, which
#: Kubernetes' own admission plugins rewrite (tolerations, priority, overhead; the
#: ServiceAccount plugin's ``imagePullSecrets``): left to the pool's template hash.
PLACEMENT = frozenset(
    {
        "imagePullSecrets",
        "nodeName",
        "nodeSelector",
        "affinity",
        "tolerations",
        "topologySpreadConstraints",
        "schedulerName",
        "priority",
        "priorityClassName",
        "preemptionPolicy",
        "overhead",
        "resources",
    }
)
#: What the API server sets for a pod field left unset.
POD_DEFAULTS: Mapping[str, Any] = {
    "dnsPolicy": "ClusterFirst",
    "terminationGracePeriodSeconds": 30,
    "serviceAccountName": "default",
    "serviceAccount": "default",
    "securityContext": {},
    "restartPolicy": "Always",
    "enableServiceLinks": True,
}
#: What the API server sets for a container field left unset (``None``: left out whatever
#: it holds: ``resources`` come back in canonical form, and say how big, not what runs).
CONTAINER_DEFAULTS: Mapping[str, Any] = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
    "resources": None,
    "imagePullPolicy": None,  # AlwaysPullImages rewrites it: how, not what, is pulled
    "resizePolicy": None,  # defaulted with InPlacePodVerticalScaling before 1.33: how big
}
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
#: A probe's fields the API server defaults, with their defaults.
PROBE_DEFAULTS: Mapping[str, Any] = {
    "timeoutSeconds": 1,
    "periodSeconds": 10,
    "successThreshold": 1,
    "failureThreshold": 3,
}
#: The mode the API server gives a configMap, secret, projected or downwardAPI volume.
DEFAULT_MODE = 0o644


def shape_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The shape of a pod ``spec`` (as created or as stored: the same for both)."""
    shape: dict[str, Any] = {}
    for field, value in spec.items():
        if field in PLACEMENT or _unset(value) or POD_DEFAULTS.get(field, ...) == value:
            continue
        if field in ("containers", "initContainers", "ephemeralContainers"):
            value = [_container(c) for c in value]
        elif field == "volumes":
            value = [_volume(v) for v in value]
        shape[field] = value
    return shape


def digest_of(shape: Mapping[str, Any]) -> str:
    """A short digest of a shape: equal digests, equal shapes."""
    return hashlib.sha256(orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


#: The digest of each template's built spec, by template hash (a hash of the whole spec:
#: equal hashes, equal specs); a handful live at once, so the memo is simply bounded.
_BUILT_DIGESTS: dict[str, str] = {}


def built_digest(template_hash: str, spec: Mapping[str, Any]) -> str:
    """The shape digest of ``spec``, the pod spec the operator builds for the template of
    ``template_hash``: computed once per template, for the pool's passes and the claims."""
    digest = _BUILT_DIGESTS.get(template_hash)
    if digest is None:
        if len(_BUILT_DIGESTS) >= 64:  # templates come and go
            _BUILT_DIGESTS.clear()
        digest = _BUILT_DIGESTS[template_hash] = digest_of(shape_of(spec))
    return digest


def is_as_built(pod: Mapping[str, Any], digest: str) -> bool:
    """Whether the cached pool pod ``pod`` has the shape of ``digest``'s (see the cache's
    :func:`~craft_operator.kube.cache.compact_pod`)."""
    return bool((pod.get("spec") or {}).get(DIGEST) == digest)


def where_unlike(pod: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """Where the cached pool pod ``pod`` first differs from the built ``spec``, for a
    message (``spec`` when its shape is unknown)."""
    return first_difference((pod.get("spec") or {}).get(SHAPE) or {}, shape_of(spec)) or "spec"


def first_difference(live: Mapping[str, Any], built: Mapping[str, Any]) -> str | None:
    """Where shape ``live`` differs from shape ``built`` (a field's path, such as
    ``spec.volumes[onyx-credentials]``), or ``None`` if they are the same."""
    for field in sorted(set(live) | set(built)):
        ours, theirs = built.get(field), live.get(field)
        if ours == theirs:
            continue
        if field in ("containers", "initContainers", "ephemeralContainers", "volumes"):
            names = [item.get("name") for item in ours or ()]
            if names == [item.get("name") for item in theirs or ()]:
                for mine, yours in zip(ours or (), theirs or (), strict=True):
                    if mine != yours:
                        where = f"spec.{field}[{mine.get('name')}]"
                        return where if field == "volumes" else f"{where}.{_key(mine, yours)}"
        return f"spec.{field}"
    return None


def _key(mine: Mapping[str, Any], yours: Mapping[str, Any]) -> str:
    return next(key for key in sorted(set(mine) | set(yours)) if mine.get(key) != yours.get(key))


def _unset(value: Any) -> bool:
    return value is None or value == {} or value == []


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    shape: dict[str, Any] = {}
    for field, value in container.items():
        if _unset(value) or _defaulted(field, value):
            continue
        if field == "env":
            value = [_env(item) for item in value]
        elif field == "ports":
            value = [
                {k: v for k, v in port.items() if (k, v) != ("protocol", "TCP")} for port in value
            ]
        elif field in PROBES:
            value = {k: v for k, v in value.items() if PROBE_DEFAULTS.get(k, ...) != v}
        shape[field] = value
    return shape


def _defaulted(field: str, value: Any) -> bool:
    """Whether a container's ``field`` holds what the API server sets when it is unset (or
    is one the shape leaves out whatever it holds)."""
    if field not in CONTAINER_DEFAULTS:
        return False
    default = CONTAINER_DEFAULTS[field]
    return default is None or bool(default == value)


def _env(item: Mapping[str, Any]) -> Mapping[str, Any]:
    field_ref = (item.get("valueFrom") or {}).get("fieldRef")
    if not field_ref or field_ref.get("apiVersion") != "v1":
        return item
    kept = {k: v for k, v in field_ref.items() if k != "apiVersion"}
    return {**item, "valueFrom": {"fieldRef": kept}}


def _volume(volume: Mapping[str, Any]) -> dict[str, Any]:
    shape: dict[str, Any] = {}
    for key, source in volume.items():
        if isinstance(source, Mapping) and source.get("defaultMode") == DEFAULT_MODE:
            source = {k: v for k, v in source.items() if k != "defaultMode"}
        shape[key] = source
    return shape
