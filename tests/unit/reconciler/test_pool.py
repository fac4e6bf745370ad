"""The pool controller against the emulator: it fills a pool to ``replicas`` a bounded
number of pods per pass, replaces pods that went away or ended, replaces an old template
gradually, never touches a claimed pod, leaves claimed pods when the pool goes, and waits
for a NetworkPolicy like a sandbox pod does."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL, LABEL_POOL_TEMPLATE_HASH
from craft_operator.config import Settings
from craft_operator.handlers import pools
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.metrics import Metrics
from craft_operator.reconciler.api_away import ApiRefusedError, ApiServerAwayError
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.dropped_status import RECHECK_AFTER
from craft_operator.reconciler.policy_step import POLICY as PLATFORM_POLICY
from craft_operator.reconciler.pool import STATUS_INTERVAL, PoolReconciler, PoolRetryLaterError
from craft_operator.reconciler.pool_pods import ready_pool_pods
from tests.support.emulator import KubeEmulator
from tests.support.pod_exec import mark_pod_running
from tests.support.policy import policy as platform_policy
from tests.support.pools import POOLS, declare_pool_resource, pool
from tests.support.queues import RecordingQueue
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import Events, NoLibrary

pytestmark = pytest.mark.unit

NAME = "warm"
KEY = (NAMESPACE, NAME)
START = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
SANDBOX_OWNER = {
    "apiVersion": "craft.onyx.app/v1alpha1",
    "kind": "CraftSandbox",
    "name": "alice",
    "uid": "sandbox-uid-alice",
    "controller": True,
}
ALICE = {
    "apiVersion": "craft.onyx.app/v1alpha1",
    "kind": "CraftSandbox",
    "metadata": {"name": "alice", "namespace": NAMESPACE, "uid": "sandbox-uid-alice"},
}
EGRESS_POLICY = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "sandbox-egress", "namespace": NAMESPACE, "resourceVersion": "1"},
    "spec": {
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "sandbox"}},
        "policyTypes": ["Egress"],
    },
}


@dataclass
class PoolWorld:
    """The emulator, the pool controller over it, and a cache the test refreshes."""

    emulator: KubeEmulator
    services: Services
    reconciler: PoolReconciler
    events: Events
    now: list[datetime] = field(default_factory=lambda: [START])
    #: How far the wall clock has been stepped (NTP) from the time that passed.
    wall_step: list[timedelta] = field(default_factory=lambda: [timedelta(0)])

    async def pass_(self) -> float | None:
        """One pass over the pool, with the cache as fresh as the watches would make it."""
        self.refresh()
        result = await self.reconciler.reconcile(KEY)
        self.refresh()
        return result

    def refresh(self) -> None:
        """Rebuild the cache from what the API server holds."""
        cache = self.services.cache
        policies = cache.in_namespace(kinds.NETWORK_POLICY.name, NAMESPACE)
        platform = cache.get(PLATFORM_POLICY, None, "default")
        cache.clear()
        for policy in policies:
            cache.put(kinds.NETWORK_POLICY.name, policy)
        if platform is not None:
            cache.put(PLATFORM_POLICY, platform)
        for pod in self.emulator.list("v1/pods", NAMESPACE):
            # As the watches would: they select by the managed-by label.
            if (pod["metadata"].get("labels") or {}).get(
                kinds.LABEL_MANAGED_BY
            ) == kinds.MANAGED_BY:
                cache.put(kinds.POD.name, pod)
        for body in self.emulator.list(POOLS, NAMESPACE):
            cache.put(kinds.POOL.name, body)
        cache.put(kinds.SANDBOX.name, ALICE)  # the sandbox that claims the pods

    def create_pool(self, **spec: Any) -> dict[str, Any]:
        return self.emulator.create(
            POOLS, {**pool(NAME, **spec), "metadata": {"name": NAME, "namespace": NAMESPACE}}
        )

    def pool_body(self) -> dict[str, Any]:
        return self.emulator.get(POOLS, NAMESPACE, NAME)

    def status(self) -> dict[str, Any]:
        return dict(self.pool_body().get("status") or {})

    def condition(self, type_: str) -> dict[str, Any]:
        return next(c for c in self.status().get("conditions", []) if c["type"] == type_)

    def pods(self) -> list[dict[str, Any]]:
        """Every pod, terminating ones excluded, oldest name first."""
        return [
            pod
            for pod in self.emulator.list("v1/pods", NAMESPACE)
            if not pod["metadata"].get("deletionTimestamp")
        ]

    def unclaimed(self) -> list[dict[str, Any]]:
        return [pod for pod in self.pods() if pod["metadata"]["labels"].get(LABEL_POOL) == NAME]

    async def filled(self, *, replicas: int) -> None:
        """A new pool of ``replicas``, filled by one pass, its pods Ready (the pool has not
        seen them Ready yet)."""
        self.create_pool(replicas=replicas)
        await self.pass_()
        self.ready_all()

    def ready_all(self) -> None:
        for pod in self.unclaimed():
            mark_pod_running(self.emulator, NAMESPACE, pod["metadata"]["name"])

    def claim(self, pod_name: str) -> dict[str, Any]:
        """What the lead's claim does, in one write: out of the pool, into a sandbox."""
        return self.emulator.patch(
            "v1/pods",
            NAMESPACE,
            pod_name,
            {
                "metadata": {
                    "labels": {LABEL_POOL: None, LABEL_CLAIMED_FROM: NAME},
                    "ownerReferences": [SANDBOX_OWNER],
                }
            },
        )

    def set_spec(self, **spec: Any) -> None:
        self.emulator.patch(POOLS, NAMESPACE, NAME, {"spec": spec})


@pytest.fixture
def make_world(
    emulator: KubeEmulator, kube: KubeClient, tmp_path: Path
) -> Callable[..., PoolWorld]:
    declare_pool_resource(emulator)

    def build(max_creates: int = 10, **overrides: Any) -> PoolWorld:
        values: dict[str, Any] = {
            "state_dir": tmp_path,
            "sandbox_image": "registry.example.com/craft/sandbox:1",
            "server_url": "http://onyx.internal:8080",
            "allow_unrestricted_egress": True,
            "pod_restart_backoff": 10,
            **overrides,
        }
        settings = Settings(**values)
        events = Events()
        now = [START]
        wall_step = [timedelta(0)]
        services = Services(
            settings=settings,
            kube=kube,
            cache=ObjectCache(),
            credentials=None,  # type: ignore[arg-type]  # a pool has no credentials
            skills=None,  # type: ignore[arg-type]
            exec=None,  # type: ignore[arg-type]
            events=events,
            library=NoLibrary(),
            clock=lambda: now[0] + wall_step[0],
            steady=lambda: (now[0] - START).total_seconds(),
            metrics=Metrics(),
        )
        world = PoolWorld(
            emulator,
            services,
            PoolReconciler(services, max_creates=max_creates),
            events,
            now,
            wall_step,
        )
        set_platform_policy(world, images=["registry.example.com/craft/"])  # updates' images
        return world

    return build


@pytest.fixture
def world(make_world: Callable[..., PoolWorld]) -> PoolWorld:
    return make_world()


# -- filling -----------------------------------------------------------------------------


