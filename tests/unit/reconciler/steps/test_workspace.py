"""The workspace step: the PVC is made before the pod, kept the user's, grown with the spec
(a refused expansion is said, never fatal), and a retained one is taken back only by a new
sandbox of the same name and user. A sandbox with a workspace starts cold."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from craft_operator.api.models import Phase
from craft_operator.api.parse import parse_sandbox
from craft_operator.builders.naming import LABEL_ONYX_TENANT_ID, LABEL_USER_ID
from craft_operator.builders.workspace import LABEL_RETAINED
from craft_operator.reconciler.step import Memory, Pass, Stop
from craft_operator.reconciler.steps import workspace
from tests.support import volumes
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, NOW, UID, World, sandbox_body

pytestmark = pytest.mark.unit

PVCS = "v1/persistentvolumeclaims"
CLAIM = f"{NAME}-workspace"
USER = "11111111-2222-3333-4444-555555555555"
OTHER_USER = "99999999-2222-3333-4444-555555555555"


def spec(**fields: Any) -> dict[str, Any]:
    return {"workspace": {"size": "1Gi", **fields}}


def observed(world: World) -> None:
    """The watch delivers the PVC as the API server has it now."""
    world.cache.put("PVC", world.emulator.get(PVCS, NAMESPACE, CLAIM))


def storage(world: World) -> str:
    pvc = world.stored(PVCS, CLAIM)
    assert pvc is not None
    return str(pvc["spec"]["resources"]["requests"]["storage"])


def retained_pvc(user: str = USER, tenant: str = "public") -> dict[str, Any]:
    """A workspace kept after its sandbox was deleted (as the finalizer leaves it)."""
    labels = {"app.kubernetes.io/managed-by": "craft-operator", LABEL_RETAINED: NAME}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": CLAIM,
            "namespace": NAMESPACE,
            "labels": {**labels, LABEL_USER_ID: user, LABEL_ONYX_TENANT_ID: tenant},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


async def test_without_a_workspace_nothing_is_made(world: World) -> None:
    p = world.pass_()
    assert await workspace.converge_workspace(p) is None
    assert world.emulator.list(PVCS, NAMESPACE) == []
    assert p.run.status.workspace is None


async def test_the_pvc_is_created_and_the_pass_goes_on_before_it_is_bound(world: World) -> None:
    p = world.pass_(spec=spec())
    assert await workspace.converge_workspace(p) is None
    pvc = world.stored(PVCS, CLAIM)
    assert pvc is not None
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == UID
    assert world.events.reasons == ["WorkspaceCreated"]
    status = p.run.status.workspace
    assert status is not None
    assert (status.claim_name, status.requested, status.retain) == (CLAIM, "1Gi", False)
    assert status.claim_uid == pvc["metadata"]["uid"]
    assert status.message is None


async def test_a_bound_pvc_reports_its_phase_and_capacity(world: World) -> None:
    await workspace.converge_workspace(world.pass_(spec=spec()))
    status = {"phase": "Bound", "capacity": {"storage": "1Gi"}}
    world.emulator.patch(PVCS, NAMESPACE, CLAIM, {"status": status}, subresource="status")
    observed(world)
    p = world.pass_(spec=spec(retain=True))
    assert await workspace.converge_workspace(p) is None
    reported = p.run.status.workspace
    assert reported is not None
    assert (reported.phase, reported.capacity, reported.retain) == ("Bound", "1Gi", True)


async def test_growing_the_size_grows_the_pvc(world: World) -> None:
    await workspace.converge_workspace(world.pass_(spec=spec()))
    observed(world)
    world.events.posted.clear()
    p = world.pass_(spec=spec(size="2Gi"))
    assert await workspace.converge_workspace(p) is None
    assert storage(world) == "2Gi"
    assert p.run.status.workspace is not None
    assert p.run.status.workspace.requested == "2Gi"
    assert world.events.reasons == []


@pytest.mark.parametrize("refusal", ["validation (422)", "admission (403)"])
async def test_a_refused_expansion_is_said_once_and_the_pass_goes_on(
    world: World, refusal: str
) -> None:
    await workspace.converge_workspace(world.pass_(spec=spec()))
    observed(world)
    if refusal.startswith("validation"):
        world.emulator.validators.append(volumes.refuse_expansion)
    else:
        world.emulator.before_request.append(volumes.forbid_expansion)
    world.events.posted.clear()
    p = world.pass_(spec=spec(size="2Gi"))
    assert await workspace.converge_workspace(p) is None, "the pod is not stopped for it"
    assert storage(world) == "1Gi"
    status = p.run.status.workspace
    assert status is not None
    assert status.message is not None
    assert "cannot grow from 1Gi to 2Gi" in status.message
    assert "allow volume expansion" in status.message
    assert world.events.reasons == ["WorkspaceResizeRefused"]
    # The next pass, with that status stored, tries again but does not say it again.
    world.events.posted.clear()
    again = world.pass_(spec=spec(size="2Gi"), status={"workspace": {"message": status.message}})
    assert await workspace.converge_workspace(again) is None
    assert world.events.reasons == []


@pytest.mark.parametrize(
    ("code", "words"),
    [(403, volumes.OVER_QUOTA), (403, volumes.OVER_LIMIT), (422, volumes.UNBOUND)],
    ids=["a ResourceQuota", "a LimitRange", "a claim not bound yet"],
)
async def test_a_resize_refused_for_another_reason_than_the_storage_class_never_blames_it(
    world: World, code: int, words: str
) -> None:
    """Sizes are bounded by a quota and a LimitRange: the admin is told what the API server
    said, never sent to change a storage class that is not the cause."""
    await workspace.converge_workspace(world.pass_(spec=spec()))
    observed(world)
    world.emulator.before_request.append(volumes.refuse_resize(code, words))
    p = world.pass_(spec=spec(size="10Gi"))
    assert await workspace.converge_workspace(p) is None, "the pod is not stopped for it"
    status = p.run.status.workspace
    assert status is not None
    assert status.message is not None
    assert "cannot grow from 1Gi to 10Gi" in status.message
    assert words in status.message
    assert "storage class" not in status.message
    assert world.events.reasons[-1:] == ["WorkspaceResizeRefused"]


async def test_a_refused_expansion_is_not_asked_again_on_every_pass(world: World) -> None:
    """A storage class without expansion refuses every time: one patch per pass would be
    writes for nothing. It is asked again after a while (the class may allow it since)."""
    await workspace.converge_workspace(world.pass_(spec=spec()))
    observed(world)
    world.emulator.validators.append(volumes.refuse_expansion)
    memory = Memory()
    patches = f"PATCH /api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{CLAIM}"

    first = world.pass_(spec=spec(size="2Gi"), memory=memory)
    await workspace.converge_workspace(first)
    stored = {"workspace": {"message": first.run.status.workspace.message}}  # type: ignore[union-attr]
    before = len(world.emulator.served)
    soon = world.pass_(
        spec=spec(size="2Gi"), status=stored, memory=memory, now=NOW + timedelta(minutes=4)
    )
    await workspace.converge_workspace(soon)

    assert patches not in world.emulator.writes(before)
    assert soon.run.status.workspace == first.run.status.workspace
    # Nothing else may come by then (a long resync): each pass asks for the one that retries.
    assert first.run.verdict.after == 300
    assert soon.run.verdict.after == 60
    later = world.pass_(
        spec=spec(size="2Gi"), status=stored, memory=memory, now=NOW + timedelta(minutes=6)
    )
    await workspace.converge_workspace(later)
    assert patches in world.emulator.writes(before)
    bigger = world.pass_(spec=spec(size="3Gi"), status=stored, memory=memory, now=NOW)
    before = len(world.emulator.served)
    await workspace.converge_workspace(bigger)
    assert patches in world.emulator.writes(before), "a larger size is asked at once"


async def test_a_pvc_of_someone_else_by_that_name_is_reported_not_touched(world: World) -> None:
    foreign = retained_pvc()
    del foreign["metadata"]["labels"]
    world.emulator.create(PVCS, foreign)
    p = world.pass_(spec=spec(size="5Gi"))
    assert await workspace.converge_workspace(p) == Stop("WorkspaceNameTaken")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "WorkspaceNameTaken")
    assert p.run.verdict.backoff == "WorkspaceNameTaken"
    pvc = world.stored(PVCS, CLAIM)
    assert pvc is not None
    assert "ownerReferences" not in pvc["metadata"]
    assert storage(world) == "1Gi"


async def test_a_retained_workspace_is_taken_back_by_the_same_user(world: World) -> None:
    world.emulator.create(PVCS, retained_pvc())
    p = world.pass_(spec=spec())
    assert await workspace.converge_workspace(p) is None
    pvc = world.stored(PVCS, CLAIM)
    assert pvc is not None
    [owner] = pvc["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == (UID, True)
    assert LABEL_RETAINED not in pvc["metadata"]["labels"]
    assert world.events.reasons == ["WorkspaceAdopted"]


@pytest.mark.parametrize(
    "pvc",
    [retained_pvc(user=OTHER_USER), retained_pvc(tenant="tenant-b")],
    ids=["another user", "the same user id in another tenant"],
)
async def test_a_retained_workspace_of_another_user_is_never_taken(
    world: World, pvc: dict[str, Any]
) -> None:
    world.emulator.create(PVCS, pvc)
    observed(world)
    p = world.pass_(spec=spec())
    assert await workspace.converge_workspace(p) == Stop("WorkspaceNameTaken")
    pvc = world.stored(PVCS, CLAIM)
    assert pvc is not None
    assert "ownerReferences" not in pvc["metadata"]
    assert pvc["metadata"]["labels"][LABEL_RETAINED] == NAME


@pytest.mark.parametrize("retain", [False, True], ids=["owned", "kept (retain)"])
async def test_refusing_another_users_retained_workspace_says_it_is_one_and_to_use_another_name(
    world: World, retain: bool
) -> None:
    """Not the generic "rename or delete it": deleting it would delete that user's files."""
    world.emulator.create(PVCS, retained_pvc(user=OTHER_USER))
    observed(world)
    p = world.pass_(spec=spec(retain=retain))
    assert await workspace.converge_workspace(p) == Stop("WorkspaceNameTaken")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert f"a workspace retained from an earlier CraftSandbox '{NAME}'" in condition.message
    assert "for another user or tenant" in condition.message
    assert "give this sandbox another name" in condition.message
    assert "only if that user's files may go" in condition.message
    assert "rename or delete it" not in condition.message


