"""The permissions ``doctor`` checks are exactly the grants of the operator's ClusterRole."""

from __future__ import annotations

import pytest

from craft_operator.permissions import REQUIRED_PERMISSIONS, Permission
from tests.support.rbac import cluster_role_rules, grants

pytestmark = pytest.mark.unit


def test_the_packaged_permissions_equal_the_cluster_role_in_manifests() -> None:
    packaged = {(p.verb, p.group, p.resource) for p in REQUIRED_PERMISSIONS}
    assert packaged == grants(cluster_role_rules())
    assert len(packaged) == len(REQUIRED_PERMISSIONS), "a permission is listed twice"


def test_only_cluster_scoped_resources_are_checked_outside_namespaces() -> None:
    cluster_scoped = {p.resource for p in REQUIRED_PERMISSIONS if not p.namespaced}
    assert cluster_scoped == {
        "customresourcedefinitions",
        "clusterkopfpeerings",
        "craftsandboxpolicies",
        "namespaces",
    }


def test_a_subresource_is_split_for_the_access_review() -> None:
    status = Permission("craft.onyx.app", "craftsandboxes/status", "patch")
    assert (status.plural, status.subresource) == ("craftsandboxes", "status")
    assert status.describe() == "patch craftsandboxes/status.craft.onyx.app"
    assert Permission("", "events", "create").describe() == "create events"