async def test_a_new_pool_is_filled_to_its_replicas(world: PoolWorld) -> None:
    world.create_pool(replicas=3)
    await world.pass_()
    pods = world.unclaimed()
    assert len(pods) == 3
    assert all(pod["metadata"]["name"].startswith("warm-") for pod in pods)
    assert {pod["metadata"]["ownerReferences"][0]["uid"] for pod in pods} == {
        world.pool_body()["metadata"]["uid"]
    }
    status = world.status()
    assert (status["replicas"], status["ready"], status["creating"], status["claimed"]) == (
        3,
        0,
        3,
        0,
    )
    assert world.condition("Ready")["reason"] == "Filling"
    assert "PoolPodsCreated" in world.events.steps
    assert status["selector"] == f"{LABEL_POOL}=warm", "what an autoscaler counts"


async def test_a_pool_says_why_its_oldest_pod_is_not_ready(world: PoolWorld) -> None:
    world.create_pool(replicas=2)
    await world.pass_()
    stuck, fine = (pod["metadata"]["name"] for pod in world.unclaimed())
    mark_pod_running(world.emulator, NAMESPACE, fine)
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "craft:9"'}
    container = {
        "name": "sandbox",
        "ready": False,
        "restartCount": 0,
        "image": "craft:9",
        "imageID": "",
        "state": {"waiting": waiting},
    }
    status = {"phase": "Pending", "containerStatuses": [container]}
    world.emulator.patch("v1/pods", NAMESPACE, stuck, {"status": status}, subresource="status")
    await world.pass_()
    world.now[0] = START + timedelta(seconds=STATUS_INTERVAL + 1)  # a routine change: held
    await world.pass_()

    message = world.condition("Ready")["message"]
    assert f"{stuck} waits: ImagePullBackOff: Back-off pulling image" in message, message


async def test_a_pod_running_but_no_longer_ready_is_said_to_be_so_not_to_be_starting(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=2)
    await world.pass_()
    lost = world.unclaimed()[0]["metadata"]["name"]
    mark_pod_running(world.emulator, NAMESPACE, lost, ready=False)  # its node went NotReady
    world.now[0] = START + timedelta(seconds=STATUS_INTERVAL + 1)
    await world.pass_()

    message = world.condition("Ready")["message"]
    assert f"{lost} waits: running but not Ready" in message, message


def forge_pod(world: PoolWorld, name: str) -> None:
    """A Ready pod someone else made from a pool pod's spec, with another command."""
    forged = copy.deepcopy(world.unclaimed()[0])
    forged["metadata"] = {
        key: forged["metadata"][key] for key in ("labels", "ownerReferences", "namespace")
    }
    forged["metadata"]["name"] = name
    forged["spec"]["containers"][0]["command"] = ["sh", "-c", "cat /run/onyx/pat"]
    forged.pop("status", None)
    world.emulator.create("v1/pods", forged)
    mark_pod_running(world.emulator, NAMESPACE, name)


async def test_a_pod_not_as_built_fills_a_slot_but_the_pool_says_so_and_never_counts_it_ready(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=2)
    world.emulator.remove("v1/pods", NAMESPACE, world.unclaimed()[1]["metadata"]["name"])
    forge_pod(world, "forged")  # in the slot the pool would refill

    for _ in range(3):
        await world.pass_()
        world.ready_all()
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()

    assert len(world.pods()) == 2, "it counts towards replicas: no pod made in its place"
    assert world.status()["ready"] == 1
    ready = world.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PoolPodNotAsBuilt")
    assert "forged" in ready["message"]
    warnings = [m for t, r, m in world.events.posted if r == "PoolPodNotAsBuilt"]
    assert len(warnings) == 1, "said once"
    assert "spec.containers[sandbox].command" in warnings[0]


async def test_a_pod_not_as_built_in_a_full_pool_is_the_surplus_deleted_first(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=2)
    await world.pass_()
    ours = {pod["metadata"]["name"] for pod in world.unclaimed()}
    forge_pod(world, "forged")
    mark_pod_running(world.emulator, NAMESPACE, min(ours), ready=False)  # before it, even
    await world.pass_()
    assert {pod["metadata"]["name"] for pod in world.pods()} == ours


async def test_what_kubernetes_own_admission_adds_to_a_pool_pod_is_no_reason_to_make_more(
    world: PoolWorld,
) -> None:
    world.create_pool(replicas=2)
    await world.pass_()
    for pod in world.unclaimed():  # the ServiceAccount plugin, AlwaysPullImages
        pod["spec"]["imagePullSecrets"] = [{"name": "registry"}]
        pod["spec"]["containers"][0]["imagePullPolicy"] = "Always"
        world.emulator.remove("v1/pods", NAMESPACE, pod["metadata"]["name"])
        world.emulator.create("v1/pods", pod)
    world.ready_all()
    for _ in range(3):
        await world.pass_()
    assert len(world.pods()) == 2
    assert not [r for _, r, _ in world.events.posted if r == "PoolPodNotAsBuilt"]


def set_platform_policy(world: PoolWorld, **spec: Any) -> None:
    """The CraftSandboxPolicy ``default`` with ``spec``, as its watch would cache it."""
    cache = world.services.cache
    before = cache.get(PLATFORM_POLICY, None, "default")
    version = int(before["metadata"]["resourceVersion"]) + 1 if before else 1
    meta = {"name": "default", "resourceVersion": str(version)}
    cache.put(PLATFORM_POLICY, {**platform_policy(**spec), "metadata": meta})


async def test_a_pool_of_an_image_the_platform_does_not_allow_makes_no_pod(
    world: PoolWorld,
) -> None:
    set_platform_policy(world, images=["registry.example.com/craft/"])
    world.create_pool(replicas=2, image="attacker.example/x:1")
    await world.pass_()
    assert world.pods() == []
    ready = world.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PolicyDenied")
    assert "spec.image attacker.example/x:1 is not allowed" in ready["message"]
    assert ("Warning", "PolicyDenied") in {(t, r) for t, r, _ in world.events.posted}


async def test_a_pool_whose_tolerations_the_platform_does_not_allow_makes_no_pod(
    world: PoolWorld,
) -> None:
    toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    world.create_pool(replicas=2, tolerations=[toleration])
    await world.pass_()
    assert world.pods() == []
    ready = world.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PolicyDenied")
    assert "spec.tolerations" in ready["message"]


async def test_a_policy_that_tightens_takes_the_pools_unclaimed_pods_not_its_claimed_ones(
    world: PoolWorld,
) -> None:
    set_platform_policy(world, images=["registry.example.com/"])
    world.create_pool(replicas=2, image="registry.example.com/other:1")
    await world.pass_()
    world.ready_all()
    await world.pass_()
    claimed = world.unclaimed()[0]["metadata"]["name"]
    world.claim(claimed)
    set_platform_policy(world, images=["registry.example.com/craft/"])
    await world.pass_()
    live = [pod["metadata"]["name"] for pod in world.pods()]
    assert live == [claimed], "the claimed pod is its sandbox's (judged as the sandbox is)"