async def test_a_pvc_of_someone_else_by_that_name_is_still_said_to_be_renamed_or_deleted(
    world: World,
) -> None:
    foreign = retained_pvc()
    del foreign["metadata"]["labels"]
    world.emulator.create(PVCS, foreign)
    p = world.pass_(spec=spec())
    assert await workspace.converge_workspace(p) == Stop("WorkspaceNameTaken")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert "is not managed by this CraftSandbox" in condition.message
    assert "retained" not in condition.message


async def test_a_write_the_api_server_refuses_is_workspace_write_failed(world: World) -> None:
    def refuse(resource: Any, obj: Any, old: Any) -> list[str]:
        return ["quota exceeded"] if resource.plural == "persistentvolumeclaims" else []

    world.emulator.validators.append(refuse)
    p = world.pass_(spec=spec())
    assert await workspace.converge_workspace(p) == Stop("WorkspaceWriteFailed")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert "quota exceeded" in condition.message
    assert world.events.reasons == ["WorkspaceWriteFailed"]


def test_a_sandbox_with_a_workspace_starts_cold() -> None:
    assert workspace.cold_start_reason(parse_sandbox(sandbox_body())) is None
    with_workspace = parse_sandbox(sandbox_body(spec=spec()))
    assert workspace.cold_start_reason(with_workspace) == "WorkspaceNeedsColdStart"


