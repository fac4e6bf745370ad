"""Claiming a warm pool pod: one conditional write takes a Ready pod like the sandbox's own,
and the sandbox is Ready in that same pass; anything else starts cold and says why."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable
from typing import Any

import aiohttp.web
import pytest

from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import parse_sandbox
from craft_operator.api.pool import (
    LABEL_CLAIMED_FROM,
    LABEL_POOL,
    LABEL_POOL_TEMPLATE_HASH,
    parse_pool,
)
from craft_operator.api.status_codec import dump_status
from craft_operator.builders.naming import SKILL_KEY, skills_configmap_name
from craft_operator.builders.pod import build_pod, template_hash
from craft_operator.builders.pool import (
    build_pool_pod,
    claimable_pod_spec,
    older_template_hashes,
)
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError
from craft_operator.kube.exec import ExecError, ExecResult, ExecTimeoutError
from craft_operator.kube.pod_shape import built_digest
from craft_operator.reconciler.detached import DetachedCalls
from craft_operator.reconciler.run import Run
from craft_operator.reconciler.step import Memory, Pass, Stop
from craft_operator.reconciler.steps import claim, claimed_skill, credentials, pod, pod_lifecycle
from craft_operator.reconciler.steps.claimed_skill import SKILL_FILE
from craft_operator.reconciler.steps.cli import EXIT_SKILL_NOT_DELIVERED
from craft_operator.reconciler.table import CONDITIONS, run_steps
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_failed, mark_pod_running
from tests.support.pools import POOLS, declare_pool_resource, pool
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, NOW, UID, World, sandbox_body

pytestmark = pytest.mark.unit
POOL = "warm"


@pytest.fixture
def pooled(world: World) -> World:
    declare_pool_resource(world.emulator)
    return world


def warm_pods(world: World, count: int, **spec: Any) -> list[str]:
    """A pool with ``count`` Ready pods, as the pool controller would have made them."""
    body = world.emulator.create(
        POOLS,
        {**pool(POOL, replicas=count, **spec), "metadata": {"name": POOL, "namespace": NAMESPACE}},
    )
    world.cache.put(kinds.POOL.name, body)
    names = []
    for index in range(count):
        manifest = build_pool_pod(parse_pool(body), world.services.settings)
        manifest["metadata"]["name"] = f"{POOL}-{index}"
        world.emulator.create("v1/pods", manifest)
        mark_pod_running(world.emulator, NAMESPACE, f"{POOL}-{index}")
        world.cache.put(kinds.POD.name, world.emulator.get("v1/pods", NAMESPACE, f"{POOL}-{index}"))
        names.append(f"{POOL}-{index}")
    return names


async def pod_pass(world: World, **body: Any) -> Pass:
    p = world.pass_(**body)
    await credentials.ensure_pat(p)
    world.events.posted.clear()
    return p


async def test_a_sandbox_naming_a_pool_claims_a_ready_pod_and_is_ready_in_that_pass(
    pooled: World,
) -> None:
    [warm] = warm_pods(pooled, 1)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(p) is None
    claimed = pooled.emulator.get("v1/pods", NAMESPACE, warm)
    labels = claimed["metadata"]["labels"]
    assert LABEL_POOL not in labels
    assert labels[LABEL_CLAIMED_FROM] == POOL
    assert labels["craft.onyx.app/sandbox"] == NAME
    [owner] = claimed["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("CraftSandbox", UID, True)
    assert p.pod is not None
    assert p.pod["metadata"]["name"] == warm
    assert p.run.status.pod_name == warm
    assert p.run.status.claimed_from == POOL
    assert pooled.events.reasons == ["PodClaimed"]
    assert pooled.stored("v1/pods", NAME) is None, "no cold pod"


async def test_a_pool_that_writes_the_sandboxs_quantities_differently_is_claimed_from(
    pooled: World,
) -> None:
    [warm] = warm_pods(pooled, 1, resources={"requests": {"cpu": "500m", "memory": "2048Mi"}})
    resources = {"requests": {"cpu": "0.5", "memory": "2Gi"}}
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}, "resources": resources})
    assert await pod.converge_pod(p) is None
    assert p.run.status.pod_name == warm


async def test_a_pools_pods_made_before_quantities_were_hashed_canonically_are_claimed(
    pooled: World,
) -> None:
    """After an upgrade, until the pool has replaced them: not a cold start per claim."""
    resources = {"requests": {"cpu": "0.5"}}
    [warm] = warm_pods(pooled, 1, resources=resources)
    spec = {"poolRef": {"name": POOL}, "resources": resources}
    p = await pod_pass(pooled, spec=spec)
    as_written = older_template_hashes(p.sandbox, pooled.services.settings)[-1]
    pooled.emulator.patch(
        "v1/pods", NAMESPACE, warm, {"metadata": {"labels": {LABEL_POOL_TEMPLATE_HASH: as_written}}}
    )
    pooled.cache.put(kinds.POD.name, pooled.emulator.get("v1/pods", NAMESPACE, warm))

    assert await pod.converge_pod(p) is None
    assert p.run.status.pod_name == warm
    assert pooled.events.reasons == ["PodClaimed"]


async def test_a_pod_claimed_under_the_hash_of_its_quantities_as_written_is_kept(
    pooled: World,
) -> None:
    """Claimed before an upgrade that hashes quantities in canonical form: the agent's
    pod is not replaced for it."""
    resources = {"requests": {"cpu": "0.5"}}
    [warm] = warm_pods(pooled, 1, resources=resources)
    spec = {"poolRef": {"name": POOL}, "resources": resources}
    first = await pod_pass(pooled, spec=spec)
    assert await pod.converge_pod(first) is None
    as_written = older_template_hashes(first.sandbox, pooled.services.settings)[-1]
    pooled.emulator.patch(
        "v1/pods", NAMESPACE, warm, {"metadata": {"labels": {LABEL_POOL_TEMPLATE_HASH: as_written}}}
    )
    pooled.cache.put(kinds.POD.name, pooled.emulator.get("v1/pods", NAMESPACE, warm))

    again = await pod_pass(pooled, spec=spec, status=dump_status(first.run.status))
    assert await pod.converge_pod(again) is None
    assert "PodReplaced" not in pooled.events.reasons
    assert again.pod is not None
    assert again.pod["metadata"]["name"] == warm


async def test_the_claimed_pod_is_found_and_kept_on_the_next_passes(pooled: World) -> None:
    [warm] = warm_pods(pooled, 1)
    first = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(first)
    stored = dump_status(first.run.status)
    again = await pod_pass(pooled, spec={"poolRef": {"name": POOL}}, status=stored)
    assert await pod.converge_pod(again) is None
    assert again.pod is not None
    assert again.pod["metadata"]["name"] == warm
    assert pooled.events.reasons == [], "neither claimed again nor replaced"


async def test_with_no_ready_pod_the_sandbox_starts_cold_and_says_why(pooled: World) -> None:
    warm_pods(pooled, 0)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(p) == Stop("WaitingForPod")
    assert pooled.stored("v1/pods", NAME) is not None
    assert pooled.events.reasons == ["ColdStart", "PodCreated"]
    assert "PoolEmpty" in pooled.events.posted[0][2]


def restrict_sandboxes_but_let_out(world: World, selector: dict[str, Any]) -> None:
    """Two NetworkPolicies in the cache: one denying the sandbox pods all egress, one
    letting every pod ``selector`` selects out anywhere."""
    sandboxes = {"matchLabels": {"app.kubernetes.io/component": "sandbox"}}
    for name, selects, egress in (("deny", sandboxes, []), ("claimed", selector, [{}])):
        world.cache.put(
            kinds.NETWORK_POLICY.name,
            {
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"podSelector": selects, "policyTypes": ["Egress"], "egress": egress},
            },
        )


async def test_a_pool_pod_whose_egress_a_policy_lets_out_once_claimed_is_not_claimed(
    make_world: Callable[..., World],
) -> None:
    """The pod step asks about the sandbox's own pod's labels; a claimed pod's differ
    (``claimed-from`` added, the pool's template hash kept), and a NetworkPolicy may select
    them: the sandbox starts cold, under the policy that restricts its own pod."""
    world = make_world(allow_unrestricted_egress=False)
    declare_pool_resource(world.emulator)
    claimed_pods = {"matchExpressions": [{"key": LABEL_CLAIMED_FROM, "operator": "Exists"}]}
    restrict_sandboxes_but_let_out(world, claimed_pods)
    [warm] = warm_pods(world, 1)
    p = await pod_pass(world, spec={"poolRef": {"name": POOL}})

    assert await pod.converge_pod(p) == Stop("WaitingForPod")

    assert (
        LABEL_CLAIMED_FROM
        not in world.emulator.get("v1/pods", NAMESPACE, warm)["metadata"]["labels"]
    )
    assert world.stored("v1/pods", NAME) is not None, "a cold pod"
    assert world.events.reasons == ["ColdStart", "PodCreated"]
    assert "EgressNotRestricted" in world.events.posted[0][2]


async def test_a_pool_pod_is_judged_without_the_pool_label_a_claim_removes(
    make_world: Callable[..., World],
) -> None:
    """A claim takes the pod out of its pool (the pool label goes): a policy that lets out
    all egress of claimed pods no longer in a pool applies to it once claimed, so it is not
    claimed, though it applies neither to the warm pod nor to the sandbox's own pod."""
    world = make_world(allow_unrestricted_egress=False)
    declare_pool_resource(world.emulator)
    claimed_out_of_pool = {
        "matchExpressions": [
            {"key": LABEL_CLAIMED_FROM, "operator": "Exists"},
            {"key": LABEL_POOL, "operator": "DoesNotExist"},
        ]
    }
    restrict_sandboxes_but_let_out(world, claimed_out_of_pool)
    [warm] = warm_pods(world, 1)
    p = await pod_pass(world, spec={"poolRef": {"name": POOL}})

    await pod.converge_pod(p)

    assert LABEL_POOL in world.emulator.get("v1/pods", NAMESPACE, warm)["metadata"]["labels"]
    assert world.stored("v1/pods", NAME) is not None, "a cold pod"
    assert world.events.reasons == ["ColdStart", "PodCreated"]
    assert "EgressNotRestricted" in world.events.posted[0][2]


async def test_a_pool_that_does_not_exist_means_a_cold_start(pooled: World) -> None:
    p = await pod_pass(pooled, spec={"poolRef": {"name": "missing"}})
    await pod.converge_pod(p)
    assert pooled.events.reasons == ["ColdStart", "PodCreated"]
    assert "NoPool" in pooled.events.posted[0][2]


async def test_a_pool_of_other_pods_is_not_claimed_from(pooled: World) -> None:
    warm_pods(pooled, 1, image="registry.example.com/craft/other:2")
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert pooled.stored("v1/pods", NAME) is not None, "cold: the pool's image is another"
    assert "NoMatchingPool" in pooled.events.posted[0][2]
    assert "differ from this sandbox's in image" in pooled.events.posted[0][2], "says which"


async def test_a_pool_unlike_the_sandbox_in_several_settings_names_them_all(
    pooled: World,
) -> None:
    warm_pods(pooled, 1, runtimeClassName="gvisor", resources={"requests": {"cpu": "2"}})
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert "in resources, runtimeClassName" in pooled.events.posted[0][2]


async def test_a_sandbox_with_a_workspace_starts_cold(pooled: World) -> None:
    warm_pods(pooled, 1)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}, "workspace": {"size": "1Gi"}})
    await pod.converge_pod(p)
    assert pooled.events.reasons[0] == "ColdStart"
    assert "WorkspaceNeedsColdStart" in pooled.events.posted[0][2]


