"""ensure(): which fields it applies, and a sandbox that is being deleted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.api.models import UserLibrary
from craft_operator.client import (
    AsyncSandboxClient,
    Connection,
    InvalidError,
    InvalidSpecError,
    ObjectTooLargeError,
    SandboxGoneError,
)
from tests.support.emulator import KubeEmulator
from tests.support.faults import failure_response
from tests.unit.client.conftest import FAST, NAMESPACE, SANDBOXES, USER_ID

#: The operator's finalizer: a deleted sandbox stays, being deleted, until it removes it.
FINALIZER = "craft.onyx.app/cleanup"


def applied_specs(emulator: KubeEmulator) -> list[dict[str, Any]]:
    """The ``spec`` of every server-side apply the emulator serves from now on."""
    specs: list[dict[str, Any]] = []

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if "apply-patch" in request.headers.get("Content-Type", ""):
            specs.append(dict((request.data or {}).get("spec") or {}))
        return None

    emulator.before_request.insert(0, hook)
    return specs


def desired_spec(disabled_paths: list[str]) -> dict[str, Any]:
    """The guide's way: one function builds the whole spec that every ensure() passes."""
    return {
        "user_id": USER_ID,
        "sources": ["slack", "confluence"],
        "idle_timeout": timedelta(hours=1),
        "user_library": UserLibrary(disabled_paths=disabled_paths),
    }


def stored_spec(emulator: KubeEmulator) -> dict[str, Any]:
    return dict(emulator.get(SANDBOXES, NAMESPACE, "alice")["spec"])


def stored_sources(emulator: KubeEmulator) -> list[dict[str, Any]] | None:
    return emulator.get(SANDBOXES, NAMESPACE, "alice")["spec"].get("sources")


async def test_ensure_without_sources_neither_sends_nor_clears_those_another_manager_set(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    applied = applied_specs(emulator)
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    # A platform engineer's (or GitOps') sources: not the backend's field.
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"sources": [{"name": "slack"}]}})

    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, email="alice@example.com")

    assert [("sources" in spec) for spec in applied] == [False, False]
    assert stored_sources(emulator) == [{"name": "slack"}]


async def test_ensure_with_an_empty_sources_list_sends_it_the_user_has_none(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=["slack"])
    applied = applied_specs(emulator)

    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=[])

    assert applied[0]["sources"] == []
    assert stored_sources(emulator) == []


async def test_ensure_is_declarative_a_field_it_applied_before_and_leaves_out_is_removed(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(
        NAMESPACE, "alice", user_id=USER_ID, sources=["slack"], idle_timeout=timedelta(hours=1)
    )

    # Only the field that changed: server-side apply gives up the others.
    await aclient.ensure(
        NAMESPACE, "alice", user_id=USER_ID, user_library=UserLibrary(disabled_paths=["a.txt"])
    )

    spec = stored_spec(emulator)
    assert "idleTimeout" not in spec
    assert "sources" not in spec
    assert spec["userLibrary"]["disabledPaths"] == ["a.txt"]


async def test_changing_one_setting_by_ensuring_the_whole_spec_keeps_every_other_field(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", **desired_spec(disabled_paths=[]))

    await aclient.ensure(NAMESPACE, "alice", **desired_spec(disabled_paths=["a.txt"]))

    spec = stored_spec(emulator)
    assert spec["idleTimeout"] == "1h"
    assert [source["name"] for source in spec["sources"]] == ["slack", "confluence"]
    assert spec["userLibrary"]["disabledPaths"] == ["a.txt"]


async def test_a_field_another_manager_applies_too_stays_when_the_backend_leaves_it_out(
    aclient: AsyncSandboxClient, emulator: KubeEmulator, connection: Connection
) -> None:
    async with AsyncSandboxClient(connection, field_manager="gitops", retry=FAST) as gitops:
        await gitops.ensure(NAMESPACE, "alice", user_id=USER_ID, idle_timeout=timedelta(hours=2))
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, idle_timeout=timedelta(hours=2))

    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)

    assert stored_spec(emulator)["idleTimeout"] == "2h"


async def test_ensure_on_a_sandbox_being_deleted_raises_gone_and_ensuring_after_creates_it(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    old = await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=["slack"])
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"finalizers": [FINALIZER]}})
    assert await aclient.delete(NAMESPACE, "alice") is True  # no wait: "reset my sandbox"

    with pytest.raises(
        SandboxGoneError, match=r"is being deleted: ensure\(\) it again once it is gone"
    ):
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=["jira"])

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"finalizers": []}})  # gone
    new = await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=["jira"])
    assert new.metadata.uid != old.metadata.uid
    assert new.metadata.deletion_timestamp is None


async def test_ensure_of_a_sandbox_too_large_to_store_says_so_at_once_without_retrying(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    """etcd refuses an object over its request limit with a 500 that no retry cures."""
    tries = []

    async def too_large(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.method.value.upper() == "PATCH" and "/craftsandboxes/alice" in request.url.path:
            tries.append(request.url.path)
            return failure_response(500, "InternalError", "etcdserver: request is too large")
        return None

    emulator.before_request.insert(0, too_large)
    with pytest.raises(ObjectTooLargeError, match="shorten its spec") as raised:
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=["slack"])
    assert isinstance(raised.value, InvalidError), "a bad spec, as a 422 is"
    assert len(tries) == 1


@pytest.mark.parametrize(
    ("idle_timeout", "sent"),
    [
        ("99999h99999h", "99999h99999h"),
        (timedelta(hours=100000), "99999h1h"),
        (timedelta(hours=499995), "99999h99999h99999h99999h99999h"),
        # Strings the CRD admits whose value has no form of 32 characters the client finds
        # (the second, finer than a microsecond, is rounded to one): sent as given.
        ("99999h99999h99999h4581.068h99us", "99999h99999h99999h4581.068h99us"),
        ("99999h99999h99999h458.999999999h", "99999h99999h99999h458.999999999h"),
        (
            timedelta(hours=300996, minutes=4, seconds=59.4, microseconds=999),
            "99999h99999h99999h999h4.99m999us",
        ),
    ],
)
async def test_a_long_idle_timeout_is_sent_as_the_crd_admits_it(
    aclient: AsyncSandboxClient, emulator: KubeEmulator, idle_timeout: Any, sent: str
) -> None:
    # Written as one part (199998h) the CRD would refuse it: a part has at most 5 digits.
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, idle_timeout=idle_timeout)
    assert stored_spec(emulator)["idleTimeout"] == sent


async def test_an_idle_timeout_longer_than_the_crd_admits_is_refused_before_sending(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    applied = applied_specs(emulator)
    with pytest.raises(InvalidSpecError, match="longer than the 32 characters of a duration"):
        await aclient.ensure(
            NAMESPACE, "alice", user_id=USER_ID, idle_timeout=timedelta(hours=600000)
        )
    assert applied == []
