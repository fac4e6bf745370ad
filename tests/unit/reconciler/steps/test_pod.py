"""PodReady: the pod is created once, kept while it matches, replaced when it drifts or
fails, stopped while the sandbox sleeps, and held back while egress is unrestricted."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta

import pytest

from craft_operator.api.pool import LABEL_CLAIMED_FROM
from craft_operator.api.status_codec import dump_status
from craft_operator.builders.naming import ANNOTATION_TEMPLATE_HASH
from craft_operator.kube.client import ApiError
from craft_operator.kube.kinds import LABEL_MANAGED_BY
from craft_operator.reconciler.step import Memory, Pass, Stop
from craft_operator.reconciler.steps import credentials, pod, pod_lifecycle
from craft_operator.status import POD_READY
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_failed, mark_pod_running
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import CANARY, NAME, NOW, World

pytestmark = pytest.mark.unit

OLD_ACTIVITY = {"craft.onyx.app/last-activity": "2026-11-23T10:00:00Z"}  # 2 h before NOW


async def pod_pass(world: World, **body: object) -> Pass:
    p = world.pass_(**body)
    await credentials.ensure_pat(p)
    world.events.posted.clear()
    return p


def observed(world: World) -> None:
    """The watch delivers the pod as the API server has it now."""
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, NAME))


async def test_a_missing_pod_is_created_and_the_pass_waits_for_it(world: World) -> None:
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    stored = world.stored("v1/pods", NAME)
    assert stored is not None
    assert CANARY not in str(stored), "the token reaches the pod through its Secret only"
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert condition.reason == "PodStarting"
    assert world.events.reasons == ["PodCreated"]
    assert p.pod is None
    cached = world.cache.get("Pod", NAMESPACE, NAME)
    assert cached is not None, "the next pass finds it before its watch event comes"
    assert cached["metadata"]["uid"] == stored["metadata"]["uid"]
    # A pod that never changes (no scheduler) still times out when it should.
    timeout = world.services.settings.provisioning_timeout
    assert p.run.verdict.after == timeout + 1


async def test_a_create_that_finds_its_own_pod_there_keeps_it_and_creates_no_more(
    world: World,
) -> None:
    """The cache was behind (the pod's watch event still on its way): the create's conflict
    reads the pod back into the cache, so the next pass finds it rather than trying the
    create again on every pass until the event comes."""
    await pod.converge_pod(await pod_pass(world))
    made = world.emulator.get("v1/pods", NAMESPACE, NAME)
    world.cache.forget("Pod", NAMESPACE, NAME)
    raced = await pod_pass(world)
    assert await pod.converge_pod(raced) == Stop("WaitingForPod")
    cached = world.cache.get("Pod", NAMESPACE, NAME)
    assert cached is not None
    assert cached["metadata"]["uid"] == made["metadata"]["uid"]

    creates = len([r for r in world.emulator.served if r.method.value.upper() == "POST"])
    await pod.converge_pod(await pod_pass(world))
    after = len([r for r in world.emulator.served if r.method.value.upper() == "POST"])
    assert after == creates, "no create tried again"
    assert world.events.reasons == []


async def test_a_ready_pod_lets_the_pass_go_on(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    observed(world)
    p = await pod_pass(world)
    assert await pod.converge_pod(p) is None
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert condition.status == "True"
    assert p.pod is not None
    assert p.pod["metadata"]["name"] == NAME


async def test_a_pod_running_an_edited_image_is_replaced(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    observed(world)
    edited = world.cache.get("Pod", NAMESPACE, NAME)
    assert edited is not None
    edited["spec"]["containers"][0]["image"] = "attacker.example.com/other:1"
    world.cache.put("Pod", edited)
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    await eventually(lambda: world.stored("v1/pods", NAME) is None, what="the pod gone")
    assert world.events.reasons == ["PodReplaced"]


async def test_a_pod_whose_template_hash_was_removed_is_replaced_saying_so_not_a_spec_change(
    world: World,
) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    world.emulator.patch(
        "v1/pods", NAMESPACE, NAME, {"metadata": {"annotations": {ANNOTATION_TEMPLATE_HASH: None}}}
    )
    observed(world)

    await pod.converge_pod(await pod_pass(world))

    [(_, reason, message)] = world.events.posted
    assert reason == "PodReplaced"
    assert ANNOTATION_TEMPLATE_HASH in message
    assert "spec changed" not in message


async def test_a_failed_pod_is_replaced_with_backoff(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_failed(world.emulator, NAMESPACE, NAME)
    observed(world)
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    assert p.run.status.pod_failures == 1
    assert p.run.verdict.after == world.services.settings.pod_restart_backoff
    assert world.events.reasons == ["PodFailed"]


async def test_a_pod_that_fails_before_it_was_ever_ready_still_waits_out_the_backoff(
    world: World,
) -> None:
    long_ago = (NOW - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    starting = {"type": "PodReady", "status": "False", "reason": "PodStarting", "message": "m"}
    status = {"conditions": [{**starting, "lastTransitionTime": long_ago}]}
    await pod.converge_pod(await pod_pass(world, status=status))
    mark_pod_failed(world.emulator, NAMESPACE, NAME)
    observed(world)
    failed = await pod_pass(world, status=status)
    assert await pod.converge_pod(failed) == Stop("WaitingForPod")
    assert world.cache.get("Pod", NAMESPACE, NAME) is None, "the delete's answer, cached"
    stored = dump_status(failed.run.status)
    early = await pod_pass(world, status=stored)
    assert await pod.converge_pod(early) == Stop("WaitingForPod")
    assert world.stored("v1/pods", NAME) is None, "no new pod during the backoff"
    assert early.run.verdict.after == world.services.settings.pod_restart_backoff
    assert early.run.status.last_pod_failure_time == NOW


async def test_a_pod_whose_program_exited_is_replaced_like_a_failed_one(world: World) -> None:
    """Its restartPolicy is Never: a sandbox whose agent exited cleanly (Succeeded) gets a
    new pod, not a wait for Ready until the provisioning timeout."""
    await pod.converge_pod(await pod_pass(world))
    world.emulator.bind_pod(NAMESPACE, NAME)
    world.emulator.patch(
        "v1/pods", NAMESPACE, NAME, {"status": {"phase": "Succeeded"}}, subresource="status"
    )
    observed(world)
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    assert p.run.status.pod_failures == 1
    assert world.events.reasons == ["PodFailed"]
    await eventually(lambda: world.stored("v1/pods", NAME) is None, what="the pod gone")


async def test_a_sandbox_that_gave_up_on_its_pods_says_so_once_and_counts_no_more(
    world: World,
) -> None:
    """The last failed pod is kept for its logs: every later pass over it (a resync, an
    edit of its labels) finds it failed again, which is neither a new failure nor news."""
    limit = world.services.settings.max_pod_failures
    await pod.converge_pod(await pod_pass(world, status={"podFailures": limit - 1}))
    mark_pod_failed(world.emulator, NAMESPACE, NAME)
    observed(world)
    last = await pod_pass(world, status={"podFailures": limit - 1})
    await pod.converge_pod(last)
    assert last.run.status.pod_failures == limit
    assert world.events.reasons == ["PodFailedRepeatedly"]
    world.events.posted.clear()

    again = await pod_pass(world, status=dump_status(last.run.finish()))
    assert await pod.converge_pod(again) == Stop("WaitingForPod")
    assert again.run.status.pod_failures == limit
    assert again.run.condition("PodReady").reason == "PodFailedRepeatedly"  # type: ignore[union-attr]
    assert world.events.reasons == [], "said once"
    assert world.stored("v1/pods", NAME) is not None, "still kept for its logs"


@pytest.mark.parametrize("code", [400, 422])
async def test_a_pod_the_api_server_refuses_as_malformed_waits_for_its_spec(
    world: World, code: int
) -> None:
    """A bad request (a field the server cannot decode) is refused again on every try, as
    an invalid pod is: it waits for the spec to change, not retried on every pass."""

    async def refused(kind: object, body: object) -> object:
        raise ApiError(code, "BadRequest", 'Pod "alice" is malformed')

    world.services.kube.create = refused  # type: ignore[method-assign]
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    assert p.run.condition("PodReady").reason == "PodRejected"  # type: ignore[union-attr]


async def test_a_failed_pod_seen_being_deleted_still_waits_out_the_backoff_once_gone(
    world: World,
) -> None:
    """A finalizer holds the failed pod a moment (a pass says PodTerminating meanwhile):
    once it is gone, the next pod still waits out the backoff the failure began."""
    await pod.converge_pod(await pod_pass(world))
    world.emulator.patch("v1/pods", NAMESPACE, NAME, {"metadata": {"finalizers": ["x/hold"]}})
    mark_pod_failed(world.emulator, NAMESPACE, NAME)
    observed(world)
    failed = await pod_pass(world)
    assert await pod.converge_pod(failed) == Stop("WaitingForPod")
    held = await pod_pass(world, status=dump_status(failed.run.finish()))
    held.run.now = NOW + timedelta(seconds=1)
    assert await pod.converge_pod(held) == Stop("WaitingForPod")
    assert held.run.condition("PodReady").reason == "PodTerminating"  # type: ignore[union-attr]

    gone = world.emulator.get("v1/pods", NAMESPACE, NAME)
    world.emulator.patch("v1/pods", NAMESPACE, NAME, {"metadata": {"finalizers": None}})
    assert world.stored("v1/pods", NAME) is None
    world.cache.remove("Pod", gone)  # its watch event
    world.events.posted.clear()
    after = await pod_pass(world, status=dump_status(held.run.finish()))
    after.run.now = NOW + timedelta(seconds=2)
    assert await pod.converge_pod(after) == Stop("WaitingForPod")
    assert world.stored("v1/pods", NAME) is None, "no new pod during the backoff"
    assert world.events.reasons == []
    assert after.run.verdict.after == world.services.settings.pod_restart_backoff - 2


async def test_a_suspended_sandbox_has_no_pod(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    observed(world)
    p = await pod_pass(world, spec={"suspend": True})
    assert await pod.converge_pod(p) == Stop("Suspended")
    assert world.stored("v1/pods", NAME) is None
    assert p.run.phase == "Suspended"


@pytest.mark.parametrize(
    ("message", "reason", "phase"),
    [
        (
            'pods "alice" is forbidden: maximum cpu usage per Container is 4, but limit is 8',
            "PodRejected",
            "Failed",
        ),
        (
            'pods "alice" is forbidden: exceeded quota: craft-sandboxes, requested: pods=1',
            "PodCreateFailed",
            None,
        ),
    ],
    ids=["limit-range", "quota"],
)
async def test_a_pod_over_a_limit_range_waits_for_its_spec_but_one_over_a_quota_is_retried(
    world: World, message: str, reason: str, phase: str | None
) -> None:
    """Both are 403s: retrying cannot fit a pod into a LimitRange's bounds, but a quota
    frees up as other sandboxes go."""

    async def refused(kind: object, body: object) -> object:
        raise ApiError(403, "Forbidden", message)

    world.services.kube.create = refused  # type: ignore[method-assign]
    p = await pod_pass(world)
    await pod.converge_pod(p)
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", reason)
    assert p.run.phase == phase


async def test_no_pod_while_nothing_restricts_its_egress(
    make_world: Callable[..., World],
) -> None:
    world = make_world(allow_unrestricted_egress=False)
    p = await pod_pass(world)
    stop = await pod.converge_pod(p)
    assert stop == Stop("EgressNotRestricted")
    assert world.stored("v1/pods", NAME) is None
    assert world.events.reasons == ["EgressNotRestricted"]
    again = await pod_pass(world, status=dump_status(p.run.finish()))
    assert await pod.converge_pod(again) == Stop("EgressNotRestricted")
    assert world.events.reasons == [], "said when it starts, not on every pass"


async def test_a_pod_of_someone_else_by_that_name_is_reported_not_touched(world: World) -> None:
    world.add_foreign_pod(NAME)
    observed(world)
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("PodNameTaken")
    assert p.run.verdict.backoff == "PodNameTaken"
    assert world.stored("v1/pods", NAME) is not None


@pytest.mark.parametrize("cached", [True, False], ids=["seen", "found-by-its-create"])
async def test_a_pod_of_someone_else_by_that_name_being_deleted_is_waited_for_not_reported(
    world: World, cached: bool
) -> None:
    """An earlier sandbox's pod of this name, still stopping after a delete and a create
    again: nobody has to act, so no final failure; the pod is neither taken nor touched."""
    world.add_foreign_pod(NAME)
    world.emulator.patch("v1/pods", NAMESPACE, NAME, {"metadata": {"finalizers": ["x.io/hold"]}})
    world.emulator.remove("v1/pods", NAMESPACE, NAME)
    if cached:
        observed(world)
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "PodTerminating")
    assert "another object's pod" in condition.message
    stored = world.stored("v1/pods", NAME)
    assert stored is not None
    assert not stored["metadata"].get("ownerReferences")


@pytest.mark.parametrize(
    ("spec", "annotations"),
    [
        ({"suspend": True}, {}),
        ({"idleTimeout": "1h"}, {"craft.onyx.app/last-activity": "2026-11-20T12:00:00Z"}),
    ],
    ids=["suspended", "asleep"],
)
async def test_a_sandbox_that_stops_its_pod_never_stops_another_sandboxs_pod_of_its_name(
    world: World, spec: dict[str, object], annotations: dict[str, str]
) -> None:
    """A claimed pod's name (``<pool>-xxxxx``, shown in its sandbox's status) is anyone's
    to give a new CraftSandbox: suspending that one must not delete the other's pod."""
    others = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "craft-operator"},
            "ownerReferences": [
                {
                    "apiVersion": "craft.onyx.app/v1alpha1",
                    "kind": "CraftSandbox",
                    "name": "someone-else",
                    "uid": "uid-of-someone-else",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "sandbox", "image": "busybox"}]},
    }
    world.emulator.create("v1/pods", others)
    observed(world)
    p = await pod_pass(world, spec=spec, annotations=annotations)
    assert await pod.converge_pod(p) in (Stop("Suspended"), Stop("Sleeping"))
    assert world.stored("v1/pods", NAME) is not None, "the other sandbox's pod stays"
    assert not any(reason.startswith("Pod") for reason in world.events.reasons)