async def test_a_sandbox_waking_from_sleep_takes_a_pod_of_a_matching_pool(pooled: World) -> None:
    [warm] = warm_pods(pooled, 1)
    p = await pod_pass(pooled, status={"wokeAt": "2026-11-23T11:59:00Z"})
    assert await pod.converge_pod(p) is None
    assert p.pod is not None
    assert p.pod["metadata"]["name"] == warm


async def test_a_new_sandbox_without_a_pool_ref_starts_cold_silently(pooled: World) -> None:
    warm_pods(pooled, 1)
    p = await pod_pass(pooled)
    await pod.converge_pod(p)
    assert pooled.events.reasons == ["PodCreated"]


async def test_two_sandboxes_never_claim_the_same_pod(pooled: World) -> None:
    [warm] = warm_pods(pooled, 1)
    passes = []
    for index in range(2):
        body = sandbox_body(spec={"poolRef": {"name": POOL}})
        body["metadata"].update(name=f"sandbox-{index}", uid=f"uid-{index}")
        p = Pass(pooled.services, parse_sandbox(body), Run(body, NOW, CONDITIONS))
        await credentials.ensure_pat(p)
        passes.append(p)
    await asyncio.gather(*(pod.converge_pod(p) for p in passes))
    claimed = pooled.emulator.get("v1/pods", NAMESPACE, warm)
    [owner] = claimed["metadata"]["ownerReferences"]
    winners = [p for p in passes if p.pod is not None]
    assert len(winners) == 1
    assert owner["uid"] == winners[0].sandbox.metadata.uid
    loser = next(p for p in passes if p.pod is None)
    assert loser.run.condition("PodReady") is not None


async def test_a_whole_pass_over_a_claimed_pod_delivers_the_pat_and_the_skill_in_one_exec(
    pooled: World,
) -> None:
    warm_pods(pooled, 1)
    p = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(p)
    [call] = pooled.exec.calls
    assert call[3:6] == ("deliver-pat-and-skill", "/run/onyx/pat", SKILL_FILE)
    assert pooled.exec.delivered == [p.issued.token.get_secret_value().encode()]  # type: ignore[union-attr]
    assert pooled.exec.skills[0].startswith(b"---")  # the SKILL.md, after the PAT
    assert p.run.status.delivered_skill is not None
    ready = {c.type: c.status for c in p.run.status.conditions}
    assert ready["PodReady"] == ready["CLIValidated"] == ready["SkillRendered"] == "True"


async def test_a_changed_skill_alone_is_written_into_the_claimed_pod_by_its_own_exec(
    pooled: World,
) -> None:
    warm_pods(pooled, 1)
    first = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(first)
    edit_skill(pooled, first.sandbox, "---\nname: company-search\n---\nnew sources\n")

    stored = dump_status(first.run.status)
    again = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=stored)
    await run_steps(again)

    assert [call[3] for call in pooled.exec.calls] == ["deliver-pat-and-skill", "deliver-skill"]
    assert pooled.exec.skills[-1].endswith(b"new sources\n")
    assert again.run.status.delivered_skill != first.run.status.delivered_skill


