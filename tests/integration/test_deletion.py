"""Deletion: the finalizer revokes the PAT, then the sandbox and its children go."""

from __future__ import annotations

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, live_pats, pod
from tests.integration.test_drift import ready_sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually


async def test_deleting_a_sandbox_revokes_its_pat_and_removes_everything(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    await ready_sandbox(emulator)
    assert emulator.get(SANDBOXES, NAMESPACE, "alice")["metadata"]["finalizers"] == [
        "craft.onyx.app/finalizer"
    ]
    assert len(live_pats(settings)) == 1

    emulator.remove(SANDBOXES, NAMESPACE, "alice")

    await eventually(
        lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="the sandbox gone"
    )
    assert live_pats(settings) == []
    assert pod(emulator, "alice") is None
    assert emulator.find("v1/secrets", NAMESPACE, "alice-credentials") is None
    assert emulator.find("v1/configmaps", NAMESPACE, "alice-skills") is None


async def test_a_sandbox_deleted_while_provisioning_leaves_nothing_behind(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    from tests.integration.helpers import sandbox

    emulator.create(SANDBOXES, sandbox("bob"))
    await eventually(
        lambda: (
            "craft.onyx.app/finalizer"
            in (emulator.get(SANDBOXES, NAMESPACE, "bob")["metadata"].get("finalizers") or [])
        ),
        what="the finalizer",
    )

    emulator.remove(SANDBOXES, NAMESPACE, "bob")

    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "bob") is None, what="bob gone")
    await eventually(lambda: pod(emulator, "bob") is None, what="no pod")
    assert live_pats(settings) == []
    assert emulator.list("v1/secrets", NAMESPACE) == []
