"""The credentials Secret: the PAT handed to the pod (its failures are on CredentialsReady)."""

from __future__ import annotations

from craft_operator.builders.secret import build_credentials_secret
from craft_operator.kube import kinds
from craft_operator.metrics import ProvisioningPhase
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.status import CREDENTIALS_READY

WAITING = "WaitingForChildren"


async def converge_secret(p: Pass) -> Stop | None:
    """Write the Secret holding the sandbox's PAT, or put it back if it drifted."""
    assert p.issued is not None, "the credentials step runs first"
    desired = build_credentials_secret(p.sandbox, token=p.issued.token, pat_id=p.issued.pat_id)
    failed = await p.converge_child(
        desired, kinds.SECRET, CREDENTIALS_READY, label="Secret", phase=ProvisioningPhase.SECRET
    )
    return Stop(WAITING) if failed else None


#: Owns no condition: its failures are reported on CredentialsReady.
STEP = Step(None, converge_secret)
