"""The user library follows S3: on an upload annotation, on a pod (re)start, on a spec change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.credentials.errors import DatabaseUnavailableError
from craft_operator.library import S3AccessDeniedError, make_s3_client
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    USER_ID,
    condition,
    event_posted,
    event_reasons,
    events_about,
    phase,
    pod,
    sandbox,
    status,
)
from tests.support.emulator import KubeEmulator
from tests.support.faults import failure_response
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.s3 import S3Server

REVISION = "craft.onyx.app/user-library-revision"
BUCKET = "craft-libraries"
PREFIX = f"public/knowledge/{USER_ID}/user_library/"


@pytest.fixture
def s3_client(s3: S3Server) -> Any:
    client = make_s3_client(endpoint_url=s3.url, region="us-east-1", max_attempts=1)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
async def operator_with_s3(
    emulator: KubeEmulator,
    settings: Settings,
    pod_exec: EmulatedPodExec,
    s3: S3Server,
    s3_client: Any,
) -> AsyncIterator[OperatorContext]:
    """The operator, syncing libraries from the test's S3 bucket."""
    with_s3 = settings.model_copy(update={"s3_bucket": BUCKET, "s3_endpoint_url": s3.url})
    url = str(emulator.url).rstrip("/")
    async with running_operator(url, with_s3, exec_transport=pod_exec) as op:
        yield op


def upload(client: Any, path: str, data: bytes) -> None:
    client.put_object(Bucket=BUCKET, Key=PREFIX + path, Body=data)


def library(pod_exec: EmulatedPodExec, name: str = "alice") -> Path:
    return pod_exec.local.workspace(NAMESPACE, name) / "user_library"


def annotate(emulator: KubeEmulator, revision: str) -> None:
    emulator.patch(
        SANDBOXES, NAMESPACE, "alice", {"metadata": {"annotations": {REVISION: revision}}}
    )


async def ready_with_library(emulator: KubeEmulator) -> dict:
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    return await phase(emulator, "alice", "Ready")


async def test_the_library_is_synced_when_the_pod_starts(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3_client: Any,
    pod_exec: EmulatedPodExec,
) -> None:
    upload(s3_client, "notes/plan.md", b"# plan\n")
    upload(s3_client, "data.csv", b"a,b\n1,2\n")

    ready = await ready_with_library(emulator)

    assert (library(pod_exec) / "notes" / "plan.md").read_bytes() == b"# plan\n"
    assert (library(pod_exec) / "data.csv").read_bytes() == b"a,b\n1,2\n"
    assert ready["userLibrary"]["files"] == 2
    assert ready["userLibrary"]["bytes"] == 15
    assert condition(emulator, "alice", "UserLibrarySynced")["reason"] == "Synced"


async def test_a_sandbox_with_a_library_is_ready_after_six_writes_and_two_events(
    emulator: KubeEmulator, operator_with_s3: OperatorContext, s3_client: Any
) -> None:
    upload(s3_client, "notes/plan.md", b"# plan\n")
    before = len(emulator.served)

    await ready_with_library(emulator)

    writes = emulator.writes(before)
    sandbox_path = f"/apis/craft.onyx.app/v1alpha1/namespaces/{NAMESPACE}/craftsandboxes/alice"
    assert sorted(w for w in writes if "/events" not in w) == sorted(
        [
            f"PATCH {sandbox_path}",  # the finalizer
            f"POST /api/v1/namespaces/{NAMESPACE}/secrets",
            f"POST /api/v1/namespaces/{NAMESPACE}/configmaps",
            f"POST /api/v1/namespaces/{NAMESPACE}/pods",
            f"PATCH {sandbox_path}/status",  # the pod created
            # The pass that validated onyx-cli and started the sync held its status (and its
            # events) for the pass that collected the sync: one write for both.
            f"PATCH {sandbox_path}/status",
        ]
    )
    said = await eventually(
        lambda: (
            len(found := events_about(emulator, "alice")) == 2
            and [(e["type"], e["reason"]) for e in found]
        ),
        what="two events: one per status write",
    )
    assert said == [("Normal", "PodCreated"), ("Normal", "LibrarySynced")]
    assert event_reasons(emulator, "alice") == [
        "PATMinted",
        "SecretCreated",
        "ConfigMapCreated",
        "PodCreated",
        "CLIValidated",
        "LibrarySynced",
    ]


async def test_a_new_revision_annotation_syncs_only_what_changed(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3_client: Any,
    pod_exec: EmulatedPodExec,
) -> None:
    upload(s3_client, "big.bin", b"x" * 100_000)
    await ready_with_library(emulator)

    upload(s3_client, "new.txt", b"hello")
    s3_client.delete_object(Bucket=BUCKET, Key=PREFIX + "big.bin")
    annotate(emulator, "rev-2")

    synced = await eventually(
        lambda: (
            (s := status(emulator, "alice")).get("userLibrary", {}).get("observedRevision")
            == "rev-2"
            and s["userLibrary"]
        ),
        what="revision rev-2 synced",
    )
    assert (library(pod_exec) / "new.txt").read_bytes() == b"hello"
    assert not (library(pod_exec) / "big.bin").exists()
    assert synced["files"] == 1
    assert synced["bytesTransferred"] < 10_000  # the new 5-byte file and tar framing only
    await event_posted(emulator, "alice", "LibrarySynced")


