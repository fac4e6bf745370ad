"""An operator runs for months with sandboxes coming and going: once they are gone, it
holds no more than it held before them, in its own state or in its metrics (else a
replica's memory grows with every sandbox it ever saw, until it is killed)."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from craft_operator.api.pool import LABEL_POOL
from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.kube import kinds
from craft_operator.kube.cache import TOMBSTONE_SECONDS
from craft_operator.kube.client import WRITTEN_REMEMBERED
from craft_operator.library import make_s3_client
from craft_operator.reconciler.pool_pods import ready_pool_pod_names
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, UNBUILDABLE_RESOURCES, pod, sandbox, status
from tests.integration.test_library_jobs import JOBS, PVCS, finish_job
from tests.integration.test_pools import NAME, run_all, unclaimed
from tests.integration.test_renewal import due_for_renewal
from tests.integration.test_user_library import BUCKET, REVISION, upload
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_failed, mark_pod_running
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


def holdings(operator: OperatorContext) -> dict[str, int]:
    """What the operator holds: :func:`held`, the time series its metrics export, and the
    objects its cache holds per kind and namespace."""
    series = sum(len(family.samples) for family in operator.services.metrics.registry.collect())
    keys = operator.services.cache._objects  # type: ignore[attr-defined]
    by_kind = collections.Counter(f"{kind} in {namespace}" for kind, namespace, _ in keys)
    return {
        **held(operator),
        "metric series": series,
        **{f"cached {kinds}": count for kinds, count in by_kind.items()},
    }


def grown_since(before: dict[str, int], after: dict[str, int]) -> dict[str, tuple[int, int]]:
    """What holds more in ``after`` than in ``before``: (before, after)."""
    return {key: (before.get(key, 0), n) for key, n in after.items() if n > before.get(key, 0)}


def start_pod(emulator: KubeEmulator, name: str) -> None:
    """Start sandbox ``name``'s own pod (a cold start), if made."""
    if pod(emulator, name) is not None:
        mark_pod_running(emulator, NAMESPACE, name)


def ready(emulator: KubeEmulator, name: str) -> bool:
    """Whether sandbox ``name`` is Ready (its own pod started once made)."""
    start_pod(emulator, name)
    return status(emulator, name).get("phase") == "Ready"


def warm(emulator: KubeEmulator, operator: OperatorContext, pool_name: str) -> int:
    """How many of pool ``pool_name``'s pods a claim may take, as the operator sees them
    (its pods are started once made)."""
    for found in emulator.list("v1/pods", NAMESPACE):
        labels = found["metadata"].get("labels") or {}
        if labels.get(LABEL_POOL) == pool_name and not found.get("status", {}).get("phase"):
            mark_pod_running(emulator, NAMESPACE, found["metadata"]["name"])
    return len(ready_pool_pod_names(operator.services.cache, NAMESPACE, pool_name))


def first_job(emulator: KubeEmulator, name: str) -> dict[str, Any] | None:
    """Sandbox ``name``'s first sync Job, once made (its pod started once made)."""
    start_pod(emulator, name)
    return emulator.find(JOBS, NAMESPACE, f"{name}-library-1")


async def come_and_go(emulator: KubeEmulator, names: list[str], **spec: Any) -> dict[str, str]:
    """Create sandboxes ``names``, see each Ready with its library, sync the first's again
    on an upload, delete them, and wait until they are gone: the pool each was claimed
    from, if any."""
    claimed = {}
    for name in names:
        emulator.create(SANDBOXES, sandbox(name, **spec))
    for name in names:
        await eventually(lambda n=name: ready(emulator, n), what=f"{name} Ready")
        assert status(emulator, name)["userLibrary"]["files"] == 2
        if pool_name := status(emulator, name).get("claimedFrom"):
            claimed[name] = pool_name
    emulator.patch(SANDBOXES, NAMESPACE, names[0], {"metadata": {"annotations": {REVISION: "2"}}})
    await eventually(
        lambda: status(emulator, names[0])["userLibrary"].get("observedRevision") == "2",
        what="the library synced again",
    )
    for name in names:
        emulator.remove(SANDBOXES, NAMESPACE, name)
    for name in names:
        await eventually(lambda n=name: emulator.find(SANDBOXES, NAMESPACE, n) is None)
    return claimed


