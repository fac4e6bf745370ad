"""Hostile input: every bad CraftSandbox is refused or explained, and no S3 key escapes.

The corpus has three parts:

- the 48 manifests the API server must refuse (schema and CEL), sent over HTTP as
  ``kubectl apply`` would: each gets a 422 naming the mistake, and nothing is stored;
- valid-but-wrong sandboxes the API server accepts: unknown sources, absurd resources, a
  node selector no node matches, an image that does not exist, a PriorityClass that does
  not exist, a server URL the pod cannot reach, users Onyx does not have or has disabled,
  a bucket that does not exist, fields at their maximum sizes. Each ends with a condition
  (or, for an unknown source, a warning event) whose reason says what is wrong;
- at least 30 hostile S3 keys in one user's library: traversal, absolute paths, control
  characters, backslashes, over-long names, collisions, the operator's own state dir.
  Nothing is written outside the library directory, and the skipped keys are reported.

Throughout, the operator process never dies and, once everything has settled, makes few
requests: no sandbox is retried in a hot loop.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from botocore.exceptions import ClientError

from craft_operator.credentials.db import create_credentials_engine
from craft_operator.devtools.onyx_schema import add_user
from craft_operator.library import make_s3_client
from tests.resilience.conftest import Launch, LeakCheck, Scale, s3_settings
from tests.resilience.harness import (
    CRAFT,
    sandbox_manifest,
)
from tests.support.emulator import OPERATOR_AGENTS, KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.policy import POLICIES, policy
from tests.support.s3 import S3Server
from tests.unit.api.cases import INVALID

NAMESPACE = "hostile"
BUCKET = "craft-libraries"

HOSTILE_KEYS = [
    "../escape.txt",
    "../../../../etc/passwd",
    "notes/../../escape.txt",
    "notes/../../../tmp/escape.txt",
    "/absolute.txt",
    "//double-absolute.txt",
    "./dot.txt",
    "notes/./dot.txt",
    "..",
    ".",
    "notes/..",
    "notes/../..",
    "back\\slash.txt",
    "..\\..\\windows.txt",
    "nul\x01control.txt",
    "new\nline.txt",
    "carriage\rreturn.txt",
    "escape\x1b[31mred.txt",
    "del\x7fchar.txt",
    "c1\u0085control.txt",
    "x" * 256 + ".txt",
    "/".join(["deep" * 60] * 20) + "/too-long.txt",
    ".craft-sync/manifest",
    ".craft-sync/staging/files/planted.txt",
    "notes//collide.txt",
    "notes/collide.txt",
    "cafe\u0301.txt",
    "caf\u00e9.txt",
    "clash",
    "clash/inner.txt",
    "..hidden-but-fine.txt",
    "%2e%2e/encoded-but-literal.txt",
    "\u202eevil-rtl.txt",
    "safe/ok.txt",
]


def kubelet_for_hostile_pods(emulator: KubeEmulator) -> Callable[[], None]:
    """One pass of a kubelet that knows some pods cannot run (what a real cluster says)."""

    def status_for(pod: dict[str, Any]) -> dict[str, Any] | None:
        container = pod["spec"]["containers"][0]
        requests = (container.get("resources") or {}).get("requests") or {}
        selector = pod["spec"].get("nodeSelector") or {}
        if "nowhere" in selector.values() or requests.get("cpu") in ("5000", "5000000m"):
            return {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient cpu.",
                    }
                ],
            }
        if ".invalid" in container["image"]:
            return {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "ready": False,
                        "restartCount": 0,
                        "image": container["image"],
                        "imageID": "",
                        "state": {
                            "waiting": {
                                "reason": "ErrImagePull",
                                "message": f'failed to pull image "{container["image"]}": '
                                "not found",
                            }
                        },
                    }
                ],
            }
        return None  # it runs

    def step() -> None:
        for pod in emulator.list("v1/pods", NAMESPACE):
            if (pod.get("status") or {}).get("phase") or pod["metadata"].get("deletionTimestamp"):
                continue
            name = pod["metadata"]["name"]
            status = status_for(pod)
            if status is None:
                mark_pod_running(emulator, NAMESPACE, name)
            else:
                emulator.patch("v1/pods", NAMESPACE, name, {"status": status}, subresource="status")

    return step


async def refuse_unknown_priority_classes(request: Any) -> aiohttp.web.Response | None:
    """The Priority admission plugin: a pod naming a PriorityClass that does not exist."""
    if request.method.value.upper() != "POST" or not request.url.path.endswith("/pods"):
        return None
    wanted = (request.data or {}).get("spec", {}).get("priorityClassName")
    if wanted in (None, "system-cluster-critical", "system-node-critical"):
        return None
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": f"pods is forbidden: no PriorityClass with name {wanted} was found",
    }
    return aiohttp.web.Response(status=403, text=json.dumps(body), content_type="application/json")


async def apply_over_http(url: str, manifest: dict[str, Any]) -> tuple[int, str]:
    """POST a CraftSandbox as kubectl would; the status code and the server's message."""
    path = f"{url}/apis/craft.onyx.app/v1alpha1/namespaces/{NAMESPACE}/craftsandboxes"
    async with (
        aiohttp.ClientSession() as session,
        session.post(path, json=manifest, headers={"User-Agent": "kubectl/v1.33"}) as response,
    ):
        text = await response.text()
        try:
            return response.status, str(json.loads(text).get("message", text))
        except ValueError:
            return response.status, text


