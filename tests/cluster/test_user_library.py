"""The user library on a real API server: synced over real exec (Exec mode), or by a sync Job
that the real Job controller runs against a statically provisioned volume (Job mode); a
running Job that left the watches' sight is followed to its end, never doubled."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Launch
from tests.support.cluster import CRAFT, ApiError, Cluster, wait_for
from tests.support.events import step_messages, step_reasons
from tests.support.operator_process import OperatorProcess

USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
#: Onyx's layout, the default prefix of a sandbox whose spec names none.
PREFIX = f"public/knowledge/{USER_ID}/user_library/"
REVISION = "craft.onyx.app/user-library-revision"
LIBRARY = "/workspace/user_library"
JOB_NAME = "batch.kubernetes.io/job-name"


def sandbox(name: str, revision: str, **spec: object) -> dict[str, Any]:
    """A CraftSandbox for USER_ID whose library is at ``revision``."""
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name, "annotations": {REVISION: revision}},
        "spec": {"user": {"id": USER_ID}, **spec},
    }


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The sandbox's status ({} before the first)."""
    return dict((cluster.sandbox(namespace, name) or {}).get("status") or {})


def ready(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The status once the sandbox is Ready, else None."""
    current = status(cluster, namespace, name)
    return current if current.get("phase") == "Ready" else None


def converge(
    check: Callable[[], Any],
    what: str,
    operator: OperatorProcess,
    within: float = 60,
    *,
    show: Callable[[], object] = lambda: None,
) -> Any:
    """:func:`wait_for` ``check``; a failure shows ``show()`` and the operator's log then."""
    try:
        return wait_for(check, within=within, what=what)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{show()}\noperator log:\n{operator.log_tail()}") from None


def library_files(seed: int = 12) -> dict[str, bytes]:
    """A user library of 120 files: empty, tiny, around tar's 512-byte blocks, up to 3 MB,
    at the top and down to five directories deep, some names with spaces and accents."""
    rng = random.Random(seed)
    folders = ["", "notes/", "data/2024/q1/", "data/2024/q2/", "Projects/Résumé drafts/"]
    folders += ["deep/a/b/c/d/", "slides/"]
    sizes = [0, 1, 511, 512, 513, 1024, 4095, 3 * 1024 * 1024, 1_500_000, 700_000]
    files: dict[str, bytes] = {}
    for index in range(120):
        if index < len(sizes):
            size = sizes[index]
        else:
            size = rng.randint(1, 4096) if rng.random() < 0.75 else rng.randint(4096, 200_000)
        path = f"{folders[index % len(folders)]}file {index:03d}.{('md', 'csv', 'bin')[index % 3]}"
        files[path] = rng.randbytes(size)
    return files


def upload(s3: Any, bucket: str, files: dict[str, bytes]) -> None:
    """Put ``files`` under the default prefix, as Onyx does on an upload."""
    for path, data in files.items():
        s3.put_object(Bucket=bucket, Key=PREFIX + path, Body=data)


def exec_in_pod(cluster: Cluster, namespace: str, pod: str, *argv: str) -> bytes:
    """``kubectl exec`` through the real API server; the command's stdout, bytes as sent."""
    result = subprocess.run(
        [
            cluster.plane.binary("kubectl"),
            "--kubeconfig",
            str(cluster.plane.kubeconfig),
            "exec",
            "-n",
            namespace,
            pod,
            "-c",
            "sandbox",
            "--",
            *argv,
        ],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"kubectl exec {argv} failed: {result.stderr.decode()}"
    return result.stdout


def library_in_pod(cluster: Cluster, namespace: str, pod: str) -> dict[str, bytes]:
    """Every file of the library as the pod sees it (a tar of it, made in the pod), without
    the operator's own ``.craft-sync`` state."""
    archive = exec_in_pod(cluster, namespace, pod, "tar", "-c", "-f", "-", "-C", LIBRARY, ".")
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            path = os.path.normpath(member.name)
            if member.isfile() and not path.startswith(".craft-sync"):
                extracted = tar.extractfile(member)
                assert extracted is not None
                files[path] = extracted.read()
    return files


def identities(library: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every library file on the pod's volume, as this machine sees it."""
    return {
        str(path.relative_to(library)): (path.stat().st_ino, path.stat().st_mtime_ns)
        for path in library.rglob("*")
        if path.is_file() and ".craft-sync" not in path.relative_to(library).parts
    }


def test_a_library_of_120_files_is_synced_through_real_exec_then_one_change_alone_is_sent(
    cluster: Cluster,
    namespace: str,
    operator: OperatorProcess,
    s3: Any,
    bucket: str,
) -> None:
    files = library_files()
    upload(s3, bucket, files)

    cluster.create(f"{CRAFT}/craftsandboxes", namespace, sandbox("alice", "1"))

    synced = converge(
        lambda: ready(cluster, namespace, "alice"),
        "alice Ready",
        operator,
        120,
        show=lambda: status(cluster, namespace, "alice"),
    )
    condition = cluster.condition(namespace, "alice", "UserLibrarySynced")
    assert (condition["status"], condition["reason"]) == ("True", "Synced"), condition
    library = synced["userLibrary"]
    total = sum(len(data) for data in files.values())
    assert library["observedRevision"] == "1"
    assert (library["files"], library["bytes"], library["skipped"]) == (len(files), total, 0)
    assert library["bytesTransferred"] >= total  # every file, and the tar framing
    assert library["podUID"] == synced["podUID"]
    print(f"first sync: {library}")
    assert library_in_pod(cluster, namespace, "alice") == files

    on_disk = cluster.plane.pods_dir / synced["podUID"] / "volumes" / "user-library"
    before = identities(on_disk)
    assert set(before) == set(files)
    changed = "data/2024/q1/file 002.bin"
    assert changed in files
    new_content = random.Random(99).randbytes(20_000)
    upload(s3, bucket, {changed: new_content})
    cluster.patch(
        f"{CRAFT}/craftsandboxes",
        namespace,
        "alice",
        {"metadata": {"annotations": {REVISION: "2"}}},
    )

    again = converge(
        lambda: (
            (library := status(cluster, namespace, "alice").get("userLibrary") or {}).get(
                "observedRevision"
            )
            == "2"
            and library
        ),
        "revision 2 synced",
        operator,
        show=lambda: status(cluster, namespace, "alice"),
    )
    new_total = total - len(files[changed]) + len(new_content)
    assert (again["files"], again["bytes"]) == (len(files), new_total)
    # The changed file, its tar header and padding, and the manifest's few lines: no more.
    assert len(new_content) <= again["bytesTransferred"] < len(new_content) + 8192, again
    print(f"incremental sync: {again}")
    summaries = step_messages(cluster.events(namespace, "alice"), "LibrarySynced")
    assert any(summary.startswith("copied 1, deleted 0, skipped 0 files") for summary in summaries)
    assert exec_in_pod(cluster, namespace, "alice", "cat", f"{LIBRARY}/{changed}") == new_content
    after = identities(on_disk)
    assert after[changed] != before[changed]  # written aside and renamed into place
    assert {path: after[path] for path in files if path != changed} == {
        path: before[path] for path in files if path != changed
    }  # the 119 others were not rewritten
    assert library_in_pod(cluster, namespace, "alice") == {**files, changed: new_content}


class Watch:
    """Every change to one kind of object in a namespace, as ``kubectl get --watch`` saw it:
    the history of objects the operator deletes as soon as it has read them."""

    def __init__(self, cluster: Cluster, namespace: str, kind: str, directory: Path) -> None:
        """Start ``kubectl get KIND --watch`` (stopped by :meth:`close`)."""
        self._output = directory / f"watch-{kind}.json"
        self._stdout = self._output.open("wb")
        self._stderr = (directory / f"watch-{kind}.err").open("wb")
        self._process = subprocess.Popen(
            [
                cluster.plane.binary("kubectl"),
                "--kubeconfig",
                str(cluster.plane.kubeconfig),
                "get",
                kind,
                "-n",
                namespace,
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ],
            stdout=self._stdout,
            stderr=self._stderr,
        )

    def events(self, name_prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        """(ADDED/MODIFIED/DELETED, object) so far, of objects named ``name_prefix``..."""
        text = self._output.read_text()
        decoder = json.JSONDecoder()
        found: list[tuple[str, dict[str, Any]]] = []
        position = 0
        while True:
            while position < len(text) and text[position].isspace():
                position += 1
            if position >= len(text):
                break
            try:
                event, position = decoder.raw_decode(text, position)
            except ValueError:
                break  # an event still being written
            if event["object"]["metadata"]["name"].startswith(name_prefix):
                found.append((event["type"], event["object"]))
        return found

    def close(self) -> None:
        """Stop kubectl."""
        self._process.terminate()
        self._process.wait(10)
        self._stdout.close()
        self._stderr.close()


@pytest.fixture
def watches(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[dict[str, Watch]]:
    """Jobs and pods of the test's namespace, watched from before anything exists."""
    started = {kind: Watch(cluster, namespace, kind, tmp_path) for kind in ("jobs", "pods")}
    yield started
    for watch in started.values():
        watch.close()


@pytest.fixture
def alice_library_volume(cluster: Cluster, namespace: str) -> Iterator[str]:
    """What a platform engineer without a dynamic provisioner does for a Job-mode sandbox: a
    PersistentVolume made beforehand and reserved (``claimRef``) for the claim the operator
    will make, ``<sandbox>-library``. A hostPath where the simulated kubelet keeps that
    claim's files."""
    name = f"{namespace}-alice-library"
    cluster.create(
        "/api/v1/persistentvolumes",
        None,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {
                    "path": str(cluster.plane.state / "volumes" / namespace / "alice-library"),
                    "type": "DirectoryOrCreate",
                },
                "claimRef": {"namespace": namespace, "name": "alice-library"},
            },
        },
    )
    yield name
    cluster.delete("/api/v1/persistentvolumes", None, name)


def owners(obj: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(kind, name, uid, controller) of each ownerReference."""
    return [
        (ref["kind"], ref["name"], ref["uid"], bool(ref.get("controller")))
        for ref in obj["metadata"].get("ownerReferences") or []
    ]


def job_mode_alice(cluster: Cluster, namespace: str, launch: Launch) -> OperatorProcess:
    """The Secret with the S3 credentials for sync Jobs, as the platform engineer sets it
    up; the operator started with it; and sandbox ``alice`` in Job mode, revision 7."""
    cluster.create(
        "/api/v1/secrets",
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "library-s3"},
            "stringData": {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
        },
    )
    operator = launch(CRAFT_LIBRARY_S3_SECRET="library-s3")
    operator.start()
    cluster.create(
        f"{CRAFT}/craftsandboxes",
        namespace,
        sandbox("alice", "7", userLibrary={"mode": "Job", "size": "1Gi"}),
    )
    return operator


def test_job_mode_on_a_statically_provisioned_volume_runs_one_sync_job_under_the_job_controller(
    cluster: Cluster,
    namespace: str,
    launch: Launch,
    watches: dict[str, Watch],
    alice_library_volume: str,
) -> None:
    operator = job_mode_alice(cluster, namespace, launch)

    synced = converge(
        lambda: ready(cluster, namespace, "alice"),
        "alice Ready",
        operator,
        120,
        show=lambda: status(cluster, namespace, "alice"),
    )
    created = cluster.sandbox(namespace, "alice")
    assert created is not None
    sandbox_uid = created["metadata"]["uid"]
    condition = cluster.condition(namespace, "alice", "UserLibrarySynced")
    assert (condition["status"], condition["reason"]) == ("True", "Synced"), condition
    library = synced["userLibrary"]
    assert library["observedRevision"] == "7"
    assert library["jobSequence"] == 1
    assert library["podUID"] == synced["podUID"]
    assert "job" not in library  # the Job's outcome is collected: none runs
    # kwok completes the Job's pod without running it, so no termination message carries
    # the sync's counts (what the sync command writes there: tests/unit/library/test_cli.py).

    # The operator's claim, bound by the real PV controller to the volume made for it.
    claim = cluster.get("/api/v1/persistentvolumeclaims", namespace, "alice-library")
    assert claim is not None
    assert owners(claim) == [("CraftSandbox", "alice", sandbox_uid, True)]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert (claim["status"]["phase"], claim["spec"]["volumeName"]) == (
        "Bound",
        alice_library_volume,
    )
    # The status says so too (a later pass than the one that made the claim writes it).
    volume = converge(
        lambda: (
            (status(cluster, namespace, "alice").get("libraryVolume") or {}).get("phase") == "Bound"
            and status(cluster, namespace, "alice")["libraryVolume"]
        ),
        "status.libraryVolume Bound",
        operator,
        60,
        show=lambda: status(cluster, namespace, "alice"),
    )
    assert volume["claimName"] == "alice-library"
    assert volume["requested"] == "1Gi"
    assert volume["capacity"] == claim["status"]["capacity"]["storage"]
    assert "message" not in volume
    pod = cluster.get("/api/v1/pods", namespace, "alice")
    assert pod is not None
    assert pod["spec"]["nodeName"] == "kwok-node"  # scheduled once the claim was bound
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["user-library"]["persistentVolumeClaim"] == {"claimName": "alice-library"}

    # The sync Job, as the operator made it and the real Job controller ran it.
    jobs = watches["jobs"].events()
    assert {job["metadata"]["name"] for _, job in jobs} == {"alice-library-1"}
    first = jobs[0][1]
    job_uid = first["metadata"]["uid"]
    assert owners(first) == [("CraftSandbox", "alice", sandbox_uid, True)]
    labels = first["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "craft-operator"
    assert labels["app.kubernetes.io/component"] == "library-sync"
    assert labels["craft.onyx.app/sandbox"] == "alice"
    annotations = first["metadata"]["annotations"]
    assert annotations[REVISION] == "7"
    assert annotations["craft.onyx.app/library-pod-uid"] == synced["podUID"]
    assert first["spec"]["selector"]["matchLabels"] == {
        "batch.kubernetes.io/controller-uid": job_uid
    }
    completed = [
        job
        for _, job in jobs
        if any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in job.get("status", {}).get("conditions") or []
        )
    ]
    assert completed, "the Job controller never marked the Job Complete"
    assert completed[-1]["status"]["succeeded"] == 1
    # Once its outcome is in the status, the operator deletes the Job...
    assert jobs[-1][0] == "DELETED"

    # ...and the garbage collector its pod, which the Job controller made and kwok completed.
    pods = converge(
        lambda: (
            (history := watches["pods"].events("alice-library-1-"))
            and history[-1][0] == "DELETED"
            and history
        ),
        "the sync Job's pod deleted",
        operator,
    )
    job_pod = pods[0][1]
    assert {name for _, obj in pods if (name := obj["metadata"]["name"])} == {
        job_pod["metadata"]["name"]
    }  # one pod: it succeeded the first time
    assert owners(job_pod) == [("Job", "alice-library-1", job_uid, True)]
    pod_labels = job_pod["metadata"]["labels"]
    assert pod_labels[JOB_NAME] == "alice-library-1"
    assert pod_labels["batch.kubernetes.io/controller-uid"] == job_uid
    assert pod_labels["app.kubernetes.io/component"] == "library-sync"
    assert pod_labels["craft.onyx.app/sandbox"] == "alice"
    assert pod_labels["app.kubernetes.io/managed-by"] == "craft-operator"
    # Not a sandbox: Onyx's egress proxy must not map it to one.
    assert "onyx.app/sandbox-id" not in pod_labels
    pod_volumes = {v["name"]: v for v in job_pod["spec"]["volumes"]}
    assert pod_volumes["user-library"]["persistentVolumeClaim"] == {"claimName": "alice-library"}
    phases = [obj.get("status", {}).get("phase") for _, obj in pods]
    assert "Succeeded" in phases
    assert any(obj["spec"].get("nodeName") == "kwok-node" for _, obj in pods)

    # What each party said it did.
    reasons = set(step_reasons(cluster.events(namespace, "alice")))
    assert {"VolumeCreated", "LibrarySyncJobCreated", "LibrarySynced"} <= reasons, reasons
    job_events = {event["reason"] for event in cluster.events(namespace, "alice-library-1")}
    assert {"SuccessfulCreate", "Completed"} <= job_events, job_events
    assert (status(cluster, namespace, "alice")["userLibrary"]["jobSequence"]) == 1


VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAP_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


@pytest.fixture
def sync_pods_held_back(cluster: Cluster, namespace: str) -> Iterator[Callable[[], None]]:
    """An admission policy refusing the test namespace's library-sync pods, so that a sync
    Job runs (its controller retrying) and has no pod; call the result to lift it."""
    name = f"hold-{namespace}"[:63]
    cluster.create(
        VAP,
        None,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.metadata.labels) || "
                        "object.metadata.labels[?'app.kubernetes.io/component'].orValue('')"
                        " != 'library-sync'",
                        "message": "held back by the test",
                    }
                ],
            },
        },
    )
    cluster.create(
        VAP_BINDINGS,
        None,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    )
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "labels": {"app.kubernetes.io/component": "library-sync"}},
        "spec": {  # within the namespace's restricted Pod Security: only the policy refuses it
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }

    def refused() -> bool:
        try:
            cluster.create("/api/v1/pods", namespace, probe, dry_run=True)
        except ApiError as error:
            return "held back by the test" in str(error)
        return False

    wait_for(refused, within=30, what="the admission policy in force")

    def lift() -> None:
        cluster.delete(VAP_BINDINGS, None, name)
        cluster.delete(VAP, None, name)

    yield lift
    lift()


def test_a_running_sync_job_whose_labels_were_edited_away_is_followed_not_doubled(
    cluster: Cluster,
    namespace: str,
    launch: Launch,
    watches: dict[str, Watch],
    alice_library_volume: str,
    sync_pods_held_back: Callable[[], None],
) -> None:
    """The API server tells the watches a Job that left their selector was deleted while it
    runs on. An admission policy holds the Job's pod back, so the Job runs while its labels
    go; once the policy is lifted, the Job controller runs it and the operator, reading the
    Job it no longer sees, collects its outcome: no second Job writes the volume beside it."""
    operator = job_mode_alice(cluster, namespace, launch)
    converge(
        lambda: cluster.get("/apis/batch/v1/jobs", namespace, "alice-library-1"),
        "the sync Job made",
        operator,
        120,
        show=lambda: status(cluster, namespace, "alice"),
    )
    converge(
        lambda: (
            "FailedCreate" in {e["reason"] for e in cluster.events(namespace, "alice-library-1")}
        ),
        "the Job's pod held back",
        operator,
    )

    # Only the label the watches select by: a Job left with no labels at all gets its
    # template's back from the API server's defaulting.
    cluster.patch(
        "/apis/batch/v1/jobs",
        namespace,
        "alice-library-1",
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}},
    )
    time.sleep(2.0)  # room for a second Job to show
    sync_pods_held_back()

    synced = converge(
        lambda: ready(cluster, namespace, "alice"),
        "alice Ready on the first Job's outcome",
        operator,
        120,
        show=lambda: (status(cluster, namespace, "alice"), watches["jobs"].events()),
    )
    assert synced["userLibrary"]["jobSequence"] == 1
    condition = cluster.condition(namespace, "alice", "UserLibrarySynced")
    assert (condition["status"], condition["reason"]) == ("True", "Synced"), condition
    assert {obj["metadata"]["name"] for _, obj in watches["jobs"].events()} == {"alice-library-1"}
