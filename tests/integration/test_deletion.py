"""Deletion: the finalizer revokes the PAT, then the sandbox and its children go."""

from __future__ import annotations

import aiohttp.web
from kmock._internal import rendering

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, live_pats, pod, pod_gone
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
    await pod_gone(emulator, "alice")
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


async def test_a_sandbox_deleted_before_it_has_the_finalizer_is_let_go_without_a_failure(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    # Seen in tests/cluster/test_crash.py: deleted right after its creation, the sandbox is
    # gone when the finalizer is added; the 404 means there is nothing to do, not a failure.
    from tests.integration.helpers import sandbox

    gone: list[int] = []

    async def delete_first(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.method.value.upper() == "PATCH" and request.url.path.endswith(
            "/craftsandboxes/carol"
        ):
            emulator.remove(SANDBOXES, NAMESPACE, "carol")
            gone.append(operator.queue.processed + operator.queue.failed)
        return None

    emulator.before_request.append(delete_first)
    emulator.create(SANDBOXES, sandbox("carol"))

    await eventually(lambda: gone, what="the finalizer's patch")
    await eventually(
        lambda: operator.queue.processed + operator.queue.failed > gone[0], what="the pass ended"
    )
    assert operator.queue.failed == 0
    assert emulator.find(SANDBOXES, NAMESPACE, "carol") is None
    assert emulator.list("v1/secrets", NAMESPACE) == []
    assert pod(emulator, "carol") is None


async def test_deleting_a_sandbox_leaves_foreign_objects_that_took_its_childrens_names(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    """The operator's watches see only its labelled children, so the finalizer reads a name
    it has not seen before deleting: here the Secret's name is taken, so the sandbox never got
    as far as its pod, and the unlabelled pod by its name is someone else's too."""
    from tests.integration.helpers import condition, foreign_pod, sandbox

    theirs = {"namespace": NAMESPACE, "labels": {"team": "theirs"}}
    emulator.create(
        "v1/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dave-credentials", **theirs}},
    )
    emulator.create(
        "v1/pods", foreign_pod("dave", "registry.example/theirs:1", labels={"team": "theirs"})
    )
    emulator.create(SANDBOXES, sandbox("dave"))
    await eventually(
        lambda: condition(emulator, "dave", "CredentialsReady").get("reason") == "SecretNameTaken",
        what="SecretNameTaken",
    )

    emulator.remove(SANDBOXES, NAMESPACE, "dave")

    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "dave") is None, what="dave gone")
    assert live_pats(settings) == []
    assert emulator.find("v1/secrets", NAMESPACE, "dave-credentials") is not None
    assert emulator.find("v1/pods", NAMESPACE, "dave") is not None
