"""The library volume of Job mode: a PVC the sync Jobs fill and the pod mounts.

It grows when the spec (or the operator's default) asks for more, as the workspace does;
what it cannot follow (a smaller size, another storage class, a resize the storage class
refuses) is kept in ``status.libraryVolume.message`` and said in a Warning once, when it
starts, not on every pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from craft_operator.api.models import LibraryMode, LibraryVolumeStatus
from craft_operator.builders.library_job import build_library_pvc
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.reconciler.steps import volume_growth
from craft_operator.reconciler.steps.workspace import requested_size, size_value
from craft_operator.status import USER_LIBRARY_SYNCED

WAITING = "WaitingForChildren"
PVC = kinds.PVC


async def converge_volume(p: Pass) -> Stop | None:
    """Create the PVC in Job mode (Exec mode needs none); its failure is the library's."""
    if p.sandbox.spec.user_library.mode != LibraryMode.JOB:
        p.run.status.library_volume = None
        return None
    settings = p.services.settings
    desired = build_library_pvc(p.sandbox, default_size=settings.library_volume_size)
    failed = await p.converge_child(desired, PVC, USER_LIBRARY_SYNCED, label="Volume")
    if failed:
        return Stop(WAITING)
    meta = desired["metadata"]
    pvc = p.services.cache.get(PVC.name, meta["namespace"], meta["name"])
    if pvc is None or pvc["metadata"].get("deletionTimestamp"):
        return None
    try:
        pvc, said = await _follow_spec(p, pvc, desired)
    except ApiError as exc:
        p.fail(USER_LIBRARY_SYNCED, "VolumeWriteFailed", f"cannot resize {meta['name']}: {exc}")
        return None
    _report(p, pvc, said)
    return None


async def _follow_spec(
    p: Pass, pvc: dict[str, Any], desired: Mapping[str, Any]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Grow the volume when asked for more; the PVC, and what it cannot follow, as
    (event reason, message)."""
    name = pvc["metadata"]["name"]
    want, have = requested_size(desired), requested_size(pvc)
    wanted, had = size_value(want), size_value(have)
    said: list[tuple[str, str]] = []
    if want is not None and wanted is not None and had is not None and wanted > had:
        what = f"the library volume {name}"
        pvc, refused = await volume_growth.grow(p, pvc, want, what=what)
        if refused is None:
            p.event("LibraryVolumeResized", f"asked for {want} for the library volume {name}")
        else:
            said.append(("LibraryVolumeResizeRefused", refused))
    elif wanted is not None and had is not None and wanted < had:
        message = (
            f"the library volume {name} is {have}, larger than {want}: kept (a volume "
            "cannot shrink)"
        )
        said.append(("LibraryVolumeKept", message))
    theirs = pvc.get("spec", {}).get("storageClassName")
    ours = desired["spec"].get("storageClassName")
    if ours and theirs and ours != theirs:
        message = (
            f"the library volume {name} has storage class {theirs}; {ours} applies to a new "
            f"volume only (delete PVC {name} to have it made anew and the library synced into "
            "it)"
        )
        said.append(("LibraryVolumeKept", message))
    return pvc, said


def _report(p: Pass, pvc: Mapping[str, Any], said: list[tuple[str, str]]) -> None:
    """``status.libraryVolume``; each thing it says goes in a Warning once, when it starts."""
    before = p.run.old_status.library_volume
    earlier = (before.message if before is not None else None) or ""
    for reason, message in said:
        if message not in earlier:
            p.event(reason, message, warning=True)
    observed = pvc.get("status") or {}
    capacity = (observed.get("capacity") or {}).get("storage")
    p.run.status.library_volume = LibraryVolumeStatus(
        claim_name=pvc["metadata"]["name"],
        requested=requested_size(pvc),
        capacity=capacity,
        phase=observed.get("phase"),
        message="; ".join(message for _, message in said) or None,
    )
    if before is not None and grown_since(before.capacity, capacity):
        _retry_failed_sync(p)


def grown_since(before: str | None, now: str | None) -> bool:
    """Whether the volume's capacity ``now`` is larger than ``before`` (both known)."""
    had, has = size_value(before), size_value(now)
    return had is not None and has is not None and has > had


def _retry_failed_sync(p: Pass) -> None:
    """The volume has grown: a sync that failed for good (a full volume, say) is tried
    again, once, on the larger one."""
    library = p.run.status.user_library
    if library is not None and library.failed_attempt is not None:
        p.run.status.user_library = library.model_copy(update={"failed_attempt": None})


#: Owns no condition: its failures are reported on UserLibrarySynced.
STEP = Step(None, converge_volume)
