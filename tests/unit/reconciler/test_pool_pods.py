"""What a claim may take from a pool, read from the cache's index without a scan: the pool's
own unclaimed pods of the template, Running and Ready, not being deleted, oldest first."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from craft_operator.api.pool import (
    LABEL_CLAIMED_FROM,
    LABEL_POOL,
    LABEL_POOL_TEMPLATE_HASH,
    POOL_KIND,
)
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.reconciler.pool_pods import (
    claimed_pods,
    count_claimed,
    pool_members,
    ready_pool_pod_names,
    ready_pool_pods,
)

pytestmark = pytest.mark.unit

POOL_UID = "pool-uid-1"


def pool(uid: str = POOL_UID, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "warm",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": version,
            "generation": 1,
        },
        "status": {"observedGeneration": 1, "templateHash": "h1"},
    }


def pod(
    name: str,
    created: str,
    *,
    ready: bool = True,
    template: str = "h1",
    owner: tuple[str, str, str] = (POOL_KIND, "warm", POOL_UID),
    version: str = "1",
) -> dict[str, Any]:
    kind, owner_name, uid = owner
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": version,
            "creationTimestamp": created,
            "labels": {LABEL_POOL: "warm", LABEL_POOL_TEMPLATE_HASH: template},
            "ownerReferences": [{"kind": kind, "name": owner_name, "uid": uid, "controller": True}],
        },
        "status": {
            "phase": "Running" if ready else "Pending",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def cache_with(*pods: dict[str, Any]) -> ObjectCache:
    cache = ObjectCache()
    cache.put(kinds.POOL.name, pool())
    for body in pods:
        cache.put(kinds.POD.name, body)
    return cache


def test_only_the_pools_own_ready_unclaimed_pods_of_its_template_are_offered_oldest_first() -> None:
    terminating = pod("terminating", "2026-11-27T09:00:00Z")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    cache = cache_with(
        pod("newer", "2026-11-27T10:00:05Z"),
        pod("older", "2026-11-27T10:00:01Z"),
        pod("starting", "2026-11-27T09:00:00Z", ready=False),
        pod("other-template", "2026-11-27T09:00:00Z", template="h0"),
        pod("labelled-by-hand", "2026-11-27T09:00:00Z", owner=("CraftSandbox", "warm", "x")),
        pod("another-pools", "2026-11-27T09:00:00Z", owner=(POOL_KIND, "cold", "x")),
        pod("an-older-pool-of-that-name", "2026-11-27T09:00:00Z", owner=(POOL_KIND, "warm", "x")),
        terminating,
    )
    assert list(ready_pool_pod_names(cache, "ns", "warm")) == ["older", "newer"]
    assert [p["metadata"]["name"] for p in ready_pool_pods(cache, "ns", "warm")] == [
        "older",
        "newer",
    ]
    assert list(ready_pool_pod_names(cache, "ns", "warm", template_hash="h0")) == ["other-template"]


def test_a_pod_that_no_longer_runs_is_not_offered_whatever_its_ready_condition_says() -> None:
    ended = pod("ended", "2026-11-27T09:00:00Z")
    ended["status"]["phase"] = "Succeeded"  # its Ready condition not yet updated
    cache = cache_with(ended, pod("running", "2026-11-27T10:00:00Z"))
    assert list(ready_pool_pod_names(cache, "ns", "warm")) == ["running"]


def test_a_pod_is_offered_once_ready_and_no_longer_once_claimed_or_deleted() -> None:
    starting = pod("a", "2026-11-27T10:00:00Z", ready=False)
    cache = cache_with(starting)
    assert list(ready_pool_pod_names(cache, "ns", "warm")) == []
    cache.put(kinds.POD.name, pod("a", "2026-11-27T10:00:00Z", version="2"))
    assert list(ready_pool_pod_names(cache, "ns", "warm")) == ["a"]
    claimed = copy.deepcopy(pod("a", "2026-11-27T10:00:00Z", version="3"))
    del claimed["metadata"]["labels"][LABEL_POOL]
    claimed["metadata"]["ownerReferences"] = [
        {"kind": "CraftSandbox", "name": "alice", "uid": "s1", "controller": True}
    ]
    cache.put(kinds.POD.name, claimed)  # the claim's answer, written through
    assert list(ready_pool_pod_names(cache, "ns", "warm")) == []
    cache.put(kinds.POD.name, pod("b", "2026-11-27T10:00:01Z"))
    cache.remove(kinds.POD.name, pod("b", "2026-11-27T10:00:01Z", version="2"))
    assert list(ready_pool_pod_names(cache, "ns", "warm")) == []


def test_nothing_is_offered_from_a_pool_that_is_gone_or_whose_status_is_behind() -> None:
    cache = cache_with(pod("a", "2026-11-27T10:00:00Z"))
    behind = pool(version="2")
    behind["metadata"]["generation"] = 2
    cache.put(kinds.POOL.name, behind)
    assert list(ready_pool_pod_names(cache, "ns", "warm")) == []
    cache.remove(kinds.POOL.name, pool(version="3"))
    assert list(ready_pool_pod_names(cache, "ns", "warm", template_hash="h1")) == []


def claimed(
    name: str, pool_name: str = "warm", *, keeps_pool_label: bool = False
) -> dict[str, Any]:
    """A pod claimed from ``pool_name`` by a sandbox (one that someone labelled back into
    the pool, if ``keeps_pool_label``)."""
    body = pod(name, "2026-11-27T10:00:00Z", owner=("CraftSandbox", name, f"s-{name}"))
    labels = body["metadata"]["labels"]
    labels[LABEL_CLAIMED_FROM] = pool_name
    if not keeps_pool_label:
        del labels[LABEL_POOL]
    return body


def test_a_pass_reads_the_pools_members_and_the_strays_of_an_earlier_pool_in_one_go() -> None:
    cache = cache_with(
        pod("ours", "2026-11-27T10:00:00Z"),
        pod("stray", "2026-11-27T10:00:00Z", owner=(POOL_KIND, "warm", "old-uid")),
        pod("labelled-by-hand", "2026-11-27T10:00:00Z", owner=("CraftSandbox", "warm", "x")),
        pod("another-pools", "2026-11-27T10:00:00Z", owner=(POOL_KIND, "cold", "x")),
        claimed("alice"),
    )
    ours, strays = pool_members(cache, "ns", "warm", POOL_UID)
    assert [p["metadata"]["name"] for p in ours] == ["ours"]
    assert [p["metadata"]["name"] for p in strays] == ["stray"]


def sandbox(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"s-{name}"}}


def test_the_claimed_count_from_the_index_agrees_with_the_claimed_pods_read_one_by_one() -> None:
    back_in_the_pool = claimed("carol", keeps_pool_label=True)
    back_in_the_pool["metadata"]["ownerReferences"] = [
        {"kind": POOL_KIND, "name": "warm", "uid": POOL_UID, "controller": True}
    ]
    cache = cache_with(
        pod("ours", "2026-11-27T10:00:00Z"),
        claimed("alice"),
        claimed("bob"),
        claimed("dave", keeps_pool_label=True),  # labelled back, still the sandbox's
        claimed("erin", pool_name="cold"),
        back_in_the_pool,  # the pool's controller again: a member, not a claimed pod
    )
    for name in ("alice", "bob", "dave", "erin"):
        cache.put(kinds.SANDBOX.name, sandbox(name))
    expected = len(claimed_pods(cache, "ns", "warm"))
    assert expected == 3
    assert count_claimed(cache, "ns", "warm") == expected
    cache.remove(kinds.POD.name, claimed("alice"))
    assert count_claimed(cache, "ns", "warm") == expected - 1
