"""The finalizer: a deletion that cannot go on says so, and a sandbox in a namespace being
deleted is let go once its PAT is revoked (the namespace controller deletes the rest)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from craft_operator.credentials.errors import DatabaseUnavailableError
from craft_operator.credentials.model import Revocation
from craft_operator.kube import kinds
from craft_operator.library.errors import S3UnavailableError
from craft_operator.reconciler import finalizer
from craft_operator.reconciler.library_pool import Outcome
from craft_operator.reconciler.table import CONDITIONS
from tests.integration.conftest import SANDBOXES, declare_craft_resources
from tests.support.apply import FailNext
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, World, sandbox_body

pytestmark = pytest.mark.unit

SECRET = f"{NAME}-credentials"


def deleted_sandbox(world: World, *others: str) -> dict[str, Any]:
    """The sandbox, Ready, with its finalizer (and ``others``) and a Secret of its own,
    deleted by a client."""
    declare_craft_resources(world.emulator)
    body = sandbox_body(status={"phase": "Ready"})
    body["metadata"]["finalizers"] = [finalizer.FINALIZER, *others]
    del body["metadata"]["resourceVersion"]
    created = world.emulator.create(SANDBOXES, body)
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "ready"}
    world.emulator.patch(
        SANDBOXES,
        NAMESPACE,
        NAME,
        {"status": {"phase": "Ready", "conditions": [ready]}},
        subresource="status",
    )
    uid = created["metadata"]["uid"]
    owner = {"apiVersion": "craft.onyx.app/v1alpha1", "kind": "CraftSandbox", "name": NAME}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": SECRET,
            "namespace": NAMESPACE,
            "labels": {"onyx.app/sandbox-id": NAME},
            "ownerReferences": [{**owner, "uid": uid, "controller": True}],
        },
    }
    world.cache.put("Secret", world.emulator.create("v1/secrets", secret))
    world.emulator.remove(SANDBOXES, NAMESPACE, NAME)
    return world.emulator.get(SANDBOXES, NAMESPACE, NAME)


def namespace_being_deleted(world: World) -> None:
    """The namespaces' watch has seen the sandbox's namespace marked for deletion."""
    world.cache.put(
        kinds.NAMESPACE.name,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "deletionTimestamp": "2026-11-23T12:00:00Z"},
        },
    )


async def test_a_deletion_that_cannot_go_on_says_so_in_the_status_and_an_event(
    world: World,
) -> None:
    body = deleted_sandbox(world)
    world.emulator.before_request.insert(0, FailNext("DELETE", 500, count=100))

    verdict = await finalizer.finalize(world.services, body, CONDITIONS)

    assert verdict is not None
    assert verdict.backoff is not None
    stored = world.emulator.get(SANDBOXES, NAMESPACE, NAME)
    assert stored["status"]["phase"] == "Terminating"
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "DeletionBlocked")
    assert f"cannot delete Secret {SECRET}" in ready["message"]
    assert ("Warning", "DeletionBlocked") in {(t, r) for t, r, _ in world.events.posted}
    assert stored["metadata"]["finalizers"] == [finalizer.FINALIZER]


async def test_the_pat_revoked_is_the_one_of_this_sandbox_as_created(world: World) -> None:
    """The store leaves a later namesake's PAT alone: it needs the uid and creation time."""
    body = deleted_sandbox(world)
    created = datetime.fromisoformat(body["metadata"]["creationTimestamp"])

    assert await finalizer.finalize(world.services, body, CONDITIONS) is None

    assert world.credentials.revoked == [(body["metadata"]["uid"], created)]
    assert created.tzinfo is not None


async def test_the_finalizer_leaves_an_object_that_took_a_cached_childs_name_since(
    world: World,
) -> None:
    """The cache still holds the sandbox's Secret, which someone else's of that name has
    replaced: the delete is made on the cached one's uid, and the API server refuses it."""
    body = deleted_sandbox(world)
    world.emulator.remove("v1/secrets", NAMESPACE, SECRET)
    successor = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "data": {"token": "c2VjcmV0"},
    }
    made = world.emulator.create("v1/secrets", successor)

    assert await finalizer.finalize(world.services, body, CONDITIONS) is None

    kept = world.emulator.find("v1/secrets", NAMESPACE, SECRET)
    assert kept is not None
    assert kept["metadata"]["uid"] == made["metadata"]["uid"]


