"""A pass cut short by a stop or a standby writes nothing: the replica leaves at once, not
after a status write to a slow API server, and a replica that stood down writes no status
over the one now in charge."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import kopf
import pytest
from kmock._internal import rendering

from craft_operator.config import Settings
from craft_operator.kube import kinds
from craft_operator.reconciler import sandbox as sandbox_module
from craft_operator.runtime import build_context
from craft_operator.status import ConditionState
from tests.integration.conftest import SANDBOXES, declare_craft_resources
from tests.support.emulator import KubeEmulator

pytestmark = pytest.mark.integration


def sandbox_body() -> dict[str, Any]:
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {
            "name": "alice",
            "namespace": "team-a",
            "finalizers": [sandbox_module.FINALIZER],
        },
        "spec": {"user": {"id": "5f0c8a3e-1b2d-4c3e-9f4a-123456789abc"}},
    }


@pytest.mark.parametrize("how", ["stop", "standby"])
async def test_a_pass_cut_short_writes_no_status(
    emulator: KubeEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    declare_craft_resources(emulator)
    emulator.create(SANDBOXES, sandbox_body())
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    context.kube.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
    context.cache.put(
        kinds.SANDBOX.name, await context.kube.get(kinds.SANDBOX.api, "team-a", "alice")
    )
    entered = asyncio.Event()

    async def stuck(s: Any, sandbox: Any, run: Any) -> bool:  # a step on a slow call
        run.set(ConditionState.false("PodReady", "Stuck", "half way"))
        entered.set()
        await asyncio.Event().wait()
        return False

    monkeypatch.setattr(sandbox_module.policy, "enforce", stuck)
    status_writes: list[float] = []

    async def slow_status_writes(request: rendering.Request) -> None:
        if request.method == "PATCH" and request.url.path.endswith("/status"):
            status_writes.append(time.monotonic())
            await asyncio.sleep(3)  # an API server slow to answer

    emulator.before_request.append(slow_status_writes)
    context.queue.start()
    context.queue.add(("team-a", "alice"))
    await asyncio.wait_for(entered.wait(), 5)

    started = time.monotonic()
    if how == "stop":
        await context.queue.stop(grace=0.2)
    else:
        await context.gate.deactivate("a peer took over")
    took = time.monotonic() - started
    await context.kube.close()

    assert status_writes == []
    assert took < 2, f"waited {took:.1f} s"
