"""Job mode: the sync Job and library PVC manifests, checked without a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from craft_operator.api.models import CraftSandbox
from craft_operator.api.spec import DISABLED_PATHS_BUDGET
from craft_operator.builders.library_job import build_library_pvc, build_sync_job
from craft_operator.library.errors import LibraryConfigError
from craft_operator.library.location import LibraryLocation, S3CredentialsSecret
from craft_operator.library.plan import SyncCaps
from tests.support.schemas import kubernetes_schema_problems

pytestmark = [pytest.mark.unit]

USER = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def sandbox(**library: Any) -> CraftSandbox:
    return CraftSandbox.model_validate(
        {
            "metadata": {"name": "alice", "namespace": "craft", "uid": "uid-1"},
            "spec": {"user": {"id": USER}, "userLibrary": {"mode": "Job", **library}},
        }
    )


def job(box: CraftSandbox | None = None, **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "image": "ghcr.io/onyx/craft-operator:0.1.0",
        "location": LibraryLocation(
            bucket="files", prefix=f"public/knowledge/{USER}/user_library/"
        ),
        "credentials": S3CredentialsSecret(name="library-s3"),
        "sequence": 7,
        "caps": SyncCaps(max_file_bytes=100, max_total_bytes=1000),
        "revision": "rev-42",
    }
    arguments.update(overrides)
    return build_sync_job(box or sandbox(), **arguments)


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    containers = manifest["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    first: dict[str, Any] = containers[0]
    return first


def test_the_job_and_pvc_are_valid_kubernetes_objects() -> None:
    box = sandbox(size="5Gi", storageClassName="fast", exclude=["*.tmp"], disabledPaths=["x"])

    assert kubernetes_schema_problems(job(box)) == []
    assert kubernetes_schema_problems(build_library_pvc(box)) == []


def test_the_job_runs_the_operator_cli_into_the_library_volume() -> None:
    box = sandbox(exclude=["*.tmp", "-weird"], disabledPaths=["private/"])
    location = LibraryLocation(
        bucket="files", prefix="t/p/", endpoint_url="http://minio:9000", region="eu-west-1"
    )

    manifest = job(box, location=location)

    sync = container(manifest)
    assert sync["command"] == ["craft-operator"]
    assert sync["args"] == [
        "sync-user-library",
        "--bucket", "files",
        "--prefix", "t/p/",
        "--dest", "/workspace/user_library",
        "--max-file-bytes", "100",
        "--max-total-bytes", "1000",
        "--max-files", "10000",
        "--result-file", "/dev/termination-log",
        "--endpoint-url", "http://minio:9000",
        "--region", "eu-west-1",
        "--exclude", "*.tmp",
        "--exclude", "-weird",
        "--disabled", "private/",
    ]  # fmt: skip
    mounts = {mount["mountPath"]: mount["name"] for mount in sync["volumeMounts"]}
    assert mounts["/workspace/user_library"] == "user-library"
    volumes = {volume["name"]: volume for volume in manifest["spec"]["template"]["spec"]["volumes"]}
    assert volumes["user-library"]["persistentVolumeClaim"] == {"claimName": "alice-library"}


def test_s3_credentials_come_from_the_secret_never_inline() -> None:
    env = {item["name"]: item for item in container(job())["env"]}

    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "library-s3",
        "key": "AWS_ACCESS_KEY_ID",
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "library-s3"
    assert env["AWS_SESSION_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert all("value" not in item for name, item in env.items() if name.startswith("AWS_"))


def test_the_job_pod_is_restricted() -> None:
    manifest = job()
    pod = manifest["spec"]["template"]["spec"]
    security = container(manifest)["securityContext"]

    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True


def test_the_job_is_named_labelled_owned_and_cleaned_up() -> None:
    manifest = job()
    metadata = manifest["metadata"]
    spec = manifest["spec"]

    assert metadata["name"] == "alice-library-7"
    assert metadata["namespace"] == "craft"
    assert metadata["annotations"] == {"craft.onyx.app/user-library-revision": "rev-42"}
    assert metadata["ownerReferences"][0]["uid"] == "uid-1"
    assert metadata["labels"]["craft.onyx.app/sandbox"] == "alice"
    assert metadata["labels"]["app.kubernetes.io/component"] == "library-sync"
    assert spec["ttlSecondsAfterFinished"] > 0
    assert spec["backoffLimit"] == 3
    template_labels = spec["template"]["metadata"]["labels"]
    assert "onyx.app/sandbox-id" not in template_labels  # not a sandbox for the egress proxy
    assert template_labels["app.kubernetes.io/managed-by"] == "craft-operator"


def test_failures_that_retrying_cannot_fix_fail_the_job_at_once() -> None:
    rules = job()["spec"]["podFailurePolicy"]["rules"]

    assert rules[0] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "sync", "operator": "In", "values": [2, 3]},
    }


def test_the_pvc_takes_size_and_class_from_the_spec_or_defaults() -> None:
    custom = build_library_pvc(sandbox(size="5Gi", storageClassName="fast"))
    default = build_library_pvc(sandbox())

    assert custom["metadata"]["name"] == "alice-library"
    assert custom["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert custom["spec"]["storageClassName"] == "fast"
    assert default["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert "storageClassName" not in default["spec"]


def test_every_spec_the_crd_admits_gets_a_job_however_its_paths_are_written() -> None:
    # The most the spec admits, in characters of four bytes each (an emoji's).
    disabled = [f"{index:03}/" + "😀" * 127 for index in range(1000)]
    assert sum(len(path) for path in disabled) <= DISABLED_PATHS_BUDGET
    excludes = [f"{index:02}" + "😀" * 254 for index in range(100)]

    args = job(sandbox(disabledPaths=disabled, exclude=excludes))["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]

    assert args.count("--disabled") == 1000
    assert args.count("--exclude") == 100


def test_arguments_beyond_what_the_crd_admits_are_refused() -> None:
    box = sandbox()
    over = [f"{index:05}/" + "😀" * 1000 for index in range(300)]  # past the CRD's budget
    library = box.spec.user_library.model_copy(update={"disabled_paths": over})
    box = box.model_copy(update={"spec": box.spec.model_copy(update={"user_library": library})})

    with pytest.raises(LibraryConfigError, match="bytes"):
        job(box)


def test_the_job_pod_must_run_on_the_sandbox_pods_node_and_tolerates_its_taints() -> None:
    box = CraftSandbox.model_validate(
        {
            "metadata": {"name": "alice", "namespace": "craft", "uid": "uid-1"},
            "spec": {
                "user": {"id": USER},
                "userLibrary": {"mode": "Job"},
                "tolerations": [{"key": "sandboxes", "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
    )

    pod = job(box)["spec"]["template"]["spec"]

    # A ReadWriteOnce volume attached to the sandbox's node cannot be mounted elsewhere.
    assert pod["affinity"]["podAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {
                    "matchLabels": {
                        "craft.onyx.app/sandbox": "alice",
                        "app.kubernetes.io/component": "sandbox",
                    }
                },
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
    assert pod["tolerations"] == [
        {"key": "sandboxes", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "tolerations" not in job()["spec"]["template"]["spec"]


def test_a_disabled_path_with_a_nul_byte_stays_out_of_the_jobs_argv() -> None:
    """execve cannot pass it (every pod of the Job would fail to start); like any path no
    file can have, it disables nothing."""
    args = container(job(sandbox(disabledPaths=["drafts\x00/secret", "x"])))
    assert all("\x00" not in arg for arg in args["args"])
    assert args["args"][-2:] == ["--disabled", "x"]


def test_an_exclude_glob_with_a_nul_byte_is_a_misconfiguration_not_a_job_that_cannot_start() -> (
    None
):
    with pytest.raises(LibraryConfigError, match="NUL"):
        job(sandbox(exclude=["*.tmp\x00"]))


def test_the_kubelet_does_not_walk_the_agents_volume_on_every_sync() -> None:
    """The default fsGroupChangePolicy changes the group of every entry on each mount."""
    spec = job()["spec"]["template"]["spec"]
    assert spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