async def test_a_revision_bumped_during_a_sync_is_not_lost(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3_client: Any,
    pod_exec: EmulatedPodExec,
) -> None:
    await ready_with_library(emulator)
    upload(s3_client, "first.txt", b"1")

    annotate(emulator, "rev-2")
    await asyncio.sleep(0)  # the sync of rev-2 starts; rev-3 arrives while it may still run
    upload(s3_client, "second.txt", b"2")
    annotate(emulator, "rev-3")

    await eventually(
        lambda: status(emulator, "alice").get("userLibrary", {}).get("observedRevision") == "rev-3",
        what="revision rev-3 synced",
    )
    assert (library(pod_exec) / "second.txt").read_bytes() == b"2"


async def test_a_replaced_pod_gets_the_library_again(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3_client: Any,
    pod_exec: EmulatedPodExec,
) -> None:
    upload(s3_client, "keep.txt", b"keep")
    await ready_with_library(emulator)
    first = pod(emulator, "alice")
    assert first is not None

    emulator.remove("v1/pods", NAMESPACE, "alice")
    second = await eventually(
        lambda: (
            (p := pod(emulator, "alice")) and p["metadata"]["uid"] != first["metadata"]["uid"] and p
        ),
        what="a new pod",
    )
    mark_pod_running(emulator, NAMESPACE, "alice")

    await eventually(
        lambda: (
            status(emulator, "alice").get("userLibrary", {}).get("podUID")
            == second["metadata"]["uid"]
        ),
        what="the library synced into the new pod",
    )
    assert (library(pod_exec, "alice") / "keep.txt").read_bytes() == b"keep"


async def test_excluded_and_disabled_paths_are_removed_from_the_sandbox(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3_client: Any,
    pod_exec: EmulatedPodExec,
) -> None:
    for path in ("a.txt", "tmp/scratch.log", "private/secret.txt", "private/deep/x.txt"):
        upload(s3_client, path, b"data")
    await ready_with_library(emulator)
    assert (library(pod_exec) / "private" / "deep" / "x.txt").exists()

    emulator.patch(
        SANDBOXES,
        NAMESPACE,
        "alice",
        {"spec": {"userLibrary": {"exclude": ["*.log"], "disabledPaths": ["private"]}}},
    )

    await eventually(
        lambda: (
            not (library(pod_exec) / "private").exists()
            and not (library(pod_exec) / "tmp" / "scratch.log").exists()
        ),
        what="excluded and disabled files gone",
    )
    assert (library(pod_exec) / "a.txt").exists()


async def test_hostile_keys_are_skipped_and_reported_and_nothing_escapes_the_library(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3_client: Any,
    pod_exec: EmulatedPodExec,
    tmp_path: Path,
) -> None:
    upload(s3_client, "ok.txt", b"ok")
    for hostile in ("../../escape.txt", "a/../../../etc/passwd", "x/\x00nul", "/abs"):
        s3_client.put_object(Bucket=BUCKET, Key=PREFIX + hostile, Body=b"evil")

    ready = await ready_with_library(emulator)

    assert ready["userLibrary"]["skipped"] >= 3
    assert ready["userLibrary"]["files"] == 1
    await event_posted(emulator, "alice", "LibraryKeysSkipped")
    workspace = pod_exec.local.workspace(NAMESPACE, "alice")
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes() == b"evil"]  # noqa: ASYNC240
    assert outside == []
    assert not (workspace / "escape.txt").exists()


async def test_a_library_over_the_cap_is_reported_and_nothing_is_applied(
    emulator: KubeEmulator,
    settings: Settings,
    pod_exec: EmulatedPodExec,
    s3: S3Server,
    s3_client: Any,
) -> None:
    upload(s3_client, "small.txt", b"s")
    upload(s3_client, "huge.bin", b"x" * 2048)
    capped = settings.model_copy(
        update={"s3_bucket": BUCKET, "s3_endpoint_url": s3.url, "library_max_file_bytes": 1024}
    )
    async with running_operator(str(emulator.url).rstrip("/"), capped, exec_transport=pod_exec):
        emulator.create(SANDBOXES, sandbox("alice"))
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")

        synced = await eventually(
            lambda: (
                (c := condition(emulator, "alice", "UserLibrarySynced")).get("status") == "False"
                and c
            ),
            what="UserLibrarySynced False",
        )
        assert synced["reason"] == "FileTooLarge"
        assert "huge.bin" in synced["message"]
        assert not (library(pod_exec) / "small.txt").exists()  # nothing applied
        assert status(emulator, "alice")["phase"] == "Provisioning"