@pytest.mark.parametrize(("ready_minutes", "failures_after"), [(1, 2), (11, None)])
async def test_failures_are_forgotten_only_once_a_pod_has_stayed_ready_ten_minutes(
    world: World, ready_minutes: int, failures_after: int | None
) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    observed(world)
    since = (NOW - timedelta(minutes=ready_minutes)).isoformat().replace("+00:00", "Z")
    ready = {"type": "PodReady", "status": "True", "reason": "PodReady", "message": "m"}
    status = {"podFailures": 2, "conditions": [{**ready, "lastTransitionTime": since}]}
    p = await pod_pass(world, status=status)
    assert await pod.converge_pod(p) is None
    assert p.run.status.pod_failures == failures_after


async def test_the_backoff_after_many_failed_pods_is_five_minutes_at_most(world: World) -> None:
    """It doubles per failure up to 300 s (CRAFT_POD_RESTART_BACKOFF): with a high
    CRAFT_MAX_POD_FAILURES, the ninth failure does not hold the sandbox for 43 minutes."""
    failed = {"type": "PodReady", "status": "False", "reason": "PodFailed", "message": "m"}
    at = NOW.isoformat().replace("+00:00", "Z")
    status = {
        "podFailures": 9,
        "lastPodFailureTime": at,
        "conditions": [{**failed, "lastTransitionTime": at}],
    }
    p = await pod_pass(world, status=status)
    assert pod_lifecycle.restart_wait(p) == Stop("WaitingForPod")
    assert p.run.verdict.after == 300


