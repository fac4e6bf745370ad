"""Status fields the API server drops from a write: its CRD is older than the operator.

The API server prunes what a CRD does not declare, so a field added since (a sandbox's
``status.admittedImages``, a pool's ``status.selector``) is lost on every write where the
CRDs were not applied before the rollout. The writers say so once per kind and field, and
leave out of their patches what would only be dropped again, for
:data:`RECHECK_AFTER` seconds: then a write tries them again, so that a pool that changes
nothing else still gets its selector once the CRDs are applied.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from craft_operator.api.crd import APPLY_CRDS
from craft_operator.kube.kinds import CachedKind
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.step import WARNING

logger = logging.getLogger(__name__)
REASON = "StatusFieldsDropped"
#: Seconds a field seen dropped is left out of the writers' patches before one tries it
#: again (one write per pool at most that often while the CRD stays old).
RECHECK_AFTER = 600.0


def dropped_fields(
    written: Mapping[str, Any], kept: Mapping[str, Any], prefix: str = "status"
) -> list[str]:
    """The fields of a status patch (set, not removed) the API server's answer lacks: it
    prunes those its CRD does not declare."""
    dropped = []
    for key, value in written.items():
        path = f"{prefix}.{key}"
        if value is None:
            continue
        if key not in kept:
            dropped.append(path)
        elif isinstance(value, Mapping) and isinstance(kept[key], Mapping):
            dropped += dropped_fields(value, kept[key], path)
    return dropped


def known_dropped(s: Services, kind: CachedKind) -> frozenset[str]:
    """The status fields of ``kind`` the API server was seen to drop (``status.selector``)
    in the last :data:`RECHECK_AFTER` seconds: no write need carry them meanwhile."""
    recent = s.steady() - RECHECK_AFTER
    return frozenset(
        path
        for (name, path), seen in s.dropped_status_fields.items()
        if name == kind.name and seen > recent
    )


def say_dropped(
    s: Services,
    kind: CachedKind,
    body: Mapping[str, Any],
    patch: Mapping[str, Any],
    kept: Mapping[str, Any],
) -> None:
    """Compare a status ``patch`` with the status the API server answered (``kept``): say
    once per kind and field, in a Warning on ``body`` and an error in the log, what it
    dropped; forget a field it keeps again, the CRD having been applied meanwhile."""
    for name, path in list(s.dropped_status_fields):
        if name == kind.name and _holds(kept, path):
            del s.dropped_status_fields[(name, path)]
    new = []
    for path in dropped_fields(patch, kept):
        if (kind.name, path) not in s.dropped_status_fields:
            new.append(path)
        s.dropped_status_fields[(kind.name, path)] = s.steady()
    if not new:
        return
    message = (
        f"the API server dropped {', '.join(new)} from a status write: the installed "
        f"{kind.name} CRD is older than this operator; install its CRDs: {APPLY_CRDS}"
    )
    meta = body.get("metadata") or {}
    logger.error("%s/%s: %s", meta.get("namespace"), meta.get("name"), message)
    s.events.post(body, type=WARNING, reason=REASON, message=message)


def without(patch: Mapping[str, Any], paths: Collection[str]) -> dict[str, Any]:
    """``patch`` (of a status) without the fields at ``paths`` (``status.selector``), and
    without the mappings that held only those."""
    result = dict(patch)
    for path in paths:
        result = _without(result, path.split(".")[1:])
    return result


def _without(patch: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    head, rest = keys[0], keys[1:]
    if head not in patch:
        return patch
    value = patch[head]
    if rest and not isinstance(value, Mapping):
        return patch
    inner = _without(dict(value), rest) if rest else {}
    trimmed = {key: item for key, item in patch.items() if key != head}
    return {**trimmed, head: inner} if inner else trimmed


def _holds(status: Mapping[str, Any], path: str) -> bool:
    """Whether ``status`` has the field at ``path`` (``status.selector``)."""
    value: Any = status
    for key in path.split(".")[1:]:
        if not isinstance(value, Mapping) or key not in value:
            return False
        value = value[key]
    return True
