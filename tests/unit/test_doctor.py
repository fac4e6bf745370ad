"""``craft-operator doctor`` against real parts: an SQLite database, a generated key ring,
moto's S3 server over HTTP and the KMock Kubernetes emulator (answering
SelfSubjectAccessReviews from a set of denied grants). Each failure names the fix and
makes the command exit non-zero; warnings do not."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
import pytest
import sqlalchemy
import yaml
from click.testing import CliRunner, Result
from kmock._internal import rendering
from kubernetes.config import kube_config
from moto.server import ThreadedMotoServer

from craft_operator.access import SSAR_PATH
from craft_operator.api import crd, models
from craft_operator.api.pool_crd import build_pool_crd
from craft_operator.cli import main
from craft_operator.config import load_settings
from craft_operator.credentials import SandboxIdentity, build_credential_store, generate_key_entry
from craft_operator.credentials.db import VERSION_TABLE, create_credentials_engine, upgrade
from craft_operator.devtools.onyx_schema import add_user, create_onyx_tables
from craft_operator.devtools.postgres import ThrowawayPostgres
from craft_operator.doctor import Status, check_kubernetes, unexpected_failure
from craft_operator.doctor import kubernetes as doctor_kubernetes
from craft_operator.doctor.database import table_sequences
from craft_operator.library.s3 import make_s3_client
from craft_operator.permissions import access_requests
from craft_operator.policy.crd import build_policy_crd
from tests.integration.helpers import NAMESPACE, sandbox
from tests.support.emulator import KubeEmulator, declare_core_resources, declare_peering_resources
from tests.support.faults import failure_response
from tests.support.policy import allow, declare_policy_resource
from tests.support.pools import POOLS, declare_pool_resource, pool

pytestmark = [pytest.mark.unit, pytest.mark.s3]

KEYS = generate_key_entry("doctor-test").get_secret_value()
USER = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
DB_PASSWORD = "hunter2-Sup3rSecret"
#: The peering object of manifests/base, and how its StatefulSet names it.
PEERING = "craft-operator"
PEERINGS = kmock.resource("kopf.dev", "v1", "clusterkopfpeerings")
Grant = tuple[str, str, str]  # (verb, group, resource[/subresource])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    """One moto S3 server for the module; each test makes its own bucket."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, s3_url: str) -> dict[str, str]:
    """A clean environment: a migrated SQLite database, a key ring and an existing bucket."""
    for name in list(os.environ):
        if name.startswith(("CRAFT_", "AWS_", "KUBERNETES_")) or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    bucket = f"lib-{uuid.uuid4().hex[:12]}"
    make_s3_client(endpoint_url=s3_url, region="us-east-1").create_bucket(Bucket=bucket)
    values = {
        "CRAFT_STATE_DIR": str(tmp_path / "state"),
        "CRAFT_ENCRYPTION_KEYS": KEYS,
        "CRAFT_SERVER_URL": "http://onyx.internal:8080",
        "CRAFT_S3_BUCKET": bucket,
        "CRAFT_S3_ENDPOINT_URL": s3_url,
        "CRAFT_S3_REGION": "us-east-1",
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    # The Kubernetes client reads KUBECONFIG once, when it is imported.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", values["KUBECONFIG"])
    build_credential_store(load_settings()).close()  # migrates the embedded database
    return values


@dataclass
class Cluster:
    """The emulated API server and what its SelfSubjectAccessReviews say."""

    emulator: KubeEmulator
    denied: set[Grant] = field(default_factory=set)
    #: Namespaces where every request is denied (no Role there).
    denied_in: set[str] = field(default_factory=set)
    reviews: list[dict[str, Any]] = field(default_factory=list)


def declare_craft_resources(emulator: KubeEmulator) -> None:
    names = crd.build_crd()["spec"]["names"]
    emulator.declare(
        kmock.resource(models.GROUP, models.VERSION, models.PLURAL),
        kmock.ResourceInfo(
            kind=names["kind"],
            singular=names["singular"],
            namespaced=True,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            subresources={"status"},
        ),
    )
    declare_pool_resource(emulator)
    declare_policy_resource(emulator)


def write_kubeconfig(path: Path, server: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulated", "cluster": {"server": server}}],
        "users": [{"name": "someone", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "someone"}}],
        "current-context": "emulated",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")


@pytest.fixture
async def cluster(env: dict[str, str]) -> AsyncIterator[Cluster]:
    """The KMock emulator with the CRDs served (kopf's peering one too) and the peering
    object of manifests/base, the kubeconfig pointing at it."""
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        declare_core_resources(emulator)
        declare_craft_resources(emulator)
        declare_peering_resources(emulator)
        emulator.create(
            PEERINGS,
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "ClusterKopfPeering",
                "metadata": {"name": PEERING},
            },
        )
        state = Cluster(emulator)

        async def review(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
            if request.method.value.upper() != "POST" or request.url.path != SSAR_PATH:
                return None
            attributes = request.data["spec"]["resourceAttributes"]
            state.reviews.append(attributes)
            resource = attributes["resource"] + (
                f"/{attributes['subresource']}" if attributes.get("subresource") else ""
            )
            grant = (attributes["verb"], attributes["group"], resource)
            allowed = grant not in state.denied and (
                attributes.get("namespace") not in state.denied_in
            )
            return aiohttp.web.json_response(
                {**request.data, "status": {"allowed": allowed, "reason": ""}}, status=201
            )

        emulator.before_request.append(review)
        publish_schemas(state, crd.build_crd(), build_pool_crd(), build_policy_crd())
        write_kubeconfig(Path(env["KUBECONFIG"]), str(emulator.url).rstrip("/"))
        yield state


def run_doctor(*args: str, charset: str = "utf-8") -> Result:
    return CliRunner(charset=charset).invoke(main, ["doctor", *args], catch_exceptions=False)


async def doctor(*args: str, charset: str = "utf-8") -> Result:
    """Run the CLI in a thread: it runs its own event loop, the emulator runs in ours."""
    return await asyncio.to_thread(run_doctor, *args, charset=charset)


def line(result: Result, name: str) -> str:
    found = [text for text in result.output.splitlines() if f" {name}: " in text]
    assert len(found) == 1, result.output
    return found[0]


# -- everything in place -----------------------------------------------------------------------


async def test_every_check_passes_when_everything_is_in_place(cluster: Cluster) -> None:
    # Standalone: a peered operator on the embedded SQLite database fails (tested below).
    result = await doctor("--standalone")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [text.split(":")[0] for text in lines] == [
        "✔ settings",
        "✔ database",
        "✔ database schema",
        "✔ key ring",
        "✔ S3",
        "✔ Kubernetes API",
        "✔ CraftSandbox API",
        "✔ API permissions",
        "✔ peering",
        "✔ policy",
    ]
    assert "(embedded SQLite)" in line(result, "database")
    assert line(result, "CraftSandbox API") == (
        "✔ CraftSandbox API: craftsandboxes.craft.onyx.app, craftsandboxpolicies.craft.onyx.app, "
        f"craftsandboxpools.craft.onyx.app are served at {models.API_VERSION}"
    )
    # Serving all namespaces (no CRAFT_NAMESPACES): every grant, cluster-wide.
    everything = len(access_requests([], peering=False))
    assert f"all {everything} grants" in line(result, "API permissions")
    assert len(cluster.reviews) == everything
    assert "not-a-real-token" not in result.output
    assert KEYS.split(":")[1] not in result.output


async def test_json_output_lists_every_check_with_its_status(cluster: Cluster) -> None:
    cluster.denied.add(("create", "", "events"))
    result = await doctor("--json")
    assert result.exit_code == 1
    payload = json.loads(result.output)
    assert payload["ok"] is False
    statuses = {check["name"]: check["status"] for check in payload["checks"]}
    assert statuses["S3"] == "ok"
    assert statuses["API permissions"] == "fail"
    failed = next(check for check in payload["checks"] if check["status"] == "fail")
    assert "create events" in failed["detail"]
    assert "manifests/overlays/all-namespaces" in failed["fix"]


async def test_without_utf8_the_marks_are_ascii(cluster: Cluster) -> None:
    result = await doctor(charset="ascii")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("[ok] settings: ")
    assert result.output.isascii()


# -- Kubernetes --------------------------------------------------------------------------------


async def test_a_missing_permission_is_named_with_the_rbac_fix(cluster: Cluster) -> None:
    cluster.denied |= {("patch", models.GROUP, "craftsandboxes/status"), ("create", "", "pods")}
    result = await doctor()
    assert result.exit_code == 1
    text = line(result, "API permissions")
    assert text.startswith("✘ API permissions: 2 missing: ")
    assert "patch craftsandboxes/status.craft.onyx.app" in text
    assert "create pods" in text
    assert "— serving all namespaces needs the cluster-wide grants of " in text
    assert line(result, "S3").startswith("✔")


async def test_a_missing_peering_grant_points_at_the_base(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_NAMESPACES", "team-a")
    cluster.denied.add(("patch", "kopf.dev", "clusterkopfpeerings"))
    result = await doctor("--peering", PEERING)
    text = line(result, "API permissions")
    assert "1 missing: patch clusterkopfpeerings.kopf.dev" in text
    assert "— apply the operator's RBAC (kubectl apply -k manifests/base)" in text


def make_namespaces(cluster: Cluster, *names: str) -> None:
    for name in names:
        cluster.emulator.add_namespace(name)


async def test_a_served_namespace_not_made_yet_is_a_warning_as_run_takes_it(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run starts, warns and watches it; doctor failed the rollout it gates instead, and
    advised applying the Role in a namespace that does not exist."""
    monkeypatch.setenv("CRAFT_NAMESPACES", "team-a,team-b")
    make_namespaces(cluster, "team-a")
    cluster.denied_in.add("team-b")  # no Role there: it does not exist

    result = await doctor("--standalone")

    text = line(result, "API permissions")
    assert result.exit_code == 0, result.output
    assert text.startswith("⚠ API permissions:"), text
    assert "team-b (does not exist)" in text


async def test_a_scoped_operator_is_checked_in_each_watched_namespace(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_NAMESPACES", "team-a,team-b")
    make_namespaces(cluster, "team-a", "team-b")
    cluster.denied.add(("watch", "", "secrets"))
    result = await doctor("--peering", PEERING)
    assert result.exit_code == 1
    text = line(result, "API permissions")
    assert "watch secrets in team-a, watch secrets in team-b" in text
    assert "— apply manifests/sandbox-namespace in team-a, team-b (kubectl apply -n" in text
    # Namespaced operators need no CRD access; the peering object is asked for once.
    assert [r for r in cluster.reviews if r["resource"] == "customresourcedefinitions"] == []
    peering = [r for r in cluster.reviews if r["resource"] == "clusterkopfpeerings"]
    assert len(peering) == 4
    assert all("namespace" not in review for review in peering)
    pod_namespaces = {r.get("namespace") for r in cluster.reviews if r["resource"] == "pods"}
    assert pod_namespaces == {"team-a", "team-b"}
    assert len(cluster.reviews) == len(access_requests(["a", "b"]))


# -- the peering -------------------------------------------------------------------------------


async def test_a_peered_operators_peering_object_is_found_with_its_live_replicas(
    cluster: Cluster,
) -> None:
    seen = datetime.now(UTC).isoformat()
    status = {"craft-operator-0": {"priority": 100, "lifetime": 60, "lastseen": seen}}
    cluster.emulator.patch(PEERINGS, None, PEERING, {"status": status})
    result = await doctor("--peering", PEERING)
    failed = [text for text in result.output.splitlines() if text.startswith("✘")]
    assert failed == [line(result, "database")], result.output  # SQLite: see below
    assert line(result, "peering") == (
        "✔ peering: ClusterKopfPeering craft-operator exists; live replicas: "
        "craft-operator-0 (priority 100)"
    )


async def test_a_missing_peering_object_fails_as_every_replica_would_idle(
    cluster: Cluster,
) -> None:
    result = await doctor("--peering", "craft-operator-east")
    assert result.exit_code == 1
    text = line(result, "peering")
    assert text.startswith(
        "✘ peering: ClusterKopfPeering craft-operator-east does not exist: every replica waits"
    )
    assert "— create it: kubectl apply -k manifests/base (manifests/base/peering.yaml)" in text


async def test_the_peering_name_may_come_from_craft_peering_name(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_PEERING_NAME", "craft-operator-east")
    result = await doctor()
    assert result.exit_code == 1
    assert "ClusterKopfPeering craft-operator-east does not exist" in line(result, "peering")


async def test_without_kopfs_peering_crd_the_peering_fails_naming_the_crd(
    env: dict[str, str],
) -> None:
    async with emulated_cluster(env, declare_core_resources, declare_craft_resources):
        result = await doctor("--peering", PEERING)
    assert result.exit_code == 1
    text = line(result, "peering")
    assert text.startswith("✘ peering: the API server does not serve clusterkopfpeerings.kopf.dev")
    assert "— install kopf's peering CRD: kubectl apply -k crds" in text


async def test_a_peered_operator_needs_kopfs_peering_crd_among_its_crds(
    env: dict[str, str],
) -> None:
    async with emulated_cluster(env, declare_core_resources, declare_craft_resources):
        peered = await doctor("--peering", PEERING)
        standalone = await doctor("--standalone")
    text = line(peered, "CraftSandbox API")
    assert text.startswith("✘ CraftSandbox API: the API server does not serve kopf.dev/v1: ")
    assert text.endswith("— install the CRDs: kubectl apply -k crds")
    assert line(standalone, "CraftSandbox API").startswith("✔ CraftSandbox API: ")


async def test_a_peered_operators_crds_include_kopfs_peering_one(cluster: Cluster) -> None:
    result = await doctor("--peering", PEERING)
    assert line(result, "CraftSandbox API").endswith(
        f"are served at {models.API_VERSION}, clusterkopfpeerings.kopf.dev at kopf.dev/v1"
    )


OPENAPI = f"/openapi/v3/apis/{models.GROUP}/{models.VERSION}"


def publish_schemas(cluster: Cluster, *crds: dict[str, Any]) -> None:
    """Answer the group version's OpenAPI v3 document with these CRDs' schemas, as the API
    server publishes them."""
    schemas = {}
    for installed in crds:
        spec, version = installed["spec"], installed["spec"]["versions"][0]
        gvk = {"group": spec["group"], "version": version["name"], "kind": spec["names"]["kind"]}
        schemas[f"app.onyx.craft.{version['name']}.{gvk['kind']}"] = {
            **version["schema"]["openAPIV3Schema"],
            "x-kubernetes-group-version-kind": [gvk],
        }

    async def publish(request: rendering.Request) -> aiohttp.web.Response | None:
        if request.url.path == OPENAPI:
            return aiohttp.web.json_response({"components": {"schemas": schemas}})
        return None

    cluster.emulator.before_request.insert(0, publish)


def older_sandbox_crd() -> dict[str, Any]:
    """The CraftSandbox CRD of a release before status.admittedImages and spec.tolerations."""
    older = crd.build_crd()
    schema = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    del schema["status"]["properties"]["admittedImages"]
    del schema["spec"]["properties"]["tolerations"]
    return older


async def test_an_older_crd_fails_naming_the_fields_the_api_server_drops(cluster: Cluster) -> None:
    """An upgrade that skipped applying the CRDs: the served CRD prunes what the operator
    writes (a webhook-changed pod replaced after each restart) and what users write."""
    publish_schemas(cluster, older_sandbox_crd(), build_pool_crd(), build_policy_crd())
    result = await doctor("--standalone")
    assert result.exit_code == 1
    assert line(result, "CraftSandbox API") == (
        "✘ CraftSandbox API: craftsandboxes.craft.onyx.app lacks spec.tolerations, "
        "status.admittedImages: older than this operator, so the API server drops those "
        "fields from what is written (specs, and the operator's status) "
        "— bring the CRDs up to date: kubectl apply -k crds"
    )


async def test_crds_as_this_operator_builds_them_pass(cluster: Cluster) -> None:
    publish_schemas(cluster, crd.build_crd(), build_pool_crd(), build_policy_crd())
    result = await doctor("--standalone")
    assert line(result, "CraftSandbox API").startswith("✔ CraftSandbox API: ")
    assert "not compared" not in result.output


async def test_an_api_server_publishing_no_openapi_v3_has_the_schemas_not_compared(
    cluster: Cluster,
) -> None:
    async def publish_none(request: rendering.Request) -> aiohttp.web.Response | None:
        if request.url.path == OPENAPI:
            return failure_response(404, "NotFound", "the page could not be found")
        return None

    cluster.emulator.before_request.insert(0, publish_none)
    result = await doctor("--standalone")
    assert result.exit_code == 0, result.output
    assert line(result, "CraftSandbox API").endswith(
        "(their schemas not compared with the operator's: reading the API server's OpenAPI v3 "
        "gave 404 NotFound)"
    )


async def test_a_standalone_operator_is_not_asked_for_peering_grants_or_object(
    cluster: Cluster,
) -> None:
    cluster.denied |= {
        (verb, "kopf.dev", "clusterkopfpeerings") for verb in ("get", "list", "watch", "patch")
    }
    result = await doctor("--standalone")
    assert result.exit_code == 0, result.output
    assert line(result, "peering") == "✔ peering: none (standalone: one replica, no peering object)"
    permissions = line(result, "API permissions")
    assert permissions.startswith(
        f"✔ API permissions: all {len(access_requests([], peering=False))} grants"
    )
    assert permissions.endswith("(cluster-wide, without the peering object's)")
    assert [r for r in cluster.reviews if r["resource"] == "clusterkopfpeerings"] == []


async def test_told_nothing_of_the_peering_doctor_says_it_did_not_check_it(
    cluster: Cluster,
) -> None:
    cluster.denied.add(("patch", "kopf.dev", "clusterkopfpeerings"))
    result = await doctor()
    assert result.exit_code == 0, result.output
    text = line(result, "peering")
    assert text.startswith("⚠ peering: not checked: doctor was not told whether the operator peers")
    assert "— pass the operator's own: --peering NAME (manifests/base: craft-operator)" in text
    assert [r for r in cluster.reviews if r["resource"] == "clusterkopfpeerings"] == []


async def test_standalone_contradicting_craft_peering_name_fails_the_peering(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_PEERING_NAME", PEERING)
    result = await doctor("--standalone")
    assert result.exit_code == 1
    assert line(result, "peering").startswith("✘ peering: --standalone contradicts peering")


def test_peering_and_standalone_together_are_a_usage_error(env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["doctor", "--peering", PEERING, "--standalone"])
    assert result.exit_code == 2
    assert result.stderr == "craft-operator: use either --peering or --standalone, not both\n"


def test_a_kubeconfig_exec_plugin_that_hangs_fails_the_api_check_without_hanging_doctor(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doctor_kubernetes, "KUBE_TIMEOUT_S", 0.5)
    released = threading.Event()

    def hanging_login() -> Any:
        released.wait(60)  # an exec plugin that never answers (released after the test)
        raise AssertionError("the login must have been given up on")

    started = time.monotonic()
    try:
        results = asyncio.run(check_kubernetes(load_settings(), connect=hanging_login))
        elapsed = time.monotonic() - started
    finally:
        released.set()
    [result] = results
    assert result.status is Status.FAIL
    assert result.detail.startswith("reading the Kubernetes credentials took longer than 0.5s")
    assert elapsed < 10, "neither the check nor the event loop's close waited for the thread"


async def test_a_refused_access_review_is_a_failure_not_a_pass(cluster: Cluster) -> None:
    async def refuse(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.url.path == SSAR_PATH:
            body = {"kind": "Status", "reason": "Forbidden", "message": "no reviews for you"}
            return aiohttp.web.json_response(body, status=403)
        return None

    cluster.emulator.before_request.insert(0, refuse)
    result = await doctor()
    assert result.exit_code == 1
    text = line(result, "API permissions")
    assert text.startswith("✘ API permissions: cannot ask the API server what is allowed")
    assert "403 Forbidden: no reviews for you" in text
    assert "— allow creating selfsubjectaccessreviews" in text


async def test_a_cluster_without_the_crd_says_how_to_install_it(env: dict[str, str]) -> None:
    async with emulated_cluster(env, declare_core_resources):
        result = await doctor()
    assert result.exit_code == 1
    text = line(result, "CraftSandbox API")
    assert text.startswith("✘ CraftSandbox API: the API server does not serve craft.onyx.app/")
    assert "— install the CRDs: kubectl apply -k crds" in text


async def test_a_cluster_without_the_policy_crd_fails_as_the_operator_would_never_start_work(
    env: dict[str, str],
) -> None:
    async with emulated_cluster(
        env,
        declare_core_resources,
        declare_peering_resources,
        declare_sandbox_crd,
        declare_pool_resource,
    ):
        result = await doctor("--standalone")
    assert result.exit_code == 1
    assert line(result, "CraftSandbox API") == (
        f"✘ CraftSandbox API: {models.API_VERSION} lacks craftsandboxpolicies: the operator "
        "lists each of these when it starts and, missing one, never becomes active"
        " — install the CRDs: kubectl apply -k crds"
    )


async def _allow_everything(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
    if request.url.path == SSAR_PATH:
        return aiohttp.web.json_response({"status": {"allowed": True}}, status=201)
    return None


def declare_sandbox_crd(emulator: KubeEmulator) -> None:
    """Serve the CraftSandbox CRD alone (as an operator of an earlier release installed)."""
    names = crd.build_crd()["spec"]["names"]
    emulator.declare(
        kmock.resource(models.GROUP, models.VERSION, models.PLURAL),
        kmock.ResourceInfo(kind=names["kind"], singular=names["singular"], subresources={"status"}),
    )


@contextlib.asynccontextmanager
async def emulated_cluster(
    env: dict[str, str], *declares: Callable[[KubeEmulator], None]
) -> AsyncIterator[KubeEmulator]:
    """An emulated API server serving what ``declares`` declare, allowing every access, with
    the doctor's kubeconfig pointing at it."""
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        for declare in declares:
            declare(emulator)
        write_kubeconfig(Path(env["KUBECONFIG"]), str(emulator.url).rstrip("/"))
        emulator.before_request.append(_allow_everything)
        yield emulator


async def test_an_unreachable_api_server_fails_with_one_line(env: dict[str, str]) -> None:
    write_kubeconfig(Path(env["KUBECONFIG"]), f"http://127.0.0.1:{free_port()}")
    result = await doctor()
    assert result.exit_code == 1
    text = line(result, "Kubernetes API")
    assert text.startswith("✘ Kubernetes API: cannot reach the Kubernetes API server at http://")
    assert "point KUBECONFIG" in text
    assert "CraftSandbox API" not in result.output


def test_a_server_url_with_a_password_fails_the_api_check_without_showing_it(
    env: dict[str, str],
) -> None:
    write_kubeconfig(Path(env["KUBECONFIG"]), "https://bob:secret@127.0.0.1:1")
    result = run_doctor()
    assert result.exit_code == 1
    assert line(result, "Kubernetes API").startswith(
        "✘ Kubernetes API: the kubeconfig's API server URL https://…@127.0.0.1:1 carries "
        "credentials (user:password@), which belong in the kubeconfig's user: fix the kubeconfig"
    )
    assert "secret" not in result.output
    assert "unexpected" not in result.output


def test_no_kubernetes_credentials_fail_the_api_check(env: dict[str, str]) -> None:
    result = run_doctor()
    assert result.exit_code == 1
    assert line(result, "Kubernetes API").startswith("✘ Kubernetes API: no Kubernetes credentials")


# -- settings, database and key ring (without the API server) ---------------------------------


def test_bad_settings_stop_doctor_at_the_first_line(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_METRICS_PORT", "99999")
    monkeypatch.setenv("CRAFT_DATABASE_URL", f"postgresql://onyx:{DB_PASSWORD}@[bad")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert result.output.startswith("✘ settings: invalid operator settings: ")
    assert "CRAFT_METRICS_PORT" in result.output
    assert "CRAFT_DATABASE_URL" in result.output
    assert "— correct the CRAFT_* variable" in result.output
    assert DB_PASSWORD not in result.output


def test_an_unmigrated_database_needs_db_upgrade_when_auto_migrate_is_off(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.db"
    create_credentials_engine(f"sqlite:///{empty}").connect().close()
    monkeypatch.setenv("CRAFT_DATABASE_URL", f"sqlite:///{empty}")
    monkeypatch.setenv("CRAFT_DATABASE_AUTO_MIGRATE", "false")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    text = line(result, "database schema")
    assert text.startswith("✘ database schema: the embedded database has no personal_access_token")
    assert "at revision none" in text
    assert text.endswith("— run: craft-operator db upgrade (CRAFT_DATABASE_AUTO_MIGRATE is off)")


def test_an_unmigrated_database_is_a_warning_when_the_operator_migrates_it(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.db"
    create_credentials_engine(f"sqlite:///{empty}").connect().close()
    monkeypatch.setenv("CRAFT_DATABASE_URL", f"sqlite:///{empty}")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 0, result.output
    assert line(result, "database schema").startswith("⚠ database schema: ")
    assert "the operator migrates it at start" in result.output
    assert line(result, "key ring").startswith("✔ key ring: ")  # nothing stored yet


def test_a_missing_sqlite_file_fails_when_auto_migrate_is_off_and_is_not_created(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.db"
    monkeypatch.setenv("CRAFT_DATABASE_URL", f"sqlite:///{missing}")
    monkeypatch.setenv("CRAFT_DATABASE_AUTO_MIGRATE", "false")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    text = line(result, "database")
    assert text.startswith("✘ database: ")
    assert "does not exist yet and CRAFT_DATABASE_AUTO_MIGRATE is false" in text
    assert text.endswith("— run: craft-operator db upgrade")
    assert not missing.exists()


def test_a_schema_a_newer_operator_migrated_fails_though_the_operator_migrates_at_start(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """This operator cannot start on it (no downgrade): auto-migrate is no excuse."""
    engine = create_credentials_engine(load_settings().database_url_value)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999_from_the_future'")
        )
    engine.dispose()
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    text = line(result, "database schema")
    assert text.startswith("✘ database schema: ")
    assert "revision 9999_from_the_future, which this operator does not know" in text
    assert text.endswith("— run the newer operator version (a downgrade is not supported)")


def test_an_unreachable_database_is_shown_without_its_password(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"postgresql+psycopg://onyx:{DB_PASSWORD}@127.0.0.1:{free_port()}/onyx"
    monkeypatch.setenv("CRAFT_DATABASE_URL", url)
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    text = line(result, "database")
    assert text.startswith("✘ database: postgresql+psycopg://onyx:***@127.0.0.1:")
    assert "— check host, port, database name, user and password in CRAFT_DATABASE_URL" in text
    assert DB_PASSWORD not in result.output
    assert "database schema" not in result.output


def test_postgres_without_a_cluster_id_fails_naming_the_setting(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"postgresql+psycopg://onyx:{DB_PASSWORD}@127.0.0.1:{free_port()}/onyx"
    monkeypatch.setenv("CRAFT_DATABASE_URL", url)
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    text = line(result, "cluster id")
    assert text.startswith("✘ cluster id: CRAFT_CLUSTER_ID must be set")
    assert DB_PASSWORD not in result.output


def test_stored_tokens_under_a_key_missing_from_the_ring_fail_the_key_ring(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = build_credential_store(load_settings())
    try:
        store.ensure(SandboxIdentity("team-a", "alice", "uid-alice"), user_id=USER, tenant_id="t")
    finally:
        store.close()
    monkeypatch.setenv("CRAFT_ENCRYPTION_KEYS", generate_key_entry("new-key").get_secret_value())
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    text = line(result, "key ring")
    assert "1 stored token(s) are encrypted under key(s) doctor-test" in text
    assert "— add those keys back to CRAFT_ENCRYPTION_KEYS" in text
    assert KEYS.split(":")[1] not in result.output


def test_an_older_key_still_in_use_suggests_a_rotation(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = build_credential_store(load_settings())
    try:
        store.ensure(SandboxIdentity("team-a", "alice", "uid-alice"), user_id=USER, tenant_id="t")
    finally:
        store.close()
    newer = generate_key_entry("newer").get_secret_value()
    monkeypatch.setenv("CRAFT_ENCRYPTION_KEYS", f"{newer},{KEYS}")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 0, result.output
    text = line(result, "key ring")
    assert text.startswith("✔ key ring: 2 key(s), encrypting with 'newer'")
    assert "1 stored token(s) under older key(s) doctor-test" in text


def test_an_unreadable_key_ring_file_fails_with_how_to_make_one(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CRAFT_ENCRYPTION_KEYS")
    broken = tmp_path / "keys"
    broken.write_text("k1:not-base64!\n", encoding="utf-8")
    monkeypatch.setenv("CRAFT_ENCRYPTION_KEYS_FILE", str(broken))
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    text = line(result, "key ring")
    assert text.startswith(
        f"✘ key ring: key ring file {broken}: key ring entry 1: the key is not valid base64"
    )
    assert text.endswith("make one with: craft-operator keys generate")


def test_a_key_ring_entry_written_the_wrong_way_round_is_named_by_position_only(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = base64.b64encode(b"doctor-canary-key-material-32by").decode()
    monkeypatch.setenv("CRAFT_ENCRYPTION_KEYS", f"{key}:k1")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code != 0
    assert "key ring entry 1: the key id is invalid" in result.output
    for form in (key, key.rstrip("="), key[:16], key[-16:]):
        assert form not in result.output


def test_the_development_key_ring_is_a_warning_and_is_not_created(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRAFT_ENCRYPTION_KEYS")
    monkeypatch.setenv("CRAFT_STATE_DIR", str(Path(env["CRAFT_STATE_DIR"]) / "fresh"))
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 0, result.output
    assert line(result, "key ring").startswith(
        "⚠ key ring: no CRAFT_ENCRYPTION_KEYS: the operator creates a development key ring"
    )
    assert "the operator creates it at start" in line(result, "database")
    assert not (Path(env["CRAFT_STATE_DIR"]) / "fresh").exists()


def test_a_state_dir_below_a_regular_file_fails_the_database_and_the_key_ring(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The operator would start, then fail every sandbox: it cannot make the folder.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.delenv("CRAFT_ENCRYPTION_KEYS")
    monkeypatch.setenv("CRAFT_STATE_DIR", str(blocker / "state"))
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    database = line(result, "database")
    assert database.startswith("✘ database: ")
    assert f"cannot be created: {blocker} is not a directory" in database
    assert database.endswith(
        "— set CRAFT_STATE_DIR (or CRAFT_DATABASE_URL) to a folder the "
        "operator may write in, e.g. a volume"
    )
    key_ring = line(result, "key ring")
    assert key_ring.startswith("✘ key ring: no CRAFT_ENCRYPTION_KEYS, and the development key ring")
    assert f"cannot be created: {blocker} is not a directory" in key_ring


def test_a_state_dir_the_user_may_not_write_in_fails_the_database(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setenv("CRAFT_STATE_DIR", str(locked / "state"))
    # Root may write anywhere: ask as a user who may not (what os.access answers).
    access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode, **kw: Path(path) != locked and access(path, mode, **kw)
    )
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    assert f"may not create files in {locked}" in line(result, "database")


def test_a_check_that_raises_fails_its_own_line_and_the_others_still_run(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"postgresql+psycopg://onyx:{DB_PASSWORD}@onyx-db:5432/onyx"
    monkeypatch.setenv("CRAFT_DATABASE_URL", url)
    monkeypatch.setenv("CRAFT_CLUSTER_ID", "east")

    def broken(*_: object, **__: object) -> Any:
        raise ValueError(f"cannot make sense of {url}")

    monkeypatch.setattr("craft_operator.doctor.check_database", broken)
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    assert [text.split(":")[0] for text in result.output.splitlines()] == [
        "✔ settings",
        "✘ database",
        "✔ key ring",
        "✔ S3",
    ]
    text = line(result, "database")
    assert text.startswith(
        "✘ database: the check failed unexpectedly: ValueError: cannot make sense of "
        "postgresql+psycopg://***@onyx-db:5432/onyx"
    )
    assert DB_PASSWORD not in result.output
    assert "Traceback" not in result.output


def test_a_database_url_with_a_port_that_is_no_number_is_a_settings_error_not_a_traceback(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_DATABASE_URL", f"postgresql+psycopg://u:{DB_PASSWORD}@db:5432x/onyx")
    monkeypatch.setenv("CRAFT_CLUSTER_ID", "east")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    assert line(result, "settings").startswith("✘ settings: ")
    assert "CRAFT_DATABASE_URL" in result.output
    assert DB_PASSWORD not in result.output


# -- the embedded database in production -------------------------------------------------------


def test_the_embedded_database_in_a_pod_is_a_warning_naming_the_database_secret(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 0, result.output
    text = line(result, "database")
    assert text.startswith("⚠ database: sqlite:///")
    assert "(embedded SQLite), but it runs in a pod: its file is lost with the pod" in text
    assert (
        "— point CRAFT_DATABASE_URL at Onyx's Postgres: the key 'url' of Secret "
        "craft-operator-database sets it (kubectl -n craft-system create secret generic "
        "craft-operator-database --from-literal=url="
    ) in text


@pytest.mark.parametrize("in_pod", [True, False], ids=["in-a-pod", "elsewhere"])
def test_a_peered_operator_on_the_embedded_database_fails(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, in_pod: bool
) -> None:
    if in_pod:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    result = run_doctor("--skip-kubernetes", "--peering", PEERING)
    assert result.exit_code == 1
    text = line(result, "database")
    assert text.startswith("✘ database: sqlite:///")
    assert "each replica has a database of its own, so a takeover mints every PAT again" in text
    assert "Secret craft-operator-database sets it" in text
    assert text.endswith("; or run one replica with --standalone")


def test_the_peering_may_come_from_craft_peering_name_for_the_database_check(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_PEERING_NAME", PEERING)
    assert line(run_doctor("--skip-kubernetes"), "database").startswith("✘ database: ")
    assert line(run_doctor("--skip-kubernetes", "--standalone"), "database").startswith("✔")


# -- S3 ----------------------------------------------------------------------------------------


def test_a_missing_bucket_fails_with_how_to_fix_it(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_S3_BUCKET", "no-such-bucket")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    text = line(result, "S3")
    assert text.startswith("✘ S3: S3 bucket 'no-such-bucket' does not exist")
    assert text.endswith("— create the bucket, or correct CRAFT_S3_BUCKET")


def test_an_unreachable_s3_endpoint_fails(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 1
    assert "— check CRAFT_S3_ENDPOINT_URL" in line(result, "S3")


def test_no_default_bucket_is_only_a_warning(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRAFT_S3_BUCKET")
    result = run_doctor("--skip-kubernetes")
    assert result.exit_code == 0, result.output
    assert line(result, "S3") == (
        "⚠ S3: no CRAFT_S3_BUCKET: user libraries need spec.userLibrary.bucket"
        " — set CRAFT_S3_BUCKET to the bucket of Onyx's user files"
    )


# -- Onyx mode (PostgreSQL) --------------------------------------------------------------------


@pytest.mark.postgres
def test_onyx_mode_needs_onyx_tables_then_the_operator_migration(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, postgres_server: ThrowawayPostgres
) -> None:
    url = postgres_server.create_database()
    monkeypatch.setenv("CRAFT_DATABASE_URL", url)
    monkeypatch.setenv("CRAFT_DATABASE_AUTO_MIGRATE", "false")
    monkeypatch.setenv("CRAFT_CLUSTER_ID", "east")
    engine = create_credentials_engine(url)
    try:
        result = run_doctor("--skip-kubernetes")
        assert result.exit_code == 1
        assert "(Onyx mode, PostgreSQL)" in line(result, "database")
        text = line(result, "database schema")
        assert text.startswith("✘ database schema: Onyx's table(s) 'user', 'personal_access_token'")
        assert text.endswith(
            "— point CRAFT_DATABASE_URL at Onyx's database once Onyx's migrations ran"
        )

        create_onyx_tables(engine)
        result = run_doctor("--skip-kubernetes")
        assert result.exit_code == 1
        assert line(result, "database schema").endswith(
            "— run: craft-operator db upgrade (CRAFT_DATABASE_AUTO_MIGRATE is off)"
        )

        upgrade(engine)
        result = run_doctor("--skip-kubernetes")
        assert result.exit_code == 0, result.output
        assert line(result, "database schema").startswith("✔ database schema: ")
        assert line(result, "database privileges").startswith("✔ database privileges: ")
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_database_role_that_may_not_use_onyx_s_tables_fails_naming_the_grants(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, postgres_server: ThrowawayPostgres
) -> None:
    """A role made for the operator's own tables alone: every mint fails, and doctor says
    why instead of passing."""
    url = postgres_server.create_database()
    admin = create_credentials_engine(url)
    create_onyx_tables(admin)
    upgrade(admin)
    role = f"craft_{uuid.uuid4().hex[:8]}"
    with admin.begin() as connection:
        connection.execute(sqlalchemy.text(f"CREATE ROLE {role} LOGIN"))
        connection.execute(sqlalchemy.text(f"GRANT USAGE ON SCHEMA public TO {role}"))
        for table in ("craft_sandbox_credential", "craft_library_sync", VERSION_TABLE):
            connection.execute(sqlalchemy.text(f"GRANT ALL ON {table} TO {role}"))
        connection.execute(
            sqlalchemy.text(f"GRANT USAGE ON SEQUENCE craft_sandbox_credential_id_seq TO {role}")
        )
        connection.execute(sqlalchemy.text(f'GRANT SELECT ON "user" TO {role}'))
    admin.dispose()
    monkeypatch.setenv("CRAFT_DATABASE_URL", url.replace("postgres@", f"{role}@", 1))
    monkeypatch.setenv("CRAFT_CLUSTER_ID", "east")

    result = run_doctor("--skip-kubernetes")

    assert result.exit_code == 1, result.output
    text = line(result, "database privileges")
    assert text.startswith(
        "✘ database privileges: the role in CRAFT_DATABASE_URL may not SELECT, INSERT, UPDATE "
        'ON "personal_access_token"; USAGE ON SEQUENCE personal_access_token_id_seq: '
    )
    assert text.endswith(
        '— GRANT SELECT, INSERT, UPDATE ON "personal_access_token" TO <that role>; '
        "GRANT USAGE ON SEQUENCE personal_access_token_id_seq TO <that role>"
    )


#: The table grants README asks of the operator's database role.
TABLE_GRANTS = (
    'SELECT, INSERT, UPDATE ON "personal_access_token"',
    'SELECT ON "user"',
    "SELECT, INSERT, UPDATE, DELETE ON craft_sandbox_credential",
    "SELECT, INSERT, UPDATE, DELETE ON craft_library_sync",
    f"SELECT ON {VERSION_TABLE}",
)
SEQUENCE_GRANTS = (
    "USAGE ON SEQUENCE personal_access_token_id_seq",
    "USAGE ON SEQUENCE craft_sandbox_credential_id_seq",
)


@pytest.mark.postgres
def test_a_database_role_with_the_table_grants_alone_fails_naming_the_sequences_it_needs(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, postgres_server: ThrowawayPostgres
) -> None:
    """An INSERT takes its id from the table's sequence, which needs a grant of its own:
    doctor passed such a role, and its first mint failed ("permission denied for sequence
    personal_access_token_id_seq")."""
    url = postgres_server.create_database()
    admin = create_credentials_engine(url)
    create_onyx_tables(admin)
    upgrade(admin)
    add_user(admin, user_id=uuid.UUID(USER))
    role = f"craft_{uuid.uuid4().hex[:8]}"

    def grant(*grants: str) -> None:
        with admin.begin() as connection:
            for what in grants:
                connection.execute(sqlalchemy.text(f"GRANT {what} TO {role}"))

    with admin.begin() as connection:
        connection.execute(sqlalchemy.text(f"CREATE ROLE {role} LOGIN"))
    grant("USAGE ON SCHEMA public", *TABLE_GRANTS)
    monkeypatch.setenv("CRAFT_DATABASE_URL", url.replace("postgres@", f"{role}@", 1))
    monkeypatch.setenv("CRAFT_DATABASE_AUTO_MIGRATE", "false")
    monkeypatch.setenv("CRAFT_CLUSTER_ID", "east")
    try:
        result = run_doctor("--skip-kubernetes")

        assert result.exit_code == 1, result.output
        assert line(result, "database privileges") == (
            "✘ database privileges: the role in CRAFT_DATABASE_URL may not "
            "USAGE ON SEQUENCE personal_access_token_id_seq; "
            "USAGE ON SEQUENCE craft_sandbox_credential_id_seq: sandboxes' PATs cannot be "
            "minted, renewed or revoked — "
            "GRANT USAGE ON SEQUENCE personal_access_token_id_seq TO <that role>; "
            "GRANT USAGE ON SEQUENCE craft_sandbox_credential_id_seq TO <that role>"
        )

        grant(*SEQUENCE_GRANTS)
        result = run_doctor("--skip-kubernetes")

        assert line(result, "database privileges").startswith("✔ database privileges: ")
        store = build_credential_store(load_settings())
        try:
            alice = SandboxIdentity("team-a", "alice", "uid-alice")
            assert store.ensure(alice, user_id=USER, tenant_id="public").minted
        finally:
            store.close()
    finally:
        admin.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("column", "sequences"),
    [
        ("id serial PRIMARY KEY", ["numbered_id_seq"]),
        ("id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", ["numbered_id_seq"]),
        ("id uuid PRIMARY KEY", []),
    ],
)
def test_the_sequences_an_insert_takes_ids_from_are_those_of_serial_and_identity_columns(
    postgres_server: ThrowawayPostgres, column: str, sequences: list[str]
) -> None:
    engine = create_credentials_engine(postgres_server.create_database())
    try:
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text(f"CREATE TABLE numbered ({column}, note text)"))
            assert table_sequences(connection, "numbered") == sequences
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_multi_tenant_onyx_needs_no_onyx_tables_in_the_default_schema(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, postgres_server: ThrowawayPostgres
) -> None:
    url = postgres_server.create_database()  # Onyx's tables in no schema yet: per tenant
    monkeypatch.setenv("CRAFT_DATABASE_URL", url)
    monkeypatch.setenv("CRAFT_DATABASE_AUTO_MIGRATE", "false")
    monkeypatch.setenv("CRAFT_CLUSTER_ID", "east")
    monkeypatch.setenv("CRAFT_ONYX_MULTI_TENANT", "true")
    engine = create_credentials_engine(url)
    try:
        result = run_doctor("--skip-kubernetes")
        assert result.exit_code == 1
        assert "each tenant's schema" in line(result, "database")
        assert line(result, "database schema").endswith(
            "— run: craft-operator db upgrade (CRAFT_DATABASE_AUTO_MIGRATE is off)"
        )

        upgrade(engine, multi_tenant=True)
        result = run_doctor("--skip-kubernetes")
        assert result.exit_code == 0, result.output
        assert line(result, "database schema").startswith("✔ database schema: ")
    finally:
        engine.dispose()


async def test_an_upgrade_without_the_pool_crd_says_how_to_install_it(
    env: dict[str, str],
) -> None:
    async with emulated_cluster(env, declare_core_resources, declare_sandbox_crd):
        result = await doctor()
    text = line(result, "CraftSandbox API")
    assert "lacks craftsandboxpolicies, craftsandboxpools, craftsandboxpools/status" in text
    assert "— install the CRDs: kubectl apply -k crds" in text


def test_an_unexpected_error_never_quotes_a_password_its_parser_split_at_an_at_sign() -> None:
    url = "postgresql+psycopg://craft:pa@ssSECRETTAIL@127.0.0.1:5432/onyx"
    error = ValueError("invalid host 'ssSECRETTAIL@127.0.0.1' in 'craft:pa@ssSECRETTAIL'")
    result = unexpected_failure("database", error, {"CRAFT_DATABASE_URL": url})
    assert result.status is Status.FAIL
    assert result.detail == (
        "the check failed unexpectedly: ValueError: invalid host '***@127.0.0.1' in '***'"
    )


def test_before_a_rollout_the_stored_tokens_are_checked_though_the_schema_is_behind(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """doctor from the new image, before the rollout, sees the schema one revision behind
    (the operator migrates it at start): the ring must still be judged by the tokens."""
    settings = load_settings()
    store = build_credential_store(settings)
    try:
        store.ensure(SandboxIdentity("team-a", "alice", "uid-alice"), user_id=USER, tenant_id="t")
    finally:
        store.close()
    engine = create_credentials_engine(settings.database_url_value)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("DROP INDEX ix_craft_sandbox_credential_sandbox_uid"))
        connection.execute(
            sqlalchemy.text(f"UPDATE {VERSION_TABLE} SET version_num = '0004_superseded_pat'")
        )
    engine.dispose()
    monkeypatch.setenv("CRAFT_ENCRYPTION_KEYS", generate_key_entry("new-key").get_secret_value())

    result = run_doctor("--skip-kubernetes")

    assert line(result, "database schema").startswith("⚠ database schema: ")
    assert line(result, "key ring").startswith("✘ key ring: 1 stored token(s)")
    assert "doctor-test" in line(result, "key ring")
    assert result.exit_code == 1


# -- the policy, judged with these settings -------------------------------------------------


SANDBOXES = kmock.resource(models.GROUP, models.VERSION, models.PLURAL)


async def test_without_a_policy_nothing_is_withdrawn(cluster: Cluster) -> None:
    result = await doctor("--standalone")
    assert "no CraftSandboxPolicy default" in line(result, "policy")


async def test_sandboxes_a_changed_default_image_leaves_unallowed_are_named_before_the_rollout(
    cluster: Cluster, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The backend pinned the default image; the rollout changes CRAFT_SANDBOX_IMAGE, and
    # the policy lists neither: the operator would withdraw every pinned sandbox.
    monkeypatch.setenv("CRAFT_SANDBOX_IMAGE", "registry.example.com/craft/sandbox:2.0")
    allow(cluster.emulator, images=["registry.example.com/craft/"])
    pinned = sandbox("pinned", image="craft-sandbox:0.1.0")
    cluster.emulator.create(SANDBOXES, pinned)
    cluster.emulator.create(SANDBOXES, sandbox("unpinned"))
    cluster.emulator.create(SANDBOXES, sandbox("refused", image="x/y:1"))
    denied = [{"type": "CredentialsReady", "status": "False", "reason": "PolicyDenied"}]
    status = {"status": {"conditions": denied}}
    cluster.emulator.patch(SANDBOXES, NAMESPACE, "refused", status, subresource="status")
    old_pool = {
        **pool("old", image="craft-sandbox:0.1.0"),
        "metadata": {"name": "old", "namespace": NAMESPACE},
    }
    cluster.emulator.create(POOLS, old_pool)

    result = await doctor("--standalone")

    assert result.exit_code == 1
    text = line(result, "policy")
    assert f"CraftSandbox {NAMESPACE}/pinned: not allowed by the platform: spec.image" in text
    assert f"CraftSandboxPool {NAMESPACE}/old" in text
    assert f"{NAMESPACE}/unpinned" not in text
    assert f"{NAMESPACE}/refused" not in text
    assert "does not allow 2 that run now" in text
    assert "spec.images" in text


async def test_sandboxes_the_policy_allows_pass_with_their_count(cluster: Cluster) -> None:
    allow(cluster.emulator, images=["registry.example.com/craft/"])
    cluster.emulator.create(SANDBOXES, sandbox("a", image="registry.example.com/craft/s:1"))
    cluster.emulator.create(SANDBOXES, sandbox("b"))

    result = await doctor("--standalone")

    assert result.exit_code == 0, result.output
    assert "allows the 2 sandboxes and 0 pools" in line(result, "policy")