async def test_a_failed_pods_backoff_is_no_longer_on_a_replica_whose_clock_is_behind(
    world: World,
) -> None:
    """lastPodFailureTime is the clock of the replica that saw the failure: after a
    failover to one 5 minutes behind, a 10 s backoff must not become 5 minutes."""
    await pod.converge_pod(await pod_pass(world))
    mark_pod_failed(world.emulator, NAMESPACE, NAME)
    observed(world)
    failed = await pod_pass(world)
    assert await pod.converge_pod(failed) == Stop("WaitingForPod")
    backoff = world.services.settings.pod_restart_backoff

    later = await pod_pass(
        world, status=dump_status(failed.run.status), now=NOW - timedelta(minutes=5)
    )

    assert await pod.converge_pod(later) == Stop("WaitingForPod")
    assert later.run.verdict.after is not None
    assert later.run.verdict.after <= backoff


def aged(world: World, hours: int, minutes: int = 0) -> None:
    """The cached pod as if created ``hours`` (and ``minutes``) before the pass (a
    long-lived or warm pod)."""
    found = world.emulator.get("v1/pods", NAMESPACE, NAME)
    created = (NOW - timedelta(hours=hours, minutes=minutes)).isoformat().replace("+00:00", "Z")
    world.cache.put(
        "Pod", {**found, "metadata": {**found["metadata"], "creationTimestamp": created}}
    )


