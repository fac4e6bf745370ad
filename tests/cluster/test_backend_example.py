"""examples/backend_session.py runs green against the real control plane, with the operator
running and the backend holding only manifests/backend: its sandbox has a workspace, and
after wake the example sees the same volume (the claim's uid in the status). That its files
survive too needs exec, which the backend may not do: tests/cluster/test_workspace.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backend import BACKEND_USER, backend_kubeconfig
from tests.support.cluster import REPO, Cluster, forbidden_requests, wait_for
from tests.support.operator_process import OperatorProcess
from tests.support.s3 import S3Server
from tests.support.volumes import reserved_volume

EXAMPLE = REPO / "examples" / "backend_session.py"
PVCS = "/api/v1/persistentvolumeclaims"


@pytest.fixture
def backend(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """The backend's kubeconfig; none of its requests may be refused."""
    yield backend_kubeconfig(cluster, namespace, tmp_path / "backend.kubeconfig")
    assert forbidden_requests(cluster.plane, namespace, BACKEND_USER) == []


@pytest.fixture
def volume(cluster: Cluster, namespace: str) -> Iterator[str]:
    """The volume the example's workspace binds to (this control plane has no provisioner)."""
    with reserved_volume(cluster, namespace, "backend-example-workspace") as name:
        yield name


@pytest.mark.parametrize("with_s3", [True, False], ids=["upload-and-notify", "notify-only"])
def test_the_example_lives_a_whole_session(
    cluster: Cluster,
    namespace: str,
    operator: OperatorProcess,
    backend: Path,
    volume: str,
    s3_server: S3Server,
    bucket: str,
    with_s3: bool,
) -> None:
    env = {
        **os.environ,
        "KUBECONFIG": str(backend),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    env.pop("S3_BUCKET", None)
    s3_args = ["--bucket", bucket, "--s3-endpoint-url", s3_server.url] if with_s3 else []

    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--namespace", namespace, "--timeout", "120", *s3_args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    shown = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}\noperator:\n{operator.log_tail()}"
    assert result.returncode == 0, shown
    lines = [line for line in result.stdout.splitlines() if line.startswith("==> ")]
    assert lines[-1] == "==> done", shown
    expected = (
        "library synced at revision" if with_s3 else "no bucket configured: notified revision"
    )
    assert any(expected in line for line in lines), shown
    if with_s3:
        assert any(line.endswith(": 1 files in the sandbox") for line in lines), shown
    [mounted] = [line for line in lines if line.startswith("==> workspace ")]
    claim = mounted.removeprefix("==> workspace ").removesuffix(" mounted at /workspace/sessions")
    assert claim.startswith("backend-example-workspace (uid "), shown
    assert f"==> the same workspace after wake: {claim}" in lines, shown
    assert f"==> deleted {namespace}/backend-example" in lines
    assert "[100%]" in result.stdout, "progress was reported up to Ready"
    assert cluster.sandbox(namespace, "backend-example") is None
    wait_for(
        lambda: cluster.get(PVCS, namespace, "backend-example-workspace") is None,
        what="the workspace deleted with the sandbox",
    )
