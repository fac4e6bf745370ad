"""UserLibrarySynced in Job mode: one sync Job at a time per volume, retried with backoff.

The tests play the Job controller and kubelet by putting a finished Job and its pod (with
the sync's result as its termination message) into the cache, as their watch events would.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from craft_operator.api.models import MAX_LIBRARY_REVISION
from craft_operator.api.status_codec import dump_status
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import JOBS
from craft_operator.kube.kinds import LABEL_MANAGED_BY, MANAGED_BY
from craft_operator.library import SyncResult, resolve_location
from craft_operator.reconciler.library_pool import LibrarySyncPool
from craft_operator.reconciler.queue import Backoff
from craft_operator.reconciler.step import Pass
from craft_operator.reconciler.steps import credentials, library, library_volume
from craft_operator.reconciler.steps.library_attempt import attempt_for
from craft_operator.reconciler.sync_jobs import (
    JOB,
    UNWATCHED_READ_SECONDS,
    desired_job,
    read_outcome,
    start_job,
)
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import CANARY, NAME, AnsweringLibrary, World

pytestmark = pytest.mark.unit

POD = {"metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "pod-1"}}
JOB_MODE = {"userLibrary": {"mode": "Job"}}
S3_DOWN = {"ok": False, "error": "S3 is unreachable", "reason": "S3Unavailable", "retryable": True}
SYNCED = {"ok": True, "files": 3, "bytes": 30, "bytesTransferred": 30, "durationSeconds": 0.5}


@pytest.fixture
def job_world(make_world: Callable[..., World]) -> World:
    """Job mode configured; retries back off by exactly 2 s, doubling (no jitter)."""
    world = make_world(s3_bucket="onyx-user-files", library_s3_secret="library-s3")
    world.services.library_pool = LibrarySyncPool(backoff=Backoff(base=2.0, cap=300.0, jitter=0))
    return world


def ready(world: World, status: dict[str, Any] | None = None, spec: Any = None) -> Pass:
    """A pass over the sandbox with its pod Ready."""
    p = world.pass_(spec=JOB_MODE if spec is None else spec, status=status or {})
    p.pod = POD
    return p


async def next_pass(
    world: World, last: Pass | dict[str, Any], spec: Any = None, *, with_pat: bool = False
) -> Pass:
    """Run the library step in a pass over the status the ``last`` pass left (after the
    credentials step, ``with_pat``)."""
    status = dump_status(last.run.status) if isinstance(last, Pass) else last
    p = ready(world, status, spec)
    if with_pat:
        await credentials.ensure_pat(p)
    await library.sync_library(p)
    return p


def jobs_created(world: World) -> int:
    """Jobs the API server was asked to create."""
    return sum(
        1 for write in world.emulator.writes() if write.startswith("POST") and "/jobs" in write
    )


def end_job(world: World, name: str, result: dict[str, Any], exit_code: int) -> None:
    """The Job's pod ends with ``result``, then the Job (Complete if it exited 0)."""
    job = copy.deepcopy(world.cache.get("Job", NAMESPACE, name))
    assert job is not None
    job["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1000)
    kind = "Complete" if exit_code == 0 else "Failed"
    job["status"] = {"conditions": [{"type": kind, "status": "True"}]}
    world.cache.put("Job", job)
    end_pod(world, job, result, exit_code)


def end_pod(world: World, job: dict[str, Any], result: dict[str, Any], exit_code: int) -> None:
    """The Job's pod ended with ``result`` (its watch event seen)."""
    name = job["metadata"]["name"]
    state = {"terminated": {"exitCode": exit_code, "message": json.dumps(result)}}
    owner = {"kind": "Job", "name": name, "uid": job["metadata"]["uid"], "controller": True}
    pod = {
        "metadata": {
            "name": f"{name}-abcde",
            "namespace": NAMESPACE,
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-23T12:00:00Z",
            "labels": {"batch.kubernetes.io/job-name": name},
            "ownerReferences": [owner],
        },
        "status": {"containerStatuses": [{"name": "sync", "state": state}]},
    }
    world.cache.put("Pod", pod)


def backoff_passed(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the sandbox's retry time come (no test waits for a clock)."""
    monkeypatch.setattr(world.services.library_pool, "retry_in", lambda key: 0.0)


def delay(p: Pass) -> float:
    """Seconds until the pass asked to come back."""
    after = p.run.verdict.after
    assert after is not None
    return after


def condition(p: Pass) -> tuple[str, str, str]:
    found = p.run.condition("UserLibrarySynced")
    assert found is not None
    return found.status, found.reason, found.message


async def test_a_retryable_job_failure_waits_for_the_backoff_before_the_next_job(
    job_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await next_pass(job_world, {})
    end_job(job_world, "alice-library-1", S3_DOWN, exit_code=1)

    collected = await next_pass(job_world, first)
    meanwhile = await next_pass(job_world, collected)  # e.g. on the Job's deletion event

    assert jobs_created(job_world) == 1
    for p in (collected, meanwhile):
        status, reason, message = condition(p)
        assert (status, reason) == ("False", "S3Unavailable")
        assert message.endswith("retried with backoff")
        assert 0 < delay(p) <= 2
    assert job_world.events.reasons.count("LibraryS3Unavailable") == 1

    backoff_passed(job_world, monkeypatch)
    retried = await next_pass(job_world, meanwhile)

    assert jobs_created(job_world) == 2
    assert retried.run.status.user_library is not None
    assert retried.run.status.user_library.job == "alice-library-2"
    assert condition(retried)[:2] == ("False", "S3Unavailable")  # until the retry's outcome


async def test_an_s3_refusal_that_failed_the_job_at_once_is_still_retried_with_backoff(
    job_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sync exits with a permanent code, so the Job fails without retrying its pod;
    # the refusal may be mended on S3's side, where the operator sees no change.
    refused = {"ok": False, "error": "Access Denied", "reason": "S3AccessDenied", "retryable": True}
    first = await next_pass(job_world, {})
    end_job(job_world, "alice-library-1", refused, exit_code=3)

    collected = await next_pass(job_world, first)

    status, reason, message = condition(collected)
    assert (status, reason) == ("False", "S3AccessDenied")
    assert message.endswith("retried with backoff")
    backoff_passed(job_world, monkeypatch)
    retried = await next_pass(job_world, collected)
    assert jobs_created(job_world) == 2
    assert retried.run.status.user_library is not None
    assert retried.run.status.user_library.job == "alice-library-2"


async def test_consecutive_job_failures_double_the_backoff_and_a_success_resets_it(
    job_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await next_pass(job_world, {})
    end_job(job_world, "alice-library-1", S3_DOWN, exit_code=1)
    once = await next_pass(job_world, first)
    with monkeypatch.context() as patched:
        backoff_passed(job_world, patched)
        second = await next_pass(job_world, once)
    end_job(job_world, "alice-library-2", S3_DOWN, exit_code=1)

    twice = await next_pass(job_world, second)

    assert 0 < delay(once) <= 2
    assert 2 < delay(twice) <= 4
    with monkeypatch.context() as patched:
        backoff_passed(job_world, patched)
        third = await next_pass(job_world, twice)
    end_job(job_world, "alice-library-3", SYNCED, exit_code=0)
    synced = await next_pass(job_world, third)

    assert condition(synced)[:2] == ("True", "Synced")
    assert job_world.services.library_pool.retry_in(synced.run.key) == 0


async def test_each_jobs_outcome_is_counted_for_the_alerts_a_failure_by_its_reason(
    job_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CraftLibrarySyncFailing reads craft_user_library_sync_errors_total by reason."""
    registry = job_world.services.metrics.registry
    first = await next_pass(job_world, {})
    end_job(job_world, "alice-library-1", S3_DOWN, exit_code=1)
    failed = await next_pass(job_world, first)
    errors = {"reason": "S3Unavailable"}
    assert registry.get_sample_value("craft_user_library_sync_errors_total", errors) == 1

    with monkeypatch.context() as patched:
        backoff_passed(job_world, patched)
        second = await next_pass(job_world, failed)
    end_job(job_world, "alice-library-2", SYNCED, exit_code=0)
    await next_pass(job_world, second)

    assert registry.get_sample_value("craft_user_library_sync_bytes_total") == 30
    assert registry.get_sample_value("craft_user_library_sync_duration_seconds_count") == 1
    assert registry.get_sample_value("craft_user_library_sync_errors_total", errors) == 1


async def test_removing_the_bucket_keeps_the_running_job_so_readding_it_starts_no_second_job(
    make_world: Callable[..., World],
) -> None:
    world = make_world(library_s3_secret="library-s3")
    with_bucket = {"userLibrary": {"mode": "Job", "bucket": "bucket-a"}}
    first = ready(world, {"userLibrary": {"jobSequence": 4}}, with_bucket)
    await library.sync_library(first)

    unconfigured = await next_pass(world, first)  # the default spec: Job mode, no bucket
    readded = await next_pass(world, unconfigured, with_bucket)

    assert condition(unconfigured)[:2] == ("True", "NotConfigured")
    for p in (unconfigured, readded):
        kept = p.run.status.user_library
        assert kept is not None
        assert (kept.job, kept.job_sequence) == ("alice-library-5", 5)
    assert jobs_created(world) == 1
    end_job(world, "alice-library-5", SYNCED, exit_code=0)
    ended = await next_pass(world, readded, with_bucket)
    assert ended.run.status.user_library is not None
    assert ended.run.status.user_library.job_sequence == 5


def fourth_job(p: Pass) -> dict[str, Any]:
    """The sandbox's sync Job of sequence 4 for its current library (pod ``pod-1``)."""
    location = resolve_location(
        p.sandbox.spec.user_library, p.sandbox.spec.user, p.services.settings
    )
    attempt = attempt_for(p.sandbox, location, "pod-1")
    return desired_job(
        p.sandbox,
        p.services.settings,
        location,
        sequence=4,
        revision=attempt.revision,
        pod_uid=attempt.pod_uid,
        config=attempt.config,
    )


async def test_an_unfinished_job_of_the_sandbox_missing_from_status_is_awaited_not_doubled(
    job_world: World,
) -> None:
    p = ready(job_world, {"userLibrary": {"jobSequence": 2}})
    s = job_world.services
    job = fourth_job(p)
    await start_job(s.kube, s.cache, job)  # its name never reached the status
    started = jobs_created(job_world)

    await library.sync_library(p)

    assert jobs_created(job_world) == started
    status = p.run.status.user_library
    assert status is not None
    assert (status.job, status.job_sequence) == ("alice-library-4", 4)
    end_job(job_world, "alice-library-4", SYNCED, exit_code=0)
    collected = await next_pass(job_world, p)
    assert condition(collected)[:2] == ("True", "Synced")
    assert jobs_created(job_world) == started


async def test_a_running_job_whose_labels_were_edited_is_read_not_doubled(
    job_world: World,
) -> None:
    """Its managed-by label edited away, the watches were told it was deleted (at the
    edit's version) while it runs on: no second Job writes the same volume; it is read
    again every few seconds (no watch event says when it ends), and its end is collected."""
    first = await next_pass(job_world, {})
    assert jobs_created(job_world) == 1
    status = first.run.status.user_library
    assert status is not None
    assert status.job
    name = status.job
    kube = job_world.services.kube
    edited = await kube.patch(
        JOBS, NAMESPACE, name, {"metadata": {"labels": {LABEL_MANAGED_BY: None}}}
    )
    job_world.cache.remove(JOB, edited)

    second = await next_pass(job_world, first)

    assert jobs_created(job_world) == 1
    assert delay(second) <= UNWATCHED_READ_SECONDS
    done = {"conditions": [{"type": "Complete", "status": "True"}]}
    job_world.emulator.patch(
        "batch/v1/jobs", NAMESPACE, name, {"status": done}, subresource="status"
    )
    end_pod(job_world, edited, SYNCED, exit_code=0)
    collected = await next_pass(job_world, second)
    assert condition(collected)[:2] == ("True", "Synced")
    assert jobs_created(job_world) == 1


async def test_a_job_gone_from_the_cluster_is_started_over(job_world: World) -> None:
    first = await next_pass(job_world, {})
    status = first.run.status.user_library
    assert status is not None
    assert status.job
    await job_world.services.kube.delete(JOBS, NAMESPACE, status.job)
    job_world.cache.forget(JOB, NAMESPACE, status.job)

    await next_pass(job_world, first)

    assert jobs_created(job_world) == 2


async def test_an_exec_mode_sync_keeps_job_modes_numbering_for_a_switch_back(
    make_world: Callable[..., World],
) -> None:
    world = make_world(s3_bucket="onyx-user-files")
    result = SyncResult(
        files=1,
        bytes=1,
        bytes_transferred=1,
        copied=1,
        deleted=0,
        skipped=(),
        excluded=0,
        duration_seconds=0.1,
    )

    world.services.library = AnsweringLibrary(result)
    exec_mode: dict[str, Any] = {"userLibrary": {"mode": "Exec"}}
    pool, ended = world.services.library_pool, asyncio.Event()
    pool.wake = lambda key: ended.set()
    started = await next_pass(world, {"userLibrary": {"jobSequence": 7}}, exec_mode)
    async with asyncio.timeout(10):
        await ended.wait()

    collected = await next_pass(world, started, exec_mode)

    assert condition(collected)[:2] == ("True", "Synced")
    assert collected.run.status.user_library is not None
    assert collected.run.status.user_library.job_sequence == 7
    await pool.close()


@pytest.mark.parametrize(
    "labels", [{}, {LABEL_MANAGED_BY: MANAGED_BY}], ids=["unlabelled", "labelled as ours"]
)
async def test_a_job_by_the_recorded_name_that_the_sandbox_does_not_control_is_left_alone(
    job_world: World, labels: dict[str, str]
) -> None:
    p = ready(job_world, {"userLibrary": {"job": "alice-library-3", "jobSequence": 3}})
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "alice-library-3", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "x"}]}
            }
        },
    }
    created = await job_world.services.kube.create(JOBS, foreign)
    created["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    created["metadata"]["resourceVersion"] = str(int(created["metadata"]["resourceVersion"]) + 1)
    job_world.cache.put("Job", created)

    await library.sync_library(p)

    assert job_world.stored("batch/v1/jobs", "alice-library-3") is not None
    assert "LibrarySynced" not in job_world.events.reasons
    status = p.run.status.user_library
    assert status is not None
    assert status.job == "alice-library-4"


async def test_a_running_job_named_as_the_sandboxs_but_not_its_own_is_not_awaited(
    job_world: World,
) -> None:
    # Labelled as the operator's, so the watches cache it: only the uid tells.
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "alice-library-2",
            "namespace": NAMESPACE,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
        },
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "x"}]}
            }
        },
    }
    job_world.cache.put("Job", await job_world.services.kube.create(JOBS, foreign))

    p = await next_pass(job_world, {})

    status = p.run.status.user_library
    assert status is not None
    assert status.job == "alice-library-1"
    ours = job_world.stored("batch/v1/jobs", "alice-library-1")
    assert ours is not None
    assert ours["metadata"]["ownerReferences"][0]["uid"] == p.sandbox.metadata.uid