def conditions_of(emulator: KubeEmulator, name: str) -> dict[str, dict[str, Any]]:
    """The sandbox's conditions by type."""
    sandbox = emulator.get(CRAFT, NAMESPACE, name)
    return {c["type"]: c for c in (sandbox.get("status") or {}).get("conditions") or []}


def reasons_of(emulator: KubeEmulator, name: str) -> set[str]:
    """Reasons of the sandbox's False conditions and of its warning events."""
    found = {c["reason"] for c in conditions_of(emulator, name).values() if c["status"] != "True"}
    for event in emulator.list("v1/events", NAMESPACE):
        if event["involvedObject"].get("name") == name and event.get("type") == "Warning":
            found.add(event["reason"])
    return found


def shows_one_of(emulator: KubeEmulator, name: str, expected: set[str]) -> bool:
    """Whether the sandbox shows one of ``expected``; else fail saying what it shows."""
    shown = reasons_of(emulator, name)
    assert expected & shown, f"{name} shows {sorted(shown)}"
    return True


@pytest.mark.admission_rejections
async def test_bad_sandboxes_are_refused_or_explained_and_no_key_escapes_the_library(
    emulator: KubeEmulator,
    pods: EmulatedPodExec,
    state: Path,
    rng: random.Random,
    scale: Scale,
    launch: Launch,
    assert_no_leaks: LeakCheck,
    onyx_database: str,
    s3: S3Server,
) -> None:
    url = str(emulator.url).rstrip("/")

    # 1. What admission refuses: nothing stored, a 422 naming the mistake.
    refused = []
    for case in INVALID:
        manifest = case.manifest()
        manifest["metadata"]["namespace"] = NAMESPACE
        code, message = await apply_over_http(url, manifest)
        assert code == 422, f"{case.id}: {code} {message}"
        assert case.expect in message, f"{case.id}: {message}"
        refused.append(case.id)
    assert emulator.list(CRAFT, NAMESPACE) == []

    # 2. What admission accepts but cannot work.
    engine = create_credentials_engine(onyx_database)
    try:
        good_user = str(add_user(engine))
        keys_user = str(add_user(engine))
        inactive_user = str(add_user(engine, active=False))
    finally:
        engine.dispose()
    library = make_s3_client(endpoint_url=s3.url, region="us-east-1", max_attempts=1)
    library.create_bucket(Bucket=BUCKET)
    keys_prefix = f"public/knowledge/{keys_user}/user_library/"
    stored = []
    for key in HOSTILE_KEYS:
        try:
            library.put_object(
                Bucket=BUCKET, Key=keys_prefix + key, Body=b"hostile " + key.encode()
            )
        except ClientError:
            continue  # moto's HTTP server normalises some '..' paths away (real S3 does not)
        stored.append(key)
    assert len(stored) >= 30, f"only {len(stored)} hostile keys could be stored"
    longest = {
        "name": "s" * 64,
        "description": "d" * 500,
        "scopes": ["x" * 200 for _ in range(5)],
    }
    # name -> (spec, reasons of which one must show, or None for "becomes Ready")
    wrong: dict[str, tuple[dict[str, Any], set[str] | None]] = {
        "unknown-source": ({"sources": [{"name": "myspace_wiki"}]}, {"UnknownSource"}),
        "absurd-cpu": (
            {"resources": {"requests": {"cpu": "5000"}, "limits": {"cpu": "5000"}}},
            {"PodStarting", "ProvisioningTimedOut"},
        ),
        "nowhere-node": (
            {"nodeSelector": {"topology.kubernetes.io/zone": "nowhere"}},
            {"PodStarting", "ProvisioningTimedOut"},
        ),
        "missing-image": (
            {"image": "registry.invalid/craft/sandbox:0.0.0"},
            {"PodStarting", "ProvisioningTimedOut"},
        ),
        "unknown-priority-class": ({"priorityClassName": "ultra-critical"}, {"PodCreateFailed"}),
        "unreachable-server": (
            {"serverURL": "https://unreachable.example.com"},
            {"ServerUnreachable"},
        ),
        "unknown-user": (
            {"user": {"id": str(uuid.UUID(int=rng.getrandbits(128)))}},
            {"UserNotFound"},
        ),
        "inactive-user": ({"user": {"id": inactive_user}}, {"UserInactive"}),
        "missing-bucket": (
            {"userLibrary": {"bucket": "no-such-bucket"}},
            {"S3BucketNotFound"},
        ),
        "hostile-keys": ({"user": {"id": keys_user}}, {"LibraryKeysSkipped"}),
        "largest-fields": (
            {"sources": [dict(longest, name=f"s{i:02d}_" + "s" * 60) for i in range(100)]},
            {"UnknownSource"},
        ),
    }
    # The platform allows what these name (the point is how the cluster answers them); the
    # last one names an image it does not allow.
    wrong["disallowed-image"] = ({"image": "attacker/sandbox:latest"}, {"PolicyDenied"})
    emulator.create(
        POLICIES,
        policy(
            images=["registry.invalid/craft/"],
            serverURLs=["https://unreachable.example.com"],
            priorityClassNames=["ultra-critical"],
            nodeSelectors={"topology.kubernetes.io/zone": ["nowhere"]},
            buckets=["no-such-bucket"],
        ),
    )
    for copy in range(scale.hostile_copies):
        for name, (spec, _) in wrong.items():
            manifest = sandbox_manifest(f"{name}-{copy}", NAMESPACE, good_user)
            manifest["spec"].update(spec)
            code, message = await apply_over_http(url, manifest)
            assert code in (200, 201), f"{name}: {code} {message}"

    def unreachable_for_some(namespace: str, pod: str) -> int:
        return 5 if "unreachable" in pods.pod_env(namespace, pod)["ONYX_SERVER_URL"] else 0

    pods.scripted_cli = unreachable_for_some
    emulator.before_request.append(refuse_unknown_priority_classes)
    kubelet_step = kubelet_for_hostile_pods(emulator)

    async def kubelet() -> None:
        while True:
            kubelet_step()
            await asyncio.sleep(0.05)

    operator = launch(
        NAMESPACE,
        CRAFT_DATABASE_URL=onyx_database,
        CRAFT_PROVISIONING_TIMEOUT="5",
        **s3_settings(s3.url, BUCKET),
    )
    kubelet_task = asyncio.create_task(kubelet())
    operator.start()
    try:
        for copy in range(scale.hostile_copies):
            for name, (_, expected) in wrong.items():
                sandbox = f"{name}-{copy}"
                if expected is None:
                    continue
                await eventually(
                    lambda sandbox=sandbox, expected=expected: (
                        expected & reasons_of(emulator, sandbox)
                    ),
                    within=60,
                    interval=0.2,
                    what=f"{sandbox}: one of {sorted(expected)}",
                )
        # Settled: now count what the operator still does.
        await asyncio.sleep(10)
        before = len(emulator.served)
        window = 10.0
        await asyncio.sleep(window)
        requests = [
            r
            for r in emulator.served[before:]
            if r.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS)
            and r.params.get("watch") != "true"
        ]
        assert operator.alive, f"the operator died:\n{operator.log_tail()}"
        await operator.stop_cleanly()
    finally:
        kubelet_task.cancel()
        if operator.alive:
            operator.kill()

    sandboxes = len(wrong) * scale.hostile_copies
    assert len(requests) <= sandboxes * window / 5, (
        f"{len(requests)} requests in {window:.0f} s from a settled operator: a hot loop? "
        + ", ".join(sorted({f"{r.method.value} {r.url.path}" for r in requests})[:10])
    )

    # Nothing outside any pod's library directory (but the PAT the operator delivered into
    # its own volume, and the mark of when that delivery started); the safe keys were synced.
    for path in pods.root.rglob("*"):
        if path.is_file():
            relative = path.relative_to(pods.root).parts
            if relative[2:] in {("run", "onyx", "pat"), ("run", "onyx", "pat.started")}:
                continue
            assert relative[2:4] == ("workspace", "user_library"), f"written outside: {path}"
    synced = pods.local.workspace(NAMESPACE, "hostile-keys-0") / "user_library"
    assert (synced / "safe" / "ok.txt").read_bytes() == b"hostile safe/ok.txt"
    assert (synced / "..hidden-but-fine.txt").exists()
    for escaped in ("escape.txt", "absolute.txt", "planted.txt", "passwd"):
        assert not list(state.parent.rglob(escaped)), f"{escaped} was written somewhere"

    assert_no_leaks(operator, texts={"exec:argv": repr(pods.calls)})
    print(
        f"refused at admission: {len(refused)}; accepted but wrong: {sandboxes}; "
        f"hostile keys: {len(stored)}; settled operator: {len(requests)} requests in "
        f"{window:.0f} s"
    )