async def test_a_workspace_to_keep_is_never_owned_by_its_sandbox(world: World) -> None:
    # A foreground deletion (Argo CD's prune) has the garbage collector delete every owned
    # object at once, before any finalizer: a workspace to keep must never be one.
    await workspace.converge_workspace(world.pass_(spec=spec(retain=True)))
    observed(world)
    pvc = world.stored(PVCS, CLAIM)
    assert pvc is not None
    assert "ownerReferences" not in pvc["metadata"]
    assert pvc["metadata"]["labels"][LABEL_RETAINED] == NAME
    assert pvc["metadata"]["labels"][LABEL_USER_ID] == USER
    assert world.events.reasons == ["WorkspaceCreated"]

    world.events.posted.clear()
    p = world.pass_(spec=spec(retain=True))
    assert await workspace.converge_workspace(p) is None, "its own, though unowned"
    assert world.events.reasons == []
    body = sandbox_body(spec=spec(retain=True))
    assert await workspace.release(world.services, body) is True
    assert world.stored(PVCS, CLAIM) == pvc, "kept as it was"


async def test_retain_set_or_unset_on_a_live_sandbox_moves_the_owner_reference_at_once(
    world: World,
) -> None:
    await workspace.converge_workspace(world.pass_(spec=spec()))
    observed(world)
    first = world.stored(PVCS, CLAIM)
    assert first is not None
    world.events.posted.clear()

    await workspace.converge_workspace(world.pass_(spec=spec(retain=True)))
    observed(world)
    kept = world.stored(PVCS, CLAIM)
    assert kept is not None
    assert kept["metadata"]["uid"] == first["metadata"]["uid"]
    assert "ownerReferences" not in kept["metadata"]
    assert kept["metadata"]["labels"][LABEL_RETAINED] == NAME
    assert world.events.reasons == ["WorkspaceRetained"]

    world.events.posted.clear()
    await workspace.converge_workspace(world.pass_(spec=spec()))
    owned = world.stored(PVCS, CLAIM)
    assert owned is not None
    [owner] = owned["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == (UID, True)
    assert LABEL_RETAINED not in owned["metadata"]["labels"]
    assert world.events.reasons == ["WorkspaceUpdated"]


async def test_release_takes_the_owner_off_a_workspace_owned_when_it_is_deleted(
    world: World,
) -> None:
    # retain set while no pass ran (the operator down), then the sandbox deleted.
    await workspace.converge_workspace(world.pass_(spec=spec()))
    observed(world)
    body = sandbox_body(spec=spec(retain=True))
    assert workspace.retains_workspace(body)
    assert await workspace.release(world.services, body) is True
    pvc = world.stored(PVCS, CLAIM)
    assert pvc is not None
    assert "ownerReferences" not in pvc["metadata"], "the garbage collector leaves it"
    assert pvc["metadata"]["labels"][LABEL_RETAINED] == NAME
    assert pvc["metadata"]["labels"][LABEL_USER_ID] == USER
    observed(world)
    assert await workspace.release(world.services, body) is True, "kept, once and for all"
    assert world.stored(PVCS, CLAIM) == pvc


def test_only_retain_true_keeps_the_workspace() -> None:
    assert not workspace.retains_workspace(sandbox_body(spec=spec()))
    assert not workspace.retains_workspace(sandbox_body())
    assert not workspace.retains_workspace({"metadata": {"name": NAME}, "spec": None})


async def test_the_pvc_of_an_earlier_sandbox_still_being_deleted_is_waited_for(
    world: World,
) -> None:
    earlier = retained_pvc()
    earlier["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandbox",
            "name": NAME,
            "uid": "earlier-sandbox",
            "controller": True,
        }
    ]
    earlier["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection"]
    world.emulator.create(PVCS, earlier)
    world.emulator.remove(PVCS, NAMESPACE, CLAIM)  # terminating: a pod still uses it
    observed(world)
    p = world.pass_(spec=spec())
    assert await workspace.converge_workspace(p) == Stop("WorkspaceTerminating")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert "still being deleted" in condition.message
    assert "held by finalizers kubernetes.io/pvc-protection" in condition.message
    assert p.run.verdict.backoff == "WorkspaceTerminating", "retried: it passes by itself"


