"""From a new CraftSandbox to a Ready sandbox pod with credentials, skill and CLI check."""

from __future__ import annotations

import base64

from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.test_operator_loop import sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_running


def condition(emulator: KubeEmulator, name: str, type_: str) -> dict | None:
    status = emulator.get(SANDBOXES, "team-a", name).get("status", {})
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


async def test_a_sandbox_becomes_ready_once_its_pod_is_ready(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, sandbox("alice", sources=[{"name": "slack"}]))

    pod = await eventually(lambda: emulator.find("v1/pods", "team-a", "alice"), what="the pod")
    secret = emulator.get("v1/secrets", "team-a", "alice-credentials")
    configmap = emulator.get("v1/configmaps", "team-a", "alice-skills")
    token = base64.b64decode(secret["data"]["ONYX_PAT"]).decode()
    assert token.startswith("onyx_pat_")
    assert "`slack`" in configmap["data"]["SKILL.md"]
    assert pod["spec"]["containers"][0]["env"][1]["valueFrom"]["secretKeyRef"] == {
        "name": "alice-credentials",
        "key": "ONYX_PAT",
    }

    mark_pod_running(emulator, "team-a", "alice")

    status = await eventually(
        lambda: (
            (s := emulator.get(SANDBOXES, "team-a", "alice")["status"])["phase"] == "Ready" and s
        ),
        what="phase Ready",
    )
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types == {
        "CredentialsReady": "True",
        "SkillRendered": "True",
        "PodReady": "True",
        "CLIValidated": "True",
        "UserLibrarySynced": "True",
        "Ready": "True",
    }
    assert status["credentials"]["tokenDisplay"].startswith(token[:12])
    assert status["skill"]["sourceCount"] == 1