async def test_a_changed_skill_the_claimed_pod_refuses_is_reported_and_not_counted_delivered(
    pooled: World,
) -> None:
    warm_pods(pooled, 1)
    first = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(first)
    edit_skill(pooled, first.sandbox, "---\nname: company-search\n---\nnew sources\n")
    pooled.exec.skill_exit = 1  # the write into the pod failed (its disk full, say)

    again = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(first.run.status))
    await run_steps(again)

    assert [call[3] for call in pooled.exec.calls] == ["deliver-pat-and-skill", "deliver-skill"]
    skill = again.run.condition("SkillRendered")
    assert skill is not None
    assert (skill.status, skill.reason) == ("False", "SkillDeliveryFailed")
    assert again.run.status.delivered_skill == first.run.status.delivered_skill, "tried again"


async def test_a_pod_claimed_after_the_one_that_got_the_skill_needs_the_skill_too(
    pooled: World,
) -> None:
    """Its first claimed pod lost, the sandbox claims another: the SKILL.md is the same,
    the pod is not, and it has none yet."""
    warm_pods(pooled, 1)
    first = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(first)
    delivered = first.run.status.delivered_skill
    assert delivered is not None

    again = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(first.run.status))
    again.pod = {
        "metadata": {
            "name": f"{POOL}-7",
            "namespace": NAMESPACE,
            "uid": "another-pod-uid",
            "labels": {LABEL_CLAIMED_FROM: POOL},
        }
    }
    pending = claimed_skill.pending_skill(again)

    assert pending is not None
    assert pending.delivered.pod_uid == "another-pod-uid"
    assert pending.delivered.content_hash == delivered.content_hash


def edit_skill(world: World, sandbox: CraftSandbox, text: str) -> None:
    """The skill ConfigMap as the skill step rewrites it (new sources, say)."""
    configmap = world.cache.get(kinds.CONFIGMAP.name, NAMESPACE, skills_configmap_name(sandbox))
    assert configmap is not None
    meta = {**configmap["metadata"], "resourceVersion": "999"}
    world.cache.put(
        kinds.CONFIGMAP.name, {**configmap, "metadata": meta, "data": {SKILL_KEY: text}}
    )


async def test_a_claimed_pod_that_stalls_its_skill_write_is_tried_once_per_backoff(
    pooled: World,
) -> None:
    """Its agent stops the exec's shell: every event of the sandbox (activity written each
    minute) must not hold a reconcile worker for the exec's timeout again."""
    warm_pods(pooled, 1)
    first = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(first)
    edit_skill(pooled, first.sandbox, "---\nname: company-search\n---\nedited\n")
    pooled.exec.skill_error = ExecError("the exec timed out after 10 s", retryable=True)

    status = dump_status(first.run.status)
    for _ in range(6):
        p = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=status)
        await run_steps(p)
        status = dump_status(p.run.status)

    writes = [call for call in pooled.exec.calls if call[3] == "deliver-skill"]
    assert len(writes) == 1
    skill = p.run.condition("SkillRendered")
    assert skill is not None
    assert (skill.status, skill.reason) == ("False", "SkillDeliveryFailed")


async def test_a_pass_during_a_failed_skill_writes_backoff_comes_back_when_it_ends(
    pooled: World,
) -> None:
    """A pass brought by an event (activity written, the status's echo) ends well, which
    resets the work queue's backoff: it must ask for the retry itself."""
    warm_pods(pooled, 1)
    first = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(first)
    edit_skill(pooled, first.sandbox, "---\nname: company-search\n---\nedited\n")
    pooled.exec.skill_error = ExecError("the exec timed out after 10 s", retryable=True)
    failing = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(first.run.status))
    await run_steps(failing)

    during = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(failing.run.status))
    await run_steps(during)

    after = during.run.verdict.after
    assert after is not None
    assert after <= 1.1, "the delivery's backoff (1 s, jitter 10 %), not the resync"


async def test_a_skill_write_the_pod_holds_runs_on_without_the_pass_and_is_taken_after(
    pooled: World,
) -> None:
    pooled.services.deliveries.inline = 0.05
    woken: list[tuple[str, str]] = []
    pooled.services.deliveries.wake = woken.append
    warm_pods(pooled, 1)
    first = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(first)
    edit_skill(pooled, first.sandbox, "---\nname: company-search\n---\nedited\n")
    pooled.exec.hold_skill = asyncio.Event()

    held = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(first.run.status))
    await asyncio.wait_for(run_steps(held), 5)  # the worker is not held
    assert held.run.status.delivered_skill == first.run.status.delivered_skill

    pooled.exec.hold_skill.set()
    await asyncio.sleep(0.05)
    assert woken == [held.run.key], "its end wakes the sandbox"
    taken = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(held.run.status))
    await run_steps(taken)
    assert taken.run.status.delivered_skill != first.run.status.delivered_skill
    assert len([call for call in pooled.exec.calls if call[3] == "deliver-skill"]) == 1


async def test_a_skill_write_the_pod_holds_forever_ends_at_its_timeout(
    pooled: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent can stop the write's shell: the write is abandoned at its timeout, gives
    back its place among the deliveries that run on, and is reported and retried."""
    monkeypatch.setattr(claimed_skill, "TIMEOUT", 0.05)
    pooled.services.deliveries.inline = 1.0
    warm_pods(pooled, 1)
    first = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(first)
    edit_skill(pooled, first.sandbox, "---\nname: company-search\n---\nedited\n")
    pooled.exec.hold_skill = asyncio.Event()  # never set
    pod_exec = pooled.exec.run

    async def bounded(
        *args: Any,
        timeout: float | None = None,  # noqa: ASYNC109 - the ExecTransport interface
        **kwargs: Any,
    ) -> ExecResult:
        try:  # as every transport does: the call is abandoned at its timeout
            async with asyncio.timeout(timeout):
                return await pod_exec(*args, timeout=timeout, **kwargs)
        except TimeoutError:
            raise ExecTimeoutError("the command did not finish in time") from None

    monkeypatch.setattr(pooled.exec, "run", bounded)
    held = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(first.run.status))
    await run_steps(held)

    skill = held.run.condition("SkillRendered")
    assert skill is not None
    assert (skill.status, skill.reason) == ("False", "SkillDeliveryFailed")
    assert pooled.services.deliveries.unfinished == 0


async def test_a_skill_the_pod_refuses_is_reported_on_skill_rendered_and_retried(
    pooled: World,
) -> None:
    warm_pods(pooled, 1)
    pooled.exec.skill_exit = EXIT_SKILL_NOT_DELIVERED
    p = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(p)

    assert len(pooled.exec.calls) == 1, "not tried again alone in the same pass"
    conditions = {c.type: c for c in p.run.status.conditions}
    assert conditions["SkillRendered"].reason == "SkillDeliveryFailed"
    assert conditions["CLIValidated"].status == "Unknown"
    assert p.run.status.delivered_skill is None
    assert p.run.verdict.backoff == "SkillDeliveryFailed"


async def test_a_skill_the_pod_refused_stays_reported_while_its_retry_waits(
    pooled: World,
) -> None:
    """The next pass renders the skill (True) but does not write it into the pod before the
    delivery's backoff: SkillRendered must not say True meanwhile, then False again."""
    warm_pods(pooled, 1)
    pooled.exec.skill_exit = EXIT_SKILL_NOT_DELIVERED
    first = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(first)
    calls = len(pooled.exec.calls)

    again = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(first.run.status))
    await run_steps(again)

    assert len(pooled.exec.calls) == calls, "nothing tried before the backoff"
    skill = again.run.condition("SkillRendered")
    assert skill is not None
    assert (skill.status, skill.reason) == ("False", "SkillDeliveryFailed")
    assert "conditions" not in again.run.status_patch()


