"""Job mode: a sync Job writes the library into a volume the pod mounts; its outcome is status."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.kube.kinds import LABEL_MANAGED_BY
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    condition,
    event_posted,
    event_reasons,
    phase,
    pod,
    sandbox,
    status,
)
from tests.support import volumes
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.s3 import S3Server, running_s3_server, use_fake_aws_credentials

REVISION = "craft.onyx.app/user-library-revision"
PVCS = "v1/persistentvolumeclaims"
JOBS = "batch/v1/jobs"


def job_mode_sandbox(**library: Any) -> dict[str, Any]:
    return sandbox("alice", userLibrary={"mode": "Job", **library})


async def first_job_running(emulator: KubeEmulator) -> dict[str, Any]:
    """Sandbox ``alice`` in Job mode, its pod running and its first sync Job made: the Job."""
    emulator.create(SANDBOXES, job_mode_sandbox())
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    job: dict[str, Any] = await eventually(
        lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1"), what="Job 1"
    )
    return job


def finish_job(
    emulator: KubeEmulator,
    name: str,
    *,
    ok: bool = True,
    result: dict | None = None,
    exit_code: int = 0,
) -> None:
    """Play the Job controller and kubelet: the Job's pod ends with a result, then the Job."""
    job = emulator.get(JOBS, NAMESPACE, name)
    template = job["spec"]["template"]
    labels = {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": name}
    emulator.create(
        "v1/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-abcde",
                "namespace": NAMESPACE,
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": name,
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template["spec"],
        },
    )
    message = json.dumps(result or {"ok": ok})
    emulator.patch(
        "v1/pods",
        NAMESPACE,
        f"{name}-abcde",
        {
            "status": {
                "phase": "Succeeded" if ok else "Failed",
                "containerStatuses": [
                    {
                        "name": "sync",
                        "ready": False,
                        "restartCount": 0,
                        "image": "craft-operator:test",
                        "imageID": "",
                        "state": {
                            "terminated": {
                                "exitCode": exit_code,
                                "message": message,
                                "reason": "Completed" if ok else "Error",
                            }
                        },
                    }
                ],
            }
        },
        subresource="status",
    )
    emulator.patch(
        JOBS,
        NAMESPACE,
        name,
        {"status": {"conditions": [{"type": "Complete" if ok else "Failed", "status": "True"}]}},
        subresource="status",
    )


async def test_job_mode_mounts_a_volume_and_runs_a_sync_job_whose_outcome_lands_in_status(
    emulator: KubeEmulator, job_mode_operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, job_mode_sandbox(size="5Gi"))

    created = await eventually(lambda: pod(emulator, "alice"), what="the pod")
    claim = emulator.get("v1/persistentvolumeclaims", NAMESPACE, "alice-library")
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    volumes = {v["name"]: v for v in created["spec"]["volumes"]}
    assert volumes["user-library"]["persistentVolumeClaim"] == {"claimName": "alice-library"}
    mark_pod_running(emulator, NAMESPACE, "alice")

    job = await eventually(lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1"), what="Job 1")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "craft-operator:test"
    assert container["args"][:3] == ["sync-user-library", "--bucket", "craft-libraries"]
    env = {item["name"]: item for item in container["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "library-s3"
    assert "AWS_ACCESS_KEY_ID" not in str(created["spec"])  # the sandbox never gets S3 keys
    await eventually(
        lambda: condition(emulator, "alice", "UserLibrarySynced")["reason"] == "Syncing",
        what="UserLibrarySynced Syncing",
    )

    finish_job(
        emulator,
        "alice-library-1",
        result={
            "ok": True,
            "files": 3,
            "bytes": 1200,
            "bytesTransferred": 5000,
            "durationSeconds": 1.5,
        },
    )

    ready = await phase(emulator, "alice", "Ready")
    assert ready["userLibrary"]["files"] == 3
    assert ready["userLibrary"]["bytesTransferred"] == 5000
    await eventually(
        lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1") is None, what="cleanup"
    )
    await event_posted(emulator, "alice", "LibrarySynced")


async def test_a_revision_annotated_while_a_job_runs_gets_a_job_of_its_own(
    emulator: KubeEmulator, job_mode_operator: OperatorContext
) -> None:
    await first_job_running(emulator)

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"annotations": {REVISION: "r2"}}})
    finish_job(emulator, "alice-library-1", result={"ok": True, "files": 1, "bytes": 1})

    second = await eventually(
        lambda: emulator.find(JOBS, NAMESPACE, "alice-library-2"), what="Job 2"
    )
    assert second["metadata"]["annotations"][REVISION] == "r2"
    finish_job(emulator, "alice-library-2", result={"ok": True, "files": 2, "bytes": 2})
    await eventually(
        lambda: status(emulator, "alice").get("userLibrary", {}).get("observedRevision") == "r2",
        what="r2 synced",
    )