async def test_a_pool_changed_to_an_image_the_policy_refuses_keeps_its_warm_pods_and_makes_none(
    world: PoolWorld,
) -> None:
    """A typo in the registry: the pods of the image before, which the policy still allows,
    stay warm and claimable until the spec is mended."""
    await world.filled(replicas=3)
    await world.pass_()
    before = sorted(pod["metadata"]["name"] for pod in world.unclaimed())

    world.set_spec(image="registy.example.com/craft/sandbox:2")
    await world.pass_()
    await world.pass_()

    assert sorted(pod["metadata"]["name"] for pod in world.unclaimed()) == before
    assert world.condition("Ready")["reason"] == "PolicyDenied"
    assert (world.status()["ready"], world.status()["replicas"]) == (3, 3), "still claimable"
    world.set_spec(image="registry.example.com/craft/sandbox:2")  # mended: a rolling update
    await world.pass_()
    assert world.condition("Ready")["reason"] == "Updating"


async def test_a_pool_changed_to_a_refused_image_loses_the_pods_whose_own_image_is_refused(
    world: PoolWorld,
) -> None:
    set_platform_policy(world, images=["registry.example.com/"])
    world.create_pool(replicas=2, image="registry.example.com/other:1")
    await world.pass_()
    world.ready_all()
    await world.pass_()

    set_platform_policy(world, images=["registry.example.com/craft/"])  # other:1 banned
    world.set_spec(image="attacker.example/x:1")
    await world.pass_()

    assert world.unclaimed() == []
    assert world.condition("Ready")["reason"] == "PolicyDenied"


async def test_while_the_policy_object_is_missing_a_pool_keeps_its_pods_and_makes_none(
    world: PoolWorld,
) -> None:
    set_platform_policy(world, images=["registry.example.com/"])
    world.create_pool(replicas=3, image="registry.example.com/other:1")
    await world.pass_()
    world.ready_all()
    await world.pass_()
    world.services.cache.forget(PLATFORM_POLICY, None, "default")  # a GitOps prune
    world.emulator.remove("v1/pods", NAMESPACE, world.unclaimed()[0]["metadata"]["name"])
    await world.pass_()
    assert len(world.pods()) == 2, "kept, and not refilled"
    assert world.condition("Ready")["reason"] == "PolicyMissing"
    # The pods kept are counted as what they are: Ready, claimable.
    assert (world.status()["ready"], world.status()["replicas"]) == (2, 2)


async def test_a_pool_on_a_cluster_with_no_policy_object_says_only_the_defaults_apply(
    world: PoolWorld,
) -> None:
    # make run installs none: "until the CraftSandboxPolicy is back" sent people looking
    # for one that never was.
    world.services.cache.forget(PLATFORM_POLICY, None, "default")
    world.create_pool(replicas=2, image="registry.example.com/other:1")
    await world.pass_()
    assert world.pods() == []
    ready = world.condition("Ready")
    assert ready["reason"] == "PolicyMissing"
    assert ready["message"].endswith(
        "spec.image registry.example.com/other:1 is not allowed: there is no "
        "CraftSandboxPolicy default, so only the operator's defaults apply (a policy lists "
        "more in spec.images); no new pods until a CraftSandboxPolicy allows them"
    )


async def test_once_its_pods_are_ready_the_pool_is_ready(world: PoolWorld) -> None:
    await world.filled(replicas=2)
    # Pods becoming ready is a routine change: written within the status interval.
    assert await world.pass_() == STATUS_INTERVAL
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()
    assert world.status()["ready"] == 2
    assert world.status()["creating"] == 0
    assert world.condition("Ready")["status"] == "True"
    assert world.status()["observedGeneration"] == world.pool_body()["metadata"]["generation"]


async def test_a_pass_creates_a_bounded_number_and_comes_back_at_once(
    make_world: Callable[..., PoolWorld],
) -> None:
    world = make_world(max_creates=4)
    world.create_pool(replicas=10)
    assert await world.pass_() == 0
    assert len(world.unclaimed()) == 4
    assert await world.pass_() == 0
    assert len(world.unclaimed()) == 8
    await world.pass_()
    assert len(world.unclaimed()) == 10
    await world.pass_()
    assert len(world.unclaimed()) == 10


async def test_a_deleted_pod_is_replaced(world: PoolWorld) -> None:
    await world.filled(replicas=3)
    gone = world.unclaimed()[0]["metadata"]["name"]
    world.emulator.remove("v1/pods", NAMESPACE, gone)
    await world.pass_()
    names = {pod["metadata"]["name"] for pod in world.unclaimed()}
    assert len(names) == 3
    assert gone not in names


async def test_a_pod_that_ended_is_deleted_and_replaced_after_a_backoff(world: PoolWorld) -> None:
    await world.filled(replicas=2)
    failed = world.unclaimed()[0]["metadata"]["name"]
    world.emulator.patch(
        "v1/pods",
        NAMESPACE,
        failed,
        {"status": {"phase": "Failed", "reason": "Evicted"}},
        subresource="status",
    )
    revisit = await world.pass_()
    assert failed not in {pod["metadata"]["name"] for pod in world.pods()}
    assert len(world.unclaimed()) == 1, "no replacement before the backoff"
    assert world.condition("Ready")["reason"] == "PoolPodsFailing"
    assert ("Warning", "PoolPodEnded") in {(t, r) for t, r, _ in world.events.posted}
    assert revisit is not None
    assert 0 < revisit <= 10
    world.now[0] = START + timedelta(seconds=11)
    await world.pass_()
    assert len(world.unclaimed()) == 2


async def test_a_replacement_that_ends_too_waits_twice_as_long(world: PoolWorld) -> None:
    await world.filled(replicas=2)

    def fail_one_not_failed() -> str:
        pod = next(p for p in world.unclaimed() if p.get("status", {}).get("phase") != "Failed")
        name = pod["metadata"]["name"]
        status = {"status": {"phase": "Failed", "reason": "Error"}}
        world.emulator.patch("v1/pods", NAMESPACE, name, status, subresource="status")
        return name

    fail_one_not_failed()
    await world.pass_()
    world.now[0] = START + timedelta(seconds=11)
    await world.pass_()
    [replacement] = [p for p in world.unclaimed() if not p.get("status", {}).get("phase")]
    status = {"status": {"phase": "Failed", "reason": "Error"}}
    name = replacement["metadata"]["name"]
    world.emulator.patch("v1/pods", NAMESPACE, name, status, subresource="status")
    world.now[0] = START + timedelta(seconds=12)
    revisit = await world.pass_()
    assert revisit is not None
    assert 10 < revisit <= 20
    world.now[0] = START + timedelta(seconds=27)
    await world.pass_()
    assert len(world.unclaimed()) == 1, "still waiting: 20 s after the second failure"
    world.now[0] = START + timedelta(seconds=33)
    await world.pass_()
    assert len(world.unclaimed()) == 2


def fail(world: PoolWorld, name: str, reason: str = "Evicted") -> None:
    status = {"status": {"phase": "Failed", "reason": reason}}
    world.emulator.patch("v1/pods", NAMESPACE, name, status, subresource="status")


async def test_pods_that_end_together_are_one_failure_not_one_each(world: PoolWorld) -> None:
    world.create_pool(replicas=10)
    await world.pass_()
    await world.pass_()
    world.ready_all()
    for pod in world.unclaimed()[:6]:  # one node drained: six evicted at once
        fail(world, pod["metadata"]["name"])

    revisit = await world.pass_()
    again = await world.pass_()  # the same six, seen again before their deletion lands

    assert revisit is not None
    assert 0 < revisit <= 10, "the first wave's backoff, not six doublings (300 s)"
    assert again is not None
    assert again <= 10


