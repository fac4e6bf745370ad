"""spec.user.id is admitted in upper case (the CRD's UUID pattern allows A-F) and the model
lowercases it, so every child is labelled with the lowercase id: the finalizer's check of a
workspace kept without an owner compares the id as the model has it."""

from __future__ import annotations

from typing import Any

import pytest

from craft_operator.reconciler.steps import workspace
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, World, sandbox_body

pytestmark = pytest.mark.unit
PVCS = "v1/persistentvolumeclaims"
CLAIM = f"{NAME}-workspace"
UPPER = "3F2B8C1E-9D4A-4E6B-8F0A-1C2D3E4F5A6B"


def body(**ws: Any) -> dict[str, Any]:
    built = sandbox_body(spec={"workspace": {"size": "1Gi", **ws}})
    built["spec"]["user"]["id"] = UPPER
    return built


async def made_kept(world: World) -> None:
    """A pass of the sandbox with retain: its PVC, kept without an owner from the start."""
    p = world.pass_(spec={"user": {"id": UPPER}, "workspace": {"size": "1Gi", "retain": True}})
    await workspace.converge_workspace(p)
    world.cache.put("PVC", world.emulator.get(PVCS, NAMESPACE, CLAIM))


async def test_a_lowercase_id_retain_unset_then_deleted_deletes_the_workspace(
    world: World,
) -> None:
    await made_kept(world)
    lower = body(retain=False)
    lower["spec"]["user"]["id"] = UPPER.lower()
    await workspace.delete_unkept(world.services, lower)
    assert world.stored(PVCS, CLAIM) is None


async def test_uppercase_id_retain_unset_then_deleted_deletes_the_workspace(
    world: World,
) -> None:
    await made_kept(world)
    assert world.stored(PVCS, CLAIM)["metadata"]["labels"]["craft.onyx.app/user-id"] == (
        UPPER.lower()
    )
    await workspace.delete_unkept(world.services, body(retain=False))
    assert world.stored(PVCS, CLAIM) is None


async def test_uppercase_id_release_says_the_workspace_is_kept(world: World) -> None:
    await made_kept(world)
    assert await workspace.release(world.services, body(retain=True)) is True
