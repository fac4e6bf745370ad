"""A sandbox whose finalizer was removed by hand (the README's own procedure, and any
CraftSandbox author's right) leaves nothing remembered behind, whenever it goes: the
operator runs for months with sandboxes coming and going."""

from __future__ import annotations

import asyncio
from typing import Any

from kmock._internal import rendering

from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, phase, pod, sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_running


def strip_and_delete(emulator: KubeEmulator, name: str) -> None:
    emulator.patch(SANDBOXES, NAMESPACE, name, {"metadata": {"finalizers": None}})
    emulator.remove(SANDBOXES, NAMESPACE, name)


def remembered(operator: OperatorContext) -> dict[str, int]:
    """How many sandboxes each per-sandbox memory holds."""
    memory = operator.reconciler._memory
    return {
        "reported": len(memory.reported),
        "held": len(memory.held),
        "cold_start": len(memory.cold_start),
        "resumed": len(memory.resumed),
        "starting": len(memory.starting),
        "credentials": len(operator.services.credentials._known),  # type: ignore[attr-defined]
    }


async def test_a_ready_sandbox_deleted_without_its_finalizer_leaves_no_pat_remembered(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    before = remembered(operator)
    for index in range(3):
        name = f"stripped-{index}"
        emulator.create(SANDBOXES, sandbox(name))
        await eventually(lambda n=name: pod(emulator, n), what="the pod")
        mark_pod_running(emulator, NAMESPACE, name)
        await phase(emulator, name, "Ready")
        strip_and_delete(emulator, name)
        await eventually(lambda n=name: emulator.find(SANDBOXES, NAMESPACE, n) is None)

    await eventually(lambda: remembered(operator) == before, what="nothing remembered")


async def test_a_sandbox_deleted_while_its_pass_runs_leaves_nothing_remembered(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    targets = {f"mid-pass-{index}" for index in range(3)}

    async def delete_during_the_pass(request: rendering.Request) -> Any:
        data = request.data if isinstance(request.data, dict) else {}
        owner = (data.get("metadata") or {}).get("name", "").removesuffix("-credentials")
        if request.method.value.upper() == "POST" and owner in targets:
            targets.discard(owner)
            strip_and_delete(emulator, owner)
            await asyncio.sleep(0.3)  # its DELETED is handled while the pass waits here
        return None

    emulator.before_request.append(delete_during_the_pass)
    before = remembered(operator)
    for name in sorted(targets):
        emulator.create(SANDBOXES, sandbox(name, poolRef={"name": "no-such-pool"}))
        await eventually(lambda n=name: emulator.find(SANDBOXES, NAMESPACE, n) is None)

    await eventually(lambda: remembered(operator) == before, what="nothing remembered")
