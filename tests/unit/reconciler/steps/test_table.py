"""The table of steps: the order of a pass, and what the conditions say when a step stops."""

from __future__ import annotations

from typing import Any

import pytest

from craft_operator.api.status_codec import dump_status
from craft_operator.credentials.errors import DatabaseUnavailableError
from craft_operator.metrics import count_sandboxes
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.reconciler.steps import pod
from craft_operator.reconciler.table import CONDITIONS, STEPS, run_steps
from craft_operator.status import ConditionState
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, NOW, World

pytestmark = pytest.mark.unit


def test_ready_requires_the_conditions_of_the_rows_in_their_order() -> None:
    assert CONDITIONS == (
        "CredentialsReady",
        "SkillRendered",
        "PodReady",
        "CLIValidated",
        "UserLibrarySynced",
    )
    assert all(row for row in STEPS)
    owned = [step.condition for row in STEPS for step in row if step.condition is not None]
    assert sorted(owned) == sorted(CONDITIONS), "each condition has exactly one step"


def test_the_library_sync_starts_before_the_cli_exec_in_the_same_pass() -> None:
    from craft_operator.reconciler.steps import cli, library

    row = next(row for row in STEPS if cli.STEP in row)
    assert row.index(library.STEP) < row.index(cli.STEP)


def recording(condition: str | None, log: list[str], stop: str | None = None) -> Step:
    async def step(p: Pass) -> Stop | None:
        log.append(condition or "helper")
        if condition is not None:
            p.run.set(ConditionState.true(condition, "Done"))
        return Stop(stop) if stop else None

    return Step(condition, step)


async def test_every_row_runs_in_order_when_none_stops(world: World) -> None:
    log: list[str] = []
    table = ((recording("A", log),), (recording("B", log), recording(None, log)))
    p = world.pass_()
    await run_steps(p, table)
    assert log == ["A", "B", "helper"]


async def test_after_a_row_stops_the_later_conditions_wait_with_its_reason(world: World) -> None:
    log: list[str] = []
    table = (
        (recording("A", log, stop="WaitingForA"), recording("A2", log)),
        (recording("B", log),),
        (recording("C", log),),
    )
    p = world.pass_()
    await run_steps(p, table)
    assert log == ["A", "A2"], "the whole row runs; no later row does"
    for type_ in ("B", "C"):
        condition = p.run.condition(type_)
        assert condition is not None
        assert (condition.status, condition.reason) == ("Unknown", "WaitingForA")


async def test_a_later_condition_this_pass_already_set_is_not_overwritten(world: World) -> None:
    async def fails_on_c(p: Pass) -> Stop | None:
        p.run.set(ConditionState.false("C", "VolumeNameTaken", "someone else's"))
        return Stop("WaitingForChildren")

    p = world.pass_()
    await run_steps(
        p, ((Step(None, fails_on_c),), (Step("B", fails_on_c),), (Step("C", fails_on_c),))
    )
    c, b = p.run.condition("C"), p.run.condition("B")
    assert c is not None
    assert c.reason == "VolumeNameTaken"
    assert b is not None
    assert b.reason == "WaitingForChildren"


async def test_a_step_that_keeps_its_failure_keeps_it_while_waiting(world: World) -> None:
    status = {
        "conditions": [
            {
                "type": "CLIValidated",
                "status": "False",
                "reason": "AuthFailed",
                "message": "refused",
                "lastTransitionTime": "2026-11-23T11:00:00Z",
            }
        ]
    }
    p = world.pass_(status=status)

    async def stops(p: Pass) -> Stop | None:
        return Stop("WaitingForPod")

    async def never(p: Pass) -> Stop | None:
        raise AssertionError("a later row does not run")

    table = ((Step("PodReady", stops),), (Step("CLIValidated", never, keeps_failure=True),))
    await run_steps(p, table)
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert condition.reason == "AuthFailed"


async def test_a_failed_pat_makes_every_later_condition_wait_for_credentials(
    world: World,
) -> None:
    from craft_operator.credentials.errors import UserNotFoundError

    world.credentials.error = UserNotFoundError("no such user")
    p = world.pass_()
    await run_steps(p)
    reasons = {c.type: (c.status, c.reason) for c in p.run.status.conditions}
    assert reasons == {
        "CredentialsReady": ("False", "UserNotFound"),
        "SkillRendered": ("Unknown", "WaitingForCredentials"),
        "PodReady": ("Unknown", "WaitingForCredentials"),
        "CLIValidated": ("Unknown", "WaitingForCredentials"),
        "UserLibrarySynced": ("Unknown", "WaitingForCredentials"),
    }
    assert world.stored("v1/secrets", "alice-credentials") is None