def with_size(p: Pass, size: str) -> Pass:
    """``p`` over a sandbox whose size the model would refuse (built past the model)."""
    sandbox = p.sandbox
    assert sandbox.spec.workspace is not None
    workspace = sandbox.spec.workspace.model_copy(update={"size": size})
    spec = sandbox.spec.model_copy(update={"workspace": workspace})
    p.sandbox = sandbox.model_copy(update={"spec": spec})
    return p


@pytest.mark.parametrize("size", ["1e1.5", "99999999999999999999999Ei", "0", "-1Gi"])
async def test_an_unusable_size_fails_the_pod_with_a_reason_and_an_event_and_never_raises(
    world: World, size: str
) -> None:
    p = with_size(world.pass_(spec=spec()), size)
    stop = await workspace.converge_workspace(p)
    assert stop == Stop(workspace.SIZE_INVALID)
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", workspace.SIZE_INVALID)
    assert "spec.workspace.size" in (condition.message or "")
    assert p.run.phase == Phase.FAILED
    assert world.events.reasons == [workspace.SIZE_INVALID]
    assert world.emulator.list(PVCS, NAMESPACE) == [], "no claim of that size is asked for"


async def test_an_unusable_size_leaves_an_existing_workspace_as_it_is(world: World) -> None:
    await workspace.converge_workspace(world.pass_(spec=spec(size="10Gi")))
    observed(world)
    p = with_size(world.pass_(spec=spec(size="10Gi")), "1e1.5")
    assert await workspace.converge_workspace(p) == Stop(workspace.SIZE_INVALID)
    assert storage(world) == "10Gi"


