"""The activity gate: a standby does no work and keeps no state; activation rebuilds both.

Real parts throughout: the operator's work queue, its cache, its API client against the
emulator, and its event handlers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.api.pool import LABEL_POOL
from craft_operator.builders.naming import LABEL_SANDBOX, MANAGED_SELECTOR
from craft_operator.config import Settings
from craft_operator.handlers.sandbox import on_sandbox_event
from craft_operator.handlers.streams import handler_for
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.peering.gate import ActivityGate
from craft_operator.policy.models import POLICY_NAME
from craft_operator.reconciler.queue import Backoff, WorkQueue
from craft_operator.runtime import build_context
from tests.integration.conftest import SANDBOXES, declare_craft_resources
from tests.support.emulator import KubeEmulator
from tests.support.pools import POOLS, pool

pytestmark = pytest.mark.unit
SANDBOX, POD = kinds.SANDBOX.name, kinds.POD.name

Key = tuple[str, str]


class Handler:
    """A reconcile stand-in: records the keys it is called with; ``hold`` keeps one running."""

    def __init__(self) -> None:
        self.calls: list[Key] = []
        self.cancelled: list[Key] = []
        self.hold: set[Key] = set()
        self.started = asyncio.Event()

    async def __call__(self, key: Key) -> float | None:
        self.calls.append(key)
        self.started.set()
        try:
            if key in self.hold:
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(key)
            raise
        return None


async def until(condition: Any, within: float = 5.0) -> None:
    """Wait until ``condition()`` holds (a bound against hangs, not a timing assertion)."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 -- polls state the code under test owns
            await asyncio.sleep(0.005)


def sandbox(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"user": {"id": "u"}},
    }


def pod(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


@pytest.fixture
async def parts(
    emulator: KubeEmulator, kube: KubeClient
) -> AsyncIterator[tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler]]:
    """A started queue around a recording handler, a cache, and the gate over them."""
    declare_craft_resources(emulator)
    handler = Handler()
    queue: WorkQueue[Key] = WorkQueue(handler, concurrency=2, backoff=Backoff(0.01, 0.02, 0))
    cache = ObjectCache()
    gate = ActivityGate(kube=kube, cache=cache, queue=queue)
    queue.start()
    yield gate, queue, cache, handler
    await queue.stop()


async def test_a_standby_cancels_the_pass_in_progress_and_drops_all_pending_work(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler],
) -> None:
    gate, queue, cache, handler = parts
    busy, later = ("team-a", "busy"), ("team-a", "later")
    handler.hold.add(busy)
    cache.put(SANDBOX, sandbox(*busy))
    queue.add(busy)
    queue.add(later, delay=0.05)  # a timer: a requeue, a backoff or an idle check
    await asyncio.wait_for(handler.started.wait(), 5)

    await gate.deactivate("a peer with a higher priority")

    assert not gate.active
    assert queue.paused
    assert handler.cancelled == [busy]
    assert len(queue) == 0
    assert len(cache) == 0
    queue.add(("team-a", "new"))
    await asyncio.sleep(0.1)  # past the timer that was dropped; nothing may run meanwhile
    assert handler.calls == [busy]


