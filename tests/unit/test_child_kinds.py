"""One registry of the kinds the operator watches: the watches, their label filters, the
relist of an activated replica, the RBAC grants, the finalizer and the policy's withdrawal
all follow it, so adding a child kind is one row (plus its grant in the manifests)."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from craft_operator import handlers
from craft_operator.api.parse import parse_sandbox
from craft_operator.credentials.model import Revocation
from craft_operator.handlers.streams import watch_streams
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import Kind, NotFoundError
from craft_operator.peering.gate import RELISTED
from craft_operator.permissions import (
    CLUSTER_PERMISSIONS,
    SANDBOX_NAMESPACE_PERMISSIONS,
    Permission,
)
from craft_operator.reconciler import policy_step as enforce
from craft_operator.reconciler.library_pool import LibrarySyncPool
from craft_operator.reconciler.sandbox import FINALIZER, SandboxReconciler
from tests.unit.policy.cases import USER
from tests.unit.reconciler.steps.conftest import Events

pytestmark = pytest.mark.unit

NAMESPACE, NAME, UID = "team-a", "alice", "u-1"
BODY: dict[str, Any] = {
    "apiVersion": "craft.onyx.app/v1alpha1",
    "kind": "CraftSandbox",
    "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": UID, "generation": 1},
    "spec": {"user": {"id": USER}, "image": "registry.example.com/craft/sandbox:1"},
}
OWNER = {"kind": "CraftSandbox", "name": NAME, "uid": UID, "controller": True}


def test_kopf_watches_none_of_the_cached_kinds() -> None:
    registry = kopf.OperatorRegistry()
    handlers.register(registry)
    assert list(registry._watching.get_all_handlers()) == []


@pytest.mark.parametrize("namespaces", [(), ("team-a", "team-b")])
def test_every_kind_is_watched_by_a_stream_of_its_own_with_its_label_filter(
    namespaces: tuple[str, ...],
) -> None:
    cache = ObjectCache()
    cache.put(kinds.POD.name, {"metadata": {"namespace": "team-a", "name": "p"}})
    cache.put(kinds.SECRET.name, {"metadata": {"namespace": "team-b", "name": "s"}})
    cache.put(kinds.NAMESPACE.name, {"metadata": {"name": "team-a"}})
    memo: Any = SimpleNamespace(kube=None, cache=cache, gate=SimpleNamespace(namespaces=namespaces))
    streams = watch_streams(memo)
    watched = {(s._kind, s._namespace, s._selector) for s in streams}
    scopes = namespaces or (None,)
    assert watched == {
        (kind.api, namespace, kind.selector)
        for kind in kinds.KINDS
        for namespace in (scopes if kind.api.namespaced else (None,))
    }
    assert len(streams) == len(watched)
    assert {kind.name for kind in kinds.KINDS if kind.managed_only} == {
        kind.name for kind in kinds.CHILDREN
    }
    # After a list, a stream says DELETED for what the cache holds of its kind and scope.
    held = {(s._kind, s._namespace): set(s._known()) for s in streams}
    assert held[(kinds.NAMESPACE.api, None)] == {("", "team-a")}
    for namespace in scopes:
        assert held[(kinds.POD.api, namespace)] == (
            {("team-a", "p")} if namespace in (None, "team-a") else set()
        )
        assert held[(kinds.CONFIGMAP.api, namespace)] == set()


def test_an_activated_replica_relists_what_is_watched_with_the_same_filter() -> None:
    assert [(kind, name, selector) for kind, name, selector in RELISTED] == [
        (kind.api, kind.name, kind.selector) for kind in kinds.KINDS
    ]
    assert RELISTED[0][1] == "NetworkPolicy", "a sandbox must not look unprotected at start"


def test_the_packaged_rbac_grants_the_registry_verbs_on_every_kind_and_no_more() -> None:
    plurals = {(kind.api.group, kind.api.plural) for kind in kinds.KINDS}
    packaged = {
        permission
        for permission in (*CLUSTER_PERMISSIONS, *SANDBOX_NAMESPACE_PERMISSIONS)
        if (permission.group, permission.resource) in plurals
    }
    expected = {
        Permission(kind.api.group, kind.api.plural, verb, kind.api.namespaced)
        for kind in kinds.KINDS
        for verb in kind.verbs
    }
    assert packaged == expected


def test_the_children_are_the_kinds_a_sandbox_owns() -> None:
    assert [kind.name for kind in kinds.CHILDREN] == ["Pod", "Secret", "ConfigMap", "PVC", "Job"]
    assert kinds.CHILDREN[0] is kinds.POD, "the finalizer frees the pod first"
    assert all(kind.api.namespaced for kind in kinds.CHILDREN)


def cache_with_one_child_of_each_kind() -> tuple[ObjectCache, set[tuple[str, str]]]:
    """A cache holding one owned child of every registered child kind, and someone else's."""
    cache = ObjectCache()
    children: set[tuple[str, str]] = set()
    for number, kind in enumerate(kinds.CHILDREN):
        for suffix in kind.name_suffixes or ("-library-1",):
            meta = {
                "name": NAME + suffix,
                "namespace": NAMESPACE,
                "uid": f"c-{number}{suffix}",
                "ownerReferences": [OWNER],
                "resourceVersion": "1",
            }
            cache.put(kind.name, {"metadata": meta})
            children.add((kind.api.plural, NAME + suffix))
        foreign = {**meta, "name": "bob-other", "uid": "f", "ownerReferences": []}
        cache.put(kind.name, {"metadata": foreign})
    return cache, children


