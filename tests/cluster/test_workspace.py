"""The workspace on a real API server: the pod after wake mounts the same PVC (same uid) as
before sleep, a file written into /workspace/sessions before sleep is read after wake (the
simulated kubelet keeps a claim's files by its name), a resize the API server refuses is
reported without stopping the pod, and a retained workspace outlives its sandbox."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from craft_operator.client import InvalidError, SandboxClient
from tests.cluster.test_lifecycle import (
    SANDBOXES,
    USER_ID,
    in_phase,
    pod,
    ready,
    reasons,
    sandbox,
    status,
    uid,
    until,
)
from tests.support.backend import backend_kubeconfig
from tests.support.cluster import CRAFT, Cluster, wait_for
from tests.support.operator_process import OperatorProcess
from tests.support.volumes import reserved_volume

pytestmark = pytest.mark.cluster

PVCS = "/api/v1/persistentvolumeclaims"
CLAIM = "alice-workspace"
NOTE = "/workspace/sessions/session-1/notes.txt"


@pytest.fixture
def volume(cluster: Cluster, namespace: str) -> Iterator[str]:
    """The PersistentVolume reserved for alice's workspace."""
    with reserved_volume(cluster, namespace, CLAIM) as name:
        yield name


def sh(cluster: Cluster, namespace: str, script: str) -> str:
    """Run ``script`` in alice's sandbox container over the real exec API; its stdout."""
    result = subprocess.run(
        [
            cluster.plane.binary("kubectl"),
            "--kubeconfig",
            str(cluster.plane.kubeconfig),
            "exec",
            "-n",
            namespace,
            "alice",
            "-c",
            "sandbox",
            "--",
            "sh",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"{script!r} failed: {result.stderr}"
    return result.stdout


def claim_of(running: dict[str, Any] | None) -> str:
    """The claim the pod mounts at /workspace/sessions."""
    assert running is not None
    [mount] = [
        m
        for m in running["spec"]["containers"][0]["volumeMounts"]
        if m["mountPath"] == "/workspace/sessions"
    ]
    [volume] = [v for v in running["spec"]["volumes"] if v["name"] == mount["name"]]
    return str(volume["persistentVolumeClaim"]["claimName"])


def workspace_ready(
    cluster: Cluster, namespace: str, operator: OperatorProcess, **workspace: object
) -> dict[str, Any]:
    cluster.create(SANDBOXES, namespace, sandbox("alice", workspace={"size": "1Gi", **workspace}))
    return ready(cluster, namespace, "alice", operator)


def test_after_wake_the_pod_mounts_the_same_pvc_and_reads_what_was_written_before_sleep(
    cluster: Cluster, namespace: str, operator: OperatorProcess, volume: str
) -> None:
    before = workspace_ready(cluster, namespace, operator)
    claim = cluster.get(PVCS, namespace, CLAIM)
    assert claim is not None
    assert (claim["status"]["phase"], claim["spec"]["volumeName"]) == ("Bound", volume)
    assert before["workspace"]["claimUID"] == uid(claim)
    assert claim_of(pod(cluster, namespace, "alice")) == CLAIM
    sh(cluster, namespace, f"mkdir -p $(dirname {NOTE}) && echo 'kept across sleep' > {NOTE}")
    assert sh(cluster, namespace, "id -u; stat -c %g /workspace/sessions").split() == [
        "1000",
        "1000",
    ], "the agent (uid 1000) writes into it through the pod's fsGroup"

    cluster.patch(SANDBOXES, namespace, "alice", {"spec": {"suspend": True}})
    in_phase(cluster, namespace, "alice", "Suspended", operator)
    wait_for(lambda: pod(cluster, namespace, "alice") is None, what="the pod gone")
    assert uid(cluster.get(PVCS, namespace, CLAIM)) == uid(claim), "kept while asleep"

    cluster.patch(SANDBOXES, namespace, "alice", {"spec": {"suspend": False}})
    after = ready(cluster, namespace, "alice", operator)

    woken = pod(cluster, namespace, "alice")
    assert after["podUID"] == uid(woken) != before["podUID"], "a new pod"
    assert claim_of(woken) == CLAIM
    assert uid(cluster.get(PVCS, namespace, CLAIM)) == uid(claim) == after["workspace"]["claimUID"]
    assert sh(cluster, namespace, f"cat {NOTE}") == "kept across sleep\n"


def test_a_resize_the_api_server_refuses_is_reported_and_the_pod_keeps_running(
    cluster: Cluster, namespace: str, operator: OperatorProcess, volume: str
) -> None:
    before = workspace_ready(cluster, namespace, operator)

    cluster.patch(SANDBOXES, namespace, "alice", {"spec": {"workspace": {"size": "2Gi"}}})

    reported = until(
        lambda: (
            (found := status(cluster, namespace, "alice").get("workspace", {})).get("message")
            and found
        ),
        operator,
        "the refused resize in status.workspace",
        show=lambda: status(cluster, namespace, "alice"),
    )
    assert "cannot grow from 1Gi to 2Gi" in reported["message"], reported
    assert reported["requested"] == "1Gi"
    assert "WorkspaceResizeRefused" in reasons(cluster, namespace, "alice")
    assert uid(pod(cluster, namespace, "alice")) == before["podUID"], "the pod is not stopped"
    assert status(cluster, namespace, "alice")["phase"] == "Ready"


def test_a_retained_workspace_outlives_a_foreground_deletion_and_returns_to_the_same_user(
    cluster: Cluster, namespace: str, operator: OperatorProcess, volume: str
) -> None:
    workspace_ready(cluster, namespace, operator, retain=True)
    made = cluster.get(PVCS, namespace, CLAIM)
    claim = uid(made)
    # Never the garbage collector's: a foreground deletion (Argo CD's prune) has it delete
    # every owned object at once, before the operator's finalizer can release any.
    assert not made["metadata"].get("ownerReferences")
    sh(cluster, namespace, f"mkdir -p $(dirname {NOTE}) && echo 'retained' > {NOTE}")

    cluster.call(
        "DELETE",
        f"{CRAFT}/namespaces/{namespace}/craftsandboxes/alice",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
    )
    until(lambda: cluster.sandbox(namespace, "alice") is None, operator, "alice gone")

    kept = cluster.get(PVCS, namespace, CLAIM)
    assert kept is not None, "neither the finalizer nor the garbage collector deleted it"
    assert uid(kept) == claim
    assert not kept["metadata"].get("ownerReferences")
    assert kept["metadata"]["labels"]["craft.onyx.app/retained-from"] == "alice"

    after = workspace_ready(cluster, namespace, operator, retain=True)
    assert after["workspace"]["claimUID"] == claim
    assert sh(cluster, namespace, f"cat {NOTE}") == "retained\n"
    assert "WorkspaceAdopted" in reasons(cluster, namespace, "alice")


def test_the_backend_cannot_drop_a_workspace_by_leaving_it_out_of_ensure(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    backend = backend_kubeconfig(cluster, namespace, tmp_path / "backend.kubeconfig")
    with SandboxClient(kubeconfig=backend) as sandboxes:
        sandboxes.ensure(namespace, "alice", user_id=USER_ID, workspace={"size": "1Gi"})
        # Server-side apply removes what the manager no longer sends: here, refused.
        with pytest.raises(InvalidError, match=r"spec\.workspace cannot be removed") as dropped:
            sandboxes.ensure(namespace, "alice", user_id=USER_ID, sources=["slack"])
        assert "set workspace.retain: true" in str(dropped.value)
        with pytest.raises(InvalidError, match="may grow but not shrink"):
            sandboxes.ensure(namespace, "alice", user_id=USER_ID, workspace={"size": "512Mi"})
        kept = sandboxes.get(namespace, "alice").spec.workspace
    assert kept is not None
    assert kept.size == "1Gi"