async def quiet(emulator: KubeEmulator, operator: OperatorContext, *, pool_pods: int) -> None:
    """Wait until nothing runs and the only pods, Jobs and volumes are the pool's ready
    ``pool_pods``, in the cluster and in the operator's cache alike."""
    cache = operator.services.cache

    def still() -> bool:
        run_all(emulator)  # the pool's pods made meanwhile are started
        pods = {p["metadata"]["name"] for p in emulator.list("v1/pods", NAMESPACE)}
        cached = {
            key[2]
            for key in cache._objects
            if key[0] in (kinds.POD.name, kinds.JOB.name, kinds.PVC.name)
        }  # type: ignore[attr-defined]
        return (
            pods == cached == {p["metadata"]["name"] for p in unclaimed(emulator)}
            and not emulator.list(JOBS, NAMESPACE)
            and not emulator.list(PVCS, NAMESPACE)
            # As the operator sees them (the pool's status may be seconds old).
            and len(ready_pool_pod_names(cache, NAMESPACE, NAME)) == pool_pods
            and not operator.queue._processing
            and not operator.pool_queue._processing
            # A visit still due for an object gone meanwhile finds it gone, and is dropped.
            and all(emulator.find(SANDBOXES, *key) for key in operator.queue._due)
            and all(emulator.find(POOLS, *key) for key in operator.pool_queue._due)
            and not operator.pool_reconciler._status_due
        )

    await eventually(still, within=30, what="the operator quiet, the pool's pods the only ones")


