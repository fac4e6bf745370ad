"""The real kopf loop, over HTTP, sees CraftSandboxes and reports what it observed."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import SANDBOXES
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually

USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def sandbox(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"user": {"id": USER_ID}, **spec},
    }


async def test_a_new_sandbox_gets_a_phase_and_its_observed_generation(
    emulator: KubeEmulator, operator: None
) -> None:
    emulator.create(SANDBOXES, sandbox("alice"))

    status = await eventually(
        lambda: emulator.get(SANDBOXES, "team-a", "alice").get("status"),
        what="status on the new sandbox",
    )

    assert status["phase"] in ("Pending", "Provisioning")
    assert status["observedGeneration"] == 1
