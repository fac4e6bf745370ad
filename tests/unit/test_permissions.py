"""The permissions ``doctor`` and the start-up check ask for are exactly the grants of the
manifests, and each lives where its scope says."""

from __future__ import annotations

import pytest

from craft_operator.permissions import (
    ALL_NAMESPACES_PERMISSIONS,
    CLUSTER_PERMISSIONS,
    OPERATOR_NAMESPACE_PERMISSIONS,
    SANDBOX_NAMESPACE_PERMISSIONS,
    Permission,
    access_requests,
)
from tests.support.rbac import (
    ALL_NAMESPACES_RBAC_PATH,
    RBAC_PATH,
    cluster_role_rules,
    grants,
    role_rules,
    sandbox_role_rules,
)

pytestmark = pytest.mark.unit


def as_grants(permissions: tuple[Permission, ...]) -> set[tuple[str, str, str]]:
    packaged = {(p.verb, p.group, p.resource) for p in permissions}
    assert len(packaged) == len(permissions), "a permission is listed twice"
    return packaged


def test_the_packaged_permissions_equal_the_roles_in_manifests() -> None:
    assert as_grants(CLUSTER_PERMISSIONS) == grants(cluster_role_rules())
    assert as_grants(OPERATOR_NAMESPACE_PERMISSIONS) == grants(
        role_rules(RBAC_PATH, "Role", "craft-system")
    )
    assert as_grants(SANDBOX_NAMESPACE_PERMISSIONS) == grants(sandbox_role_rules())
    assert as_grants(ALL_NAMESPACES_PERMISSIONS) == grants(
        role_rules(ALL_NAMESPACES_RBAC_PATH, "ClusterRole")
    )


def test_the_cluster_role_of_the_default_install_holds_only_cluster_scoped_grants() -> None:
    assert all(not p.namespaced for p in CLUSTER_PERMISSIONS)
    assert {p.resource for p in CLUSTER_PERMISSIONS} == {
        "clusterkopfpeerings",
        "craftsandboxpolicies",
        "namespaces",
    }
    assert all(p.namespaced for p in SANDBOX_NAMESPACE_PERMISSIONS)


def test_a_scoped_operator_asks_for_the_sandbox_role_in_each_namespace_it_serves() -> None:
    requests = access_requests(["team-a", "team-b"], template_namespace="craft-system")
    namespaced = [(p, ns) for p, ns in requests if p.namespaced]
    assert {ns for _, ns in namespaced} == {"team-a", "team-b", "craft-system"}
    assert len([r for r in namespaced if r[1] == "team-a"]) == len(SANDBOX_NAMESPACE_PERMISSIONS)
    assert [p for p, ns in namespaced if ns == "craft-system"] == list(
        OPERATOR_NAMESPACE_PERMISSIONS
    )
    assert {p for p, ns in requests if ns is None} == set(CLUSTER_PERMISSIONS)


def test_an_operator_of_all_namespaces_asks_for_everything_cluster_wide() -> None:
    requests = access_requests([], peering=False, template_namespace="craft-system")
    policy_reads = [(p, None) for p in CLUSTER_PERMISSIONS if p.group != "kopf.dev"]
    assert requests == [*policy_reads, *((p, None) for p in ALL_NAMESPACES_PERMISSIONS)]


def test_a_subresource_is_split_for_the_access_review() -> None:
    status = Permission("craft.onyx.app", "craftsandboxes/status", "patch")
    assert (status.plural, status.subresource) == ("craftsandboxes", "status")
    assert status.describe() == "patch craftsandboxes/status.craft.onyx.app"
    assert Permission("", "events", "create").describe() == "create events"
