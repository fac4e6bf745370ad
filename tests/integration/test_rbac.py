"""The ClusterRole grants nothing the operator does not use.

Every integration test already fails when the operator uses access the ClusterRole lacks
(see ``conftest.emulator``). This scenario walks every path that talks to the API
(provisioning, CLI validation, drift repair, a create conflict, a custom template, deletion)
and checks the other direction: each grant in ``manifests/base/rbac.yaml`` is used.
"""

from __future__ import annotations

import base64

from kmock._internal import rendering

from craft_operator.builders.naming import LABEL_SANDBOX
from craft_operator.config import Settings
from tests.integration.conftest import SANDBOXES, observed_access
from tests.integration.helpers import NAMESPACE, phase, pod, sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.rbac import cluster_role_rules, grants


async def test_every_grant_in_the_cluster_role_is_used(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
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

    conflicts = {"secrets", "pods"}

    async def exists_already(request: rendering.Request) -> None:
        # As if a previous operator wrote the object and died before its cache saw it: the
        # create conflicts and the operator reads the object instead (the get verb).
        plural = request.url.path.rsplit("/", 1)[-1]
        if request.method.value.upper() == "POST" and plural in conflicts:
            conflicts.discard(plural)
            emulator.create(f"v1/{plural}", {**request.data})

    emulator.before_request.append(exists_already)  # type: ignore[arg-type]
    custom = settings.model_copy(update={"skill_template_configmap": "craft-system/skill-template"})
    async with running_operator(str(emulator.url).rstrip("/"), custom, exec_transport=pod_exec):
        emulator.create(SANDBOXES, sandbox("alice"))
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")
        await phase(emulator, "alice", "Ready")
        forged = base64.b64encode(b"forged").decode()
        emulator.patch("v1/secrets", NAMESPACE, "alice-credentials", {"data": {"ONYX_PAT": forged}})
        await eventually(
            lambda: (
                emulator.get("v1/secrets", NAMESPACE, "alice-credentials")["data"]["ONYX_PAT"]
                != forged
            ),
            what="the Secret put back",
        )
        emulator.patch("v1/configmaps", NAMESPACE, "alice-skills", {"data": {"SKILL.md": "x"}})
        emulator.patch(
            "v1/pods", NAMESPACE, "alice", {"metadata": {"labels": {LABEL_SANDBOX: "x"}}}
        )
        await eventually(
            lambda: (
                emulator.get("v1/pods", NAMESPACE, "alice")["metadata"]["labels"][LABEL_SANDBOX]
                == "alice"
                and emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"]["SKILL.md"]
                != "x"
            ),
            what="the ConfigMap and the pod's labels put back",
        )
        emulator.remove(SANDBOXES, NAMESPACE, "alice")
        await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None)

    unused = grants(cluster_role_rules()) - observed_access(emulator)
    assert not unused, f"the ClusterRole grants access the operator never used: {sorted(unused)}"