def test_the_pvcs_are_named_children_the_library_volume_and_the_workspace() -> None:
    assert kinds.PVC.name_suffixes == ("-library", "-workspace")
    _, children = cache_with_one_child_of_each_kind()
    assert ("persistentvolumeclaims", NAME + "-library") in children
    assert ("persistentvolumeclaims", NAME + "-workspace") in children
    targets = kinds.child_targets(ObjectCache(), NAMESPACE, NAME, lambda obj: False)
    assert [(kind.name, name) for kind, name in targets if kind is kinds.PVC] == [
        ("PVC", NAME + "-library"),
        ("PVC", NAME + "-workspace"),
    ], "named children are found by name, cached or not"


class FakeKube:
    """Records deletions; knows only what the cache holds."""

    def __init__(self) -> None:
        self.deleted: set[tuple[str, str]] = set()

    async def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        raise NotFoundError(404, "NotFound", name)

    async def delete(self, kind: Kind, namespace: str, name: str, *, uid: str | None) -> None:
        self.deleted.add((kind.plural, name))

    async def patch(self, kind: Kind, namespace: str, name: str, body: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace}}


class NoCredentials:
    async def revoke(
        self, namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        return Revocation.NOTHING

    def forget(self, uid: str) -> None:
        return None


class NoLibrary:
    async def forget(self, uid: str) -> None:
        return None

    async def close(self) -> None:
        return None


async def test_the_finalizer_deletes_one_child_of_every_registered_kind() -> None:
    cache, children = cache_with_one_child_of_each_kind()
    cache.put(
        kinds.SANDBOX.name,
        {
            **BODY,
            "metadata": {
                **BODY["metadata"],
                "deletionTimestamp": "2026-11-23T12:00:00Z",
                "finalizers": [FINALIZER],
            },
        },
    )
    kube = FakeKube()
    services = SimpleNamespace(
        kube=kube,
        cache=cache,
        credentials=NoCredentials(),
        library=NoLibrary(),
        library_pool=LibrarySyncPool(1),
        events=Events(),
    )
    await SandboxReconciler(services).reconcile((NAMESPACE, NAME))
    assert kube.deleted == children


def test_a_withdrawal_finds_one_child_of_every_registered_kind_but_the_workspace() -> None:
    cache, children = cache_with_one_child_of_each_kind()
    found = enforce._children(parse_sandbox(BODY), cache)
    workspace = ("persistentvolumeclaims", NAME + "-workspace")
    assert {(kind.plural, obj["metadata"]["name"]) for _, kind, obj in found} == children - {
        workspace
    }, "the user's files hold no token: a withdrawal keeps them, the deletion does not"
