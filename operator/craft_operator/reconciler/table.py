"""The table of steps: the order of a pass over a sandbox, one row per condition.

Each row converges one part of the sandbox and owns one condition (a step that converges a
child for another step's condition owns none). The steps of one row are independent of
each other and all run; after a row in which a step stopped, the
pass ends, and every condition of a later row this pass has not set becomes ``Unknown``
with the reason the step gave (``WaitingForCredentials``, ``WaitingForPod``,
``Sleeping``, ...). Ready requires the conditions of the rows, in this order.

Adding a condition is one new module under ``steps/`` defining ``STEP`` and one row here.
"""

from __future__ import annotations

from craft_operator.api.models import ConditionStatus
from craft_operator.reconciler.step import WAITING_MESSAGE, Pass, Step, Stop
from craft_operator.reconciler.steps import (
    claimed_skill,
    cli,
    credentials,
    library,
    library_volume,
    pod,
    secret,
    skill,
    sleep,
    workspace,
)
from craft_operator.status import (
    CLI_VALIDATED,
    CREDENTIALS_READY,
    POD_READY,
    SKILL_RENDERED,
    USER_LIBRARY_SYNCED,
    ConditionState,
)

#: The rows of a pass, in order.
STEPS: tuple[tuple[Step, ...], ...] = (
    (credentials.STEP,),  # CredentialsReady: a live PAT
    # SkillRendered; what the pod mounts
    (secret.STEP, skill.STEP, library_volume.STEP, workspace.STEP),
    (pod.STEP,),  # PodReady
    # UserLibrarySynced first: its sync runs in the background and never stops a pass, so
    # started before the CLI's exec it overlaps it instead of following it.
    # CLIValidated; a claimed pod's SKILL.md rides in its exec, else its own step writes it.
    (library.STEP, cli.STEP, claimed_skill.STEP),
)

#: The conditions Ready requires, in reporting order: the rows' order, except that the
#: library, started first in its row, is reported last (it is the slowest to settle).
CONDITIONS: tuple[str, ...] = (
    CREDENTIALS_READY,
    SKILL_RENDERED,
    POD_READY,
    CLI_VALIDATED,
    USER_LIBRARY_SYNCED,
)

#: The row of the pod step: a pass stopped before it may still deliver a renewed PAT.
POD_ROW = next(index for index, row in enumerate(STEPS) if pod.STEP in row)


async def run_steps(p: Pass, steps: tuple[tuple[Step, ...], ...] = STEPS) -> None:
    """Run the rows in order until one stops; later conditions then wait, except that a
    renewed PAT still goes into a Ready pod (:func:`cli.deliver_renewal`) that is not being
    stopped."""
    for index, row in enumerate(steps):
        stops = [stop for step in row if (stop := await step.run(p)) is not None]
        if stops:
            if steps is STEPS and index <= POD_ROW:
                if index < POD_ROW:
                    # First, so that the pod of a sandbox suspended or falling asleep is
                    # stopped before a renewed PAT could go into it (none goes into a pod
                    # being deleted), as when the pod step stops it.
                    await _pod_without_pod_step(p)
                # Also when the pod step itself stopped with the pod running (a spec it
                # cannot build a pod from keeps the earlier pod): its PAT must not lapse.
                await cli.deliver_renewal(p)
            _wait(p, steps[index + 1 :], stops[0])
            return


async def _pod_without_pod_step(p: Pass) -> None:
    """A pass stopped before the pod's row (the credential database down, a user made
    inactive) still stops the pod of a suspended or idle sandbox, and says what its pod is:
    suspended or asleep, else Provisioning while a pod of its exists. Suspending must not
    wait for the database, a running sandbox must not turn Pending, nor a sleeping one count
    as on its way to Ready since it fell asleep. The workspace's owner reference follows
    ``retain`` all the same."""
    await workspace.settle_owner(p)
    if await sleep.hold(p, pod.own_pod(p)) is None:
        p.run.pod_exists = pod.has_pod(p)


def _wait(p: Pass, later: tuple[tuple[Step, ...], ...], stop: Stop) -> None:
    """Mark the conditions of the later rows Waiting, except what this pass already set."""
    run = p.run
    for row in later:
        for step in row:
            if step.condition is None or step.condition in run.touched:
                continue
            if step.keeps_failure and run.condition_is(step.condition, ConditionStatus.FALSE):
                continue
            if step.condition == POD_READY and run.failed_pod_stands():
                continue
            run.set(ConditionState.unknown(step.condition, stop.reason, WAITING_MESSAGE))