async def test_a_running_job_whose_labels_were_edited_away_is_followed_not_doubled(
    emulator: KubeEmulator, job_mode_operator: OperatorContext
) -> None:
    # The watches select by the managed-by label: the API server tells them the Job was
    # deleted while it runs on. No second Job writes the volume beside it, and nothing
    # beyond the operator's grants is used (its Role has no patch on Jobs).
    await first_job_running(emulator)
    await eventually(
        lambda: condition(emulator, "alice", "UserLibrarySynced")["reason"] == "Syncing",
        what="UserLibrarySynced Syncing",
    )

    # The label the watches select by (a Job with no labels at all gets its template's
    # back from the real API server's defaulting).
    emulator.patch(
        JOBS, NAMESPACE, "alice-library-1", {"metadata": {"labels": {LABEL_MANAGED_BY: None}}}
    )
    await asyncio.sleep(1.0)  # room for a second Job to show
    finish_job(emulator, "alice-library-1", result={"ok": True, "files": 1, "bytes": 1})

    ready = await phase(emulator, "alice", "Ready")
    assert ready["userLibrary"]["files"] == 1
    assert emulator.find(JOBS, NAMESPACE, "alice-library-2") is None


async def test_a_job_that_fails_for_good_is_reported_and_not_rerun(
    emulator: KubeEmulator, job_mode_operator: OperatorContext
) -> None:
    await first_job_running(emulator)

    finish_job(
        emulator,
        "alice-library-1",
        ok=False,
        exit_code=3,
        result={"ok": False, "error": "huge.bin is over the 500 MB cap", "reason": "FileTooLarge"},
    )

    synced = await eventually(
        lambda: (
            (c := condition(emulator, "alice", "UserLibrarySynced")).get("status") == "False" and c
        ),
        what="the failure reported",
    )
    assert synced["reason"] == "FileTooLarge"
    assert "huge.bin" in synced["message"]
    await event_posted(emulator, "alice", "LibraryFileTooLarge")
    assert emulator.find(JOBS, NAMESPACE, "alice-library-2") is None


async def test_job_mode_without_an_s3_secret_says_which_setting_is_missing(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    no_secret = settings.model_copy(update={"s3_bucket": "craft-libraries"})
    async with running_operator(str(emulator.url).rstrip("/"), no_secret, exec_transport=pod_exec):
        emulator.create(SANDBOXES, job_mode_sandbox())
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")

        synced = await eventually(
            lambda: (
                (c := condition(emulator, "alice", "UserLibrarySynced")).get("status") == "False"
                and c
            ),
            what="the misconfiguration reported",
        )
        assert "CRAFT_LIBRARY_S3_SECRET" in synced["message"]


async def test_deleting_a_job_mode_sandbox_removes_its_volume_and_jobs(
    emulator: KubeEmulator, job_mode_operator: OperatorContext
) -> None:
    await first_job_running(emulator)

    emulator.remove(SANDBOXES, NAMESPACE, "alice")

    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="gone")
    assert emulator.find("v1/persistentvolumeclaims", NAMESPACE, "alice-library") is None
    assert emulator.find(JOBS, NAMESPACE, "alice-library-1") is None


@pytest.fixture
def sts(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """moto over HTTP as the STS endpoint (it issues credentials; it enforces no policy)."""
    use_fake_aws_credentials(monkeypatch)
    yield from running_s3_server()


def with_job_role(settings: Settings, sts_url: str) -> Settings:
    """Job-mode settings in which each sync Job reads S3 with STS credentials of its own."""
    return settings.model_copy(
        update={
            "s3_bucket": "craft-libraries",
            "operator_image": "craft-operator:test",
            "library_job_role_arn": "arn:aws:iam::123456789012:role/craft-library-reader",
            "library_sts_endpoint_url": sts_url,
        }
    )


async def test_with_a_job_role_each_job_reads_s3_with_its_own_scoped_secret(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec, sts: S3Server
) -> None:
    scoped = with_job_role(settings, sts.url)
    async with running_operator(str(emulator.url).rstrip("/"), scoped, exec_transport=pod_exec):
        emulator.create(SANDBOXES, job_mode_sandbox())
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")
        job = await eventually(lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1"))
        secret = await eventually(
            lambda: emulator.find("v1/secrets", NAMESPACE, "alice-library-1-s3"),
            what="the Job's own Secret",
        )

    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Job", job["metadata"]["uid"])
    assert set(secret["data"]) == {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    }
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {item["valueFrom"]["secretKeyRef"]["name"] for item in env if "valueFrom" in item} == {
        "alice-library-1-s3"
    }


@pytest.mark.usefixtures("job_mode_operator")
async def test_a_job_by_the_sync_jobs_name_made_by_someone_else_is_reported_and_left_alone(
    emulator: KubeEmulator,
) -> None:
    theirs = emulator.create(
        JOBS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "alice-library-1", "namespace": NAMESPACE},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "theirs", "image": "registry.example/theirs:1"}],
                    }
                }
            },
        },
    )
    emulator.create(SANDBOXES, job_mode_sandbox())
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")

    clash = await eventually(
        lambda: (
            (c := condition(emulator, "alice", "UserLibrarySynced")).get("reason") == "JobNameTaken"
            and c
        ),
        what="JobNameTaken",
    )
    assert "not managed by this CraftSandbox" in clash["message"]
    kept = emulator.get(JOBS, NAMESPACE, "alice-library-1")
    assert kept["metadata"]["uid"] == theirs["metadata"]["uid"]
    assert not kept["metadata"].get("ownerReferences")


