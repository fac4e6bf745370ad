"""The library volume of Job mode: a PVC the sync Jobs fill and the pod mounts."""

from __future__ import annotations

from craft_operator.api.models import LibraryMode
from craft_operator.builders.library_job import build_library_pvc
from craft_operator.kube import kinds
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.status import USER_LIBRARY_SYNCED

WAITING = "WaitingForChildren"


async def converge_volume(p: Pass) -> Stop | None:
    """Create the PVC in Job mode (Exec mode needs none); its failure is the library's."""
    if p.sandbox.spec.user_library.mode != LibraryMode.JOB:
        return None
    settings = p.services.settings
    desired = build_library_pvc(p.sandbox, default_size=settings.library_volume_size)
    failed = await p.converge_child(desired, kinds.PVC, USER_LIBRARY_SYNCED, label="Volume")
    return Stop(WAITING) if failed else None


#: Owns no condition: its failures are reported on UserLibrarySynced.
STEP = Step(None, converge_volume)
