"""End to end on kind: the real images, the dev overlay, a CraftSandbox from Ready to deleted.

``make e2e`` runs it. It creates a kind cluster (``CRAFT_E2E_CLUSTER``, default
``craft-e2e``; an existing cluster of that name is reused and kept), builds and loads
``craft-operator:dev`` and ``craft-sandbox:dev``, applies ``manifests/overlays/dev``
(Postgres, MinIO, the stand-in Onyx API, the operator) and the sample sandbox, then:
Ready; ``onyx-cli validate-config`` in the pod; a file put into MinIO appears in the pod
after the ``user-library-revision`` annotation moves; a file written into a sandbox's
workspace before it sleeps is read after it wakes, from the same PVC; deleting the sandbox
revokes its PAT (the stand-in API answers 401 for it). The cluster it created is deleted at the end
unless ``CRAFT_E2E_KEEP=1``. ``CRAFT_E2E_NODE_IMAGE`` picks the kind node image (the exec
sync needs Kubernetes 1.30 or newer).

Where no Docker engine runs, the whole module skips with one line.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import REPO, CommandError, Kind, build_image, skip_reason, wait_for

_REASON = skip_reason()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

OPERATOR_IMAGE = "craft-operator:dev"
SANDBOX_IMAGE = "craft-sandbox:dev"
SYSTEM = "craft-system"
SANDBOXES = "craft-sandboxes"
SANDBOX = "alice"
USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
DEV_OVERLAY = "manifests/overlays/dev"
SAMPLE = "manifests/overlays/dev/sample-sandbox.yaml"
WORKLOADS = (
    "deployment/postgres",
    "deployment/minio",
    "deployment/onyx-api",
    "statefulset/craft-operator",
)
LIBRARY_PREFIX = f"public/knowledge/{USER_ID}/user_library/"
REVISION_ANNOTATION = "craft.onyx.app/user-library-revision"
#: A second sandbox of the dev user, with a workspace, that sleeps and wakes.
WORKSPACE_SANDBOX = "carol"
SUSPEND, RESUME = '{"spec":{"suspend":true}}', '{"spec":{"suspend":false}}'

# Run inside the operator pod, which has boto3, the S3 settings and the dev credentials.
UPLOAD = """
import os, sys
import boto3
s3 = boto3.client("s3", endpoint_url=os.environ["CRAFT_S3_ENDPOINT_URL"],
                  region_name=os.environ.get("CRAFT_S3_REGION"))