def test_a_job_past_its_deadline_reports_that_the_sync_timed_out() -> None:
    job = {
        "metadata": {"name": "alice-library-1", "namespace": NAMESPACE, "uid": "job-uid"},
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "message": "Job was active longer than specified deadline",
                }
            ]
        },
    }

    outcome = read_outcome(ObjectCache(), job)

    assert outcome is not None
    assert (outcome.reason, outcome.retryable) == ("SyncTimedOut", True)


async def test_a_refused_job_request_is_said_and_retried_but_never_stops_the_cli_row(
    job_world: World,
) -> None:
    from craft_operator.reconciler import table
    from craft_operator.reconciler.step import Step, Stop
    from craft_operator.reconciler.steps import cli
    from tests.support.apply import FailNext

    job_world.emulator.before_request.insert(0, FailNext("POST", 403, count=100))
    ran: list[str] = []

    async def cli_step(p: Pass) -> Stop | None:
        ran.append("cli")
        return None

    p = ready(job_world)
    await table.run_steps(p, ((library.STEP, Step(cli.STEP.condition, cli_step)),))

    assert ran == ["cli"], "a renewed PAT still reaches the pod"
    condition = p.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "JobRequestFailed")
    assert p.run.verdict.backoff == "JobRequestFailed"


async def test_a_foreign_object_at_the_next_job_name_is_skipped_not_retried_forever(
    job_world: World,
) -> None:
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "alice-library-1", "namespace": NAMESPACE},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "x"}]}
            }
        },
    }
    await job_world.services.kube.create(JOBS, foreign)
    p = ready(job_world)
    await library.sync_library(p)
    assert condition(p)[1] == "JobNameTaken"

    second = await next_pass(job_world, p)

    status = second.run.status.user_library
    assert status is not None
    assert status.job == "alice-library-2"
    untouched = job_world.stored("batch/v1/jobs", "alice-library-1")
    assert untouched is not None
    assert not untouched["metadata"].get("ownerReferences"), "never adopted"