async def test_sandboxes_that_came_and_went_leave_nothing_held(
    emulator: KubeEmulator, operator_with_library: OperatorContext
) -> None:
    operator = operator_with_library
    emulator.create(
        POOLS, {**pool(NAME, replicas=2), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    # Every path once, so that what is made on first use is in the baseline.
    await come_and_go(emulator, ["first-cold"])
    await come_and_go(emulator, ["first-pooled"], poolRef={"name": NAME})
    await quiet(emulator, operator, pool_pods=2)
    before = holdings(operator)

    for round_ in range(2):
        await come_and_go(emulator, [f"cold-{round_}-{i}" for i in range(4)])
        pooled = [f"pooled-{round_}-{i}" for i in range(3)]  # one more than the pool holds
        claimed = await come_and_go(emulator, pooled, poolRef={"name": NAME})
        assert len(claimed) >= 2, "the pool's two pods were claimed"
        await quiet(emulator, operator, pool_pods=2)
    await quiet(emulator, operator, pool_pods=2)

    assert grown_since(before, holdings(operator)) == {}, "held after the sandboxes went"


async def sync_with_jobs_and_go(emulator: KubeEmulator, names: list[str]) -> None:
    """Create sandboxes ``names`` in Job mode, see each Ready once its sync Job ends,
    delete them, and wait until they are gone."""
    for name in names:
        emulator.create(SANDBOXES, sandbox(name, userLibrary={"mode": "Job"}))
    for name in names:
        await eventually(lambda n=name: first_job(emulator, n), what=f"{name}'s sync Job")
        finish_job(emulator, f"{name}-library-1", result={"ok": True, "files": 1, "bytes": 1})
        await eventually(lambda n=name: ready(emulator, n), what=f"{name} Ready")
    for name in names:
        emulator.remove(SANDBOXES, NAMESPACE, name)
    for name in names:
        await eventually(lambda n=name: emulator.find(SANDBOXES, NAMESPACE, n) is None)


async def test_sandboxes_whose_libraries_synced_in_jobs_leave_nothing_held(
    emulator: KubeEmulator, job_mode_operator: OperatorContext
) -> None:
    operator = job_mode_operator
    await sync_with_jobs_and_go(emulator, ["first"])
    await quiet(emulator, operator, pool_pods=0)
    before = holdings(operator)

    for round_ in range(2):
        await sync_with_jobs_and_go(emulator, [f"job-{round_}-{i}" for i in range(4)])
    await quiet(emulator, operator, pool_pods=0)

    assert grown_since(before, holdings(operator)) == {}, "held after the sandboxes went"


async def test_pools_that_came_and_went_leave_nothing_held_nor_their_metrics(
    emulator: KubeEmulator, operator_with_library: OperatorContext
) -> None:
    operator = operator_with_library

    async def pool_comes_and_goes(name: str) -> None:
        body = {**pool(name, replicas=2), "metadata": {"name": name, "namespace": NAMESPACE}}
        emulator.create(POOLS, body)
        await eventually(lambda: warm(emulator, operator, name) == 2, what=f"pool {name} warm")
        claimed = await come_and_go(emulator, [f"{name}-user"], poolRef={"name": name})
        assert claimed == {f"{name}-user": name}
        emulator.remove(POOLS, NAMESPACE, name)
        await eventually(lambda: emulator.find(POOLS, NAMESPACE, name) is None, what="gone")

    await pool_comes_and_goes("first")
    await quiet(emulator, operator, pool_pods=0)
    before = holdings(operator)

    for index in range(4):
        await pool_comes_and_goes(f"pool-{index}")
    await quiet(emulator, operator, pool_pods=0)

    assert grown_since(before, holdings(operator)) == {}, "held after the pools went"


async def fail_suspend_and_go(emulator: KubeEmulator, settings: Settings, round_: int) -> None:
    """Sandboxes that went wrong or slept: one whose pods failed until it is Failed, one
    whose spec cannot be built, one suspended and resumed; then none of them is left."""
    failing, unbuildable, suspended = (f"{what}-{round_}" for what in ("failing", "bad", "nap"))
    emulator.create(SANDBOXES, sandbox(failing))
    emulator.create(SANDBOXES, sandbox(unbuildable, resources=UNBUILDABLE_RESOURCES))
    emulator.create(SANDBOXES, sandbox(suspended))
    seen: set[str] = set()
    for attempt in range(settings.max_pod_failures):
        current = await eventually(
            lambda: (p := pod(emulator, failing)) and p["metadata"]["uid"] not in seen and p,
            what=f"pod {attempt + 1} of {failing}",
        )
        seen.add(current["metadata"]["uid"])
        mark_pod_failed(emulator, NAMESPACE, failing)
    for name in (failing, unbuildable):
        await eventually(lambda n=name: status(emulator, n).get("phase") == "Failed", what=name)
    await eventually(lambda: ready(emulator, suspended), what=f"{suspended} Ready")
    emulator.patch(SANDBOXES, NAMESPACE, suspended, {"spec": {"suspend": True}})
    await eventually(lambda: status(emulator, suspended).get("phase") == "Suspended")
    emulator.patch(SANDBOXES, NAMESPACE, suspended, {"spec": {"suspend": False}})
    await eventually(lambda: ready(emulator, suspended), what=f"{suspended} resumed")
    for name in (failing, unbuildable, suspended):
        emulator.remove(SANDBOXES, NAMESPACE, name)
    for name in (failing, unbuildable, suspended):
        await eventually(lambda n=name: emulator.find(SANDBOXES, NAMESPACE, n) is None)


async def test_sandboxes_that_failed_or_slept_leave_nothing_held(
    emulator: KubeEmulator, operator_with_library: OperatorContext, settings: Settings
) -> None:
    operator = operator_with_library
    await fail_suspend_and_go(emulator, settings, 0)
    await quiet(emulator, operator, pool_pods=0)
    before = holdings(operator)

    for round_ in range(1, 3):
        await fail_suspend_and_go(emulator, settings, round_)
    await quiet(emulator, operator, pool_pods=0)

    assert grown_since(before, holdings(operator)) == {}, "held after the sandboxes went"


async def renew_and_go(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings, name: str
) -> None:
    """A sandbox whose PAT was renewed in its pod, the one it replaced revoked; then gone."""
    emulator.create(SANDBOXES, sandbox(name, credentials={"lifetime": "1h"}))
    await eventually(lambda: ready(emulator, name), what=f"{name} Ready")
    first = status(emulator, name)["credentials"]["patId"]
    uid = emulator.get(SANDBOXES, NAMESPACE, name)["metadata"]["uid"]
    due_for_renewal(settings, operator, first, uid, name)
    await eventually(
        lambda: status(emulator, name).get("validatedPatID") not in (None, first),
        what=f"{name}'s renewed PAT validated",
    )
    emulator.remove(SANDBOXES, NAMESPACE, name)
    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, name) is None, what="gone")


async def test_sandboxes_whose_pats_were_renewed_leave_nothing_held(
    emulator: KubeEmulator, operator_with_library: OperatorContext, settings: Settings
) -> None:
    operator = operator_with_library
    await renew_and_go(emulator, operator, settings, "first")
    await quiet(emulator, operator, pool_pods=0)
    before = holdings(operator)

    for index in range(4):
        await renew_and_go(emulator, operator, settings, f"renewed-{index}")
    await quiet(emulator, operator, pool_pods=0)

    assert grown_since(before, holdings(operator)) == {}, "held after the sandboxes went"
