"""Job mode of the user library: the sync Job and the library volume it writes into.

Pure builders; the syncing itself is :mod:`craft_operator.library`.

The Job runs the operator image with ``craft-operator sync-user-library``, reads S3 with
credentials from a Secret (the sandbox pod never gets them), and writes into a PVC that
the sandbox pod mounts at ``/workspace/user_library``. It writes a compact JSON result to
its termination message, so the reconciler can read the outcome from the Job's pod status.
Exit codes 2 and 3 (bad usage, over a cap, no bucket, access denied) fail the Job at once
through a pod failure policy; other failures are retried up to ``backoff_limit``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from craft_operator.api.models import ANNOTATION_LIBRARY_REVISION, CraftSandbox
from craft_operator.api.spec import DISABLED_PATHS_BUDGET
from craft_operator.builders.naming import (
    LABEL_COMPONENT,
    LABEL_ONYX_SANDBOX_ID,
    LABEL_ONYX_TENANT_ID,
    LABEL_SANDBOX,
    LIBRARY_SUFFIX,
    child_labels,
    child_metadata,
)
from craft_operator.builders.pod import scheduling
from craft_operator.builders.security import (
    SANDBOX_UID,
    container_security_context,
    pod_security_context,
)
from craft_operator.library.errors import LibraryConfigError
from craft_operator.library.location import LibraryLocation, S3CredentialsSecret
from craft_operator.library.plan import SyncCaps
from craft_operator.library.scoped import ScopedCredentials, job_secret_ref
from craft_operator.library.transfer import LIBRARY_ROOT

SYNC_CONTAINER = "sync"
SYNC_COMPONENT = "library-sync"
DEFAULT_VOLUME_SIZE = "20Gi"
#: Exit codes of ``sync-user-library`` that retrying cannot fix.
PERMANENT_EXIT_CODES = (2, 3)
#: Upper bound on the Job's argv (excludes and disabled paths): objects must stay small,
#: yet every spec the CRD admits fits: its characters (100 excludes of 256, the disabled
#: paths' budget) at up to 4 bytes of UTF-8 each, with their flags and the fixed arguments.
MAX_ARGS_BYTES = 4 * (100 * 256 + DISABLED_PATHS_BUDGET) + 64 * 1024
#: A private emptyDir: the root filesystem is read-only.
SCRATCH_DIR = "/tmp"  # noqa: S108


def library_claim_name(sandbox: CraftSandbox) -> str:
    """``<name>-library``: the PVC holding the library in Job mode."""
    return sandbox.metadata.name + LIBRARY_SUFFIX


def sync_job_labels(sandbox: CraftSandbox) -> dict[str, str]:
    """The labels of a sandbox's sync Jobs: its children's, with the sync's component."""
    return {**child_labels(sandbox), LABEL_COMPONENT: SYNC_COMPONENT}


def sync_job_name(sandbox: CraftSandbox, sequence: int) -> str:
    """``<name>-library-<n>``: the n-th sync Job of a sandbox."""
    return f"{sandbox.metadata.name}-library-{sequence}"


def build_library_pvc(
    sandbox: CraftSandbox,
    *,
    default_size: str = DEFAULT_VOLUME_SIZE,
    access_modes: tuple[str, ...] = ("ReadWriteOnce",),
) -> dict[str, Any]:
    """The library PVC: size and storage class from ``spec.userLibrary``, else defaults.

    The volume must hold the library and, during a sync, the changed files staged beside
    it; the default leaves room for a full 10 GB library.
    """
    library = sandbox.spec.user_library
    spec: dict[str, Any] = {
        "accessModes": list(access_modes),
        "resources": {"requests": {"storage": str(library.size or default_size)}},
    }
    if library.storage_class_name:
        spec["storageClassName"] = library.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": child_metadata(sandbox, library_claim_name(sandbox)),
        "spec": spec,
    }


def sync_args(
    location: LibraryLocation,
    *,
    excludes: tuple[str, ...] | list[str],
    disabled: tuple[str, ...] | list[str],
    caps: SyncCaps,
) -> list[str]:
    """The ``craft-operator`` argv of the sync container."""
    args = [
        "sync-user-library",
        "--bucket",
        location.bucket,
        "--prefix",
        location.prefix,
        "--dest",
        LIBRARY_ROOT,
        "--max-file-bytes",
        str(caps.max_file_bytes),
        "--max-total-bytes",
        str(caps.max_total_bytes),
        "--max-files",
        str(caps.max_files),
        "--result-file",
        "/dev/termination-log",
    ]
    if location.endpoint_url:
        args += ["--endpoint-url", location.endpoint_url]
    if location.region:
        args += ["--region", location.region]
    for pattern in excludes:
        if "\x00" in pattern:  # execve cannot pass it: every pod of the Job would fail
            raise LibraryConfigError(
                f"exclude glob {pattern!r} is invalid: it holds a NUL character"
            )
        args += ["--exclude", pattern]
    for path in disabled:
        if "\x00" not in path:  # (one that holds a NUL matches nothing: no path does)
            args += ["--disabled", path]
    if sum(len(arg.encode()) for arg in args) > MAX_ARGS_BYTES:
        raise LibraryConfigError(
            f"the excludes and disabled paths of sandbox take more than {MAX_ARGS_BYTES} bytes"
        )
    return args


def _pod_labels(sandbox: CraftSandbox) -> dict[str, str]:
    # Not a sandbox: without Onyx's egress-proxy labels and with its own component, so
    # policies aimed at sandbox pods (and the proxy's pod-to-sandbox map) leave it alone.
    labels = {
        key: value
        for key, value in child_labels(sandbox).items()
        if key not in (LABEL_ONYX_SANDBOX_ID, LABEL_ONYX_TENANT_ID)
    }
    labels[LABEL_COMPONENT] = SYNC_COMPONENT
    return labels


