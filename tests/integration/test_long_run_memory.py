"""An operator runs for months with sandboxes coming and going: once they are gone, it
holds no more than it held before them, in its own state or in its metrics (else a
replica's memory grows with every sandbox it ever saw, until it is killed)."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.kube.cache import TOMBSTONE_SECONDS
from craft_operator.kube.client import WRITTEN_REMEMBERED
from craft_operator.library import make_s3_client
from craft_operator.reconciler.pool_pods import ready_pool_pod_names
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, pod, sandbox, status
from tests.integration.test_pools import NAME, full, run_all, unclaimed
from tests.integration.test_user_library import BUCKET, REVISION, upload
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.pools import POOLS, pool
from tests.support.s3 import S3Server

#: Containers bounded by design rather than by the sandboxes alive, by how their paths end.
BOUNDED = {
    "._tombstones": f"deleted objects' last versions, for {TOMBSTONE_SECONDS:g} s",
    "._written": f"the versions the operator's writes made, the last {WRITTEN_REMEMBERED}",
    "._series": "event series, for aggregation, in an LRU of 4096",
    "._buckets": "event rate budgets, in an LRU of 4096",
    "._heap": "a queue's timers: at most twice its pending keys, plus 64",
    "._threads._threads": "a thread pool's threads, started as needed up to its bound",
    "._objects[*]": "the cluster's objects as cached: compared by key, their bodies vary",
}


@pytest.fixture
async def operator_with_library(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec, s3: S3Server
) -> AsyncIterator[OperatorContext]:
    """The operator, syncing every sandbox's library (two files) from S3."""
    client = make_s3_client(endpoint_url=s3.url, region="us-east-1", max_attempts=1)
    client.create_bucket(Bucket=BUCKET)
    upload(client, "notes/plan.md", b"# plan\n")
    upload(client, "data.csv", b"a,b\n1,2\n")
    with_s3 = settings.model_copy(update={"s3_bucket": BUCKET, "s3_endpoint_url": s3.url})
    async with running_operator(
        str(emulator.url).rstrip("/"), with_s3, exec_transport=pod_exec
    ) as op:
        yield op


def _children(value: Any, path: str) -> Iterator[tuple[Any, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, f"{path}[key]"
            yield item, f"{path}[*]"
    elif isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        for item in value:
            yield item, f"{path}[*]"
    elif type(value).__module__.startswith("craft_operator"):
        attributes = dict(getattr(value, "__dict__", {}))
        for slot in getattr(type(value), "__slots__", ()):
            if hasattr(value, slot):
                attributes[slot] = getattr(value, slot)
        for name, item in attributes.items():
            yield item, f"{path}.{name}"


def held(root: object) -> dict[str, int]:
    """How many items each container reachable from ``root`` through the operator's own
    objects holds, summed by path (a dict's values share one path), the bounded ones left
    out."""
    sizes: collections.Counter[str] = collections.Counter()
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(root, "operator")]
    while stack:
        value, path = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if any(path.endswith(end) for end in BOUNDED):
            continue
        if isinstance(value, (dict, list, set, frozenset, collections.deque)):
            sizes[path] += len(value)
        stack.extend(_children(value, path))
    return dict(sizes)


def metric_series(operator: OperatorContext) -> int:
    """How many time series the operator's metrics export."""
    return sum(len(family.samples) for family in operator.services.metrics.registry.collect())


def cached_by_kind(operator: OperatorContext) -> collections.Counter[tuple[str, str | None]]:
    """How many objects the operator's cache holds, per kind and namespace."""
    keys = operator.services.cache._objects  # type: ignore[attr-defined]
    return collections.Counter(key[:2] for key in keys)


def ready(emulator: KubeEmulator, name: str) -> bool:
    """Whether sandbox ``name`` is Ready; its own pod (a cold start) is started if made."""
    if pod(emulator, name) is not None:
        mark_pod_running(emulator, NAMESPACE, name)
    return status(emulator, name).get("phase") == "Ready"


async def come_and_go(emulator: KubeEmulator, names: list[str], **spec: Any) -> None:
    """Create sandboxes ``names``, see each Ready with its library, sync the first's again
    on an upload, delete them, and wait until they are gone."""
    for name in names:
        emulator.create(SANDBOXES, sandbox(name, **spec))
    for name in names:
        await eventually(lambda n=name: ready(emulator, n), what=f"{name} Ready")
        assert status(emulator, name)["userLibrary"]["files"] == 2
    emulator.patch(SANDBOXES, NAMESPACE, names[0], {"metadata": {"annotations": {REVISION: "2"}}})
    await eventually(
        lambda: status(emulator, names[0])["userLibrary"].get("observedRevision") == "2",
        what="the library synced again",
    )
    for name in names:
        emulator.remove(SANDBOXES, NAMESPACE, name)
    for name in names:
        await eventually(lambda n=name: emulator.find(SANDBOXES, NAMESPACE, n) is None)


async def quiet(emulator: KubeEmulator, operator: OperatorContext) -> None:
    """Wait until the pool is full again, its pods the only ones, and nothing runs."""
    await full(emulator, 2)

    def still() -> bool:
        run_all(emulator)  # a pod refilled since is started too
        pods = {p["metadata"]["name"] for p in emulator.list("v1/pods", NAMESPACE)}
        cached = {key[2] for key in operator.services.cache._objects if key[0] == "Pod"}  # type: ignore[attr-defined]
        pool_pods = {p["metadata"]["name"] for p in unclaimed(emulator)}
        return (
            pods == cached == pool_pods
            # Both claimable as the operator sees them (the pool's status may be seconds old).
            and len(ready_pool_pod_names(operator.services.cache, NAMESPACE, NAME)) == 2
            and not operator.queue._processing
            and not operator.pool_queue._processing
            and not operator.pool_reconciler._status_due
        )

    await eventually(still, what="the operator quiet, the pool's pods the only ones")


async def test_sandboxes_that_came_and_went_leave_nothing_held(
    emulator: KubeEmulator, operator_with_library: OperatorContext
) -> None:
    operator = operator_with_library
    emulator.create(
        POOLS, {**pool(NAME, replicas=2), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    await full(emulator, 2)
    # Every path once, so that what is made on first use is in the baseline.
    await come_and_go(emulator, ["first-cold"])
    await come_and_go(emulator, ["first-pooled"], poolRef={"name": NAME})
    await quiet(emulator, operator)
    before, series = held(operator), metric_series(operator)
    cached = cached_by_kind(operator)

    for round_ in range(2):
        await come_and_go(emulator, [f"cold-{round_}-{i}" for i in range(4)])
        pooled = [f"pooled-{round_}-{i}" for i in range(3)]  # one more than the pool holds
        await come_and_go(emulator, pooled, poolRef={"name": NAME})
    await quiet(emulator, operator)

    after = held(operator)
    grown = {path: (before.get(path, 0), n) for path, n in after.items() if n > before.get(path, 0)}
    assert grown == {}, "held after the sandboxes went: (before, after)"
    assert metric_series(operator) == series
    assert cached_by_kind(operator) == cached  # the pool's two pods are new ones