async def test_a_delivery_killed_before_onyx_cli_does_not_count_the_skill_as_delivered(
    pooled: World,
) -> None:
    warm_pods(pooled, 1)
    pooled.exec.skill_exit = 137  # the shell killed (the agent, the OOM killer) mid-script
    p = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(p)

    assert p.run.status.delivered_skill is None, "sent again by the next delivery"


async def test_a_pod_claimed_meanwhile_is_not_taken_over_the_claim_loses_the_race(
    pooled: World,
) -> None:
    [warm] = warm_pods(pooled, 1)
    other = {"apiVersion": "craft.onyx.app/v1alpha1", "kind": "CraftSandbox", "name": "bob"}
    pooled.emulator.patch(  # bob's claim; this operator's cache has not seen it yet
        "v1/pods",
        NAMESPACE,
        warm,
        {
            "metadata": {
                "labels": {LABEL_POOL: None, LABEL_CLAIMED_FROM: POOL},
                "ownerReferences": [{**other, "uid": "uid-bob", "controller": True}],
            }
        },
    )
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    [owner] = pooled.emulator.get("v1/pods", NAMESPACE, warm)["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-bob"
    assert "ClaimConflict" in pooled.events.posted[0][2]
    assert pooled.stored("v1/pods", NAME) is not None, "cold instead"


async def test_a_lost_race_tries_the_next_pod_even_after_an_earlier_step_asked_for_a_backoff(
    pooled: World,
) -> None:
    names = warm_pods(pooled, 3)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    built = claimable_pod_spec(p.sandbox, pooled.services.settings)
    digest = built_digest(template_hash(built), built)
    tried = claim._spread(p, names, built, digest)[:2]
    first, second = (body["metadata"]["name"] for body in tried)
    other = {"apiVersion": "craft.onyx.app/v1alpha1", "kind": "CraftSandbox", "name": "bob"}
    pooled.emulator.patch(  # bob's claim of the first pod tried, unseen by this cache
        "v1/pods",
        NAMESPACE,
        first,
        {
            "metadata": {
                "labels": {LABEL_POOL: None, LABEL_CLAIMED_FROM: POOL},
                "ownerReferences": [{**other, "uid": "uid-bob", "controller": True}],
            }
        },
    )
    # What the skill step asks for when the shared template fails and it falls back:
    p.run.revisit(backoff="TemplateFallback")
    await pod.converge_pod(p)
    assert p.pod is not None
    assert p.pod["metadata"]["name"] == second
    assert not any("ColdStart" in event[1] for event in pooled.events.posted)


def warm_pods_of_existing_pool(world: World, count: int) -> list[str]:
    """``count`` more Ready pods of the pool :func:`warm_pods` made, as its controller would."""
    body = world.emulator.get(POOLS, NAMESPACE, POOL)
    names = []
    for index in range(count):
        manifest = build_pool_pod(parse_pool(body), world.services.settings)
        manifest["metadata"]["name"] = name = f"{POOL}-more-{index}"
        world.emulator.create("v1/pods", manifest)
        mark_pod_running(world.emulator, NAMESPACE, name)
        world.cache.put(kinds.POD.name, world.emulator.get("v1/pods", NAMESPACE, name))
        names.append(name)
    return names


def forged_pod(world: World, name: str) -> None:
    """A Ready pod someone else made with the pool's labels and controller reference, whose
    ``/run/onyx`` is a host directory: it would keep the token written into it."""
    pool_body = world.emulator.get(POOLS, NAMESPACE, POOL)
    manifest = build_pool_pod(parse_pool(pool_body), world.services.settings)
    manifest["metadata"]["name"] = name
    [volume] = (v for v in manifest["spec"]["volumes"] if v["name"] == "onyx-credentials")
    volume.pop("emptyDir")
    volume["hostPath"] = {"path": "/var/tmp/loot"}
    world.emulator.create("v1/pods", manifest)
    mark_pod_running(world.emulator, NAMESPACE, name)
    world.cache.put(kinds.POD.name, world.emulator.get("v1/pods", NAMESPACE, name))


async def test_a_pod_not_as_the_operator_builds_it_is_never_claimed(pooled: World) -> None:
    [warm] = warm_pods(pooled, 1)
    forged_pod(pooled, "warm-forged")
    forged = copy.deepcopy(pooled.emulator.get("v1/pods", NAMESPACE, "warm-forged"))
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert p.pod is not None
    assert p.pod["metadata"]["name"] == warm
    untouched = pooled.emulator.get("v1/pods", NAMESPACE, "warm-forged")
    assert untouched["metadata"]["labels"] == forged["metadata"]["labels"]
    assert untouched["metadata"]["ownerReferences"] == forged["metadata"]["ownerReferences"]


async def test_a_pool_of_pods_not_as_built_means_a_cold_start_and_a_warning(
    pooled: World,
) -> None:
    warm_pods(pooled, 0)
    forged_pod(pooled, "warm-forged")
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert pooled.stored("v1/pods", NAME) is not None, "a cold pod"
    warnings = [event for event in pooled.events.posted if event[0] == "Warning"]
    assert [(kind, reason) for kind, reason, _ in warnings] == [("Warning", "PoolPodNotAsBuilt")]
    assert "warm-forged" in warnings[0][2]
    assert "spec.volumes[onyx-credentials]" in warnings[0][2]
    assert any(
        reason == "ColdStart" and "PoolPodNotAsBuilt" in message
        for _, reason, message in pooled.events.posted
    )
    assert (
        "craft.onyx.app/claimed-from"
        not in (pooled.emulator.get("v1/pods", NAMESPACE, "warm-forged")["metadata"]["labels"])
    )


async def test_pods_not_as_built_ahead_of_a_real_one_do_not_hide_it(pooled: World) -> None:
    warm_pods(pooled, 0)
    for index in range(8):
        forged_pod(pooled, f"warm-forged-{index}")
    [warm] = warm_pods_of_existing_pool(pooled, 1)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert p.pod is not None
    assert p.pod["metadata"]["name"] == warm
    [warning] = [event for event in pooled.events.posted if event[0] == "Warning"]
    assert warning[2].count("warm-forged-") >= 3, "said in one event"


async def test_a_claim_and_a_cold_start_are_counted(pooled: World) -> None:
    warm_pods(pooled, 1)
    for name, uid in (("alice", "uid-a"), ("bob", "uid-b")):
        body = sandbox_body(spec={"poolRef": {"name": POOL}})
        body["metadata"].update(name=name, uid=uid)
        p = Pass(pooled.services, parse_sandbox(body), Run(body, NOW, CONDITIONS))
        await credentials.ensure_pat(p)
        await pod.converge_pod(p)
    registry = pooled.services.metrics.registry
    where = {"namespace": NAMESPACE, "pool": POOL}
    assert registry.get_sample_value("craft_pool_claims_total", where) == 1
    cold = {**where, "reason": "PoolEmpty"}
    assert registry.get_sample_value("craft_pool_cold_starts_total", cold) == 1


async def test_a_claimed_pod_is_among_the_children_the_finalizer_deletes(pooled: World) -> None:
    from craft_operator.reconciler.children import controlled_by

    [warm] = warm_pods(pooled, 1)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    targets = kinds.child_targets(
        pooled.cache, NAMESPACE, NAME, lambda obj: controlled_by(obj, UID)
    )
    assert (kinds.POD, warm) in targets


async def test_a_woken_sandbox_with_a_workspace_and_no_pool_around_starts_cold_silently(
    pooled: World,
) -> None:
    p = await pod_pass(
        pooled, spec={"workspace": {"size": "1Gi"}}, status={"wokeAt": "2026-11-23T11:59:00Z"}
    )
    await pod.converge_pod(p)
    assert pooled.events.reasons == ["PodCreated"]


def answer_lost(world: World, *, pod_readable: bool) -> None:
    """The API server applies a claim but its answer is lost (503); reads of pods fail
    too unless ``pod_readable``."""

    async def lose(request: Any) -> aiohttp.web.StreamResponse | None:
        path, method = request.url.path, request.method.value.upper()
        if "/pods/" in path and method == "PATCH":
            name = path.rsplit("/", 1)[-1]
            change = copy.deepcopy(request.data)
            change["metadata"].pop("resourceVersion", None)
            world.emulator.patch("v1/pods", NAMESPACE, name, change)
        elif "/pods/" not in path or method != "GET" or pod_readable:
            return None
        return aiohttp.web.json_response({"kind": "Status", "code": 503}, status=503)

    world.emulator.before_request.insert(0, lose)


async def test_a_claimed_pod_stripped_of_every_label_is_replaced_saying_its_hash_went_not_its_spec(
    pooled: World,
) -> None:
    """Its labels are put back, but its template hash is recorded nowhere else: whether it
    has the sandbox's spec cannot be told, so it is replaced, and the reason says what went
    (on-call would look in vain for a spec change)."""
    warm_pods(pooled, 1)
    first = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(first) is None
    assert first.pod is not None
    claimed = first.pod["metadata"]["name"]
    stored = dump_status(first.run.status)
    labels = pooled.emulator.get("v1/pods", NAMESPACE, claimed)["metadata"]["labels"]
    stripped = pooled.emulator.patch(
        "v1/pods", NAMESPACE, claimed, {"metadata": {"labels": dict.fromkeys(labels)}}
    )
    assert not stripped["metadata"].get("labels")
    pooled.cache.remove(kinds.POD.name, stripped)  # the watches were told it was deleted

    again = await pod_pass(pooled, spec={"poolRef": {"name": POOL}}, status=stored)
    await pod.converge_pod(again)

    replaced = [message for _, reason, message in pooled.events.posted if reason == "PodReplaced"]
    assert replaced, pooled.events.posted
    assert LABEL_POOL_TEMPLATE_HASH in replaced[0]
    assert "spec changed" not in replaced[0]


async def test_a_claim_whose_answer_was_lost_is_read_back_and_kept(pooled: World) -> None:
    [warm, _] = warm_pods(pooled, 2)
    answer_lost(pooled, pod_readable=True)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert p.pod is not None
    assert p.pod["metadata"]["name"] in (warm, f"{POOL}-1")
    assert pooled.stored("v1/pods", NAME) is None, "no cold pod beside the claimed one"
    claimed = [
        name
        for name in (warm, f"{POOL}-1")
        if LABEL_CLAIMED_FROM
        in pooled.emulator.get("v1/pods", NAMESPACE, name)["metadata"]["labels"]
    ]
    assert claimed == [p.pod["metadata"]["name"]], "one pod claimed"


async def test_a_claim_that_may_have_landed_stops_the_pass_without_a_second_pod(
    pooled: World,
) -> None:
    warm_pods(pooled, 2)
    answer_lost(pooled, pod_readable=False)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(p) == Stop("ClaimUnsettled")
    assert p.run.verdict.backoff is not None
    assert pooled.stored("v1/pods", NAME) is None, "no cold pod"
    labels = [
        pooled.emulator.get("v1/pods", NAMESPACE, f"{POOL}-{index}")["metadata"]["labels"]
        for index in range(2)
    ]
    assert sum(LABEL_CLAIMED_FROM in each for each in labels) == 1, "no second claim"


def claimed_by_bob_unanswered(world: World) -> None:
    """Another sandbox (bob) claims each pod this one tries, and this one's claim goes
    unanswered (503): its write lost the race though no answer said so."""
    other = {"apiVersion": "craft.onyx.app/v1alpha1", "kind": "CraftSandbox", "name": "bob"}

    async def bob_first(request: Any) -> aiohttp.web.StreamResponse | None:
        path, method = request.url.path, request.method.value.upper()
        if "/pods/" not in path or method != "PATCH":
            return None
        world.emulator.patch(
            "v1/pods",
            NAMESPACE,
            path.rsplit("/", 1)[-1],
            {
                "metadata": {
                    "labels": {LABEL_POOL: None, LABEL_CLAIMED_FROM: POOL},
                    "ownerReferences": [{**other, "uid": "uid-bob", "controller": True}],
                }
            },
        )
        return aiohttp.web.json_response({"kind": "Status", "code": 503}, status=503)

    world.emulator.before_request.insert(0, bob_first)


async def test_a_pod_read_back_after_an_unanswered_claim_is_kept_only_if_it_is_the_sandboxs(
    pooled: World,
) -> None:
    [warm] = warm_pods(pooled, 1)
    claimed_by_bob_unanswered(pooled)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert p.pod is None or p.pod["metadata"]["name"] != warm, "never bob's pod"
    [owner] = pooled.emulator.get("v1/pods", NAMESPACE, warm)["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-bob"
    assert pooled.stored("v1/pods", NAME) is not None, "cold instead"


def claims_answered(world: World, code: int, reason: str) -> list[str]:
    """Every claim (a pod's PATCH) is answered ``code``; the names of the pods tried."""
    tried: list[str] = []

    async def answer(request: Any) -> aiohttp.web.StreamResponse | None:
        path, method = request.url.path, request.method.value.upper()
        if "/pods/" not in path or method != "PATCH":
            return None
        tried.append(path.rsplit("/", 1)[-1])
        status = {"kind": "Status", "code": code, "reason": reason, "message": reason}
        return aiohttp.web.json_response(status, status=code)

    world.emulator.before_request.insert(0, answer)
    return tried


async def test_a_claim_the_api_server_refuses_starts_cold_as_a_failed_claim_not_a_lost_race(
    pooled: World,
) -> None:
    warm_pods(pooled, 2)
    pooled.services.metrics.pool_seen(NAMESPACE, POOL)
    patches = claims_answered(pooled, 403, "Forbidden")
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert len(patches) == 1, "a refused claim is not tried on the next pod"
    [cold] = [event for event in pooled.events.posted if event[1] == "ColdStart"]
    assert "ClaimFailed" in cold[2]
    assert pooled.stored("v1/pods", NAME) is not None, "cold instead"
    where = {"namespace": NAMESPACE, "pool": POOL, "reason": "ClaimFailed"}
    registry = pooled.services.metrics.registry
    assert registry.get_sample_value("craft_pool_cold_starts_total", where) == 1


async def unanswered(request: Any) -> aiohttp.web.StreamResponse | None:
    """Every pod request fails unanswered (503): a claim's write and its read-back; nothing
    is applied."""
    if "/pods/" not in request.url.path:
        return None
    return aiohttp.web.json_response({"kind": "Status", "code": 503}, status=503)


def claims_counted(world: World) -> tuple[float | None, float | None]:
    """The pool's claims counted, and the claim durations observed."""
    registry, where = world.services.metrics.registry, {"namespace": NAMESPACE, "pool": POOL}
    return (
        registry.get_sample_value("craft_pool_claims_total", where),
        registry.get_sample_value("craft_pool_claim_duration_seconds_count", where),
    )


def watch_delivers(world: World, names: list[str]) -> None:
    """The watch brings the pods as the API server holds them."""
    for name in names:
        world.cache.put(kinds.POD.name, world.emulator.get("v1/pods", NAMESPACE, name))


async def test_a_claim_that_landed_unanswered_is_counted_once_its_pod_is_seen_the_sandboxs(
    pooled: World,
) -> None:
    names = warm_pods(pooled, 2)
    pooled.services.metrics.pool_seen(NAMESPACE, POOL)
    memory = Memory()
    answer_lost(pooled, pod_readable=False)
    first = await pod_pass(pooled, memory=memory, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(first) == Stop("ClaimUnsettled")
    assert claims_counted(pooled) == (0, 0), "not known to have landed yet"
    pooled.emulator.before_request.pop(0)  # the API server answers again
    watch_delivers(pooled, names)

    for _ in range(2):  # the passes that run on the claimed pod
        again = await pod_pass(pooled, memory=memory, spec={"poolRef": {"name": POOL}})
        await pod.converge_pod(again)
        assert again.pod is not None
        assert LABEL_CLAIMED_FROM in again.pod["metadata"]["labels"]

    assert claims_counted(pooled) == (1, 1)


async def test_a_claim_left_unsettled_that_did_not_land_is_not_counted_beside_the_next(
    pooled: World,
) -> None:
    names = warm_pods(pooled, 2)
    pooled.services.metrics.pool_seen(NAMESPACE, POOL)
    memory = Memory()

    pooled.emulator.before_request.insert(0, unanswered)
    first = await pod_pass(pooled, memory=memory, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(first) == Stop("ClaimUnsettled")
    pooled.emulator.before_request.pop(0)
    watch_delivers(pooled, names)

    for _ in range(2):  # the pass that claims a pod, then one that runs on it
        again = await pod_pass(pooled, memory=memory, spec={"poolRef": {"name": POOL}})
        await pod.converge_pod(again)
        assert again.pod is not None

    assert claims_counted(pooled) == (1, 1)


async def test_of_two_unsettled_claims_in_a_row_the_one_that_landed_is_counted(
    pooled: World,
) -> None:
    names = warm_pods(pooled, 2)
    pooled.services.metrics.pool_seen(NAMESPACE, POOL)
    memory = Memory()
    answer_lost(pooled, pod_readable=False)
    first = await pod_pass(pooled, memory=memory, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(first) == Stop("ClaimUnsettled")
    [landed] = [
        name
        for name in names
        if LABEL_CLAIMED_FROM
        in pooled.emulator.get("v1/pods", NAMESPACE, name)["metadata"]["labels"]
    ]
    pooled.emulator.before_request.pop(0)
    # The watch lags behind: the claimed pod is out of view, the other still looks free.
    pooled.cache.forget(kinds.POD.name, NAMESPACE, landed)

    pooled.emulator.before_request.insert(0, unanswered)
    second = await pod_pass(pooled, memory=memory, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(second) == Stop("ClaimUnsettled")
    pooled.emulator.before_request.pop(0)
    watch_delivers(pooled, names)

    for _ in range(2):  # the passes that run on the pod the first claim took
        again = await pod_pass(pooled, memory=memory, spec={"poolRef": {"name": POOL}})
        await pod.converge_pod(again)
        assert again.pod is not None
        assert again.pod["metadata"]["name"] == landed

    assert claims_counted(pooled) == (1, 1)


async def test_a_sandbox_whose_pod_failed_waits_out_its_backoff_before_claiming_again(
    pooled: World,
) -> None:
    warm_pods(pooled, 2)
    first = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(first)
    assert first.pod is not None
    taken = first.pod["metadata"]["name"]
    mark_pod_failed(pooled.emulator, NAMESPACE, taken)
    pooled.cache.put(kinds.POD.name, pooled.emulator.get("v1/pods", NAMESPACE, taken))
    stored = dump_status(first.run.status)
    failed = await pod_pass(pooled, spec={"poolRef": {"name": POOL}}, status=stored)
    await pod.converge_pod(failed)
    assert failed.run.status.pod_failures == 1
    assert pooled.cache.get(kinds.POD.name, NAMESPACE, taken) is None, "the delete's answer"
    stored = dump_status(failed.run.status)
    early = await pod_pass(pooled, spec={"poolRef": {"name": POOL}}, status=stored)
    assert await pod.converge_pod(early) == Stop("WaitingForPod")
    assert early.run.verdict.after == pooled.services.settings.pod_restart_backoff
    [other] = [f"{POOL}-{index}" for index in range(2) if f"{POOL}-{index}" != taken]
    assert LABEL_POOL in pooled.emulator.get("v1/pods", NAMESPACE, other)["metadata"]["labels"]
    assert pooled.events.reasons == [], "neither claimed nor created during the backoff"


async def test_a_second_pod_of_the_sandbox_is_deleted_whichever_way_it_came(
    pooled: World,
) -> None:
    [warm] = warm_pods(pooled, 1)
    first = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(first)  # claims warm-0
    cold = await pod_pass(pooled)  # as if the claim were not seen: a cold pod too
    await pod_lifecycle.create(cold, cold_pod(pooled, cold))
    mark_pod_running(pooled.emulator, NAMESPACE, NAME)
    pooled.cache.put(kinds.POD.name, pooled.emulator.get("v1/pods", NAMESPACE, NAME))
    pooled.events.posted.clear()
    again = await pod_pass(
        pooled, spec={"poolRef": {"name": POOL}}, status=dump_status(first.run.status)
    )
    assert await pod.converge_pod(again) is None
    assert again.pod is not None
    assert again.pod["metadata"]["name"] == NAME
    await eventually(lambda: pooled.stored("v1/pods", warm) is None, what="the other pod gone")
    assert pooled.events.reasons == ["ExtraPodDeleted"]
    assert again.run.status.claimed_from is None, "the sandbox runs its cold pod"
    pooled.events.posted.clear()
    await pod.converge_pod(await pod_pass(pooled, spec={"poolRef": {"name": POOL}}))
    assert pooled.stored("v1/pods", NAME) is not None, "the kept one stays"
    assert pooled.events.reasons == [], "said once"


def cold_pod(world: World, p: Pass) -> dict[str, Any]:
    """The pod the sandbox would create cold."""
    return build_pod(p.sandbox, world.services.settings)


async def test_a_recorded_pod_out_of_sight_that_another_sandbox_holds_is_left_alone(
    pooled: World,
) -> None:
    """The pod the status names, missing from the cache, is read back and relabelled only
    if the sandbox controls it: another sandbox's pod of that name keeps its labels (they
    say whose egress and tenant a pod is), and the sandbox starts a pod of its own."""
    [warm] = warm_pods(pooled, 1)
    bob = {"apiVersion": "craft.onyx.app/v1alpha1", "kind": "CraftSandbox", "name": "bob"}
    pooled.emulator.patch(
        "v1/pods",
        NAMESPACE,
        warm,
        {
            "metadata": {
                "labels": {
                    LABEL_POOL: None,
                    LABEL_CLAIMED_FROM: POOL,
                    "craft.onyx.app/sandbox": "bob",
                },
                "ownerReferences": [{**bob, "uid": "uid-bob", "controller": True}],
            }
        },
    )
    pooled.cache.forget(kinds.POD.name, NAMESPACE, warm)  # out of the watches' sight
    p = await pod_pass(
        pooled, spec={"poolRef": {"name": POOL}}, status={"podName": warm, "claimedFrom": POOL}
    )
    await pod.converge_pod(p)

    labels = pooled.emulator.get("v1/pods", NAMESPACE, warm)["metadata"]["labels"]
    assert labels["craft.onyx.app/sandbox"] == "bob", "bob's pod keeps bob's labels"
    assert p.pod is None or p.pod["metadata"]["name"] != warm, "never bob's pod"
    assert pooled.stored("v1/pods", NAME) is not None, "a pod of its own instead"


async def test_a_pool_being_deleted_is_not_claimed_from(pooled: World) -> None:
    [warm] = warm_pods(pooled, 1)
    body = pooled.cache.get(kinds.POOL.name, NAMESPACE, POOL)
    assert body is not None
    deleting = {
        **body,
        "metadata": {
            **body["metadata"],
            "deletionTimestamp": "2026-11-23T12:00:00Z",
            "resourceVersion": str(int(body["metadata"]["resourceVersion"]) + 1),
        },
    }
    pooled.cache.put(kinds.POOL.name, deleting)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert LABEL_POOL in pooled.emulator.get("v1/pods", NAMESPACE, warm)["metadata"]["labels"]
    assert pooled.stored("v1/pods", NAME) is not None, "cold instead"
    assert "is being deleted" in pooled.events.posted[0][2]


async def test_a_foreign_pod_taking_the_sandboxs_name_does_not_cost_it_its_claimed_pod(
    pooled: World,
) -> None:
    [warm] = warm_pods(pooled, 1)
    first = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(first)
    intruder = cold_pod(pooled, first)
    intruder["metadata"].pop("ownerReferences", None)  # someone else's, with our labels
    pooled.emulator.create("v1/pods", intruder)
    pooled.cache.put(kinds.POD.name, pooled.emulator.get("v1/pods", NAMESPACE, NAME))
    pooled.events.posted.clear()
    again = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(again) is None
    assert again.pod is not None
    assert again.pod["metadata"]["name"] == warm
    assert pooled.stored("v1/pods", warm) is not None
    assert pooled.stored("v1/pods", NAME) is not None, "not ours: left alone"
    assert pooled.events.reasons == []


async def test_a_pod_stopped_for_sleep_after_running_ends_the_row_of_failures(
    pooled: World,
) -> None:
    warm_pods(pooled, 1)
    first = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(first)
    stored = dump_status(first.run.status)
    stored["podFailures"] = 2
    asleep = await pod_pass(
        pooled, spec={"poolRef": {"name": POOL}, "suspend": True}, status=stored
    )
    assert await pod.converge_pod(asleep) == Stop("Suspended")
    assert asleep.run.status.pod_failures is None


@pytest.mark.parametrize(
    "change",
    [{"workspace": {"size": "1Gi"}}, {"userLibrary": {"mode": "Job"}}],
    ids=["workspace-added", "library-to-job-mode"],
)
async def test_a_claimed_pod_whose_sandbox_now_needs_its_own_volume_is_replaced(
    pooled: World, change: dict[str, Any]
) -> None:
    [warm] = warm_pods(pooled, 1)
    first = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(first) is None
    stored = dump_status(first.run.status)

    again = await pod_pass(pooled, spec={"poolRef": {"name": POOL}, **change}, status=stored)
    assert await pod.converge_pod(again) is not None, "the claimed pod is not kept as Ready"

    assert again.pod is None
    assert "PodReplaced" in pooled.events.reasons
    kept = pooled.emulator.find("v1/pods", NAMESPACE, warm)
    assert kept is None or kept["metadata"].get("deletionTimestamp"), "the warm pod goes"


async def test_a_sandbox_woken_while_a_pool_like_it_has_no_ready_pod_says_it_starts_cold(
    pooled: World,
) -> None:
    warm_pods(pooled, 0)
    p = await pod_pass(pooled, status={"wokeAt": "2026-11-23T11:59:00Z"})
    await pod.converge_pod(p)

    said = [message for type_, reason, message in pooled.events.posted if reason == "ColdStart"]
    assert said, pooled.events.reasons
    assert "(PoolEmpty)" in said[0]


async def test_a_cold_pod_whose_creation_is_retried_is_one_cold_start(pooled: World) -> None:
    warm_pods(pooled, 0)
    memory = Memory()
    real = over_quota(pooled)
    for _ in range(3):  # the pod step retries the cold pod's creation, pass after pass
        p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
        p.memory = memory
        with contextlib.suppress(Exception):
            await pod.converge_pod(p)
    pooled.services.kube.create = real  # type: ignore[method-assign]
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    p.memory = memory
    await pod.converge_pod(p)

    registry = pooled.services.metrics.registry
    cold = {"namespace": NAMESPACE, "pool": POOL, "reason": "PoolEmpty"}
    assert registry.get_sample_value("craft_pool_cold_starts_total", cold) == 1
    assert pooled.stored("v1/pods", NAME) is not None


def over_quota(world: World) -> Any:
    """Make the API server refuse every pod create, as a full ResourceQuota does; returns
    the real create, to put back."""
    real = world.services.kube.create

    async def refuse(kind: Any, body: Any) -> Any:
        if body.get("kind") == "Pod":
            raise ApiError(403, "Forbidden", "pods is forbidden: exceeded quota")
        return await real(kind, body)

    world.services.kube.create = refuse  # type: ignore[method-assign]
    return real


def cold_starts(world: World) -> dict[str, float]:
    """The cold starts counted so far, by reason (any pool label)."""
    counted: dict[str, float] = {}
    for metric in world.services.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "craft_pool_cold_starts_total" and sample.value:
                reason = sample.labels["reason"]
                counted[reason] = counted.get(reason, 0) + sample.value
    return counted


async def test_a_cold_start_whose_reason_changes_while_its_creation_is_retried_is_one(
    pooled: World,
) -> None:
    warm_pods(pooled, 0)
    memory = Memory()
    real = over_quota(pooled)
    body = pooled.cache.get(kinds.POOL.name, NAMESPACE, POOL)
    for present in (True, False, True):  # PoolEmpty, then NoPool (deleted), PoolEmpty again
        if present:
            pooled.cache.put(kinds.POOL.name, body)
        else:
            pooled.cache.forget(kinds.POOL.name, NAMESPACE, POOL)
        p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
        p.memory = memory
        await pod.converge_pod(p)
    assert cold_starts(pooled) == {}, "nothing counted before a cold pod exists"
    pooled.services.kube.create = real  # type: ignore[method-assign]
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    p.memory = memory
    await pod.converge_pod(p)

    assert pooled.stored("v1/pods", NAME) is not None
    assert cold_starts(pooled) == {"PoolEmpty": 1}


async def test_a_sandbox_that_claims_after_its_cold_pod_was_refused_is_no_cold_start(
    pooled: World,
) -> None:
    [warm] = warm_pods(pooled, 1)
    pooled.cache.forget(kinds.POD.name, NAMESPACE, warm)  # not Ready yet, as the pass sees it
    memory = Memory()
    real = over_quota(pooled)
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    p.memory = memory
    await pod.converge_pod(p)
    pooled.services.kube.create = real  # type: ignore[method-assign]
    ready = pooled.emulator.get("v1/pods", NAMESPACE, warm)
    pooled.cache.put(kinds.POD.name, ready)  # the pool refills before the quota lets a pod in
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    p.memory = memory
    await pod.converge_pod(p)

    assert p.pod is not None
    assert p.pod["metadata"]["name"] == warm, "claimed"
    registry = pooled.services.metrics.registry
    where = {"namespace": NAMESPACE, "pool": POOL}
    assert registry.get_sample_value("craft_pool_claims_total", where) == 1
    assert cold_starts(pooled) == {}


async def test_a_claimed_pods_skill_is_not_written_alone_while_its_pat_delivery_runs_on(
    pooled: World,
) -> None:
    pooled.services.deliveries = DetachedCalls(inline=0.05)
    pooled.exec.hold_delivery = asyncio.Event()  # onyx-cli slow to answer
    warm_pods(pooled, 1)
    p = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await asyncio.wait_for(run_steps(p), 5)
    assert [call[3] for call in pooled.exec.calls] == ["deliver-pat-and-skill"], (
        "the delivery running on carries the SKILL.md: no second exec beside it"
    )
    pooled.exec.hold_delivery.set()
    await asyncio.sleep(0.05)
    judged = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(p.run.status))
    await run_steps(judged)
    assert [call[3] for call in pooled.exec.calls] == ["deliver-pat-and-skill"]
    assert judged.run.status.delivered_skill is not None


async def test_a_skill_the_pod_refused_is_not_tried_alone_within_the_backoff(
    pooled: World,
) -> None:
    warm_pods(pooled, 1)
    pooled.exec.skill_exit = EXIT_SKILL_NOT_DELIVERED
    p = pooled.pass_(spec={"poolRef": {"name": POOL}})
    await run_steps(p)
    pooled.exec.skill_exit = 0
    soon = pooled.pass_(spec={"poolRef": {"name": POOL}}, status=dump_status(p.run.status))
    await run_steps(soon)  # a pod event brings the sandbox back at once
    assert len(pooled.exec.calls) == 1, "neither the delivery nor the SKILL.md alone"


TOLERATIONS = [
    {"key": "gvisor", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "craft", "effect": "NoSchedule"},
]


async def test_a_pool_that_lists_the_same_tolerations_otherwise_serves_the_claim(
    pooled: World,
) -> None:
    """In another order, with the default operator spelled out: the same pod."""
    spelled = [{**TOLERATIONS[1], "operator": "Equal"}, TOLERATIONS[0]]
    [warm] = warm_pods(pooled, 1, tolerations=spelled)

    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}, "tolerations": TOLERATIONS})

    assert await pod.converge_pod(p) is None
    assert p.run.status.pod_name == warm


async def test_a_pod_claimed_under_the_hash_of_its_tolerations_as_written_is_kept(
    pooled: World,
) -> None:
    """Claimed before an upgrade that hashes tolerations in canonical form."""
    [warm] = warm_pods(pooled, 1, tolerations=TOLERATIONS)
    spec = {"poolRef": {"name": POOL}, "tolerations": TOLERATIONS}
    first = await pod_pass(pooled, spec=spec)
    assert await pod.converge_pod(first) is None
    older = older_template_hashes(first.sandbox, pooled.services.settings)[0]
    pooled.emulator.patch(
        "v1/pods", NAMESPACE, warm, {"metadata": {"labels": {LABEL_POOL_TEMPLATE_HASH: older}}}
    )
    pooled.cache.put(kinds.POD.name, pooled.emulator.get("v1/pods", NAMESPACE, warm))

    again = await pod_pass(pooled, spec=spec, status=dump_status(first.run.status))
    assert await pod.converge_pod(again) is None
    assert "PodReplaced" not in pooled.events.reasons


async def test_a_cold_pod_whose_create_answer_was_lost_is_still_one_cold_start(
    pooled: World,
) -> None:
    warm_pods(pooled, 0)
    memory = Memory()
    real = pooled.services.kube.create

    async def answer_lost(kind: Any, body: Any) -> Any:
        created = await real(kind, body)
        if body.get("kind") == "Pod":
            raise ApiError(504, "Timeout", "the answer was lost")  # (the create landed)
        return created

    pooled.services.kube.create = answer_lost  # type: ignore[method-assign]
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    p.memory = memory
    await pod.converge_pod(p)
    pooled.services.kube.create = real  # type: ignore[method-assign]
    for _ in range(2):  # the next passes: the create conflicts, then the watch shows the pod
        again = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
        again.memory = memory
        await pod.converge_pod(again)
        pooled.cache.put(kinds.POD.name, pooled.emulator.get("v1/pods", NAMESPACE, NAME))

    assert cold_starts(pooled) == {"PoolEmpty": 1}


async def test_a_sandbox_waking_from_sleep_does_not_claim_from_a_pool_being_deleted(
    pooled: World,
) -> None:
    [warm] = warm_pods(pooled, 1)
    body = pooled.cache.get(kinds.POOL.name, NAMESPACE, POOL)
    assert body is not None
    deleting = copy.deepcopy(body)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-23T12:00:00Z"
    deleting["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
    pooled.cache.put(kinds.POOL.name, deleting)
    p = await pod_pass(pooled, status={"wokeAt": "2026-11-23T11:59:00Z"})
    await pod.converge_pod(p)
    assert LABEL_POOL in pooled.emulator.get("v1/pods", NAMESPACE, warm)["metadata"]["labels"]
    assert pooled.stored("v1/pods", NAME) is not None, "cold instead"


async def test_a_pass_tries_three_pods_at_most_before_it_starts_cold(pooled: World) -> None:
    warm_pods(pooled, 5)
    tried = claims_answered(pooled, 409, "Conflict")
    p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
    await pod.converge_pod(p)
    assert len(tried) == claim.MAX_TRIES == 3
    assert "ClaimConflict" in pooled.events.posted[0][2]


async def test_a_cold_start_is_said_once_while_its_pods_creation_is_retried(
    pooled: World,
) -> None:
    warm_pods(pooled, 0)
    memory = Memory()
    over_quota(pooled)
    said = 0
    for _ in range(3):  # the pod step retries the cold pod's creation, pass after pass
        p = await pod_pass(pooled, spec={"poolRef": {"name": POOL}})
        p.memory = memory
        with contextlib.suppress(Exception):
            await pod.converge_pod(p)
        said += pooled.events.reasons.count("ColdStart")
    assert said == 1