async def test_a_pod_just_made_is_not_timed_out_by_an_api_server_clock_minutes_behind(
    world: World,
) -> None:
    """Its creationTimestamp is the API server's clock: a woken sandbox (PodReady False
    for hours) whose pod is seconds old was said ProvisioningTimedOut at once, a failure
    to the backend's client, when the operator's clock ran ahead."""
    slept = (NOW - timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    asleep = {"type": "PodReady", "status": "False", "reason": "Sleeping", "message": "m"}
    status = {"conditions": [{**asleep, "lastTransitionTime": slept}]}
    first = await pod_pass(world, status=status)
    await pod.converge_pod(first)
    mark_pod_running(world.emulator, NAMESPACE, NAME, ready=False)
    aged(world, hours=0, minutes=4)  # stamped by an API server 4 min behind the operator

    later = await pod_pass(world, status=dump_status(first.run.finish()), memory=first.memory)
    later.run.now = NOW + timedelta(seconds=2)
    assert await pod.converge_pod(later) == Stop("WaitingForPod")

    condition = later.run.condition("PodReady")
    assert condition is not None
    assert condition.reason == "PodStarting"
    assert "ProvisioningTimedOut" not in world.events.reasons


async def test_an_old_pod_that_stops_being_ready_is_starting_not_timed_out(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME, ready=False)
    aged(world, hours=3)
    since = (NOW - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    ready = {"type": "PodReady", "status": "True", "reason": "PodReady", "message": "m"}
    p = await pod_pass(world, status={"conditions": [{**ready, "lastTransitionTime": since}]})

    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "PodStarting")
    assert "ProvisioningTimedOut" not in world.events.reasons


async def test_a_pod_not_ready_since_it_left_ready_longer_than_the_timeout_is_timed_out(
    world: World,
) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME, ready=False)
    aged(world, hours=3)
    left = (NOW - timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    starting = {"type": "PodReady", "status": "False", "reason": "PodStarting", "message": "m"}
    p = await pod_pass(world, status={"conditions": [{**starting, "lastTransitionTime": left}]})

    await pod.converge_pod(p)
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert condition.reason == "ProvisioningTimedOut"


async def test_a_pod_timed_out_is_said_once_not_on_every_pass(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME, ready=False)
    aged(world, hours=3)
    first = await pod_pass(world)
    await pod.converge_pod(first)
    assert world.events.reasons == ["ProvisioningTimedOut"]
    world.events.posted.clear()

    later = await pod_pass(world, status=dump_status(first.run.finish()), memory=first.memory)
    later.run.now = NOW + timedelta(minutes=10)
    await pod.converge_pod(later)
    assert later.run.condition("PodReady").reason == "ProvisioningTimedOut"  # type: ignore[union-attr]
    assert world.events.reasons == []


async def test_a_wait_for_an_earlier_step_does_not_restart_the_provisioning_clock(
    world: World,
) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME, ready=False)
    aged(world, hours=3)
    starting = {"type": "PodReady", "status": "False", "reason": "PodStarting", "message": "m"}
    left = (NOW - timedelta(minutes=2)).isoformat().replace("+00:00", "Z")
    first = await pod_pass(world, status={"conditions": [{**starting, "lastTransitionTime": left}]})
    await pod.converge_pod(first)
    assert first.run.condition("PodReady").reason == "PodStarting"  # type: ignore[union-attr]

    # The database was down for a pass: PodReady went Unknown, then False again, anew.
    later = NOW + timedelta(minutes=2)
    again = (later - timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    p = await pod_pass(world, status={"conditions": [{**starting, "lastTransitionTime": again}]})
    p.memory = first.memory
    p.run.now = later
    await pod.converge_pod(p)
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert condition.reason == "ProvisioningTimedOut", "4 min since it left Ready, not 5 s"


async def test_a_replica_that_stood_by_remembers_no_provisioning_clock(world: World) -> None:
    from craft_operator.reconciler.sandbox import SandboxReconciler

    reconciler = SandboxReconciler(world.services)
    await pod.converge_pod(await pod_pass(world))
    observed(world)
    p = await pod_pass(world)
    p.memory = reconciler._memory
    await pod.converge_pod(p)  # the pod is not Ready: its clock is remembered
    assert reconciler._memory.starting
    await reconciler.forget_all()  # the other replica acted meanwhile, for days maybe
    assert not reconciler._memory.starting


async def test_a_refused_pod_is_tried_again_only_after_a_while(world: World) -> None:
    """The same spec, refused for what it is, waits RETRY_REJECTED_AFTER (a webhook or a
    LimitRange may have changed since); a changed spec is tried at once."""
    creates: list[object] = []

    async def refused(kind: object, body: object) -> object:
        creates.append(body)
        raise ApiError(422, "Invalid", 'Pod "alice" is invalid: denied by policy')

    world.services.kube.create = refused  # type: ignore[method-assign]
    memory = Memory()
    first = await pod_pass(world, memory=memory)
    await pod.converge_pod(first)
    stored = dump_status(first.run.finish())

    soon = await pod_pass(world, status=stored, memory=memory, now=NOW + timedelta(minutes=9))
    assert await pod.converge_pod(soon) == Stop("WaitingForPod")
    assert len(creates) == 1
    assert soon.run.verdict.after == pytest.approx(60)
    later = await pod_pass(world, status=stored, memory=memory, now=NOW + timedelta(minutes=11))
    await pod.converge_pod(later)
    assert len(creates) == 2
    edited = {**stored, "observedGeneration": 0}  # the spec changed since it was refused
    changed = await pod_pass(world, status=edited, memory=memory)
    await pod.converge_pod(changed)
    assert len(creates) == 3


def being_deleted(world: World, due: timedelta) -> None:
    """The pod is being deleted, its grace period over ``due`` before NOW (a finalizer
    someone put on it, say, holds it)."""
    stored = world.emulator.get("v1/pods", NAMESPACE, NAME)
    meta = stored["metadata"]
    meta["deletionTimestamp"] = (NOW - due).isoformat().replace("+00:00", "Z")
    meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
    world.cache.put("Pod", stored)


async def test_a_pod_being_deleted_is_waited_for(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    being_deleted(world, timedelta(seconds=-20))  # within its grace period
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert (condition.reason, condition.message) == ("PodTerminating", "the old pod is stopping")
    assert p.run.verdict.after == 5
    assert world.stored("v1/pods", NAME) is not None, "no second pod beside it"


async def test_a_pod_stuck_past_its_grace_period_is_said_so_and_looked_at_once_a_minute(
    world: World,
) -> None:
    await pod.converge_pod(await pod_pass(world))
    being_deleted(world, timedelta(minutes=10))
    p = await pod_pass(world)
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    condition = p.run.condition("PodReady")
    assert condition is not None
    assert condition.reason == "PodTerminating"
    assert "past its grace period" in condition.message
    assert "a finalizer on it or an unreachable node" in condition.message
    assert p.run.verdict.after == 60, "not every 5 s for as long as it stays"


async def test_one_failed_pod_counts_once_whatever_passes_come_before_its_watch_event(
    world: World,
) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_failed(world.emulator, NAMESPACE, NAME)
    observed(world)
    first = await pod_pass(world)
    await pod.converge_pod(first)
    assert first.run.status.pod_failures == 1
    # The next pass (a second event of the pod queued meanwhile), before the watch said
    # the pod is being deleted: the delete's answer is in the cache already.
    again = await pod_pass(world, status=dump_status(first.run.status))
    await pod.converge_pod(again)
    assert again.run.status.pod_failures == 1


async def test_another_pod_of_the_sandbox_already_being_deleted_is_not_deleted_again(
    world: World,
) -> None:
    """One sandbox, one pod: a second one it controls is deleted once, and while it takes
    its time to go (a finalizer, a grace period) no pass deletes it, nor says so, again."""
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    observed(world)
    extra = copy.deepcopy(world.emulator.get("v1/pods", NAMESPACE, NAME))
    meta = extra["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        meta.pop(key, None)
    meta.update(name="warm-x1", labels={**meta["labels"], LABEL_CLAIMED_FROM: "warm"})
    going = world.emulator.create("v1/pods", extra)
    going["metadata"]["deletionTimestamp"] = "2026-11-23T12:00:30Z"  # asked to go, NOW + 30 s
    world.cache.put("Pod", going)

    p = await pod_pass(world)
    assert await pod.converge_pod(p) is None
    assert p.pod is not None
    assert p.pod["metadata"]["name"] == NAME
    assert "ExtraPodDeleted" not in world.events.reasons
    assert world.stored("v1/pods", "warm-x1") is not None, "left to go in its own time"


async def test_a_pod_stopped_for_sleep_is_stopped_and_said_once(world: World) -> None:
    idle = {"idleTimeout": "1h"}
    made = await pod_pass(world, spec=idle)
    await pod.converge_pod(made)
    observed(world)
    running = {"podUID": made.run.status.pod_uid}
    first = await pod_pass(world, spec=idle, annotations=OLD_ACTIVITY, status=running)
    await pod.converge_pod(first)
    assert "PodSleeping" in world.events.reasons
    assert first.run.status.pod_uid is None, "the status names no pod while none runs"
    status = dump_status(first.run.status)
    again = await pod_pass(world, spec=idle, annotations=OLD_ACTIVITY, status=status)
    await pod.converge_pod(again)
    assert "PodSleeping" not in world.events.reasons, "not stopped, nor said, again"


async def test_the_labels_put_back_never_land_on_another_pod_that_took_the_name(
    world: World,
) -> None:
    """The labels say whose egress and tenant a pod is: they go back only onto the pod
    the pass read. The conflict proves the cached pod is not the one there now: the pass
    goes no further with it (no Ready, nothing done by its name, the PAT's delivery say)."""
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    observed(world)
    # Someone edited the sandbox's pod's labels (the cache saw it) ...
    ours = copy.deepcopy(world.emulator.get("v1/pods", NAMESPACE, NAME))
    del ours["metadata"]["labels"]["onyx.app/tenant-id"]
    ours["metadata"]["resourceVersion"] = str(int(ours["metadata"]["resourceVersion"]) + 1)
    world.cache.put("Pod", ours)
    # ... then the pod went, and another sandbox's took its name (not cached yet).
    world.emulator.remove("v1/pods", NAMESPACE, NAME, grace_period_seconds=0)
    other_labels = {"onyx.app/sandbox-id": "someone-else", "onyx.app/tenant-id": "other"}
    owner = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "name": "someone-else",
        "uid": "uid-of-someone-else",
        "controller": True,
    }
    theirs = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "labels": other_labels,
            "ownerReferences": [owner],
        },
        "spec": {"containers": [{"name": "sandbox", "image": "busybox"}]},
    }
    world.emulator.create("v1/pods", theirs)

    p = await pod_pass(world)
    stop = await pod.converge_pod(p)

    labels = world.emulator.get("v1/pods", NAMESPACE, NAME)["metadata"]["labels"]
    assert labels == other_labels
    assert p.run.verdict.after is not None, "looked at again once the watch has caught up"
    assert stop is not None
    assert p.pod is None
    ready = p.run.condition(POD_READY)
    assert ready is None or ready.status != "True"
    assert world.cache.get("Pod", NAMESPACE, NAME) is None, "the stale copy is dropped"