async def test_a_kept_workspace_whose_labels_were_edited_is_still_its_sandboxs(
    world: World,
) -> None:
    # Someone tidying retained PVCs by their label drops it from a live sandbox's own: the
    # claim its status records is still its own (no WorkspaceNameTaken), the labels return.
    await workspace.converge_workspace(world.pass_(spec=spec(retain=True)))
    made = world.stored(PVCS, CLAIM)
    assert made is not None
    world.emulator.patch(PVCS, NAMESPACE, CLAIM, {"metadata": {"labels": {LABEL_RETAINED: None}}})
    observed(world)
    recorded = {"workspace": {"claimName": CLAIM, "claimUID": made["metadata"]["uid"]}}
    p = world.pass_(spec=spec(retain=True), status=recorded)
    assert await workspace.converge_workspace(p) is None
    pvc = world.stored(PVCS, CLAIM)
    assert pvc is not None
    assert pvc["metadata"]["labels"][LABEL_RETAINED] == NAME


async def test_a_workspace_kept_while_retain_was_set_goes_with_a_sandbox_deleted_without(
    world: World,
) -> None:
    # retain unset, then the sandbox deleted before any pass gave the PVC its owner back.
    await workspace.converge_workspace(world.pass_(spec=spec(retain=True)))
    observed(world)
    await workspace.delete_unkept(world.services, sandbox_body(spec=spec(retain=False)))
    assert world.stored(PVCS, CLAIM) is None


async def test_deleting_without_retain_never_takes_a_workspace_kept_for_another_sandbox(
    world: World,
) -> None:
    world.emulator.create(PVCS, retained_pvc())  # an earlier sandbox's, kept
    observed(world)
    await workspace.delete_unkept(world.services, sandbox_body(spec=spec()))
    assert world.stored(PVCS, CLAIM) is not None


async def test_a_pass_stopped_before_the_workspace_still_sets_its_owner_by_retain(
    world: World,
) -> None:
    await workspace.converge_workspace(world.pass_(spec=spec()))
    observed(world)
    await workspace.settle_owner(world.pass_(spec=spec(retain=True)))
    observed(world)
    kept = world.stored(PVCS, CLAIM)
    assert kept is not None
    assert "ownerReferences" not in kept["metadata"]
    await workspace.settle_owner(world.pass_(spec=spec()))
    owned = world.stored(PVCS, CLAIM)
    assert owned is not None
    [owner] = owned["metadata"]["ownerReferences"]
    assert owner["uid"] == UID