def _secret_env(secret: S3CredentialsSecret) -> list[dict[str, Any]]:
    def ref(variable: str, key: str, optional: bool) -> dict[str, Any]:
        selector: dict[str, Any] = {"name": secret.name, "key": key}
        if optional:
            selector["optional"] = True
        return {"name": variable, "valueFrom": {"secretKeyRef": selector}}

    return [
        ref("AWS_ACCESS_KEY_ID", secret.access_key_id_key, False),
        ref("AWS_SECRET_ACCESS_KEY", secret.secret_access_key_key, False),
        ref("AWS_SESSION_TOKEN", secret.session_token_key, True),
    ]


def _sync_container(
    sandbox: CraftSandbox,
    *,
    image: str,
    location: LibraryLocation,
    credentials: S3CredentialsSecret,
    caps: SyncCaps,
    resources: Mapping[str, Mapping[str, str]] | None,
) -> dict[str, Any]:
    """The sync container: restricted, read-only root, the S3 keys from the Job's Secret."""
    library = sandbox.spec.user_library
    restricted = container_security_context(SANDBOX_UID, read_only_root=True)
    return {
        "name": SYNC_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["craft-operator"],
        "args": sync_args(
            location, excludes=library.exclude, disabled=library.disabled_paths, caps=caps
        ),
        "env": [*_secret_env(credentials), {"name": "HOME", "value": SCRATCH_DIR}],
        "resources": {key: dict(value) for key, value in (resources or {}).items()}
        or {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": restricted,
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": "user-library", "mountPath": LIBRARY_ROOT},
            {"name": "tmp", "mountPath": SCRATCH_DIR},
        ],
    }


def _sync_pod_spec(
    sandbox: CraftSandbox, container: dict[str, Any], claim_name: str
) -> dict[str, Any]:
    """The Job's pod: no service account token, the library claim, on the sandbox pod's node."""
    # A ReadWriteOnce volume attaches to one node at a time, and a Job is started only
    # while the sandbox pod runs with the volume attached: on any other node the Job's pod
    # would wait on Multi-Attach until its deadline, so the sandbox's node is required, not
    # preferred. Should the sandbox pod go (sleep, eviction) before the Job's pod is
    # scheduled, that pod waits for the next sandbox pod and runs beside it, rather than
    # holding the volume on another node where the new sandbox pod could not mount it.
    sandbox_node = {
        "labelSelector": {
            "matchLabels": {LABEL_SANDBOX: sandbox.metadata.name, LABEL_COMPONENT: "sandbox"}
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # The agent controls what is on the volume: the kubelet changes the group of the
        # volume's root only, not of each of the millions of entries it may have made.
        "securityContext": {
            **pod_security_context(SANDBOX_UID),
            "fsGroupChangePolicy": "OnRootMismatch",
        },
        "affinity": {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [sandbox_node]}
        },
        "containers": [container],
        "volumes": [
            {"name": "user-library", "persistentVolumeClaim": {"claimName": claim_name}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    # Whatever taints the sandbox's node has, the sandbox tolerates: so must its Job.
    tolerations = scheduling(sandbox.spec).get("tolerations")
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


def _pod_failure_policy() -> dict[str, Any]:
    """Fail the Job at once on ``PERMANENT_EXIT_CODES``; a disrupted pod is not a failure."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": SYNC_CONTAINER,
                    "operator": "In",
                    "values": list(PERMANENT_EXIT_CODES),
                },
            },
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        ]
    }


def build_sync_job(
    sandbox: CraftSandbox,
    *,
    image: str,
    location: LibraryLocation,
    credentials: S3CredentialsSecret,
    sequence: int,
    caps: SyncCaps,
    revision: str | None = None,
    claim_name: str | None = None,
    ttl_seconds_after_finished: int = 3600,
    backoff_limit: int = 3,
    active_deadline_seconds: int = 3600,
    resources: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The n-th (``sequence``) sync Job of ``sandbox``, syncing ``location`` into its PVC.

    ``revision`` (the ``user-library-revision`` it syncs) is recorded as an annotation so
    the reconciler can tell which revision a finished Job delivered.
    """
    annotations = {ANNOTATION_LIBRARY_REVISION: revision} if revision is not None else None
    metadata = child_metadata(sandbox, sync_job_name(sandbox, sequence), annotations)
    metadata["labels"] = sync_job_labels(sandbox)
    container = _sync_container(
        sandbox,
        image=image,
        location=location,
        credentials=credentials,
        caps=caps,
        resources=resources,
    )
    pod_spec = _sync_pod_spec(sandbox, container, claim_name or library_claim_name(sandbox))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": backoff_limit,
            "activeDeadlineSeconds": active_deadline_seconds,
            "ttlSecondsAfterFinished": ttl_seconds_after_finished,
            "podFailurePolicy": _pod_failure_policy(),
            "template": {"metadata": {"labels": _pod_labels(sandbox)}, "spec": pod_spec},
        },
    }


def build_job_secret(job: Mapping[str, Any], credentials: ScopedCredentials) -> dict[str, Any]:
    """The Secret of ``job``'s scoped credentials, owned by the Job (deleted with it)."""
    meta = job["metadata"]
    ref = job_secret_ref(meta["name"])

    def encoded(value: str) -> str:
        return base64.b64encode(value.encode()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": ref.name,
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "data": {
            ref.access_key_id_key: encoded(credentials.access_key_id),
            ref.secret_access_key_key: encoded(credentials.secret_access_key.get_secret_value()),
            ref.session_token_key: encoded(credentials.session_token.get_secret_value()),
        },
    }