async def test_labels_edited_on_the_sandboxs_pod_are_put_back(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    edited = world.emulator.patch(
        "v1/pods", NAMESPACE, NAME, {"metadata": {"labels": {"onyx.app/tenant-id": "other"}}}
    )
    world.cache.put("Pod", edited)

    await pod.converge_pod(await pod_pass(world))

    labels = world.emulator.get("v1/pods", NAMESPACE, NAME)["metadata"]["labels"]
    assert labels["onyx.app/tenant-id"] != "other"


async def test_a_pass_whose_label_repair_finds_the_pod_gone_forgets_it(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    edited = world.emulator.patch(
        "v1/pods", NAMESPACE, NAME, {"metadata": {"labels": {"onyx.app/tenant-id": "other"}}}
    )
    world.cache.put("Pod", edited)
    # Gone (forced), its watch event not seen yet.
    world.emulator.remove("v1/pods", NAMESPACE, NAME, grace_period_seconds=0)

    p = await pod_pass(world)
    stop = await pod.converge_pod(p)

    assert stop is not None
    assert p.pod is None
    assert world.cache.get("Pod", NAMESPACE, NAME) is None


async def test_a_pod_changed_since_the_cache_saw_it_is_read_back_and_relabelled_next_pass(
    world: World,
) -> None:
    """A pod outside the watches' selector (its managed-by label edited away) is never
    refreshed by them: a conflict reads it back, so the next pass's repair lands."""
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    observed(world)
    stale = world.emulator.patch(
        "v1/pods", NAMESPACE, NAME, {"metadata": {"labels": {LABEL_MANAGED_BY: None}}}
    )
    world.cache.put("Pod", stale)
    world.emulator.patch("v1/pods", NAMESPACE, NAME, {"metadata": {"annotations": {"a": "b"}}})

    assert await pod.converge_pod(await pod_pass(world)) is not None
    assert await pod.converge_pod(await pod_pass(world)) is None

    labels = world.emulator.get("v1/pods", NAMESPACE, NAME)["metadata"]["labels"]
    assert labels[LABEL_MANAGED_BY] == "craft-operator"


async def test_replacing_a_pod_that_another_has_succeeded_deletes_nothing_and_goes_on(
    world: World,
) -> None:
    """The cache still holds an edited pod that was replaced behind its back (an earlier
    replica's pass, say): the delete's uid precondition refuses the successor (409), which
    is the pod being gone, not a failure of the pass."""
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    stale = world.emulator.get("v1/pods", NAMESPACE, NAME)
    world.emulator.remove("v1/pods", NAMESPACE, NAME, grace_period_seconds=0)
    dropped = ("uid", "resourceVersion", "creationTimestamp")
    successor = {
        **{key: value for key, value in stale.items() if key != "status"},
        "metadata": {k: v for k, v in stale["metadata"].items() if k not in dropped},
    }
    made = world.emulator.create("v1/pods", successor)
    stale["spec"]["containers"][0]["image"] = "registry.example.com/edited:1"
    world.cache.put("Pod", stale)

    stop = await pod.converge_pod(await pod_pass(world))

    assert stop is not None
    kept = world.emulator.get("v1/pods", NAMESPACE, NAME)["metadata"]
    assert kept["uid"] == made["metadata"]["uid"]
    assert not kept.get("deletionTimestamp"), "the successor is not even being deleted"