async def test_failures_hours_apart_each_wait_the_first_backoff_only(world: PoolWorld) -> None:
    await world.filled(replicas=3)
    waits = []
    for hour in range(1, 5):
        # Claims keep the pool one short, so it is never full between the failures.
        victim = world.unclaimed()[0]["metadata"]["name"]
        fail(world, victim, reason="Error")
        waits.append(await world.pass_())
        world.now[0] = START + timedelta(hours=hour)
        await world.pass_()
        world.ready_all()

    assert all(wait is not None and 0 < wait <= 10 for wait in waits), waits


async def refill_and_see_full(world: PoolWorld, *, replicas: int) -> None:
    """Passes until the pool holds ``replicas`` Ready pods (a probe first, then the batch)
    and a pass has seen it full and said so."""
    for _ in range(5):
        await world.pass_()
        world.ready_all()
        if len(world.unclaimed()) == replicas:
            break
    await world.pass_()
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)  # a refill's status write waits
    await world.pass_()
    assert world.condition("Ready")["reason"] == "PoolReady"


async def test_pods_that_crash_soon_after_they_are_ready_wait_longer_wave_after_wave(
    world: PoolWorld,
) -> None:
    """An app that dies 30 s after its readiness probe passes: the pool is seen full between
    the waves, which must not make each wave the first (recreated every 10 s for ever)."""
    world.create_pool(replicas=3)
    waits, first_made = [], []
    for _ in range(5):
        await world.pass_()
        first_made.append(len(world.unclaimed()))
        await refill_and_see_full(world, replicas=3)
        world.now[0] += timedelta(seconds=30)
        for pod in world.unclaimed():
            fail(world, pod["metadata"]["name"], reason="Error")
        waits.append(await world.pass_())
        assert world.condition("Ready")["reason"] == "PoolPodsFailing"
        world.now[0] += timedelta(seconds=(waits[-1] or 0) + 1)

    assert waits == [10, 20, 40, 80, 160], "the backoff doubles per wave, as a sandbox's does"
    assert first_made == [3, 3, 1, 1, 1], "after a second wave, a probe before each batch"


async def test_a_pool_that_stayed_full_ten_minutes_after_a_wave_refills_the_next_at_once(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=3)
    waits = []
    for _ in range(3):  # node drains ten minutes apart, the pool full in between
        fail(world, world.unclaimed()[0]["metadata"]["name"])
        waits.append(await world.pass_())
        world.now[0] += timedelta(seconds=11)
        await refill_and_see_full(world, replicas=3)
        world.now[0] += timedelta(minutes=10)

    assert waits == [10, 10, 10], "each drain waits the first backoff only"


async def a_pass_over_quota(world: PoolWorld, *, then_allowed: bool = True) -> None:
    """One pass whose pod creates a quota refuses (the pass fails, to be retried); creates
    are allowed again after it unless ``then_allowed`` is false."""
    real = world.services.kube.create

    async def over_quota(kind: Any, body: Any) -> Any:
        raise ApiError(403, "Forbidden", "pods is forbidden: exceeded quota: sandboxes")

    world.services.kube.create = over_quota  # type: ignore[method-assign]
    with pytest.raises(PoolRetryLaterError):
        await world.pass_()
    if then_allowed:
        world.services.kube.create = real  # type: ignore[method-assign]


async def test_a_refused_create_waits_its_backoff_whatever_events_come(
    world: PoolWorld,
) -> None:
    world.create_pool(replicas=5)
    creates: list[str] = []
    real = world.services.kube.create

    async def over_quota(kind: Any, body: Any) -> Any:
        creates.append(body["metadata"].get("generateName", ""))
        raise ApiError(403, "Forbidden", "pods is forbidden: exceeded quota: sandboxes")

    world.services.kube.create = over_quota  # type: ignore[method-assign]
    with pytest.raises(PoolRetryLaterError):
        await world.pass_()
    refused_once = len(creates)
    for _ in range(4):  # events of the pool's pods, within the backoff
        await world.pass_()

    assert len(creates) == refused_once, "no create is tried again before the backoff"
    ready = world.condition("Ready")
    assert ready["reason"] == "PodCreateFailed"
    assert "exceeded quota" in ready["message"]

    world.services.kube.create = real  # type: ignore[method-assign]
    world.now[0] = START + timedelta(seconds=11)
    await world.pass_()
    assert len(world.unclaimed()) == 5


async def test_a_pod_template_changed_after_a_refused_create_is_tried_at_once(
    world: PoolWorld,
) -> None:
    """The engineer lowers the pool's resources to fit the quota: the new pods need not
    wait out the backoff of the ones refused."""
    world.create_pool(replicas=2)
    await a_pass_over_quota(world)
    await world.pass_()
    assert world.unclaimed() == [], "the same template waits its backoff"

    world.set_spec(resources={"requests": {"cpu": "100m"}})
    await world.pass_()
    assert len(world.unclaimed()) == 2
    assert world.condition("Ready")["reason"] == "Filling"


async def test_a_wall_clock_stepped_back_an_hour_holds_no_refill_past_its_backoff(
    world: PoolWorld,
) -> None:
    """An NTP correction moves the wall clock, not the time that passes: the waits a pool
    keeps in memory (failure waves, refused creates, held status writes) are its own."""
    await world.filled(replicas=2)
    fail(world, world.unclaimed()[0]["metadata"]["name"])
    await world.pass_()
    assert len(world.unclaimed()) == 1, "the first wave's backoff (10 s) runs"

    world.wall_step[0] = -timedelta(hours=1)
    world.now[0] = START + timedelta(seconds=11)
    revisit = await world.pass_()

    assert len(world.unclaimed()) == 2, "refilled 11 s later, whatever the wall clock says"
    assert revisit is None or revisit <= world.services.settings.resync_interval


async def test_a_refused_create_after_a_wall_clock_step_back_waits_its_backoff_only(
    world: PoolWorld,
) -> None:
    world.create_pool(replicas=2)
    await a_pass_over_quota(world)
    world.wall_step[0] = -timedelta(hours=1)
    world.now[0] = START + timedelta(seconds=11)
    await world.pass_()

    assert len(world.unclaimed()) == 2


async def test_a_replica_that_stood_by_keeps_no_backoff_of_a_pool(world: PoolWorld) -> None:
    """The other replica acted meanwhile (the quota may be gone, the pool recreated)."""
    world.create_pool(replicas=2)
    await a_pass_over_quota(world)

    await world.reconciler.forget_all()  # stood by, and is active again
    await world.pass_()

    assert len(world.unclaimed()) == 2, "created at once, no backoff remembered"


async def test_while_pods_of_a_template_keep_ending_one_at_a_time_proves_it(
    world: PoolWorld,
) -> None:
    world.create_pool(replicas=10)
    await world.pass_()
    await world.pass_()
    for pod in world.unclaimed():  # an image that crashes at start: every pod ends
        fail(world, pod["metadata"]["name"], reason="Error")
    await world.pass_()
    world.now[0] = START + timedelta(seconds=11)
    await world.pass_()
    await world.pass_()
    assert len(world.unclaimed()) == 10, "after one wave, a full refill (a node drain)"
    for pod in world.unclaimed():  # and they end again
        fail(world, pod["metadata"]["name"], reason="Error")
    await world.pass_()
    world.now[0] = START + timedelta(seconds=40)
    await world.pass_()
    await world.pass_()
    assert len(world.unclaimed()) == 1, "one probe, not the whole pool again"

    world.ready_all()  # the probe comes up: the template works
    await world.pass_()
    await world.pass_()
    assert len(world.unclaimed()) == 10


