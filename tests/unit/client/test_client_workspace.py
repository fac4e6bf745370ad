"""The backend asks for a workspace through ensure() and reads it back from status()."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from craft_operator.client import (
    AsyncSandboxClient,
    InvalidError,
    InvalidSpecError,
    SandboxClient,
    Workspace,
)
from tests.support.emulator import KubeEmulator
from tests.unit.client.conftest import NAMESPACE, SANDBOXES, USER_ID, all_true, write_status


def stored_workspace(emulator: KubeEmulator) -> dict[str, Any]:
    return dict(emulator.get(SANDBOXES, NAMESPACE, "alice")["spec"]["workspace"])


async def test_ensure_applies_a_workspace_given_as_a_mapping(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    created = await aclient.ensure(
        NAMESPACE,
        "alice",
        user_id=USER_ID,
        workspace={"size": "10Gi", "storage_class_name": "fast", "retain": True},
    )
    assert stored_workspace(emulator) == {
        "size": "10Gi",
        "storageClassName": "fast",
        "retain": True,
    }
    assert created.spec.workspace == Workspace(size="10Gi", storage_class_name="fast", retain=True)


async def test_the_sync_client_applies_a_workspace_model_and_it_may_grow(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    await asyncio.to_thread(
        client.ensure, NAMESPACE, "alice", user_id=USER_ID, workspace=Workspace(size="1Gi")
    )
    await asyncio.to_thread(
        client.ensure, NAMESPACE, "alice", user_id=USER_ID, workspace=Workspace(size="2Gi")
    )
    assert stored_workspace(emulator)["size"] == "2Gi"


async def test_a_workspace_model_with_no_storage_class_sends_none(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    workspace = Workspace(size="1Gi", storage_class_name=None)
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, workspace=workspace)
    [applied] = [r.data for r in emulator.served if r.method.value.upper() == "PATCH"]
    assert applied["spec"]["workspace"] == {"size": "1Gi"}, "never null: the API server refuses it"


async def test_a_workspace_that_is_no_quantity_is_refused_before_sending(
    aclient: AsyncSandboxClient,
) -> None:
    with pytest.raises(InvalidSpecError, match="quantity"):
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, workspace={"size": "lots"})
    assert sum(aclient.requests.values()) == 0


async def test_shrinking_the_workspace_is_the_api_servers_invalid_error(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, workspace={"size": "2Gi"})
    with pytest.raises(InvalidError, match="may grow but not shrink"):
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, workspace={"size": "1Gi"})
    emulator.rejections.clear()  # refused on purpose
    assert stored_workspace(emulator)["size"] == "2Gi"


async def test_leaving_an_applied_workspace_out_of_ensure_is_the_api_servers_invalid_error(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, workspace={"size": "1Gi"})
    with pytest.raises(InvalidError, match="cannot be removed"):
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    emulator.rejections.clear()  # refused on purpose
    assert stored_workspace(emulator)["size"] == "1Gi"


async def test_status_shows_the_workspace(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, workspace={"size": "1Gi"})
    reported = {
        "claimName": "alice-workspace",
        "requested": "1Gi",
        "capacity": "1Gi",
        "phase": "Bound",
        "retain": False,
    }
    write_status(emulator, "alice", "Ready", all_true(), workspace=reported)

    status = await aclient.status(NAMESPACE, "alice")

    assert status.workspace is not None
    assert status.workspace.claim_name == "alice-workspace"
    assert (status.workspace.capacity, status.workspace.phase) == ("1Gi", "Bound")
