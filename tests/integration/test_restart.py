"""A restarted operator reconciles nothing until the first listing of everything is cached.

kopf lists each watched kind in its own stream, in no set order. If a sandbox were
reconciled before its pod's listing arrived, the pod would look missing and the operator
would try to create it again (refused as a duplicate: a wasted write per sandbox, which at
1,000 sandboxes was 53 writes on a restart). Like a controller waiting for its informers
to sync, the operator lists everything itself before its first pass.
"""

from __future__ import annotations

import asyncio
from typing import Any

from craft_operator.config import Settings
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, phase, pod, sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, start_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


async def test_a_restart_writes_nothing_even_when_the_pods_are_listed_last(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    url = str(emulator.url).rstrip("/")
    first = await start_operator(url, settings, exec_transport=pod_exec)
    for name in ("alice", "bob"):
        emulator.create(SANDBOXES, sandbox(name))
    for name in ("alice", "bob"):
        await eventually(lambda name=name: pod(emulator, name), what=f"{name}'s pod")  # type: ignore[misc]
        mark_pod_running(emulator, NAMESPACE, name)
        await phase(emulator, name, "Ready")
    await first.stop()

    async def kopf_lists_pods_late(request: Any) -> None:
        if request.headers.get("User-Agent", "").startswith("kopf/") and (
            request.method.value.upper() == "GET" and request.url.path.endswith("/pods")
        ):
            await asyncio.sleep(1.0)

    emulator.before_request.append(kopf_lists_pods_late)
    restarted = len(emulator.served)
    second = await start_operator(url, settings, exec_transport=pod_exec)
    try:
        await asyncio.sleep(2.5)  # kopf's late pod listing included
    finally:
        await second.stop()

    assert emulator.writes(restarted) == []