async def test_pods_ending_one_by_one_within_a_backoff_are_one_wave(world: PoolWorld) -> None:
    world.create_pool(replicas=10)
    await world.pass_()
    await world.pass_()
    world.ready_all()
    waits = []
    for second, pod in enumerate(world.unclaimed()[:6]):  # a kubelet evicting one at a time
        fail(world, pod["metadata"]["name"])
        world.now[0] = START + timedelta(seconds=second)
        waits.append(await world.pass_())

    assert all(wait is not None and wait <= 10 for wait in waits), waits


async def test_probing_ends_once_a_probe_comes_up_though_claims_take_it_at_once(
    world: PoolWorld,
) -> None:
    world.create_pool(replicas=10)
    await world.pass_()
    await world.pass_()
    for wave, at in enumerate((11, 40)):  # two waves: the template is in doubt
        for pod in world.unclaimed():
            fail(world, pod["metadata"]["name"], reason="Error")
        await world.pass_()
        world.now[0] = START + timedelta(seconds=at)
        await world.pass_()
        if wave == 0:
            await world.pass_()
    [probe] = world.unclaimed()
    world.ready_all()
    world.claim(probe["metadata"]["name"])  # steady claims: a Ready pod is taken at once
    await world.pass_()
    assert len(world.unclaimed()) == 10, "the claimed probe proved the template: a batch"


async def test_a_pool_waiting_out_a_backoff_writes_its_status_once(world: PoolWorld) -> None:
    world.create_pool(replicas=5)
    await a_pass_over_quota(world, then_allowed=False)
    version = world.pool_body()["metadata"]["resourceVersion"]
    for second in (1, 2, 3):  # pod events within the backoff
        world.now[0] = START + timedelta(seconds=second)
        await world.pass_()

    assert world.pool_body()["metadata"]["resourceVersion"] == version, "no write per pass"


async def test_scaling_down_deletes_pods_that_are_not_ready_first(world: PoolWorld) -> None:
    world.create_pool(replicas=3)
    await world.pass_()
    names = [pod["metadata"]["name"] for pod in world.unclaimed()]
    for name in names[:2]:
        mark_pod_running(world.emulator, NAMESPACE, name)
    world.set_spec(replicas=2)
    await world.pass_()
    assert {pod["metadata"]["name"] for pod in world.unclaimed()} == set(names[:2])
    assert "PoolScaledDown" in world.events.steps


# -- updates -------------------------------------------------------------------------------


async def updating(world: PoolWorld, *, replicas: int) -> str:
    """A full pool of Ready pods whose image just changed; the old template hash."""
    world.create_pool(replicas=replicas)
    await world.pass_()
    world.ready_all()
    await world.pass_()
    old_hash: str = world.status()["templateHash"]
    world.set_spec(image="registry.example.com/craft/sandbox:2")
    return old_hash


async def test_a_template_change_replaces_the_pods_gradually(world: PoolWorld) -> None:
    old_hash = await updating(world, replicas=3)
    for _ in range(20):
        await world.pass_()
        pods = world.unclaimed()
        ready = [pod for pod in pods if pod.get("status", {}).get("phase") == "Running"]
        assert len(ready) >= 3, "never fewer Ready pods than replicas during the update"
        assert len(pods) <= 4, "at most one pod above replicas"
        if (
            all(pod["metadata"]["labels"][LABEL_POOL_TEMPLATE_HASH] != old_hash for pod in pods)
            and len(ready) == 3
        ):
            break
        world.ready_all()
    pods = world.unclaimed()
    assert len(pods) == 3
    assert {pod["spec"]["containers"][0]["image"] for pod in pods} == {
        "registry.example.com/craft/sandbox:2"
    }
    await world.pass_()
    assert world.condition("Ready")["status"] == "True"
    assert world.status()["templateHash"] != old_hash
    assert "PoolPodOutdated" in world.events.steps


async def test_during_an_update_only_the_current_templates_pods_count_as_ready(
    world: PoolWorld,
) -> None:
    await updating(world, replicas=3)
    await world.pass_()  # one new pod, starting; the three old ones still Ready
    status = world.status()
    assert (status["replicas"], status["ready"], status["creating"]) == (4, 0, 1)
    assert world.condition("Ready")["reason"] == "Updating"


async def test_an_update_never_touches_a_claimed_pod(world: PoolWorld) -> None:
    await world.filled(replicas=2)
    claimed = world.unclaimed()[0]["metadata"]["name"]
    before = world.claim(claimed)
    world.set_spec(image="registry.example.com/craft/sandbox:2")
    for _ in range(12):
        await world.pass_()
        world.ready_all()
    after = world.emulator.get("v1/pods", NAMESPACE, claimed)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert len(world.unclaimed()) == 2, "the pool refilled what was claimed"
    assert world.status()["claimed"] == 1


async def test_a_pod_claimed_after_the_cache_saw_it_is_not_deleted(world: PoolWorld) -> None:
    await world.filled(replicas=1)
    world.refresh()
    [pod] = world.unclaimed()
    world.set_spec(replicas=0)
    world.refresh()
    world.claim(pod["metadata"]["name"])  # the cache still sees it in the pool
    revisit = await world.reconciler.reconcile(KEY)
    assert world.emulator.find("v1/pods", NAMESPACE, pod["metadata"]["name"]) is not None
    assert revisit == 1.0, "the pass comes back to see what changed"


# -- deletion ------------------------------------------------------------------------------


async def test_deleting_the_pool_deletes_its_unclaimed_pods_only(world: PoolWorld) -> None:
    await world.filled(replicas=3)
    claimed = world.unclaimed()[0]["metadata"]["name"]
    world.claim(claimed)
    await world.pass_()
    world.emulator.remove(POOLS, NAMESPACE, NAME)
    await world.pass_()
    assert [pod["metadata"]["name"] for pod in world.pods()] == [claimed]


async def test_a_pool_held_by_a_finalizer_while_deleted_deletes_its_pods_and_makes_no_more(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=2)
    claimed = world.unclaimed()[0]["metadata"]["name"]
    world.claim(claimed)
    held = {"metadata": {"finalizers": ["example.com/hold"]}}
    world.emulator.patch(POOLS, NAMESPACE, NAME, held)
    world.emulator.remove(POOLS, NAMESPACE, NAME)  # it stays, being deleted
    for _ in range(2):
        await world.pass_()
    assert [pod["metadata"]["name"] for pod in world.pods()] == [claimed]


async def test_deleting_the_pool_leaves_a_pod_that_carries_its_label_but_is_not_its_own(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=1)
    claimed = world.unclaimed()[0]["metadata"]["name"]
    world.claim(claimed)
    # Labels are anyone's to write: the claimed pod is the sandbox's still.
    relabelled = {"metadata": {"labels": {LABEL_POOL: NAME}}}
    world.emulator.patch("v1/pods", NAMESPACE, claimed, relabelled)
    world.emulator.remove(POOLS, NAMESPACE, NAME)
    await world.pass_()
    assert [pod["metadata"]["name"] for pod in world.pods()] == [claimed]


