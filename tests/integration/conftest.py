"""Fixtures for the integration tier: the KMock emulator and the real kopf operator loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import kmock
import pytest

from craft_operator.api import crd, models
from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.credentials.keyring import generate_key_entry
from tests.support.admission import admit, default_craftsandbox
from tests.support.emulator import (
    OPERATOR_AGENTS,
    KubeEmulator,
    declare_core_resources,
    declare_peering_resources,
)
from tests.support.operator import running_operator
from tests.support.pod_exec import EmulatedPodExec
from tests.support.policy import declare_policy_resource
from tests.support.pools import declare_pool_resource
from tests.support.rbac import Access, Install, access_of, grants, install_rules
from tests.support.s3 import S3Server, running_s3_server, use_fake_aws_credentials
from tests.support.sandbox_namespace import provision_sandbox_namespaces

SANDBOXES = kmock.resource(models.GROUP, models.VERSION, models.PLURAL)


def observed_access(emulator: KubeEmulator) -> set[Access]:
    """The RBAC access the operator's requests to ``emulator`` needed (not the test's own)."""
    used = {
        access
        for request in emulator.served
        if request.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS)
        if (access := access_of(request)) is not None
    }
    return used | set(emulator.side_access)


def declare_craft_resources(emulator: KubeEmulator) -> None:
    """Serve the CraftSandbox resource in discovery exactly as the generated CRD defines it,
    the CraftSandboxPolicy and the CraftSandboxPool."""
    names = crd.build_crd()["spec"]["names"]
    emulator.declare(
        SANDBOXES,
        kmock.ResourceInfo(
            kind=names["kind"],
            singular=names["singular"],
            namespaced=True,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            shortnames=set(names["shortNames"]),
            categories=set(names["categories"]),
            subresources={"status"},
        ),
    )
    declare_policy_resource(emulator)
    declare_pool_resource(emulator)


@pytest.fixture
async def emulator(request: pytest.FixtureRequest) -> AsyncIterator[KubeEmulator]:
    """A running Kubernetes API emulator with the core resources and the CRDs in ``crds/``.

    Every write is admitted as a real API server would (schemas, CEL, Pod Security). Every
    namespace gets the NetworkPolicies of ``manifests/sandbox-namespace`` as it appears
    (clear ``namespace_defaults`` first for one without). At the end, the test fails if
    anything was refused that it did not expect (expected refusals are marked
    ``@pytest.mark.admission_rejections``), or if the operator used API access its RBAC
    does not grant (the all-namespaces install, which grants the most).
    """
    async with KubeEmulator() as handler, kmock.Server(handler):
        declare_core_resources(handler)
        declare_craft_resources(handler)
        declare_peering_resources(handler)
        handler.mutators.append(default_craftsandbox)
        handler.validators.append(admit)
        provision_sandbox_namespaces(handler)
        yield handler
    if not request.node.get_closest_marker("admission_rejections"):
        assert handler.rejections == [], "the API server would have refused these writes"
    ungranted = observed_access(handler) - grants(install_rules(Install.ALL_NAMESPACES))
    assert not ungranted, f"the operator used access its RBAC does not grant: {ungranted}"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Operator settings for a test: a private state dir and SQLite database."""
    return Settings(
        state_dir=tmp_path / "state",
        server_url="http://onyx.invalid:8080",
        encryption_keys=generate_key_entry("test"),
        pod_restart_backoff=0.2,
        metrics_port=0,  # tests read the registry; a fixed port would collide between runs
    )


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """moto's S3 server over HTTP, with fake AWS credentials in the environment."""
    use_fake_aws_credentials(monkeypatch)
    yield from running_s3_server()


@pytest.fixture
def cli_exit_codes() -> dict[str, int]:
    """What the scripted onyx-cli answers per pod (``namespace/pod``); 0 by default."""
    return {}


@pytest.fixture
def pod_exec(
    emulator: KubeEmulator, tmp_path: Path, cli_exit_codes: dict[str, int]
) -> EmulatedPodExec:
    """Exec into the emulator's pods, with onyx-cli scripted by ``cli_exit_codes``."""
    return EmulatedPodExec(
        emulator,
        tmp_path / "pods",
        scripted_cli=lambda namespace, pod: cli_exit_codes.get(f"{namespace}/{pod}", 0),
    )


@pytest.fixture
async def operator(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> AsyncIterator[OperatorContext]:
    """The real operator loop, running against the emulator until the test ends."""
    async with running_operator(
        str(emulator.url).rstrip("/"), settings, exec_transport=pod_exec
    ) as context:
        yield context


@pytest.fixture
async def job_mode_operator(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> AsyncIterator[OperatorContext]:
    """The operator running, its library in Job mode (sync Jobs with an S3 Secret)."""
    job_mode = settings.model_copy(
        update={
            "s3_bucket": "craft-libraries",
            "library_s3_secret": "library-s3",
            "operator_image": "craft-operator:test",
        }
    )
    url = str(emulator.url).rstrip("/")
    async with running_operator(url, job_mode, exec_transport=pod_exec) as context:
        yield context