async def test_an_s3_outage_is_reported_and_the_sync_recovers_on_its_own(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3: S3Server,
    pod_exec: EmulatedPodExec,
) -> None:
    s3.stop()
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")

    down = await eventually(
        lambda: (
            (c := condition(emulator, "alice", "UserLibrarySynced")).get("status") == "False" and c
        ),
        what="the outage reported",
    )
    assert down["reason"] == "S3Unavailable"

    s3.start()
    client = make_s3_client(endpoint_url=s3.url, region="us-east-1", max_attempts=1)
    client.create_bucket(Bucket=BUCKET)
    upload(client, "back.txt", b"back")
    await phase(emulator, "alice", "Ready", within=20)
    assert (library(pod_exec) / "back.txt").read_bytes() == b"back"


async def test_a_status_the_api_server_cannot_store_backs_off_instead_of_redoing_every_second(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    pod_exec: EmulatedPodExec,
    s3_client: Any,
) -> None:
    """A spec that only just fits etcd leaves no room for its status: every status write
    fails. The sync and the validation the status never records were redone about once a
    second, for ever (a held pass between two failed writes passed for a success, so the
    backoff never grew); the failures now count, and the backoff grows."""
    upload(s3_client, "notes.md", b"hello")

    async def too_large(request: rendering.Request) -> aiohttp.web.Response | None:
        if request.url.path.endswith("/craftsandboxes/alice/status"):
            return failure_response(500, "InternalError", "etcdserver: request is too large")
        return None

    emulator.before_request.append(too_large)
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await eventually(lambda: pod_exec.calls, what="the first exec")
    await asyncio.sleep(12)

    execs = len(pod_exec.calls)
    # Without the backoff growing: about 2 execs a second (a validation, a sync), 20+ here.
    assert execs <= 10, f"{execs} execs in 12 s"
    # The status cannot say it: an event does, for whoever reads kubectl describe.
    [said] = [e for e in events_about(emulator, "alice") if e["reason"] == "StatusWriteFailed"]
    assert said["type"] == "Warning"
    assert "500 InternalError" in said["message"]
    assert "etcdserver" not in said["message"], "never the API server's own words"


async def test_a_database_outage_does_not_sync_the_library_again_once_it_ends(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # While the database is down the pass stops before the library's row, which shows as
    # Unknown meanwhile; once it is back, the recorded sync still stands: a fleet must not
    # resync every library (an S3 listing and an exec each) before it is Ready again.
    services = operator_with_s3.services
    upload(s3_client, "a.md", b"hello\n")
    await ready_with_library(emulator)
    synced = condition(emulator, "alice", "UserLibrarySynced")
    assert synced["reason"] == "Synced"
    syncs: list[object] = []
    real_sync, real_ensure = services.library.sync, services.credentials.ensure

    async def counted_sync(*args: Any, **kwargs: Any) -> Any:
        syncs.append(args)
        return await real_sync(*args, **kwargs)

    async def unreachable(*args: object, **kwargs: object) -> None:
        raise DatabaseUnavailableError("the credentials database is unreachable")

    monkeypatch.setattr(services.library, "sync", counted_sync)
    monkeypatch.setattr(services.credentials, "ensure", unreachable)
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"labels": {"poke": "1"}}})
    await eventually(
        lambda: (
            condition(emulator, "alice", "CredentialsReady").get("reason") == "DatabaseUnavailable"
        ),
        what="the outage reported",
    )
    assert condition(emulator, "alice", "UserLibrarySynced")["status"] == "Unknown"

    monkeypatch.setattr(services.credentials, "ensure", real_ensure)
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"labels": {"poke": "2"}}})
    await phase(emulator, "alice", "Ready", within=20)
    await asyncio.sleep(1.0)

    assert syncs == [], "the library was synced again though nothing about it changed"
    after = condition(emulator, "alice", "UserLibrarySynced")
    assert (after["status"], after["reason"]) == ("True", "Synced")
    assert after["message"] == "1 files, 6 bytes"


async def test_a_library_s3_refused_is_synced_by_itself_once_s3_allows_it(
    emulator: KubeEmulator,
    operator_with_s3: OperatorContext,
    s3_client: Any,
    pod_exec: EmulatedPodExec,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A bucket policy or role broken for a while is mended on S3's side, where the operator
    # sees no change: the refusal is retried with backoff, never pinned for good.
    services = operator_with_s3.services
    upload(s3_client, "a.md", b"hello\n")
    await ready_with_library(emulator)
    real_sync = services.library.sync
    denied = [True]

    async def refusing(*args: Any, **kwargs: Any) -> Any:
        if denied[0]:
            raise S3AccessDeniedError(f"S3 denied access to bucket '{BUCKET}': Access Denied")
        return await real_sync(*args, **kwargs)

    monkeypatch.setattr(services.library, "sync", refusing)
    upload(s3_client, "b.md", b"world\n")
    annotate(emulator, "r2")
    refused = await eventually(
        lambda: (
            (c := condition(emulator, "alice", "UserLibrarySynced")).get("reason")
            == "S3AccessDenied"
            and c
        ),
        what="the refusal reported",
    )
    assert refused["message"].endswith("; retried with backoff")
    denied[0] = False  # the bucket policy is mended
    await eventually(
        lambda: condition(emulator, "alice", "UserLibrarySynced").get("reason") == "Synced",
        what="the library synced once S3 allows it",
        within=15,
    )
    assert (library(pod_exec) / "b.md").read_bytes() == b"world\n"