async def test_no_sync_job_starts_while_a_policy_on_the_job_controllers_labels_lets_all_out(
    make_world: Callable[..., World],
) -> None:
    """The Job controller labels its pods with the Job's name (``job-name``,
    ``batch.kubernetes.io/job-name``) and uid: "all egress for Jobs" selects them."""
    world = make_world(
        s3_bucket="onyx-user-files",
        library_s3_secret="library-s3",
        allow_unrestricted_egress=False,
    )
    for name, selector, egress in (
        ("craft-library-sync-egress", SYNC_POD_SELECTOR, None),
        ("jobs-anywhere", {"matchExpressions": [{"key": "job-name", "operator": "Exists"}]}, [{}]),
    ):
        spec: dict[str, Any] = {"podSelector": selector, "policyTypes": ["Egress"]}
        if egress is not None:
            spec["egress"] = egress
        world.cache.put(
            "NetworkPolicy", {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}
        )

    first = await next_pass(world, {})

    assert jobs_created(world) == 0, "no Job holds S3 credentials with its egress open"
    condition = first.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "EgressNotRestricted")


SYNC_POD_SELECTOR = {
    "matchLabels": {
        "app.kubernetes.io/name": "craft-sandbox",
        "app.kubernetes.io/component": "library-sync",
    }
}


