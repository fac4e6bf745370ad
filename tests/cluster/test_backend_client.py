"""The backend's client on a real API server, with the real operator, under exactly the RBAC
of ``manifests/backend``: server-side apply with its own field manager, waits by watch, the
annotations, sleep and wake, deletion. The API server's audit log must show no request of
the backend refused.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from craft_operator.api.durations import parse_duration
from craft_operator.client import (
    AsyncSandboxClient,
    FieldConflictError,
    ForbiddenError,
    Progress,
    SandboxClient,
    SandboxFailedError,
)
from tests.support.backend import BACKEND_USER, backend_kubeconfig
from tests.support.cluster import CRAFT, Cluster, forbidden_requests, wait_for
from tests.support.operator_process import OperatorProcess

USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
PREFIX = f"public/knowledge/{USER_ID}/user_library/"
SANDBOXES = f"{CRAFT}/craftsandboxes"
#: Provisioning on two shared cores: scheduling, kwok, and onyx-cli through real exec.
READY_WITHIN = 120.0


@pytest.fixture
def backend(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """The backend's kubeconfig, granted manifests/backend in the test's namespace; at the
    end, no request of the backend may have been refused there."""
    yield backend_kubeconfig(cluster, namespace, tmp_path / "backend.kubeconfig")
    refused = forbidden_requests(cluster.plane, namespace, BACKEND_USER)
    assert not refused, f"the backend's Role lacks a grant the client used: {refused}"


def token(cluster: Cluster, namespace: str, name: str) -> str:
    secret = cluster.get("/api/v1/secrets", namespace, f"{name}-credentials")
    assert secret is not None
    return base64.b64decode(secret["data"]["ONYX_PAT"]).decode()


def pod_uid(cluster: Cluster, namespace: str, name: str) -> str | None:
    pod = cluster.get("/api/v1/pods", namespace, name)
    return None if pod is None else str(pod["metadata"]["uid"])


def test_the_backend_drives_a_sandboxs_whole_life_with_only_its_role(
    cluster: Cluster,
    namespace: str,
    operator: OperatorProcess,
    backend: Path,
    s3: Any,
    bucket: str,
) -> None:
    seen: list[Progress] = []
    with SandboxClient(kubeconfig=backend) as sandboxes:
        sandboxes.ensure(namespace, "alice", user_id=USER_ID, sources=["slack"])
        try:
            sandboxes.wait_ready(namespace, "alice", timeout=READY_WITHIN, on_progress=seen.append)
        except Exception as error:
            raise AssertionError(f"{error}\noperator log:\n{operator.log_tail()}") from error
        assert sandboxes.pod_name(namespace, "alice") == "alice"
        first_pod, pat = pod_uid(cluster, namespace, "alice"), token(cluster, namespace, "alice")

        touched = sandboxes.touch(namespace, "alice")
        stored = (cluster.sandbox(namespace, "alice") or {})["metadata"]["annotations"]
        assert stored["craft.onyx.app/last-activity"] == touched.strftime("%Y-%m-%dT%H:%M:%SZ")

        s3.put_object(Bucket=bucket, Key=PREFIX + "notes.txt", Body=b"uploaded by the user")
        revision = sandboxes.notify_library_changed(namespace, "alice", wait=True, timeout=60)
        library = sandboxes.status(namespace, "alice").user_library
        assert library is not None
        assert (library.observed_revision, library.files) == (revision, 1)

        sandboxes.sleep(namespace, "alice", wait=True, timeout=60)
        assert sandboxes.status(namespace, "alice").phase == "Suspended"
        assert sandboxes.pod_name(namespace, "alice") is None
        wait_for(lambda: pod_uid(cluster, namespace, "alice") is None, what="the pod gone")

        sandboxes.wake(namespace, "alice", wait=True, timeout=READY_WITHIN)
        assert pod_uid(cluster, namespace, "alice") not in (None, first_pod)
        assert token(cluster, namespace, "alice") == pat, "sleep keeps the credentials"

        assert sandboxes.delete(namespace, "alice", wait=True, timeout=60) is True
        assert cluster.sandbox(namespace, "alice") is None
        requests = dict(sandboxes.aio.requests)

    assert seen[-1].ready
    assert len(seen) > 1, "progress is reported as the sandbox comes up"
    assert requests["watch"] >= 4, "every wait watches"
    assert requests["get"] <= 12, f"waits read once and then watch, not poll: {requests}"


async def test_a_sandbox_the_platform_does_not_allow_fails_the_wait_with_its_reason(
    namespace: str, operator: OperatorProcess, backend: Path
) -> None:
    async with AsyncSandboxClient(kubeconfig=backend) as sandboxes:
        await sandboxes.ensure(namespace, "mallory", user_id=USER_ID, image="attacker/sandbox:1")

        with pytest.raises(SandboxFailedError) as failure:
            await sandboxes.wait_ready(namespace, "mallory", timeout=READY_WITHIN)

    assert failure.value.condition_type == "CredentialsReady"
    assert failure.value.reason == "PolicyDenied"
    assert failure.value.phase == "Failed"


async def test_ensure_does_not_take_fields_another_manager_owns_unless_forced(
    cluster: Cluster, namespace: str, backend: Path
) -> None:
    gitops = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": "bob"},
        "spec": {"user": {"id": USER_ID}, "sources": [{"name": "confluence"}]},
    }
    cluster.call(
        "PATCH",
        f"{CRAFT}/namespaces/{namespace}/craftsandboxes/bob?fieldManager=gitops",
        gitops,
        content_type="application/apply-patch+yaml",
    )
    async with AsyncSandboxClient(kubeconfig=backend) as sandboxes:
        with pytest.raises(FieldConflictError, match="gitops"):
            await sandboxes.ensure(namespace, "bob", user_id=USER_ID, sources=["slack"])
        taken = await sandboxes.ensure(
            namespace, "bob", user_id=USER_ID, sources=["slack"], force=True
        )

    assert [source.name for source in taken.spec.sources] == ["slack"]
    managers = {
        entry["manager"]
        for entry in (cluster.sandbox(namespace, "bob") or {})["metadata"]["managedFields"]
    }
    assert "onyx-backend" in managers


@pytest.mark.parametrize(
    "idle_timeout",
    ["99999h99999h", timedelta(hours=100000), timedelta(hours=499995, minutes=9)],
    ids=["two-parts", "one-past-a-part", "longest"],
)
async def test_a_long_idle_timeout_the_crd_admits_is_applied_as_it_admits_it(
    cluster: Cluster, namespace: str, backend: Path, idle_timeout: str | timedelta
) -> None:
    # The client writes hours in parts of at most 99999h: one part of 100000h is a 422.
    async with AsyncSandboxClient(kubeconfig=backend) as sandboxes:
        applied = await sandboxes.ensure(
            namespace, "carol", user_id=USER_ID, idle_timeout=idle_timeout
        )

    stored = (cluster.sandbox(namespace, "carol") or {})["spec"]["idleTimeout"]
    assert parse_duration(stored) == applied.spec.idle_timeout


async def test_a_namespace_without_the_backends_role_is_refused_with_what_to_bind(
    cluster: Cluster, namespace: str, backend: Path
) -> None:
    elsewhere = cluster.restricted_namespace(f"no-backend-{uuid.uuid4().hex[:5]}")
    async with AsyncSandboxClient(kubeconfig=backend) as sandboxes:
        with pytest.raises(ForbiddenError) as refused:
            await sandboxes.ensure(elsewhere, "alice", user_id=USER_ID)

    text = str(refused.value)
    assert f'patch craftsandboxes.craft.onyx.app "alice" in namespace "{elsewhere}"' in text
    assert BACKEND_USER in text
    assert "manifests/backend/rbac.yaml" in text