s3.put_object(Bucket=os.environ["CRAFT_S3_BUCKET"], Key=sys.argv[1], Body=sys.stdin.buffer.read())
"""
# Run inside the stand-in API's pod; the token arrives on stdin, the status code goes out.
PAT_STATUS = """
import sys, urllib.error, urllib.request
token = sys.stdin.read().strip()
request = urllib.request.Request(
    "http://127.0.0.1:8080/api/me", headers={"Authorization": "Bearer " + token})
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        print(response.status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


def diagnose(kind: Kind) -> str:
    """What an on-call engineer would look at first, for a failure message."""
    sections = [
        ("sandboxes", ["get", "csb", "-A", "-o", "wide"]),
        ("pods", ["get", "pods", "-A", "-o", "wide"]),
        ("sandbox", ["-n", SANDBOXES, "describe", "csb", SANDBOX]),
        ("events", ["-n", SANDBOXES, "get", "events", "--sort-by=.lastTimestamp"]),
        ("operator log", ["-n", SYSTEM, "logs", "craft-operator-0", "--tail=80"]),
    ]
    out = []
    for title, args in sections:
        result = kind.kubectl(*args, check=False, timeout=30)
        out.append(f"--- {title}\n{(result.stdout or result.stderr).decode(errors='replace')}")
    return "\n".join(out)


@pytest.fixture(scope="module")
def kind() -> Iterator[Kind]:
    """A kind cluster: created here and deleted afterwards, or an existing one reused."""
    cluster = Kind(os.environ.get("CRAFT_E2E_CLUSTER", "craft-e2e"))
    reused = cluster.exists()
    try:
        if not reused:
            cluster.create(os.environ.get("CRAFT_E2E_NODE_IMAGE"))
        yield cluster
    finally:
        if not reused and os.environ.get("CRAFT_E2E_KEEP") != "1":
            cluster.delete()


@pytest.fixture(scope="module")
def dev_environment(kind: Kind) -> Kind:
    """Both images built and loaded, the dev overlay applied and every component up."""
    build_image(OPERATOR_IMAGE, REPO, REPO / "operator" / "Dockerfile")
    build_image(SANDBOX_IMAGE, REPO / "sandbox-image")
    kind.load_image(OPERATOR_IMAGE)
    kind.load_image(SANDBOX_IMAGE)
    try:
        # The CRDs first, as hack/dev-up.sh does (no overlay includes them).
        kind.kubectl("apply", "-k", "crds", timeout=60)
        kind.kubectl(
            "wait",
            "--for=condition=Established",
            "crd/craftsandboxes.craft.onyx.app",
            "crd/clusterkopfpeerings.kopf.dev",
            "--timeout=60s",
            timeout=90,
        )
        kind.kubectl("apply", "-k", DEV_OVERLAY, timeout=180)
        # A reused cluster may run older images under the same tags.
        kind.kubectl("-n", SYSTEM, "rollout", "restart", "statefulset/craft-operator")
        kind.kubectl("-n", SYSTEM, "rollout", "restart", "deployment/onyx-api")
        for workload in WORKLOADS:
            kind.kubectl(
                "-n",
                SYSTEM,
                "rollout",
                "status",
                workload,
                "--timeout=300s",
                timeout=330,
            )
        kind.kubectl(
            "-n",
            SYSTEM,
            "wait",
            "--for=condition=Complete",
            "job/craft-dev-bucket",
            "--timeout=300s",
            timeout=330,
        )
    except CommandError as exc:
        raise AssertionError(
            f"the dev environment did not come up: {exc}\n{diagnose(kind)}"
        ) from None
    return kind


def phase(kind: Kind, sandbox: str = SANDBOX) -> str:
    return kind.text("-n", SANDBOXES, "get", "csb", sandbox, "-o", "jsonpath={.status.phase}")


def reach(kind: Kind, wanted: str, sandbox: str = SANDBOX, timeout: float = 300) -> None:
    """Wait until the sandbox is in phase ``wanted``."""
    wait_for(
        lambda: True if phase(kind, sandbox) == wanted else None,
        what=f"CraftSandbox {SANDBOXES}/{sandbox} to be {wanted}",
        timeout=timeout,
        interval=3,
        diagnose=lambda: diagnose(kind),
    )


@pytest.fixture(scope="module")
def ready(dev_environment: Kind) -> Iterator[Kind]:
    """The sample sandbox, Ready; deleted afterwards if a test left it behind."""
    kind = dev_environment
    kind.kubectl("-n", SANDBOXES, "delete", "csb", SANDBOX, "--ignore-not-found", timeout=180)
    kind.kubectl("apply", "-f", SAMPLE)
    try:
        wait_for(
            lambda: True if phase(kind) == "Ready" else None,
            what=f"CraftSandbox {SANDBOXES}/{SANDBOX} to be Ready",
            timeout=300,
            interval=3,
            diagnose=lambda: diagnose(kind),
        )
        yield kind
    finally:
        kind.kubectl(
            "-n", SANDBOXES, "delete", "csb", SANDBOX, "--ignore-not-found", "--wait=false"
        )


def in_sandbox(kind: Kind, *argv: str, check: bool = True, sandbox: str = SANDBOX) -> str:
    pod = kind.text("-n", SANDBOXES, "get", "csb", sandbox, "-o", "jsonpath={.status.podName}")
    result = kind.kubectl(
        "-n", SANDBOXES, "exec", pod or sandbox, "-c", "sandbox", "--", *argv, check=check
    )
    return result.stdout.decode(errors="replace")


def pat_status(kind: Kind, token: bytes) -> int:
    """The stand-in Onyx API's answer to ``GET /api/me`` with ``token`` (200 or 401)."""
    out = kind.kubectl(
        "-n",
        SYSTEM,
        "exec",
        "-i",
        "deployment/onyx-api",
        "--",
        "python",
        "-c",
        PAT_STATUS,
        stdin=token,
    )
    return int(out.stdout.decode().strip())


def test_onyx_cli_in_the_sandbox_validates_its_configuration(ready: Kind) -> None:
    out = in_sandbox(ready, "onyx-cli", "validate-config")
    assert "Server" in out, out
    assert in_sandbox(ready, "id", "-u").strip() == "1000"
    # The PAT was written into the pod, readable by its user only, and is not in its env.
    assert in_sandbox(ready, "stat", "-c", "%a %u", "/run/onyx/pat").strip() == "600 1000"
    assert "ONYX_PAT=" not in in_sandbox(ready, "env")
    assert "company-search" in in_sandbox(ready, "cat", "/workspace/skills/company-search/SKILL.md")


def test_a_file_put_into_s3_appears_in_the_sandbox_after_the_revision_moves(ready: Kind) -> None:
    content = f"hello from e2e at {time.time_ns()}\n".encode()
    ready.kubectl(
        "-n",
        SYSTEM,
        "exec",
        "-i",
        "craft-operator-0",
        "--",
        "python",
        "-c",
        UPLOAD,
        f"{LIBRARY_PREFIX}e2e/hello.txt",
        stdin=content,
    )
    ready.kubectl(
        "-n",
        SANDBOXES,
        "annotate",
        "csb",
        SANDBOX,
        f"{REVISION_ANNOTATION}=e2e-{time.time_ns()}",
        "--overwrite",
    )
    path = "/workspace/user_library/e2e/hello.txt"
    wait_for(
        lambda: True if in_sandbox(ready, "cat", path).encode() == content else None,
        what=f"{path} in the sandbox with the uploaded content",
        timeout=180,
        interval=3,
        diagnose=lambda: diagnose(ready),
    )


def test_a_file_written_into_the_workspace_before_sleep_is_read_after_wake(
    dev_environment: Kind,
) -> None:
    kind, name = dev_environment, WORKSPACE_SANDBOX
    manifest = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name, "namespace": SANDBOXES},
        # kind's default storage class (local-path) provisions it for the first pod.
        "spec": {"user": {"id": USER_ID}, "workspace": {"size": "1Gi"}},
    }
    kind.kubectl("-n", SANDBOXES, "delete", "csb", name, "--ignore-not-found", timeout=180)
    kind.kubectl("apply", "-f", "-", stdin=json.dumps(manifest).encode())
    try:
        reach(kind, "Ready", name)
        claim = f"{name}-workspace"
        before = kind.text("-n", SANDBOXES, "get", "pvc", claim, "-o", "jsonpath={.metadata.uid}")
        content = f"written before sleep at {time.time_ns()}"
        note = "/workspace/sessions/e2e/notes.txt"
        script = f"mkdir -p /workspace/sessions/e2e && printf '%s' '{content}' > {note}"
        in_sandbox(kind, "sh", "-c", script, sandbox=name)

        kind.kubectl("-n", SANDBOXES, "patch", "csb", name, "--type=merge", "-p", SUSPEND)
        reach(kind, "Suspended", name)
        kind.kubectl("-n", SANDBOXES, "wait", "--for=delete", f"pod/{name}", "--timeout=180s")
        kind.kubectl("-n", SANDBOXES, "patch", "csb", name, "--type=merge", "-p", RESUME)
        reach(kind, "Ready", name)

        after = kind.text("-n", SANDBOXES, "get", "pvc", claim, "-o", "jsonpath={.metadata.uid}")
        assert after == before, "the same PVC after wake"
        mounted = kind.text(
            "-n",
            SANDBOXES,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.spec.volumes[?(@.name=='workspace')].persistentVolumeClaim.claimName}",
        )
        assert mounted == claim
        assert in_sandbox(kind, "cat", note, sandbox=name) == content
    finally:
        kind.kubectl("-n", SANDBOXES, "delete", "csb", name, "--ignore-not-found", "--wait=false")


def test_deleting_the_sandbox_revokes_its_pat(ready: Kind) -> None:
    encoded = ready.text(
        "-n",
        SANDBOXES,
        "get",
        "secret",
        f"{SANDBOX}-credentials",
        "-o",
        "jsonpath={.data.ONYX_PAT}",
    )
    token = base64.b64decode(encoded)
    assert token.startswith(b"onyx_pat_")
    assert pat_status(ready, token) == 200
    ready.kubectl(
        "-n", SANDBOXES, "delete", "csb", SANDBOX, "--wait=true", "--timeout=180s", timeout=200
    )
    wait_for(
        lambda: True if pat_status(ready, token) == 401 else None,
        what="the stand-in Onyx API to refuse the deleted sandbox's PAT (401)",
        timeout=60,
        diagnose=lambda: diagnose(ready),
    )
    wait_for(
        lambda: (
            True
            if not ready.text(
                "-n",
                SANDBOXES,
                "get",
                "pods,secrets,configmaps",
                "-l",
                f"craft.onyx.app/sandbox={SANDBOX}",
                "-o",
                "name",
            )
            else None
        ),
        what="the sandbox's pod, Secret and ConfigMap to be garbage-collected",
        timeout=120,
        diagnose=lambda: diagnose(ready),
    )