@pytest.mark.parametrize(
    ("revocation", "said"),
    [
        (Revocation.REVOKED, ("PATRevoked", "the sandbox's PAT was revoked")),
        (Revocation.NOT_IN_ONYX, ("PATForgotten", finalizer.PAT_NOT_IN_ONYX)),
        (Revocation.NOTHING, None),
    ],
)
async def test_the_deletion_says_whether_the_pat_was_revoked_or_already_gone_from_onyx(
    world: World, revocation: Revocation, said: tuple[str, str] | None
) -> None:
    body = deleted_sandbox(world)

    async def revoke(
        namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        return revocation

    world.credentials.revoke = revoke  # type: ignore[method-assign]

    assert await finalizer.finalize(world.services, body, CONDITIONS) is None

    about_the_pat = {
        (reason, message)
        for _, reason, message in world.events.posted
        if reason in {"PATRevoked", "PATForgotten"}
    }
    assert about_the_pat == ({said} if said else set())


async def test_in_a_namespace_being_deleted_the_sandbox_is_let_go_and_its_children_left_to_it(
    world: World,
) -> None:
    """The namespace controller deletes every object there, and took the operator's Role
    with it: the children are not the finalizer's to delete (it could not)."""
    body = deleted_sandbox(world)
    namespace_being_deleted(world)
    refused = FailNext("DELETE", 403, count=100)
    world.emulator.before_request.insert(0, refused)

    verdict = await finalizer.finalize(world.services, body, CONDITIONS)

    assert verdict is None
    assert world.emulator.find(SANDBOXES, NAMESPACE, NAME) is None
    assert refused.failed == [], "no child deletion was tried"


async def test_where_its_namespace_took_the_operators_role_the_deletion_says_what_to_do(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Neither the finalizer's removal nor the status may be written any more: the log says
    how to let the namespace go, and the pass backs off (no traceback on every retry)."""
    body = deleted_sandbox(world)
    namespace_being_deleted(world)
    world.emulator.before_request.insert(0, FailNext("PATCH", 403, count=100))

    verdict = await finalizer.finalize(world.services, body, CONDITIONS)

    assert verdict is not None
    assert verdict.backoff is not None
    assert "kubectl patch csb alice" in caplog.text
    assert '{"metadata":{"finalizers":null}}' in caplog.text


async def test_a_sandbox_others_still_hold_no_longer_says_ready_once_released(
    world: World,
) -> None:
    # kubectl delete --cascade=foreground: the garbage collector's finalizer keeps the
    # sandbox until its children are gone (for good, if a finalizer holds its pod).
    body = deleted_sandbox(world, "foregroundDeletion")

    assert await finalizer.finalize(world.services, body, CONDITIONS) is None

    stored = world.emulator.get(SANDBOXES, NAMESPACE, NAME)
    assert stored["metadata"]["finalizers"] == ["foregroundDeletion"], "released at once"
    assert stored["status"]["phase"] == "Terminating"
    conditions = {c["type"]: c for c in stored["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "False"
    credentials = conditions["CredentialsReady"]
    assert (credentials["status"], credentials["reason"]) == ("False", "Deleting")
    assert "foregroundDeletion" in credentials["message"]


def database_unreachable(world: World) -> None:
    """Every revocation fails: the credential database cannot be reached."""

    async def revoke(
        namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        raise DatabaseUnavailableError("the credential database cannot be reached")

    world.credentials.revoke = revoke  # type: ignore[method-assign]


async def test_a_revocation_that_fails_where_the_role_went_says_what_to_do(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    body = deleted_sandbox(world)
    namespace_being_deleted(world)
    world.emulator.before_request.insert(0, FailNext("PATCH", 403, count=100))
    database_unreachable(world)

    verdict = await finalizer.finalize(world.services, body, CONDITIONS)

    assert verdict is not None
    assert verdict.backoff is not None, "backs off, no traceback on every retry"
    assert "kubectl patch csb alice" in caplog.text


async def test_a_pat_that_cannot_be_revoked_holds_the_deletion_and_nothing_is_deleted(
    world: World,
) -> None:
    body = deleted_sandbox(world)
    database_unreachable(world)

    verdict = await finalizer.finalize(world.services, body, CONDITIONS)

    assert verdict is not None
    assert verdict.backoff is not None
    stored = world.emulator.get(SANDBOXES, NAMESPACE, NAME)
    assert stored["metadata"]["finalizers"] == [finalizer.FINALIZER]
    assert world.emulator.find("v1/secrets", NAMESPACE, SECRET) is not None
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "RevokeFailed")
    assert ("Warning", "RevokeFailed") in {(t, r) for t, r, _ in world.events.posted}


async def test_adding_the_finalizer_to_a_stale_copy_drops_no_finalizer_added_meanwhile(
    world: World,
) -> None:
    declare_craft_resources(world.emulator)
    body = sandbox_body()
    del body["metadata"]["resourceVersion"]
    stale = world.emulator.create(SANDBOXES, body)
    world.emulator.patch(
        SANDBOXES, NAMESPACE, NAME, {"metadata": {"finalizers": ["example.com/backup"]}}
    )

    verdict = await finalizer.ensure(world.services, stale)

    stored = world.emulator.get(SANDBOXES, NAMESPACE, NAME)
    assert "example.com/backup" in stored["metadata"]["finalizers"]
    assert verdict is not None


async def test_a_deleted_sandbox_leaves_no_library_record_nor_sync_state_behind(
    world: World,
) -> None:
    body = deleted_sandbox(world)
    forgotten: list[str] = []

    async def forget(uid: str) -> None:
        forgotten.append(uid)

    world.services.library.forget = forget  # type: ignore[method-assign]
    pool = world.services.library_pool
    pool.count((NAMESPACE, NAME), Outcome("", error=S3UnavailableError("S3 is unreachable")))
    assert pool.retry_in((NAMESPACE, NAME)) > 0

    assert await finalizer.finalize(world.services, body, CONDITIONS) is None

    assert forgotten == [body["metadata"]["uid"]]
    assert pool.retry_in((NAMESPACE, NAME)) == 0, "a namesake starts without its backoff"


def namesake_of_a_gone_sandbox(world: World, stale: dict[str, Any]) -> dict[str, Any]:
    """The sandbox ``stale`` is a copy of let go (its finalizer removed: the API server
    deleted it), and a new CraftSandbox of its name, Ready, made since."""
    world.emulator.patch(SANDBOXES, NAMESPACE, NAME, {"metadata": {"finalizers": None}})
    assert world.emulator.find(SANDBOXES, NAMESPACE, NAME) is None
    body = sandbox_body()
    body["metadata"]["finalizers"] = [finalizer.FINALIZER]
    del body["metadata"]["resourceVersion"], body["metadata"]["uid"]
    world.emulator.create(SANDBOXES, body)
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "ready"}
    namesake = world.emulator.patch(
        SANDBOXES,
        NAMESPACE,
        NAME,
        {"status": {"phase": "Ready", "conditions": [ready]}},
        subresource="status",
    )
    assert namesake["metadata"]["uid"] != stale["metadata"]["uid"]
    return namesake


@pytest.mark.parametrize("others", [(), ("foregroundDeletion",)], ids=["revoke fails", "held"])
async def test_a_pass_on_a_stale_copy_of_a_gone_sandbox_writes_nothing_on_its_namesake(
    world: World, others: tuple[str, ...]
) -> None:
    """A merge patch of the status subresource carries no precondition on the uid (the
    API server ignores the metadata of a status write): the write is conditional on the
    resourceVersion the pass read instead, which no later object has."""
    stale = deleted_sandbox(world, *others)
    namesake = namesake_of_a_gone_sandbox(world, stale)
    if not others:
        database_unreachable(world)

    await finalizer.finalize(world.services, stale, CONDITIONS)

    stored = world.emulator.get(SANDBOXES, NAMESPACE, NAME)
    assert stored["metadata"]["uid"] == namesake["metadata"]["uid"]
    assert stored["status"] == namesake["status"], "the namesake's status is its own"
    assert stored["metadata"]["finalizers"] == [finalizer.FINALIZER]


async def test_a_sandbox_others_hold_that_changed_since_read_is_released_once_it_says_so(
    world: World,
) -> None:
    """Its status write, conditional on the copy read, is refused: the finalizer stays
    until a pass on the sandbox as it is now says Terminating, then goes."""
    read = deleted_sandbox(world, "foregroundDeletion")
    world.emulator.patch(
        SANDBOXES, NAMESPACE, NAME, {"metadata": {"annotations": {"example.com/x": "y"}}}
    )

    verdict = await finalizer.finalize(world.services, read, CONDITIONS)

    assert verdict is not None
    assert verdict.backoff is not None
    stored = world.emulator.get(SANDBOXES, NAMESPACE, NAME)
    assert stored["metadata"]["finalizers"] == [finalizer.FINALIZER, "foregroundDeletion"]
    assert stored["status"]["phase"] == "Ready"

    assert await finalizer.finalize(world.services, stored, CONDITIONS) is None

    stored = world.emulator.get(SANDBOXES, NAMESPACE, NAME)
    assert stored["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert stored["status"]["phase"] == "Terminating"
