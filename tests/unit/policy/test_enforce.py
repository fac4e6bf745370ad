"""What the operator's policy step reads: the cached policy and namespace, failing closed."""

from __future__ import annotations

import pytest

from craft_operator.api.parse import parse_sandbox
from craft_operator.kube.cache import ObjectCache
from craft_operator.policy.enforce import NAMESPACE, POLICY, check
from craft_operator.policy.models import TENANT_LABEL
from tests.support.policy import policy
from tests.unit.policy.cases import USER
from tests.unit.policy.test_rules import SETTINGS

pytestmark = pytest.mark.unit

SANDBOX = parse_sandbox(
    {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": "alice", "namespace": "team-a", "uid": "u-1"},
        "spec": {"user": {"id": USER}, "image": "registry.example.com/craft/sandbox:1"},
    }
)


def cache_with(*, labels: dict[str, str] | None = None, spec: dict | None = None) -> ObjectCache:
    cache = ObjectCache()
    if labels is not None:
        cache.put(NAMESPACE, {"metadata": {"name": "team-a", "labels": labels}})
    if spec is not None:
        cache.put(
            POLICY, {**policy(**spec), "metadata": {"name": "default", "resourceVersion": "7"}}
        )
    return cache


def test_a_sandbox_in_a_namespace_not_seen_yet_is_not_judged_allowed() -> None:
    assert (
        check(SANDBOX, cache_with(spec={"images": ["registry.example.com/craft/"]}), SETTINGS)
        is None
    )


def test_the_cached_policy_allows_what_it_lists() -> None:
    cache = cache_with(labels={}, spec={"images": ["registry.example.com/craft/"]})
    assert check(SANDBOX, cache, SETTINGS) == []


def test_no_policy_object_allows_only_the_defaults() -> None:
    violations = check(SANDBOX, cache_with(labels={}), SETTINGS)
    assert [violation.field for violation in violations or []] == ["spec.image"]


def test_an_unreadable_policy_allows_only_the_defaults() -> None:
    cache = cache_with(labels={}, spec={"images": "registry.example.com/craft/"})
    violations = check(SANDBOX, cache, SETTINGS)
    assert [violation.field for violation in violations or []] == ["spec.image"]


def test_the_namespace_label_is_read_from_the_cache() -> None:
    cache = cache_with(labels={TENANT_LABEL: "acme"}, spec={"images": ["registry.example.com/"]})
    violations = check(SANDBOX, cache, SETTINGS)
    assert [violation.field for violation in violations or []] == ["spec.user.tenantId"]
