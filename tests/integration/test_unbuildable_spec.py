"""A sandbox whose spec the operator cannot build a pod from (InvalidResources, say) is
Failed, but the pod an earlier spec made still runs: it is still suspended, put to sleep
when idle, and given its renewed PAT."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    UNBUILDABLE_RESOURCES,
    condition,
    phase,
    pod,
    status,
)
from tests.integration.test_drift import ready_sandbox
from tests.integration.test_renewal import due_for_renewal
from tests.integration.test_renewal import ready_sandbox as ready_with_pat
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually

UNBUILDABLE = {"resources": UNBUILDABLE_RESOURCES}


def stopped(emulator: KubeEmulator) -> bool:
    found = pod(emulator, "alice")
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


#: A request above its limit: refused at admission since, but stored under an older CRD.
STORED_BEFORE = {"resources": {"requests": {"cpu": "3"}, "limits": {"cpu": "2"}}}


@pytest.mark.parametrize("spec", [UNBUILDABLE, STORED_BEFORE], ids=["admitted", "stored-before"])
async def test_suspend_stops_its_pod(
    emulator: KubeEmulator, operator: OperatorContext, spec: dict[str, Any]
) -> None:
    await ready_sandbox(emulator)
    if spec is STORED_BEFORE:
        emulator.validators.clear()  # the CRD before it refused a request above its limit
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": spec})
    await phase(emulator, "alice", "Failed")
    assert condition(emulator, "alice", "PodReady")["reason"] == "InvalidResources"

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"suspend": True}})

    await eventually(lambda: stopped(emulator), what="the pod stopped")
    await phase(emulator, "alice", "Suspended")


async def test_idle_sleep_stops_its_pod(emulator: KubeEmulator, operator: OperatorContext) -> None:
    await ready_sandbox(emulator)
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": UNBUILDABLE})
    await phase(emulator, "alice", "Failed")
    long_ago = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")

    emulator.patch(
        SANDBOXES,
        NAMESPACE,
        "alice",
        {
            "spec": {"idleTimeout": "1h"},
            "metadata": {"annotations": {"craft.onyx.app/last-activity": long_ago}},
        },
    )

    await eventually(lambda: stopped(emulator), what="the idle sandbox's pod stopped")


async def test_its_running_pod_gets_the_renewed_pat(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    """Else the old PAT lapses at the end of its grace period in a pod still in use."""
    first, _, _ = await ready_with_pat(emulator)
    uid = emulator.get(SANDBOXES, NAMESPACE, "alice")["metadata"]["uid"]
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": UNBUILDABLE})
    await phase(emulator, "alice", "Failed")

    due_for_renewal(settings, operator, first, uid)

    renewed = await eventually(
        lambda: (
            (s := status(emulator, "alice"))["credentials"]["patId"] != first
            and s.get("validatedPatID") == s["credentials"]["patId"]
        ),
        what="the renewed PAT validated in the running pod",
    )
    assert renewed