async def test_no_sync_job_starts_while_no_policy_restricts_the_egress_of_its_pod(
    make_world: Callable[..., World],
) -> None:
    world = make_world(
        s3_bucket="onyx-user-files",
        library_s3_secret="library-s3",
        allow_unrestricted_egress=False,
    )
    # A policy for sandbox pods only: the sync Job's pod (component library-sync) is not in it.
    world.cache.put(
        "NetworkPolicy",
        {
            "metadata": {"name": "sandboxes", "namespace": NAMESPACE},
            "spec": {
                "podSelector": {"matchLabels": {"app.kubernetes.io/component": "sandbox"}},
                "policyTypes": ["Egress"],
            },
        },
    )
    first = await next_pass(world, {})
    assert jobs_created(world) == 0, "no Job holds S3 credentials with its egress open"
    condition = first.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "EgressNotRestricted")
    assert world.events.reasons.count("EgressNotRestricted") == 1

    again = await next_pass(world, first)
    assert world.events.reasons.count("EgressNotRestricted") == 1, "said once"

    world.cache.put(
        "NetworkPolicy",
        {
            "metadata": {"name": "craft-library-sync-egress", "namespace": NAMESPACE},
            "spec": {
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/name": "craft-sandbox",
                        "app.kubernetes.io/component": "library-sync",
                    }
                },
                "policyTypes": ["Ingress", "Egress"],
            },
        },
    )
    await next_pass(world, again)
    assert jobs_created(world) == 1