@pytest.mark.usefixtures("job_mode_operator")
async def test_a_pod_labelled_with_the_jobs_name_but_not_made_by_it_supplies_no_result(
    emulator: KubeEmulator,
) -> None:
    """Anyone who can create pods can label one with the Job's name and a forged result;
    only the pod the Job controls speaks for it."""
    emulator.create(SANDBOXES, job_mode_sandbox())
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    job = await eventually(lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1"), what="Job")
    labels = {
        **job["spec"]["template"]["metadata"]["labels"],
        "batch.kubernetes.io/job-name": "alice-library-1",
    }
    emulator.create(
        "v1/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "forged", "namespace": NAMESPACE, "labels": labels},
            "spec": job["spec"]["template"]["spec"],
        },
    )
    forged = {"ok": True, "files": 999, "bytes": 1, "bytesTransferred": 1, "durationSeconds": 1}
    terminated = {"exitCode": 0, "message": json.dumps(forged), "reason": "Completed"}
    emulator.patch(
        "v1/pods",
        NAMESPACE,
        "forged",
        {
            "status": {
                "phase": "Succeeded",
                "containerStatuses": [
                    {
                        "name": "sync",
                        "ready": False,
                        "restartCount": 0,
                        "image": "craft-operator:test",
                        "imageID": "",
                        "state": {"terminated": terminated},
                    }
                ],
            }
        },
        subresource="status",
    )
    emulator.patch(
        JOBS,
        NAMESPACE,
        "alice-library-1",
        {"status": {"conditions": [{"type": "Complete", "status": "True"}]}},
        subresource="status",
    )

    ready = await phase(emulator, "alice", "Ready")
    assert ready["userLibrary"].get("files") != 999


async def test_a_passing_sts_outage_is_retried_not_recorded_as_a_failed_attempt(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    """STS throttled or down for a moment must not stop this user's syncs until the next
    change: the attempt is retried with backoff."""
    unreachable = with_job_role(settings, "http://127.0.0.1:9")  # discard: nothing listens
    async with running_operator(
        str(emulator.url).rstrip("/"), unreachable, exec_transport=pod_exec
    ):
        emulator.create(SANDBOXES, job_mode_sandbox())
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")
        unavailable = await eventually(
            lambda: (
                (c := condition(emulator, "alice", "UserLibrarySynced")).get("reason")
                == "S3Unavailable"
                and c
            ),
            what="S3Unavailable",
            within=30,
        )
        library = emulator.get(SANDBOXES, NAMESPACE, "alice")["status"].get("userLibrary") or {}

    assert unavailable["status"] == "False"
    assert "failedAttempt" not in library
    assert emulator.find(JOBS, NAMESPACE, "alice-library-1") is None


async def test_a_foreign_secret_by_the_jobs_credentials_name_is_reported_and_gets_no_credentials(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec, sts: S3Server
) -> None:
    """The Job's Secret name is predictable; a Secret someone made under it must neither be
    used by the Job nor receive the scoped credentials, and the Job goes again."""
    theirs = emulator.create(
        "v1/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "alice-library-1-s3", "namespace": NAMESPACE},
            "data": {"AWS_ACCESS_KEY_ID": "dGhlaXJz"},
        },
    )
    scoped = with_job_role(settings, sts.url)
    async with running_operator(str(emulator.url).rstrip("/"), scoped, exec_transport=pod_exec):
        emulator.create(SANDBOXES, job_mode_sandbox())
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")
        clash = await eventually(
            lambda: (
                (c := condition(emulator, "alice", "UserLibrarySynced")).get("reason")
                == "SecretNameTaken"
                and c
            ),
            what="SecretNameTaken",
        )

    assert "alice-library-1-s3" in clash["message"]
    kept = emulator.get("v1/secrets", NAMESPACE, "alice-library-1-s3")
    assert kept["metadata"]["uid"] == theirs["metadata"]["uid"]
    assert kept["data"] == {"AWS_ACCESS_KEY_ID": "dGhlaXJz"}
    assert emulator.find(JOBS, NAMESPACE, "alice-library-1") is None


