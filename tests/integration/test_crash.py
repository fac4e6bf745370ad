"""An operator killed mid-provisioning converges when it comes back, duplicating nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp.web
import pytest

from craft_operator.config import Settings
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, live_pats, phase, pod, sandbox, token_in_secret
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, start_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


@pytest.mark.parametrize("cut_before", ["configmaps", "pods"])
async def test_an_operator_killed_mid_provisioning_converges_after_restart(
    emulator: KubeEmulator, settings: Settings, tmp_path: Path, cut_before: str
) -> None:
    reached = asyncio.Event()

    async def hang_up(request):  # type: ignore[no-untyped-def]
        if request.method.value.upper() == "POST" and request.url.path.endswith(f"/{cut_before}"):
            reached.set()
            return aiohttp.web.Response(status=503, text="the operator died here")
        return None

    url = str(emulator.url).rstrip("/")
    pod_exec = EmulatedPodExec(emulator, tmp_path / "pods", scripted_cli=lambda *_: 0)
    first = await start_operator(url, settings, exec_transport=pod_exec)
    emulator.before_request.append(hang_up)
    emulator.create(SANDBOXES, sandbox("alice"))
    await asyncio.wait_for(reached.wait(), 10)
    token = token_in_secret(emulator, "alice")  # the Secret was written before the cut

    await first.kill()
    emulator.before_request.remove(hang_up)
    second = await start_operator(url, settings, exec_transport=pod_exec)
    try:
        await eventually(lambda: pod(emulator, "alice"), what="the pod after the restart")
        mark_pod_running(emulator, NAMESPACE, "alice")
        await phase(emulator, "alice", "Ready")
    finally:
        await second.stop()

    assert token_in_secret(emulator, "alice") == token  # the stored PAT was reused
    assert len(live_pats(settings)) == 1
    for resource, name in (
        ("v1/secrets", "alice-credentials"),
        ("v1/configmaps", "alice-skills"),
        ("v1/pods", "alice"),
    ):
        # The pod's other two versions: the scheduler's binding and the kubelet's status.
        assert emulator.history(resource, NAMESPACE, name) == 1 + 2 * (resource == "v1/pods"), name
    assert [s["metadata"]["name"] for s in emulator.list("v1/secrets", NAMESPACE)] == [
        "alice-credentials"
    ]