async def test_a_job_pod_read_directly_is_cached_only_if_the_job_controls_it(
    job_world: World,
) -> None:
    """The Job's end can come before its pod's, so its pods are listed once by the Job's
    label; a pod someone labelled so is never put in the cache, whose watches (on the
    operator's own pods) would never see it change or go."""
    first = await next_pass(job_world, {})
    name = "alice-library-1"
    job = copy.deepcopy(job_world.cache.get("Job", NAMESPACE, name))
    assert job is not None
    job["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1000)
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    job_world.cache.put("Job", job)
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": name,
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    state = {"terminated": {"exitCode": 0, "message": json.dumps(SYNCED)}}
    for pod_name, owners in ((f"{name}-abcde", [owner]), (f"{name}-plant", [])):
        job_world.emulator.create(
            "v1/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": NAMESPACE,
                    "labels": {"batch.kubernetes.io/job-name": name},
                    "ownerReferences": owners,
                },
                "spec": {"containers": [{"name": "sync", "image": "craft-operator:dev"}]},
                "status": {"containerStatuses": [{"name": "sync", "state": state}]},
            },
        )

    collected = await next_pass(job_world, first)

    assert condition(collected)[:2] == ("True", "Synced")
    assert job_world.cache.get("Pod", NAMESPACE, f"{name}-abcde") is not None
    assert job_world.cache.get("Pod", NAMESPACE, f"{name}-plant") is None