async def test_activation_relists_the_sandboxes_and_our_children_and_queues_every_sandbox(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    gate, queue, cache, handler = parts
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    emulator.create(SANDBOXES, sandbox("team-b", "bob"))
    emulator.create("v1/pods", pod("team-a", "alice", dict(MANAGED_SELECTOR)))
    emulator.create("v1/pods", pod("team-a", "stranger", {"app": "other"}))
    await gate.deactivate("starting")

    await gate.activate("no live peer with a higher or equal priority")

    assert gate.active
    assert not queue.paused
    await until(lambda: len(handler.calls) == 2)
    assert sorted(handler.calls) == [("team-a", "alice"), ("team-b", "bob")]
    assert cache.get(SANDBOX, "team-b", "bob") is not None
    assert cache.get(POD, "team-a", "alice") is not None
    assert cache.get(POD, "team-a", "stranger") is None  # the watches see only ours
    assert gate.activations == 1


async def test_a_gate_for_some_namespaces_relists_only_those(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    gate, _, cache, handler = parts
    gate.namespaces = ("team-a",)
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    emulator.create(SANDBOXES, sandbox("team-b", "bob"))
    await gate.deactivate("starting")
    await gate.activate("test")
    await until(lambda: handler.calls == [("team-a", "alice")])
    assert cache.get(SANDBOX, "team-b", "bob") is None


async def test_a_failed_relist_leaves_the_replica_a_standby(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    gate, queue, cache, handler = parts
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))

    async def pods_unavailable(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.url.path.endswith("/pods"):
            return aiohttp.web.json_response({"kind": "Status", "code": 503}, status=503)
        return None

    emulator.before_request.append(pods_unavailable)
    await gate.deactivate("starting")
    with pytest.raises(ApiError):
        await gate.activate("test")
    assert not gate.active
    assert queue.paused
    assert len(cache) == 0  # the sandboxes listed before the failure are dropped again

    emulator.before_request.remove(pods_unavailable)
    await gate.activate("test")
    await until(lambda: handler.calls == [("team-a", "alice")])


def held_pod_listing(
    emulator: KubeEmulator,
) -> tuple[asyncio.Event, asyncio.Event, Callable[..., Awaitable[Any]]]:
    """Hold every listing of pods (a takeover's relist on a big cluster) until ``release``
    is set; ``listing`` is set once one waits. The hook, to remove it."""
    listing, release = asyncio.Event(), asyncio.Event()

    async def slow_pods(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.url.path.endswith("/pods"):
            listing.set()
            await release.wait()
        return None

    emulator.before_request.append(slow_pods)
    return listing, release, slow_pods


async def test_a_step_down_asked_while_a_takeover_lists_starts_no_pass(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    gate, queue, cache, handler = parts
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    listing, release, slow_pods = held_pod_listing(emulator)
    await gate.deactivate("starting")
    takeover = asyncio.create_task(gate.activate("the peer's record expired"))
    await listing.wait()
    # The preferred replica is back meanwhile (a watch event of the peering): stand by.
    step_down = asyncio.create_task(gate.deactivate("the preferred replica is back"))
    await asyncio.sleep(0.05)
    release.set()
    await takeover
    await step_down
    await asyncio.sleep(0.1)

    assert not gate.active
    assert queue.paused
    assert handler.calls == [], "no pass beside the preferred replica, not even a first write"
    assert len(cache) == 0

    emulator.before_request.remove(slow_pods)
    await gate.activate("the preferred replica went again")
    await until(lambda: handler.calls == [("team-a", "alice")])


async def test_a_crd_not_installed_is_named_in_the_relists_failure(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    """Else the operator only says it cannot list the sandboxes, for ever (make run on a
    cluster without the pool CRD did)."""
    gate, _, _, _ = parts

    async def no_pool_crd(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.url.path.endswith("/craftsandboxpools"):
            body = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
            return aiohttp.web.json_response(body, status=404)
        return None

    emulator.before_request.append(no_pool_crd)
    await gate.deactivate("starting")
    with pytest.raises(ApiError) as raised:
        await gate.activate("test")

    assert raised.value.status == 404
    assert "does not serve craftsandboxpools.craft.onyx.app" in str(raised.value)
    assert "kubectl apply --server-side -k crds/" in str(raised.value)


def failing(where: str, code: int = 403, reason: str = "Forbidden") -> Any:
    """A before-request hook: every request whose path holds ``where`` is answered with
    the error ``code`` (by default refused, as where the operator has no Role)."""

    async def fail(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if where in request.url.path:
            body = {"kind": "Status", "code": code, "reason": reason}
            return aiohttp.web.json_response(body, status=code)
        return None

    return fail


def forbidden_in(namespace: str) -> Any:
    """A before-request hook: every request in ``namespace`` is refused (no Role there)."""
    return failing(f"/namespaces/{namespace}/")


async def test_a_served_namespace_deleted_with_its_role_does_not_keep_a_replica_standing_by(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    """The namespace controller took the operator's Role with the namespace: the replica
    taking over serves the others (it was a full outage until a restart)."""
    gate, _, _, handler = parts
    gate.namespaces = ("team-a", "torn-down")
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    emulator.before_request.append(forbidden_in("torn-down"))

    await gate.deactivate("starting")
    await gate.activate("test")

    assert gate.active
    await until(lambda: handler.calls == [("team-a", "alice")])


async def test_a_first_start_in_a_namespace_that_exists_without_the_role_fails_the_relist(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    gate, _, _, _ = parts
    gate.namespaces = ("team-a",)
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    emulator.before_request.append(forbidden_in("team-a"))

    await gate.hold_until_primed()
    with pytest.raises(ApiError):
        await gate.activate("the first listing")
    assert not gate.active


async def test_a_takeover_serves_the_namespaces_it_may_list_without_the_one_it_may_not(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    """A namespace's Role pruned while the operator ran: the replica taking over at the
    next failover or rollout serves the others (no replica served any, for ever)."""
    gate, _, cache, handler = parts
    gate.namespaces = ("team-a", "team-b")
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    emulator.create(SANDBOXES, sandbox("team-b", "bob"))
    emulator.before_request.append(forbidden_in("team-b"))

    await gate.deactivate("a peer with a higher priority")
    await gate.activate("the peer is gone")

    assert gate.cache_synced
    await until(lambda: handler.calls == [("team-a", "alice")])
    assert cache.get(kinds.SANDBOX.name, "team-b", "bob") is None


async def test_a_takeover_queues_no_sandbox_of_a_namespace_it_left_out_half_listed(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    """Its sandboxes listed, its pods refused (the Role pruned of them): a sandbox there,
    reconciled from a cache without its pod, would look podless and get another one."""
    gate, _, _, handler = parts
    gate.namespaces = ("team-a", "team-b")
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    emulator.create(SANDBOXES, sandbox("team-b", "bob"))

    emulator.before_request.append(failing("/namespaces/team-b/pods"))
    await gate.deactivate("a peer with a higher priority")
    await gate.activate("the peer is gone")

    await until(lambda: ("team-a", "alice") in handler.calls)
    await asyncio.sleep(0.05)
    assert handler.calls == [("team-a", "alice")]


async def test_a_takeover_whose_listing_the_server_fails_in_one_namespace_stays_standby(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    """Only a 403 (a Role gone) leaves a namespace out; a server error is retried: a
    replica that took over without the namespace would leave its sandboxes unserved."""
    gate, _, _, handler = parts
    gate.namespaces = ("team-a", "team-b")
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    emulator.create(SANDBOXES, sandbox("team-b", "bob"))

    emulator.before_request.append(failing("/namespaces/team-b/", 503, "ServiceUnavailable"))
    await gate.deactivate("a peer with a higher priority")

    with pytest.raises(ApiError):
        await gate.activate("the peer is gone")
    assert not gate.active
    assert handler.calls == []


def alice(version: int) -> dict[str, Any]:
    """Sandbox team-a/alice at ``version``, as a watch event carries it."""
    meta = {"name": "alice", "namespace": "team-a", "resourceVersion": str(version)}
    return sandbox("team-a", "alice") | {"metadata": meta}


async def test_the_handlers_ignore_events_on_a_standby(tmp_path: Path) -> None:
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    on_sandbox_event(context, "ADDED", alice(5))
    assert (len(context.cache), len(context.queue)) == (1, 1)

    await context.gate.deactivate("a peer with a higher priority")
    on_sandbox_event(context, "MODIFIED", alice(6))

    assert (len(context.cache), len(context.queue)) == (0, 0)


def watched(kind: kinds.CachedKind, version: int) -> dict[str, Any]:
    """An object of ``kind`` at ``version``, as its stream hands it over: a sandbox's child
    or a pool's pod by its labels, the policy under the one name the operator reads."""
    name = POLICY_NAME if kind is kinds.POLICY else "alice"
    meta: dict[str, Any] = {"name": name, "uid": "u1", "resourceVersion": str(version)}
    meta["labels"] = {LABEL_SANDBOX: "alice", LABEL_POOL: "warm"}
    if kind.api.namespaced:
        meta["namespace"] = "team-a"
    return {"metadata": meta}


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda kind: kind.name)
async def test_no_stream_fills_a_standbys_cache_or_queues(
    tmp_path: Path, kind: kinds.CachedKind
) -> None:
    """The streams go on while the replica is a standby: what they bring is dropped, for
    every kind (activation relists; a standby's cache would go stale unseen)."""
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    handle = handler_for(context, kind)
    handle("ADDED", watched(kind, 5))
    assert len(context.cache) == 1

    await context.gate.deactivate("a peer with a higher priority")
    handle("MODIFIED", watched(kind, 6))

    assert (len(context.cache), len(context.queue), len(context.pool_queue)) == (0, 0, 0)


async def test_a_standby_stops_the_library_syncs_running_outside_the_queue(
    tmp_path: Path,
) -> None:
    """An Exec-mode sync writes into a sandbox pod from a pool of its own: a standby
    must not go on writing beside the replica that took over."""
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    syncs = context.services.library_pool
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def sync() -> Any:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    syncs.submit(("team-a", "alice"), "uid-1", "attempt-1", sync)
    await asyncio.wait_for(started.wait(), 5)

    await context.gate.deactivate("a peer with a higher priority")

    assert cancelled.is_set()
    assert not syncs.busy(("team-a", "alice"), "uid-1")


async def test_the_metrics_say_whether_the_replica_is_active(tmp_path: Path) -> None:
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    registry = context.services.metrics.registry
    assert registry.get_sample_value("craft_replica_active") == 1.0
    await context.gate.deactivate("a peer with a higher priority")
    assert registry.get_sample_value("craft_replica_active") == 0.0


async def test_a_primed_start_waits_for_the_first_listing_and_retries_it_until_it_works(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    gate, queue, cache, handler = parts
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    emulator.create("v1/pods", pod("team-a", "alice", dict(MANAGED_SELECTOR)))
    refusals = []

    async def pods_unavailable_once(
        request: rendering.Request,
    ) -> aiohttp.web.StreamResponse | None:
        if request.url.path.endswith("/pods") and not refusals:
            refusals.append(request.url.path)
            return aiohttp.web.json_response({"kind": "Status", "code": 503}, status=503)
        return None

    emulator.before_request.append(pods_unavailable_once)
    await gate.hold_until_primed()
    queue.add(("team-a", "alice"))  # as kopf's own listing would, before ours is complete
    await asyncio.sleep(0.05)
    assert handler.calls == []

    await asyncio.wait_for(gate.prime(max_delay=0.05), 10)

    assert refusals  # the first listing failed and was retried
    assert gate.active
    assert not gate.priming
    assert cache.get(POD, "team-a", "alice") is not None
    await until(lambda: handler.calls == [("team-a", "alice")])


async def test_the_pool_queue_stops_with_the_sandboxes_and_visits_every_pool_on_activation(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    gate, _, cache, _ = parts
    pools = Handler()
    pool_queue: WorkQueue[Key] = WorkQueue(pools, concurrency=1, backoff=Backoff(0.01, 0.02, 0))
    gate.followers.append((pool_queue, kinds.POOL.name))
    pool_queue.start()
    try:
        emulator.create(
            POOLS, {**pool("warm"), "metadata": {"name": "warm", "namespace": "team-a"}}
        )
        pool_queue.add(("team-a", "waiting"), delay=0.05)
        await gate.deactivate("a peer with a higher priority")
        assert pool_queue.paused
        assert len(pool_queue) == 0, "pending pool visits are dropped"

        await gate.activate("test")
        assert not pool_queue.paused
        await until(lambda: pools.calls == [("team-a", "warm")])
        assert cache.get(kinds.POOL.name, "team-a", "warm") is not None
    finally:
        await pool_queue.stop()


async def test_the_cache_counts_as_synced_only_once_a_reactivation_s_listing_is_done(
    parts: tuple[ActivityGate, WorkQueue[Key], ObjectCache, Handler], emulator: KubeEmulator
) -> None:
    gate, _, _, _ = parts
    emulator.create(SANDBOXES, sandbox("team-a", "alice"))
    listing, release, _ = held_pod_listing(emulator)
    await gate.deactivate("starting")
    assert not gate.cache_synced
    activation = asyncio.create_task(gate.activate("test"))
    await listing.wait()
    assert gate.active, "watch events count during the listing"
    assert not gate.cache_synced, "but what the cache lacks proves nothing yet"
    release.set()
    await activation
    assert gate.cache_synced