async def test_a_sync_job_left_without_its_credentials_gets_them(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec, sts: S3Server
) -> None:
    """The Secret's create and then the Job's clean-up refused (or the operator stopped in
    between): the Job's pod could not start, and the sandbox waited on it until its
    deadline (30 minutes)."""
    refused: list[str] = []

    async def refuse_once(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        path, method = request.url.path, request.method.value.upper()
        name = str(((request.data or {}).get("metadata") or {}).get("name", ""))
        wanted = (method == "POST" and name.endswith("-s3") and "s3" not in refused) or (
            method == "DELETE" and "/jobs/" in path and "job" not in refused
        )
        if not wanted:
            return None
        refused.append("s3" if method == "POST" else "job")
        return aiohttp.web.json_response({"kind": "Status", "code": 500}, status=500)

    scoped = with_job_role(settings, sts.url)
    async with running_operator(str(emulator.url).rstrip("/"), scoped, exec_transport=pod_exec):
        emulator.create(SANDBOXES, job_mode_sandbox())
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        emulator.before_request.append(refuse_once)
        mark_pod_running(emulator, NAMESPACE, "alice")
        job = await eventually(lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1"))
        await eventually(lambda: len(refused) == 2, what="the Secret and the clean-up refused")
        waiting_job_pod(emulator, job, reason="CreateContainerConfigError")

        secret = await eventually(
            lambda: emulator.find("v1/secrets", NAMESPACE, "alice-library-1-s3"),
            what="the Job's Secret, made after all",
            within=15,  # after the refusal's backoff
        )
        await event_posted(emulator, "alice", "LibrarySyncCredentials")

    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]


@pytest.mark.usefixtures("job_mode_operator")
async def test_a_sync_job_whose_pod_cannot_start_says_why_not_only_that_it_runs(
    emulator: KubeEmulator,
) -> None:
    """An image the namespace cannot pull, a full node: 'is running' for 30 minutes."""
    emulator.create(SANDBOXES, job_mode_sandbox())
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    job = await eventually(lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1"))

    waiting_job_pod(emulator, job, reason="ImagePullBackOff")

    # The pod is made, then its status written (two events, as from the API server): the
    # first pass may see it Pending with no reason yet; the next one says the reason.
    said = await eventually(
        lambda: "ImagePullBackOff" in (m := condition(emulator, "alice", "Ready")["message"]) and m,
        what="the pod's wait, with its reason, in the sandbox's status",
    )
    assert "its pod waits" in said


def waiting_job_pod(emulator: KubeEmulator, job: dict[str, Any], *, reason: str) -> dict[str, Any]:
    """The Job's pod as a kubelet that cannot start its container shows it."""
    made = emulator.create(
        "v1/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job['metadata']['name']}-x1",
                "namespace": NAMESPACE,
                "labels": {
                    **(job["spec"]["template"]["metadata"].get("labels") or {}),
                    "batch.kubernetes.io/job-name": job["metadata"]["name"],
                },
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": job["spec"]["template"]["spec"],
        },
    )
    waiting = {"reason": reason, "message": 'secret "alice-library-1-s3" not found'}
    status = {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": job["spec"]["template"]["spec"]["containers"][0]["name"],
                "ready": False,
                "restartCount": 0,
                "image": "craft-operator:test",
                "imageID": "",
                "state": {"waiting": waiting},
            }
        ],
    }
    emulator.patch(
        "v1/pods", NAMESPACE, made["metadata"]["name"], {"status": status}, subresource="status"
    )
    return made