async def test_a_pass_stopped_before_the_workspace_never_takes_an_earlier_sandboxs_pvc(
    world: World,
) -> None:
    # A new sandbox whose credentials fail: an earlier sandbox's kept files stay unowned
    # (deleting this one must not take them); the workspace step takes them back later.
    world.emulator.create(PVCS, retained_pvc())
    observed(world)
    await workspace.settle_owner(world.pass_(spec=spec()))
    kept = world.stored(PVCS, CLAIM)
    assert kept is not None
    assert "ownerReferences" not in kept["metadata"]


def replaced_behind_the_cache(world: World) -> dict[str, Any]:
    """The PVC the cache holds is deleted and someone else's, unlabelled, made by that name
    before the watch delivers the deletion (the cache still holds the old one): the new one."""
    world.emulator.remove(PVCS, NAMESPACE, CLAIM)
    foreign = retained_pvc()
    del foreign["metadata"]["labels"]
    made = world.emulator.create(PVCS, foreign)
    assert world.cache.get("PVC", NAMESPACE, CLAIM) is not None, "the cache has the old one"
    return made


def untouched(world: World, other: dict[str, Any]) -> None:
    """``other`` is as its maker made it: no label, owner or size of the operator's."""
    assert world.stored(PVCS, CLAIM) == other


async def test_a_retained_workspace_replaced_behind_a_stale_cache_leaves_the_new_pvc_alone(
    world: World,
) -> None:
    """Taking back a retained workspace the cache still holds writes only to that very
    PVC: someone else's made by its name since is never labelled as this sandbox's, so
    neither mounted, nor adopted by its uid, nor deleted with the sandbox."""
    world.emulator.create(PVCS, retained_pvc())
    observed(world)
    other = replaced_behind_the_cache(world)
    p = world.pass_(spec=spec(retain=True))
    assert await workspace.converge_workspace(p) == Stop("WorkspaceWriteFailed")
    assert p.run.status.workspace is None, "no claim of this sandbox's"
    untouched(world, other)
    assert world.cache.get("PVC", NAMESPACE, CLAIM) is None, "read anew on the next pass"

    again = world.pass_(spec=spec(retain=True))
    assert await workspace.converge_workspace(again) == Stop("WorkspaceNameTaken")
    await workspace.delete_unkept(world.services, sandbox_body(spec=spec()))
    untouched(world, other)


async def test_a_resize_on_a_stale_cache_never_lands_on_a_pvc_that_replaced_the_one_read(
    world: World,
) -> None:
    """The resize goes only to the PVC as read: someone else's made by its name since is
    neither grown nor recorded as this sandbox's claim (whose uid a later pass would adopt
    and deleting the sandbox delete)."""
    assert await workspace.converge_workspace(world.pass_(spec=spec())) is None
    observed(world)
    ours = world.stored(PVCS, CLAIM)
    assert ours is not None
    other = replaced_behind_the_cache(world)
    p = world.pass_(spec=spec(size="5Gi"))
    assert await workspace.converge_workspace(p) == Stop("WorkspaceWriteFailed")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert "cannot resize" in condition.message
    recorded_now = p.run.status.workspace
    assert recorded_now is None or recorded_now.claim_uid != other["metadata"]["uid"]
    untouched(world, other)
    assert world.cache.get("PVC", NAMESPACE, CLAIM) is None, "read anew on the next pass"

    recorded = {"workspace": {"claimName": CLAIM, "claimUID": ours["metadata"]["uid"]}}
    again = world.pass_(spec=spec(size="5Gi"), status=recorded)
    assert await workspace.converge_workspace(again) == Stop("WorkspaceNameTaken")
    await workspace.delete_unkept(world.services, sandbox_body(spec=spec()))
    untouched(world, other)