async def test_a_job_error_quoting_pieces_of_the_pat_is_withheld(job_world: World) -> None:
    # The Job mounts the library volume the agent writes: its errors may quote file names
    # the agent chose, pieces of its token among them.
    secret = CANARY.removeprefix("onyx_pat_")
    quoted = {**S3_DOWN, "reason": "SyncFailed", "error": f"cannot remove '{secret[:14]}'"}
    first = await next_pass(job_world, {}, with_pat=True)
    end_job(job_world, "alice-library-1", quoted, exit_code=1)
    collected = await next_pass(job_world, first, with_pat=True)

    status, reason, message = condition(collected)
    assert (status, reason) == ("False", "SyncFailed")
    assert "output withheld: it contained the PAT" in message
    assert collected.run.status.user_library is not None
    assert secret[:14] not in str(collected.run.status.user_library)
    assert all(secret[:14] not in said for _, _, said in job_world.events.posted)


async def test_a_job_error_quoting_a_file_name_that_is_not_utf8_can_be_written_and_said(
    job_world: World,
) -> None:
    """The agent names a file with bytes that are not UTF-8; the sync quotes its name, which
    reaches the termination message's JSON as an escaped lone surrogate. Taken as is, no
    status holding it could be written, on any pass, nor its Warning event sent."""
    planted = {**FULL_VOLUME, "error": "cannot update docs/\udcff: Permission denied"}
    first = await next_pass(job_world, {})
    end_job(job_world, "alice-library-1", json.loads(json.dumps(planted)), exit_code=3)
    collected = await next_pass(job_world, first)

    status, reason, message = condition(collected)
    assert (status, reason) == ("False", "DestinationFailed")
    assert "cannot update docs/\\udcff: Permission denied" in message
    orjson.dumps(dump_status(collected.run.status))
    orjson.dumps(job_world.events.posted[-1])


FULL_VOLUME = {
    "ok": False,
    "error": "cannot update docs/a.pdf: No space left on device (the library volume is full)",
    "reason": "DestinationFailed",
    "retryable": False,
}


async def volume_pass(world: World, last: Pass, capacity: str) -> Pass:
    """A pass of the library volume's step, then the library's, with the volume's PVC
    bound at ``capacity``."""
    p = ready(world, dump_status(last.run.status))
    pvcs, claim = "v1/persistentvolumeclaims", f"{NAME}-library"
    if world.emulator.find(pvcs, NAMESPACE, claim) is not None:  # made by an earlier pass
        bound = {"status": {"phase": "Bound", "capacity": {"storage": capacity}}}
        world.emulator.patch(pvcs, NAMESPACE, claim, bound, subresource="status")
        world.cache.put(kinds.PVC.name, world.emulator.get(pvcs, NAMESPACE, claim))
    await library_volume.converge_volume(p)
    await library.sync_library(p)
    return p