async def test_a_first_pass_makes_the_children_and_the_pod_and_waits_for_it(
    world: World,
) -> None:
    p = world.pass_()
    await run_steps(p)
    reasons = {c.type: (c.status, c.reason) for c in p.run.status.conditions}
    assert reasons == {
        "CredentialsReady": ("True", "PATValid"),
        "SkillRendered": ("True", "Rendered"),
        "PodReady": ("False", "PodStarting"),
        "CLIValidated": ("Unknown", "WaitingForPod"),
        "UserLibrarySynced": ("Unknown", "WaitingForPod"),
    }
    assert world.events.reasons == ["PATMinted", "SecretCreated", "ConfigMapCreated", "PodCreated"]


def _true(type_: str) -> dict[str, str]:
    return {
        "type": type_,
        "status": "True",
        "reason": "Done",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


async def test_a_running_sandbox_stopped_at_its_credentials_is_provisioning_not_pending(
    world: World,
) -> None:
    """The credential database down: the pass stops before the pod's row, and the sandbox,
    whose pod runs, must not pass for one that has none (Pending, to alerts and people)."""
    await pod.converge_pod(world.pass_())
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, NAME))
    world.credentials.error = DatabaseUnavailableError("the database is unreachable")
    conditions = [_true(type_) for type_ in (*CONDITIONS, "Ready")]

    p = world.pass_(status={"phase": "Ready", "conditions": conditions})
    await run_steps(p)
    status = p.run.finish()

    assert status.phase == "Provisioning"
    ready = p.run.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason) == ("False", "DatabaseUnavailable")


async def test_a_sandbox_without_a_pod_stopped_at_its_credentials_is_pending(
    world: World,
) -> None:
    world.credentials.error = DatabaseUnavailableError("the database is unreachable")
    p = world.pass_()
    await run_steps(p)
    assert p.run.finish().phase == "Pending"


@pytest.mark.parametrize(
    ("body", "phase"),
    [
        (
            {
                "spec": {"idleTimeout": "1h"},
                "status": {"phase": "Sleeping", "sleepingSince": "2026-01-01T00:00:00Z"},
                "annotations": {"craft.onyx.app/last-activity": "2025-12-31T00:00:00Z"},
            },
            "Sleeping",
        ),
        ({"spec": {"suspend": True}, "status": {"phase": "Suspended"}}, "Suspended"),
    ],
)
async def test_a_sleeping_or_suspended_sandbox_stopped_at_its_credentials_stays_so(
    world: World, body: dict[str, Any], phase: str
) -> None:
    """Else it would count as on its way to Ready since it fell asleep (days, to the
    StuckNotReady alert)."""
    world.credentials.error = DatabaseUnavailableError("the database is unreachable")
    p = world.pass_(**body)
    await run_steps(p)
    status = p.run.finish()

    assert status.phase == phase
    counted = dict(p.run.body)
    counted["status"] = dump_status(status)
    assert count_sandboxes([counted], NOW).oldest_not_ready_seconds == 0


async def test_a_sandbox_suspended_while_its_credentials_fail_has_its_pod_stopped(
    world: World,
) -> None:
    """Suspending is how a platform stops a sandbox's pod: it must not wait for the
    credential database to come back."""
    await pod.converge_pod(world.pass_())
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, NAME))
    world.credentials.error = DatabaseUnavailableError("the database is unreachable")

    p = world.pass_(spec={"suspend": True}, status={"phase": "Ready"})
    await run_steps(p)
    status = p.run.finish()

    stored = world.stored("v1/pods", NAME)
    assert stored is None or stored["metadata"].get("deletionTimestamp")
    assert status.phase == "Suspended"
    assert "PodSuspended" in world.events.reasons
    pod_ready = p.run.condition("PodReady")
    assert pod_ready is not None
    assert (pod_ready.status, pod_ready.reason) == ("False", "Suspended")


async def test_an_idle_sandbox_falls_asleep_while_its_credentials_fail(world: World) -> None:
    await pod.converge_pod(world.pass_())
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, NAME))
    world.credentials.error = DatabaseUnavailableError("the database is unreachable")

    p = world.pass_(
        spec={"idleTimeout": "1h"},
        status={"phase": "Ready"},
        annotations={"craft.onyx.app/last-activity": "2025-12-31T00:00:00Z"},
    )
    await run_steps(p)
    status = p.run.finish()

    stored = world.stored("v1/pods", NAME)
    assert stored is None or stored["metadata"].get("deletionTimestamp")
    assert (status.phase, status.sleeping_since) == ("Sleeping", NOW)


async def test_a_stopped_pass_never_stops_a_pod_of_the_sandboxs_name_it_does_not_control(
    world: World,
) -> None:
    world.cache.put("Pod", world.add_foreign_pod(NAME))
    world.credentials.error = DatabaseUnavailableError("the database is unreachable")

    p = world.pass_(spec={"suspend": True}, status={"phase": "Ready"})
    await run_steps(p)

    stored = world.stored("v1/pods", NAME)
    assert stored is not None
    assert not stored["metadata"].get("deletionTimestamp")
    assert p.run.finish().phase == "Suspended"