async def test_pods_of_an_earlier_pool_of_the_name_are_deleted_once_not_on_every_pass(
    world: PoolWorld,
) -> None:
    world.create_pool(replicas=2)
    await world.pass_()
    earlier = [pod["metadata"]["name"] for pod in world.unclaimed()]
    for pod in world.unclaimed():  # made by an earlier pool of the name; they stop slowly
        owner = {**pod["metadata"]["ownerReferences"][0], "uid": "uid-of-an-earlier-pool"}
        change = {"metadata": {"finalizers": ["x/y"], "ownerReferences": [owner]}}
        world.emulator.patch("v1/pods", NAMESPACE, pod["metadata"]["name"], change)
    world.events.posted.clear()

    await world.pass_()
    await world.pass_()

    assert world.events.steps.count("PoolPodOrphaned") == 1, world.events.posted
    assert all(
        world.emulator.get("v1/pods", NAMESPACE, name)["metadata"].get("deletionTimestamp")
        for name in earlier
    )


async def test_a_pass_over_a_pool_that_is_gone_deletes_what_is_left(world: PoolWorld) -> None:
    world.create_pool(replicas=2)
    await world.pass_()
    world.refresh()
    world.services.cache.forget(kinds.POOL.name, NAMESPACE, NAME)  # as after its DELETED event
    assert await world.reconciler.reconcile(KEY) is None
    assert world.pods() == []


# -- the egress gate ---------------------------------------------------------------------------


async def test_no_pod_starts_until_a_network_policy_restricts_its_egress(
    make_world: Callable[..., PoolWorld],
) -> None:
    world = make_world(allow_unrestricted_egress=False)
    world.create_pool(replicas=2)
    await world.pass_()
    await world.pass_()
    assert world.pods() == []
    assert world.condition("EgressRestricted")["status"] == "False"
    assert world.condition("Ready")["reason"] == "EgressNotRestricted"
    assert world.events.reasons.count("EgressNotRestricted") == 1, "said once"
    world.services.cache.put(kinds.NETWORK_POLICY.name, EGRESS_POLICY)
    await world.pass_()
    assert len(world.unclaimed()) == 2
    assert world.condition("EgressRestricted")["status"] == "True"


async def test_a_refused_pool_still_says_whether_its_egress_is_restricted(
    make_world: Callable[..., PoolWorld],
) -> None:
    """Egress is judged while the platform's policy refuses the pool: a NetworkPolicy
    applied meanwhile is not left reported missing beside the refusal."""
    world = make_world(allow_unrestricted_egress=False)
    set_platform_policy(world, images=["registry.example.com/"])
    world.create_pool(replicas=2, image="registry.example.com/other:1")
    await world.pass_()
    assert world.condition("EgressRestricted")["reason"] == "EgressNotRestricted"

    set_platform_policy(world, images=["registry.example.com/craft/"])
    world.services.cache.put(kinds.NETWORK_POLICY.name, EGRESS_POLICY)
    await world.pass_()

    assert world.condition("Ready")["reason"] == "PolicyDenied"
    assert world.condition("EgressRestricted")["status"] == "True"


async def test_a_pool_whose_spec_makes_no_pod_says_its_egress_is_not_judged(
    make_world: Callable[..., PoolWorld],
) -> None:
    world = make_world(allow_unrestricted_egress=False, server_url=None)
    world.create_pool(replicas=2)
    await world.pass_()

    egress = world.condition("EgressRestricted")
    assert egress["status"] == "Unknown"
    assert egress["reason"] == world.condition("Ready")["reason"] == "NoServerURL"


# -- status --------------------------------------------------------------------------------


async def test_the_status_is_written_only_when_it_changes(
    world: PoolWorld, kube: KubeClient
) -> None:
    await world.filled(replicas=1)
    await world.pass_()
    patches = kube.requests["PATCH"]
    await world.pass_()
    assert kube.requests["PATCH"] == patches


def status_patches(world: PoolWorld) -> int:
    """Status writes on the pool so far."""
    return sum(
        1 for write in world.emulator.writes() if write.startswith("PATCH") and "/status" in write
    )


async def test_claims_and_refills_within_the_status_interval_share_one_status_write(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=3)
    await world.pass_()
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()
    assert (world.status()["ready"], world.condition("Ready")["reason"]) == (3, "PoolReady")
    before = status_patches(world)
    for claimed in range(2):  # two claims, each refilled and its new pod Ready
        world.claim(world.unclaimed()[0]["metadata"]["name"])
        assert await world.pass_() == STATUS_INTERVAL - claimed
        world.ready_all()
        world.now[0] += timedelta(seconds=1)
        await world.pass_()
    assert status_patches(world) == before, "nothing written within the interval"
    assert world.status()["claimed"] == 0, "the status still says what was last written"
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()
    assert status_patches(world) == before + 1
    status = world.status()
    assert (status["ready"], status["claimed"], status["creating"]) == (3, 2, 0)
    assert world.condition("Ready")["reason"] == "PoolReady"


async def test_a_change_that_is_not_routine_is_written_at_once(world: PoolWorld) -> None:
    await world.filled(replicas=2)
    await world.pass_()
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()
    world.claim(world.unclaimed()[0]["metadata"]["name"])
    await world.pass_()  # routine: held
    before = status_patches(world)
    world.set_spec(replicas=3)  # a new generation: written now, the held counts with it
    await world.pass_()
    assert status_patches(world) == before + 1
    assert world.status()["observedGeneration"] == world.pool_body()["metadata"]["generation"]
    assert world.status()["claimed"] == 1


async def test_a_pass_says_what_it_did_in_one_normal_event(world: PoolWorld) -> None:
    await world.filled(replicas=3)
    await world.pass_()
    world.events.posted.clear()
    world.set_spec(image="registry.example.com/craft/sandbox:2")
    await world.pass_()  # a new pod above replicas
    world.ready_all()
    world.events.posted.clear()
    await world.pass_()  # an outdated pod deleted, the next new one created
    assert [(kind, reason) for kind, reason, _ in world.events.posted] == [
        ("Normal", "PoolPodsCreated")
    ]
    assert world.events.steps == ["PoolPodOutdated", "PoolPodsCreated"]
    assert "replacing 1 pods of an earlier template" in world.events.posted[0][2]


async def test_settings_that_cannot_make_a_pod_are_reported(
    make_world: Callable[..., PoolWorld],
) -> None:
    world = make_world(server_url=None)
    world.create_pool(replicas=1)
    await world.pass_()
    assert world.pods() == []
    assert world.condition("Ready")["reason"] == "NoServerURL"


async def test_a_spec_change_during_a_pass_brings_it_back_at_once(world: PoolWorld) -> None:
    world.create_pool(replicas=1)
    world.refresh()
    world.set_spec(replicas=2)  # its watch event would be older than the pass's status write
    assert await world.reconciler.reconcile(KEY) == 0


# -- what a claim reads ----------------------------------------------------------------------


