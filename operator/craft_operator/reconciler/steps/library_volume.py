"""The library volume of Job mode: a PVC the sync Jobs fill and the pod mounts."""

from __future__ import annotations

from typing import Any

from craft_operator.api.models import LibraryMode
from craft_operator.builders.library_job import build_library_pvc
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.reconciler.steps.workspace import requested_size, size_value
from craft_operator.status import USER_LIBRARY_SYNCED

WAITING = "WaitingForChildren"
PVC = kinds.PVC
#: What the API server answers a resize the storage class does not allow.
_REFUSED = (403, 422)


async def converge_volume(p: Pass) -> Stop | None:
    """Create the PVC in Job mode (Exec mode needs none); its failure is the library's."""
    if p.sandbox.spec.user_library.mode != LibraryMode.JOB:
        return None
    settings = p.services.settings
    desired = build_library_pvc(p.sandbox, default_size=settings.library_volume_size)
    failed = await p.converge_child(desired, PVC, USER_LIBRARY_SYNCED, label="Volume")
    if failed:
        return Stop(WAITING)
    await _follow_spec(p, desired)
    return None


async def _follow_spec(p: Pass, desired: dict[str, Any]) -> None:
    """Grow the volume when the spec (or the operator's default) asks for more, as the
    workspace does; say in a Warning what a volume cannot follow (a smaller size, another
    storage class), instead of nothing."""
    s, meta = p.services, desired["metadata"]
    pvc = s.cache.get(PVC.name, meta["namespace"], meta["name"])
    if pvc is None or pvc["metadata"].get("deletionTimestamp"):
        return
    want, have = requested_size(desired), requested_size(pvc)
    wanted, had = size_value(want), size_value(have)
    name = meta["name"]
    if wanted is not None and had is not None and wanted > had:
        patch = {"spec": {"resources": {"requests": {"storage": want}}}}
        try:
            grown = await s.kube.patch(PVC.api, meta["namespace"], name, patch)
        except ApiError as exc:
            if exc.status not in _REFUSED:
                p.fail(USER_LIBRARY_SYNCED, "VolumeWriteFailed", f"cannot resize {name}: {exc}")
                return
            p.event(
                "LibraryVolumeResizeRefused",
                f"the library volume {name} cannot grow from {have} to {want}: the API server "
                f"refused ({exc.message}); the storage class must allow volume expansion",
                warning=True,
            )
        else:
            s.cache.put(PVC.name, grown)
            p.event("LibraryVolumeResized", f"asked for {want} for the library volume {name}")
    elif wanted is not None and had is not None and wanted < had:
        p.event(
            "LibraryVolumeKept",
            f"the library volume {name} is {have}, larger than {want}: kept (a volume cannot "
            "shrink)",
            warning=True,
        )
    theirs, ours = (
        pvc.get("spec", {}).get("storageClassName"),
        desired["spec"].get("storageClassName"),
    )
    if ours and theirs and ours != theirs:
        p.event(
            "LibraryVolumeKept",
            f"the library volume {name} has storage class {theirs}; {ours} applies to a new "
            f"volume only (delete PVC {name} to have it made anew and the library synced into "
            "it)",
            warning=True,
        )


#: Owns no condition: its failures are reported on UserLibrarySynced.
STEP = Step(None, converge_volume)
