"""The operator's watch streams, wired to its handlers: what vanished while they were away
(a watch gap after 410 Gone, an API server restart) leaves the cache, whatever its kind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from craft_operator.handlers.streams import watch_streams
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import KubeClient
from craft_operator.metrics import Metrics
from craft_operator.policy.models import POLICY_NAME
from tests.integration.conftest import SANDBOXES, declare_craft_resources
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.policy import POLICIES
from tests.support.pools import POOLS
from tests.support.queues import RecordingQueue
from tests.unit.kube.conftest import NAMESPACE

pytestmark = pytest.mark.unit


OBJECTS: list[tuple[str, dict[str, Any]]] = [
    (
        "networking.k8s.io/v1/networkpolicies",
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "deny-egress", "namespace": NAMESPACE},
            "spec": {"podSelector": {}, "policyTypes": ["Egress"]},
        },
    ),
    (POOLS, {"kind": "CraftSandboxPool", "metadata": {"name": "warm", "namespace": NAMESPACE}}),
    (SANDBOXES, {"kind": "CraftSandbox", "metadata": {"name": "alice", "namespace": NAMESPACE}}),
    (POLICIES, {"kind": "CraftSandboxPolicy", "metadata": {"name": POLICY_NAME}}),
]


KINDS = (kinds.NETWORK_POLICY, kinds.POOL, kinds.SANDBOX, kinds.POLICY)


def held(cache: ObjectCache) -> int:
    """How many of the objects above the cache holds."""
    return sum(len(cache.keys(kind.name, None)) for kind in KINDS)


async def streaming(memo: Any, until: Callable[[], bool], what: str) -> None:
    """Run the operator's streams until ``until`` holds."""
    tasks = [asyncio.create_task(stream.run()) for stream in watch_streams(memo)]
    try:
        await eventually(until, what=what)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_objects_deleted_while_the_streams_were_away_leave_the_cache(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    declare_craft_resources(emulator)
    cache = ObjectCache()
    queue, pool_queue = RecordingQueue(), RecordingQueue()
    memo: Any = SimpleNamespace(
        kube=kube,
        cache=cache,
        gate=SimpleNamespace(active=True, namespaces=(NAMESPACE,)),
        queue=queue,
        pool_queue=pool_queue,
        reconciler=SimpleNamespace(forget=lambda key: None),
        services=SimpleNamespace(
            clock=lambda: datetime.now(UTC),
            metrics=Metrics(),
            credentials=SimpleNamespace(forget=lambda uid: None),
        ),
    )
    for resource, body in OBJECTS:
        emulator.create(resource, {"apiVersion": "craft.onyx.app/v1alpha1", **body})
    await streaming(memo, lambda: held(cache) == len(OBJECTS), "every object cached")

    for resource, body in OBJECTS:  # while no stream runs: as after 410 Gone, or a restart
        meta = body["metadata"]
        emulator.remove(resource, meta.get("namespace"), meta["name"])
    queue.added.clear()
    pool_queue.added.clear()
    await streaming(memo, lambda: held(cache) == 0, "every deleted object forgotten")

    # (queued for its own deletion, and for the NetworkPolicy's: a queue runs it once)
    assert set(pool_queue.added) == {(NAMESPACE, "warm")}, "a deleted pool's pods are cleaned up"
    assert queue.forgotten == [(NAMESPACE, "alice")]