async def test_ready_pool_pods_are_the_current_ready_unclaimed_ones(world: PoolWorld) -> None:
    world.create_pool(replicas=3)
    await world.pass_()
    names = [pod["metadata"]["name"] for pod in world.unclaimed()]
    mark_pod_running(world.emulator, NAMESPACE, names[0])
    mark_pod_running(world.emulator, NAMESPACE, names[1])
    world.claim(names[1])
    await world.pass_()
    ready = ready_pool_pods(world.services.cache, NAMESPACE, NAME)
    assert [pod["metadata"]["name"] for pod in ready] == [names[0]]
    world.set_spec(image="registry.example.com/craft/sandbox:2")
    world.refresh()
    assert ready_pool_pods(world.services.cache, NAMESPACE, NAME) == [], (
        "while the status is older than the spec, nothing is offered"
    )
    hash_ = ready[0]["metadata"]["labels"][LABEL_POOL_TEMPLATE_HASH]
    assert len(ready_pool_pods(world.services.cache, NAMESPACE, NAME, template_hash=hash_)) == 1
    assert ready_pool_pods(world.services.cache, NAMESPACE, "other") == []


async def test_an_update_goes_through_while_every_new_pod_is_claimed_at_once(
    world: PoolWorld,
) -> None:
    old_hash = await updating(world, replicas=3)
    for _ in range(20):
        await world.pass_()
        world.ready_all()
        for pod in world.unclaimed():  # sandboxes take each new pod as soon as it is Ready
            if pod["metadata"]["labels"][LABEL_POOL_TEMPLATE_HASH] != old_hash:
                world.claim(pod["metadata"]["name"])
        if all(
            pod["metadata"]["labels"][LABEL_POOL_TEMPLATE_HASH] != old_hash
            for pod in world.unclaimed()
        ):
            break
    left = [
        pod["metadata"]["name"]
        for pod in world.unclaimed()
        if pod["metadata"]["labels"][LABEL_POOL_TEMPLATE_HASH] == old_hash
    ]
    assert left == [], "no old pod is kept for claims that never come"


async def test_pods_labelled_as_claimed_by_hand_retire_no_old_pod_and_count_for_nothing(
    world: PoolWorld,
) -> None:
    await updating(world, replicas=3)
    await world.pass_()  # the first new pod
    new_hash = world.status()["templateHash"]
    for index in range(3):  # anyone may write labels: no sandbox controls these
        name = f"by-hand-{index}"
        labels = {LABEL_CLAIMED_FROM: NAME, LABEL_POOL_TEMPLATE_HASH: new_hash}
        world.emulator.create(
            "v1/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                "spec": {"containers": [{"name": "x", "image": "busybox"}]},
            },
        )
        mark_pod_running(world.emulator, NAMESPACE, name)
    await world.pass_()
    ready = [pod for pod in world.unclaimed() if pod.get("status", {}).get("phase") == "Running"]
    assert len(ready) == 3, "the old Ready pods stay until new ones are Ready"
    assert world.status()["claimed"] == 0


async def test_pods_naming_a_sandbox_they_do_not_belong_to_retire_no_old_pod(
    world: PoolWorld,
) -> None:
    await updating(world, replicas=3)
    await world.pass_()  # the first new pod
    new_hash = world.status()["templateHash"]
    # alice's name, not her uid: an earlier alice's pods, or someone's made to look hers
    owner = {**SANDBOX_OWNER, "uid": "uid-of-another-alice"}
    for index in range(3):
        name = f"not-alices-{index}"
        labels = {
            LABEL_CLAIMED_FROM: NAME,
            LABEL_POOL_TEMPLATE_HASH: new_hash,
            kinds.LABEL_MANAGED_BY: kinds.MANAGED_BY,
        }
        world.emulator.create(
            "v1/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": labels,
                    "ownerReferences": [owner],
                },
                "spec": {"containers": [{"name": "x", "image": "busybox"}]},
            },
        )
        mark_pod_running(world.emulator, NAMESPACE, name)
    await world.pass_()
    ready = [pod for pod in world.unclaimed() if pod.get("status", {}).get("phase") == "Running"]
    assert len(ready) == 3, "the old Ready pods stay until new ones are Ready"


async def test_a_large_pool_is_deleted_ten_pods_at_a_time_not_one_after_another(
    world: PoolWorld,
) -> None:
    world.create_pool(replicas=25)
    for _ in range(3):  # CREATES_PER_PASS at a time
        await world.pass_()
    assert len(world.unclaimed()) == 25
    world.refresh()
    kube = world.services.kube
    real, running, peak = kube.request, 0, 0

    async def counting(method: str, path: str, **kw: Any) -> Any:
        nonlocal running, peak
        if method != "DELETE":
            return await real(method, path, **kw)
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.01)
            return await real(method, path, **kw)
        finally:
            running -= 1

    kube.request = counting  # type: ignore[method-assign]
    world.services.cache.forget(kinds.POOL.name, NAMESPACE, NAME)  # as after its DELETED event
    assert await world.reconciler.reconcile(KEY) is None
    assert world.pods() == []
    assert peak == 10


async def test_an_image_fix_on_a_crashing_pool_is_not_held_by_the_old_templates_backoff(
    world: PoolWorld,
) -> None:
    """Pods of image :1 crash wave after wave; the engineer sets image :2. The new template
    has never failed: it should be tried at once (as a new template after a refused create
    is), not after the crashing template's backoff and one probe at a time."""
    world.create_pool(replicas=4)
    await world.pass_()
    seconds = 0
    for _ in range(4):  # four waves: backoff 10, 20, 40, 80 s
        for pod in world.unclaimed():
            fail(world, pod["metadata"]["name"], reason="Error")
        await world.pass_()
        seconds += 100
        world.now[0] = START + timedelta(seconds=seconds)
        await world.pass_()
    for pod in world.unclaimed():
        fail(world, pod["metadata"]["name"], reason="Error")
    await world.pass_()  # fifth wave: 160 s
    assert world.condition("Ready")["reason"] == "PoolPodsFailing"

    world.set_spec(image="registry.example.com/craft/sandbox:2")  # the fix
    world.now[0] = START + timedelta(seconds=seconds + 1)
    await world.pass_()
    ready = world.condition("Ready")
    made = [p for p in world.unclaimed() if p["spec"]["containers"][0]["image"].endswith(":2")]
    assert len(made) == 4, (len(made), ready)


async def test_a_pool_deleted_and_recreated_between_two_passes_starts_afresh(
    world: PoolWorld,
) -> None:
    """kubectl replace --force (or delete then apply) while the pool's key waits for a
    worker: the stream hands over DELETED then ADDED before the next pass. The new pool
    (another uid) must not inherit the old one's crash backoff."""
    world.create_pool(replicas=3)
    await world.pass_()
    for at in (100, 200):  # two waves of crashes: backoff 20 s, probing
        for pod in world.unclaimed():
            fail(world, pod["metadata"]["name"], reason="Error")
        await world.pass_()
        world.now[0] = START + timedelta(seconds=at)
        await world.pass_()
    for pod in world.unclaimed():
        fail(world, pod["metadata"]["name"], reason="Error")
    await world.pass_()  # third wave: 40 s

    memo = SimpleNamespace(
        gate=SimpleNamespace(active=True),
        cache=world.services.cache,
        pool_queue=RecordingQueue(),
        pool_reconciler=world.reconciler,
    )
    old = world.pool_body()
    pools.on_pool_event(memo, "ADDED", old)
    world.emulator.remove(POOLS, NAMESPACE, NAME)
    pools.on_pool_event(memo, "DELETED", old)
    new = world.create_pool(replicas=3)  # the same spec: only the uid differs
    pools.on_pool_event(memo, "ADDED", new)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert (
        world.services.cache.get(kinds.POOL.name, NAMESPACE, NAME)["metadata"]["uid"]
        == (new["metadata"]["uid"])
    )

    world.now[0] = START + timedelta(seconds=201)
    await world.pass_()
    assert len(world.unclaimed()) == 3, world.condition("Ready")


