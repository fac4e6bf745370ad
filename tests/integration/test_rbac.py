"""The operator's RBAC grants nothing it does not use, in either install.

Every integration test already fails when the operator uses access its RBAC lacks (see
``conftest.emulator``). This scenario walks every path that talks to the API (provisioning,
CLI validation, Job-mode library sync, drift repair, create conflicts, a custom template,
the orphan sweep, a warm pool, deletion), as one replica of an active/standby pair
(peering), and checks both directions for each install: the namespaced default
(``manifests/base`` plus the Role of ``manifests/sandbox-namespace``), where the operator
serves one namespace and never asks for a namespaced kind cluster-wide, and
``manifests/overlays/all-namespaces``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from kmock._internal import rendering

from craft_operator.builders.naming import LABEL_SANDBOX
from craft_operator.config import Settings
from craft_operator.peering.options import PeeringOptions
from tests.integration.conftest import SANDBOXES, observed_access
from tests.integration.helpers import NAMESPACE, phase, pod, sandbox
from tests.integration.test_library_jobs import JOBS, finish_job
from tests.integration.test_orphan_sweep import pat_state, plant_row
from tests.integration.test_peering import PEERING, PEERINGS, peering_object
from tests.support.emulator import OPERATOR_AGENTS, KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.pools import POOLS, pool
from tests.support.rbac import Install, access_of, grants, install_rules

#: Cluster-scoped kinds, and the access reviews everyone may create.
CLUSTER_SCOPED = {
    "clusterkopfpeerings",
    "customresourcedefinitions",
    "namespaces",
    "craftsandboxpolicies",
}


@pytest.mark.parametrize("install", list(Install))
async def test_every_grant_of_the_install_is_used_and_nothing_else(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec, install: Install
) -> None:
    emulator.create(
        "v1/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "skill-template", "namespace": "craft-system"},
            "data": {
                "SKILL.md.j2": "---\nname: company-search\ndescription: Search.\n---\n"
                "{% for source in sources %}{{ source.line }}\n{% endfor %}"
            },
        },
    )

    conflicts = {"secrets", "pods", "persistentvolumeclaims", "jobs"}

    async def exists_already(request: rendering.Request) -> None:
        # As if a previous operator wrote the object and died before its cache saw it: the
        # create conflicts and the operator reads the object instead (the get verb).
        plural = request.url.path.rsplit("/", 1)[-1]
        if request.method.value.upper() == "POST" and plural in conflicts:
            conflicts.discard(plural)
            api = "batch/v1" if plural == "jobs" else "v1"
            emulator.create(f"{api}/{plural}", {**request.data})

    def put_back(resource: str, name: str, check: Callable[[dict], bool]) -> Callable[[], bool]:
        return lambda: check(emulator.get(resource, NAMESPACE, name))

    emulator.before_request.append(exists_already)  # type: ignore[arg-type]
    custom = settings.model_copy(
        update={
            "skill_template_configmap": "craft-system/skill-template",
            "s3_bucket": "craft-libraries",
            "library_s3_secret": "library-s3",
            "orphan_sweep_interval": 0.2,
        }
    )
    plant_row(custom, "deleted-while-the-operator-was-down")
    emulator.create(PEERINGS, peering_object())
    peering = PeeringOptions(name=PEERING, priority=100, identity="craft-operator-0", lifetime=5)
    served = (NAMESPACE,) if install is Install.NAMESPACED else ()
    warm = {"name": "warm", "namespace": NAMESPACE}
    async with running_operator(
        str(emulator.url).rstrip("/"),
        custom,
        exec_transport=pod_exec,
        peering=peering,
        namespaces=served,
    ):
        emulator.create(SANDBOXES, sandbox("alice", userLibrary={"mode": "Job"}))
        # A warm pool: watched, its pod owned by it (blockOwnerDeletion), its status written.
        emulator.create(POOLS, {**pool("warm", replicas=1), "metadata": warm})
        await eventually(
            lambda: emulator.get(POOLS, NAMESPACE, "warm").get("status", {}).get("replicas"),
            what="the pool's status",
        )
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")
        await eventually(lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1"), what="a Job")
        finish_job(emulator, "alice-library-1", result={"ok": True, "files": 0, "bytes": 0})
        await phase(emulator, "alice", "Ready")
        await eventually(lambda: emulator.find(JOBS, NAMESPACE, "alice-library-1") is None)

        forged = base64.b64encode(b"forged").decode()
        emulator.patch("v1/secrets", NAMESPACE, "alice-credentials", {"data": {"ONYX_PAT": forged}})
        emulator.patch("v1/configmaps", NAMESPACE, "alice-skills", {"data": {"SKILL.md": "x"}})
        relabel = {"metadata": {"labels": {LABEL_SANDBOX: "x"}}}
        emulator.patch("v1/pods", NAMESPACE, "alice", relabel)
        emulator.patch("v1/persistentvolumeclaims", NAMESPACE, "alice-library", relabel)
        for resource, name, check in (
            ("v1/secrets", "alice-credentials", lambda o: o["data"]["ONYX_PAT"] != forged),
            ("v1/configmaps", "alice-skills", lambda o: o["data"]["SKILL.md"] != "x"),
            ("v1/pods", "alice", lambda o: o["metadata"]["labels"][LABEL_SANDBOX] == "alice"),
            (
                "v1/persistentvolumeclaims",
                "alice-library",
                lambda o: o["metadata"]["labels"][LABEL_SANDBOX] == "alice",
            ),
        ):
            await eventually(put_back(resource, name, check), what=f"{name} put back")
        # The Secret's drift alone, twice: the second event repeats the first and is
        # counted up in its series (the events patch).
        for _ in range(2):
            emulator.patch(
                "v1/secrets", NAMESPACE, "alice-credentials", {"data": {"ONYX_PAT": forged}}
            )
            await eventually(
                put_back(
                    "v1/secrets", "alice-credentials", lambda o: o["data"]["ONYX_PAT"] != forged
                ),
                what="alice-credentials put back again",
            )

        await eventually(
            lambda: pat_state(custom, "deleted-while-the-operator-was-down") is None,
            what="the orphan sweep",
        )

        # The kubelet stops the pod at once, so that the finalizer's next pass no longer
        # caches it and reads its name (get pods) before it lets the sandbox go.
        emulator.kubelet_delay = 0
        emulator.remove(SANDBOXES, NAMESPACE, "alice")
        await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None)

    granted, used = grants(install_rules(install)), observed_access(emulator)
    assert not granted - used, f"granted, never used: {sorted(granted - used)}"
    assert not used - granted, f"used, not granted: {sorted(used - granted)}"
    if install is Install.NAMESPACED:
        cluster_wide = {
            f"{request.method.value.upper()} {request.url.path}"
            for request in emulator.served
            if request.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS)
            and (access := access_of(request)) is not None
            and access[2].partition("/")[0] not in CLUSTER_SCOPED
            and "/namespaces/" not in request.url.path
        }
        assert cluster_wide == set(), "a namespaced operator asked cluster-wide"