async def test_a_sync_failed_on_a_full_volume_is_tried_again_once_the_volume_has_grown(
    job_world: World,
) -> None:
    first = await volume_pass(job_world, await next_pass(job_world, {}), "1Gi")
    first = await volume_pass(job_world, first, "1Gi")
    end_job(job_world, "alice-library-1", FULL_VOLUME, exit_code=3)
    failed = await volume_pass(job_world, first, "1Gi")
    still = await volume_pass(job_world, failed, "1Gi")

    assert condition(still)[:2] == ("False", "DestinationFailed")
    assert jobs_created(job_world) == 1, "a full volume is not retried as it is"

    grown = await volume_pass(job_world, still, "50Gi")

    assert jobs_created(job_world) == 2
    assert grown.run.status.user_library is not None
    assert grown.run.status.user_library.job == "alice-library-2"


async def test_no_sync_job_starts_while_the_policies_cannot_be_watched_and_that_is_said(
    make_world: Callable[..., World],
) -> None:
    """A restricting policy is cached, but the watch fails (a 403, say): one deleted since
    would still count. Said as the pods' refusal is, not as a missing policy."""
    world = make_world(
        s3_bucket="onyx-user-files", library_s3_secret="library-s3", allow_unrestricted_egress=False
    )
    world.cache.put(
        "NetworkPolicy",
        {
            "metadata": {"name": "craft-library-sync-egress", "namespace": NAMESPACE},
            "spec": {
                "podSelector": {"matchLabels": {"app.kubernetes.io/component": "library-sync"}},
                "policyTypes": ["Ingress", "Egress"],
            },
        },
    )
    world.cache.mark_stale("NetworkPolicy", NAMESPACE, True)

    first = await next_pass(world, {})

    assert jobs_created(world) == 0
    status, reason, message = condition(first)
    assert (status, reason) == ("False", "EgressUnverified")
    assert "cannot watch the NetworkPolicies" in message
    assert "no new library sync Job pods" in message
    assert world.events.reasons == ["EgressUnverified"]


async def test_a_full_volume_grown_while_its_job_ran_is_tried_again(
    job_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await volume_pass(job_world, await next_pass(job_world, {}), "1Gi")
    end_job(job_world, "alice-library-1", S3_DOWN, exit_code=1)
    backoff_passed(job_world, monkeypatch)
    second = await volume_pass(job_world, first, "1Gi")  # collects it, starts Job 2 on 1Gi
    second = await volume_pass(job_world, second, "1Gi")
    assert jobs_created(job_world) == 2
    job = job_world.emulator.get("batch/v1/jobs", NAMESPACE, "alice-library-2")
    assert job["metadata"]["annotations"]["craft.onyx.app/library-volume-capacity"] == "1Gi"

    # The volume is grown while Job 2 fills it; the Job fails on the old size all the same.
    end_job(job_world, "alice-library-2", FULL_VOLUME, exit_code=3)
    failed = await volume_pass(job_world, second, "50Gi")

    status, reason, message = condition(failed)
    assert (status, reason) == ("False", "DestinationFailed")
    assert "has grown to 50Gi since" in message
    await volume_pass(job_world, failed, "50Gi")
    assert jobs_created(job_world) == 3


async def test_no_sync_job_starts_for_a_revision_too_long_and_the_longest_fits_a_job(
    job_world: World,
) -> None:
    annotation = "craft.onyx.app/user-library-revision"
    p = job_world.pass_(spec=JOB_MODE, status={}, annotations={annotation: "r" * 300_000})
    p.pod = POD
    await library.sync_library(p)
    condition = p.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "RevisionTooLong")
    assert jobs_created(job_world) == 0

    longest = job_world.pass_(
        spec=JOB_MODE, status={}, annotations={annotation: "r" * MAX_LIBRARY_REVISION}
    )
    annotations = fourth_job(longest)["metadata"]["annotations"]
    # The API server's bound on an object's annotations: 256 KiB, keys and values.
    assert sum(len(k) + len(v) for k, v in annotations.items()) <= 256 * 1024
    longest.pod = POD
    await library.sync_library(longest)
    assert jobs_created(job_world) == 1