async def test_a_pod_not_as_built_does_not_stall_a_template_update(world: PoolWorld) -> None:
    old_hash = await updating(world, replicas=3)
    await world.pass_()  # the update's first new pod
    new_hash = world.status()["templateHash"]
    made = next(
        pod
        for pod in world.unclaimed()
        if pod["metadata"]["labels"][LABEL_POOL_TEMPLATE_HASH] == new_hash
    )
    # Someone else's pod with the pool's labels, owner and new template, another command.
    forged = copy.deepcopy(made)
    forged["metadata"] = {
        key: made["metadata"][key] for key in ("labels", "ownerReferences", "namespace")
    }
    forged["metadata"]["name"] = "forged"
    forged["spec"]["containers"][0]["command"] = ["sh", "-c", "cat /run/onyx/pat"]
    forged.pop("status", None)
    world.emulator.create("v1/pods", forged)
    for _ in range(10):
        world.ready_all()
        await world.pass_()

    templates = [pod["metadata"]["labels"][LABEL_POOL_TEMPLATE_HASH] for pod in world.unclaimed()]
    assert old_hash not in templates, "every old pod replaced"
    assert "forged" in [pod["metadata"]["name"] for pod in world.unclaimed()], "never deleted"


# -- the API server away -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "said"),
    [
        (0, ApiServerAwayError, "the API server is away"),
        (503, ApiServerAwayError, "the API server is away"),
        (403, ApiRefusedError, "the API server refused a request (403 "),
    ],
)
async def test_a_pass_the_api_servers_absence_cut_short_says_so_and_a_refusal_stays_one(
    world: PoolWorld, status: int, error: type[Exception], said: str
) -> None:
    world.create_pool(replicas=1)

    async def answer(*args: object, **kwargs: object) -> object:
        raise ApiError(status, "Answer", "the answer of the test")

    world.services.kube.patch = answer  # type: ignore[method-assign]
    with pytest.raises(error) as caught:
        await world.pass_()
    assert str(caught.value).startswith(f"pool {NAMESPACE}/{NAME}: {said}")


@pytest.mark.parametrize("status", [0, 503])
async def test_creates_the_api_servers_absence_cut_short_are_no_refusal_and_refill_once_back(
    world: PoolWorld, status: int
) -> None:
    world.create_pool(replicas=3)
    real = world.services.kube.create

    async def away(*args: object, **kwargs: object) -> object:
        raise ApiError(status, "Unreachable", "the answer of the test")

    world.services.kube.create = away  # type: ignore[method-assign]
    with pytest.raises(ApiServerAwayError):
        await world.pass_()

    world.services.kube.create = real  # type: ignore[method-assign]
    await world.pass_()
    assert len(world.unclaimed()) == 3, "no refusal's wait before the creates"


def older_pool_crd(resource: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """The API server under the pool CRD from before 2026-11-27: no ``status.selector``."""
    if resource == POOLS:
        (obj.get("status") or {}).pop("selector", None)
    return obj


def dropped_said(world: PoolWorld) -> list[str]:
    """The messages of the StatusFieldsDropped events posted so far."""
    return [
        message for _, reason, message in world.events.posted if reason == "StatusFieldsDropped"
    ]


async def test_a_status_field_an_older_pool_crd_drops_is_said_once_in_an_event_and_the_log(
    world: PoolWorld, caplog: pytest.LogCaptureFixture
) -> None:
    world.emulator.mutators.append(older_pool_crd)
    with caplog.at_level("ERROR", logger="craft_operator.reconciler.dropped_status"):
        await world.filled(replicas=2)
        for _ in range(3):
            await world.pass_()
        world.set_spec(replicas=3)  # written at once, the selector with it: dropped again
        await world.pass_()
    message = (
        "the API server dropped status.selector from a status write: the installed "
        "CraftSandboxPool CRD is older than this operator; install its CRDs: "
        "kubectl apply -k crds"
    )
    assert dropped_said(world) == [message]
    assert [r.getMessage() for r in caplog.records] == [f"{NAMESPACE}/{NAME}: {message}"]
    assert world.status()["observedGeneration"] == world.pool_body()["metadata"]["generation"]


async def test_a_steady_pool_under_an_older_crd_writes_no_status(world: PoolWorld) -> None:
    world.emulator.mutators.append(older_pool_crd)
    await world.filled(replicas=2)
    await world.pass_()
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()  # the pods' Ready, held for the interval, written
    assert world.condition("Ready")["reason"] == "PoolReady"
    before = status_patches(world)
    for _ in range(3):
        world.now[0] += timedelta(seconds=STATUS_INTERVAL)
        await world.pass_()
    assert status_patches(world) == before
    assert "selector" not in world.status()


async def test_claims_under_an_older_crd_still_share_one_status_write(world: PoolWorld) -> None:
    # The selector the API server drops is no change that must be written at once.
    world.emulator.mutators.append(older_pool_crd)
    await world.filled(replicas=3)
    await world.pass_()
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()
    before = status_patches(world)
    world.claim(world.unclaimed()[0]["metadata"]["name"])
    assert await world.pass_() == STATUS_INTERVAL
    assert status_patches(world) == before, "held within the interval"
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()
    assert status_patches(world) == before + 1
    assert world.status()["claimed"] == 1


async def test_a_steady_pool_gets_its_dropped_field_written_once_the_crds_are_applied(
    world: PoolWorld,
) -> None:
    """A pool that changes nothing else tries the field again now and then: no claim, no
    scale, no restart needed for an autoscaler to find its selector."""
    world.emulator.mutators.append(older_pool_crd)
    await world.filled(replicas=2)
    await world.pass_()
    world.now[0] += timedelta(seconds=STATUS_INTERVAL)
    await world.pass_()
    assert "selector" not in world.status()
    world.emulator.mutators.remove(older_pool_crd)  # kubectl apply -k crds
    world.now[0] += timedelta(seconds=RECHECK_AFTER)

    await world.pass_()

    assert world.status()["selector"] == f"{LABEL_POOL}={NAME}"
    assert len(dropped_said(world)) == 1


async def test_the_dropped_field_is_written_again_once_the_crds_are_applied(
    world: PoolWorld,
) -> None:
    world.emulator.mutators.append(older_pool_crd)
    await world.filled(replicas=2)
    await world.pass_()
    world.emulator.mutators.remove(older_pool_crd)  # kubectl apply -k crds
    world.set_spec(replicas=3)  # the next write the pool makes carries it
    await world.pass_()
    assert world.status()["selector"] == f"{LABEL_POOL}={NAME}"
    world.emulator.mutators.append(older_pool_crd)  # rolled back: said again
    world.set_spec(replicas=2)
    await world.pass_()
    assert len(dropped_said(world)) == 2
