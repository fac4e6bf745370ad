"""Fixtures of the cluster tier: a real control plane, and the operator as in production.

One control plane serves the whole run (built from Kubernetes' own Go modules, cached; see
``hack/controlplane``). The CRDs come from ``crds/`` and the namespace, ServiceAccount and
RBAC from ``manifests/base``, applied with kubectl. Each test gets a sandbox namespace with
Pod Security ``restricted`` enforced and ``manifests/sandbox-namespace`` applied (the
operator's Role there, the NetworkPolicies), and its own ``craft-operator run -n
<namespace>`` process that authenticates as the ``craft-operator`` ServiceAccount with a
TokenRequest token: the real authorizer judges every request against exactly the namespaced
RBAC that ``manifests/`` installs by default, and a test fails when any request of its
operator was refused (the API server's audit log).
Exec goes through the real API server to the simulated kubelet, which runs the real
``onyx-cli`` and BusyBox in the pod's own ``/workspace``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from craft_operator.credentials.keyring import generate_key_entry
from craft_operator.devtools.controlplane import (
    ControlPlane,
    ControlPlaneError,
    Ports,
    default_onyx_cli,
)
from tests.support.cluster import (
    BuildError,
    Cluster,
    controlplane_binaries,
    forbidden_requests,
)
from tests.support.onyx_api import stand_in_onyx_api
from tests.support.operator_process import OperatorProcess
from tests.support.s3 import S3Server, running_s3_server

Launch = Callable[..., OperatorProcess]


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The real control plane for the whole run; never skipped: no control plane fails."""
    try:
        bin_dir = controlplane_binaries()
    except BuildError as error:
        pytest.fail(f"the control plane could not be built: {error}", pytrace=False)
    onyx_cli = default_onyx_cli()
    if onyx_cli is None:
        pytest.fail("onyx-cli is not installed (pip install -e '.[dev]')", pytrace=False)
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"), bin_dir, Ports.free(), onyx_cli)
    try:
        plane.up(timeout=120)
    except ControlPlaneError as error:
        plane.down()
        pytest.fail(f"the control plane did not start: {error}", pytrace=False)
    yield plane
    plane.down()


@pytest.fixture(scope="session")
def cluster(control_plane: ControlPlane) -> Cluster:
    """The control plane with the CRDs and ``manifests/base`` applied."""
    cluster = Cluster(control_plane)
    cluster.install()
    return cluster


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> str:
    """A fresh sandbox namespace (restricted Pod Security, ``manifests/sandbox-namespace``)."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    return cluster.sandbox_namespace(f"{stem}-{uuid.uuid4().hex[:5]}")


@pytest.fixture(scope="session")
def canary_key() -> str:
    """The key ring of every operator process in the tier; it must never show."""
    return generate_key_entry("canary").get_secret_value()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server for the whole tier (each test has its own bucket)."""
    yield from running_s3_server()


@pytest.fixture(scope="session")
def s3(s3_server: S3Server) -> Any:
    """A boto3 client of moto's server, with fake credentials (never the developer's)."""
    return boto3.client(
        "s3",
        endpoint_url=s3_server.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def bucket(s3: Any) -> str:
    """An empty bucket of this test's own."""
    name = f"lib-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The operator's state directory: its SQLite database, kubeconfig and logs."""
    path = tmp_path / "operator"
    path.mkdir()
    return path


@pytest.fixture
def onyx_api(state: Path) -> Iterator[str]:
    """The stand-in Onyx API on the operator's database, so PATs it mints authenticate."""
    with stand_in_onyx_api(
        f"sqlite:///{state / 'craft-operator.db'}", state / "onyx-api.log"
    ) as url:
        yield url


@pytest.fixture
def launch(
    cluster: Cluster,
    namespace: str,
    state: Path,
    canary_key: str,
    onyx_api: str,
    s3_server: S3Server,
    bucket: str,
) -> Iterator[Launch]:
    """Make (not start) an operator process for the test's namespace, as the ServiceAccount.

    ``launch(CRAFT_X="...")`` adds settings. Every process still running at the end is
    stopped with SIGTERM and must exit cleanly.
    """
    kubeconfig = cluster.service_account_kubeconfig(state / "operator.kubeconfig")
    made: list[OperatorProcess] = []

    def make(*, run_args: tuple[str, ...] = ("--standalone",), **env: str) -> OperatorProcess:
        operator = OperatorProcess(
            cluster.plane.server,
            state,
            namespace,
            {
                "CRAFT_SERVER_URL": onyx_api,
                "CRAFT_ENCRYPTION_KEYS": canary_key,
                "CRAFT_S3_BUCKET": bucket,
                "CRAFT_S3_ENDPOINT_URL": s3_server.url,
                "CRAFT_S3_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                **env,
            },
            kubeconfig_path=kubeconfig,
            run_args=run_args,
        )
        made.append(operator)
        return operator

    yield make
    failures = []
    for operator in made:
        if operator.alive and operator.terminate() != 0:
            failures.append(operator.log_tail())
    assert not failures, "an operator did not exit cleanly on SIGTERM:\n" + "\n".join(failures)
    # The real authorizer is the judge of least privilege: the namespaced RBAC of
    # manifests/base and manifests/sandbox-namespace must grant every request the operator
    # made in this test.
    refused = forbidden_requests(cluster.plane, namespace, restarts=cluster.restarts)
    assert not refused, f"the API server refused the operator (RBAC lacks a grant): {refused}"


@pytest.fixture
def operator(launch: Launch) -> OperatorProcess:
    """A running standalone operator for the test's namespace."""
    process = launch()
    process.start()
    return process