async def test_a_library_volume_being_deleted_gets_no_job_and_the_sandbox_says_why(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    """Deleted by someone while the pod mounts it (pvc-protection holds it Terminating): a
    Job could never mount it, and waited unschedulable until its deadline, the sandbox
    Ready and Synced at the old revision all the while."""
    job_mode = settings.model_copy(
        update={
            "s3_bucket": "craft-libraries",
            "library_s3_secret": "library-s3",
            "operator_image": "craft-operator:test",
        }
    )
    url = str(emulator.url).rstrip("/")
    async with running_operator(url, job_mode, exec_transport=pod_exec) as operator:
        await first_job_running(emulator)
        finish_job(emulator, "alice-library-1", result={"ok": True, "files": 1, "bytes": 1})
        await phase(emulator, "alice", "Ready")
        protection = {"metadata": {"finalizers": ["kubernetes.io/pvc-protection"]}}
        emulator.patch(PVCS, NAMESPACE, "alice-library", protection)
        emulator.remove(PVCS, NAMESPACE, "alice-library")
        await eventually(
            lambda: (
                (operator.cache.get("PVC", NAMESPACE, "alice-library") or {})
                .get("metadata", {})
                .get("deletionTimestamp")
            ),
            what="the operator sees the volume being deleted",
        )

        emulator.patch(
            SANDBOXES, NAMESPACE, "alice", {"metadata": {"annotations": {REVISION: "r2"}}}
        )

        said = await eventually(
            lambda: (
                (c := condition(emulator, "alice", "UserLibrarySynced")).get("reason")
                == "VolumeTerminating"
                and c
            ),
            what="VolumeTerminating",
        )
    assert said["status"] == "False"
    assert "alice-library is being deleted" in said["message"]
    assert emulator.find(JOBS, NAMESPACE, "alice-library-2") is None
    assert event_reasons(emulator, "alice").count("VolumeTerminating") == 1


@pytest.mark.usefixtures("job_mode_operator")
async def test_a_larger_library_size_grows_the_volume_and_what_cannot_follow_is_said(
    emulator: KubeEmulator,
) -> None:
    """The library outgrew its volume: raising spec.userLibrary.size did nothing, silently."""
    emulator.create(SANDBOXES, job_mode_sandbox(size="5Gi"))
    await eventually(lambda: emulator.find(PVCS, NAMESPACE, "alice-library"), what="the PVC")

    grow = {"spec": {"userLibrary": {"mode": "Job", "size": "50Gi"}}}
    emulator.patch(SANDBOXES, NAMESPACE, "alice", grow)

    await eventually(
        lambda: (
            emulator.get(PVCS, NAMESPACE, "alice-library")["spec"]["resources"]["requests"][
                "storage"
            ]
            == "50Gi"
        ),
        what="the volume asked to grow",
    )
    await event_posted(emulator, "alice", "LibraryVolumeResized")

    shrink = {"spec": {"userLibrary": {"mode": "Job", "size": "1Gi"}}}
    emulator.patch(SANDBOXES, NAMESPACE, "alice", shrink)

    await event_posted(emulator, "alice", "LibraryVolumeKept")
    storage = emulator.get(PVCS, NAMESPACE, "alice-library")["spec"]["resources"]["requests"]
    assert storage["storage"] == "50Gi"


@pytest.mark.admission_rejections
@pytest.mark.usefixtures("job_mode_operator")
async def test_what_the_library_volume_cannot_follow_is_said_once_and_kept_in_status(
    emulator: KubeEmulator,
) -> None:
    """A Warning on every pass buried the sandbox's events; the refused resize was sent
    again on every pass too."""
    emulator.validators.append(volumes.refuse_expansion)
    emulator.create(SANDBOXES, job_mode_sandbox(size="5Gi"))
    await eventually(lambda: emulator.find(PVCS, NAMESPACE, "alice-library"), what="the PVC")
    await eventually(
        lambda: status(emulator, "alice").get("libraryVolume"), what="status.libraryVolume"
    )
    assert status(emulator, "alice")["libraryVolume"]["requested"] == "5Gi"

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"userLibrary": {"size": "50Gi"}}})
    await event_posted(emulator, "alice", "LibraryVolumeResizeRefused")
    patches = f"PATCH /api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/alice-library"
    before = len(emulator.served)
    for n in range(4):  # passes for other reasons: an annotation, a touch, a resync
        emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"annotations": {"n": str(n)}}})
        await asyncio.sleep(0.3)

    message = status(emulator, "alice")["libraryVolume"]["message"]
    assert "cannot grow from 5Gi to 50Gi" in message
    assert event_reasons(emulator, "alice").count("LibraryVolumeResizeRefused") == 1
    assert patches not in emulator.writes(before)

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"userLibrary": {"size": "1Gi"}}})
    await event_posted(emulator, "alice", "LibraryVolumeKept")
    for n in range(4):
        emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"annotations": {"m": str(n)}}})
        await asyncio.sleep(0.3)

    assert "larger than 1Gi: kept" in status(emulator, "alice")["libraryVolume"]["message"]
    assert event_reasons(emulator, "alice").count("LibraryVolumeKept") == 1
