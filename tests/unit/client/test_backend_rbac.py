"""manifests/backend grants the client what it uses, and nothing it does not use.

The cluster tier shows the real authorizer refuses none of the client's requests under
that Role; this shows the other direction on the emulator: a whole life of a sandbox
uses every grant.
"""

from __future__ import annotations

import asyncio
import re

from craft_operator.client import AsyncSandboxClient, ForbiddenError
from craft_operator.client.errors import Request
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.rbac import MANIFESTS, access_of, grants, role_rules
from tests.unit.client.conftest import NAMESPACE, USER_ID, all_true, write_status

BACKEND_RBAC = MANIFESTS / "backend" / "rbac.yaml"
CLIENT_AGENT = "craft-operator-client/"


async def test_a_whole_life_uses_every_grant_of_the_backends_role(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await eventually(lambda: aclient.requests["watch"], what="the client watching")
    write_status(emulator, "alice", "Ready", all_true(), podName="alice", podUID="u1")
    await waiting
    await aclient.touch(NAMESPACE, "alice")
    await aclient.notify_library_changed(NAMESPACE, "alice")
    await aclient.sleep(NAMESPACE, "alice")
    await aclient.wake(NAMESPACE, "alice")
    assert await aclient.pod_name(NAMESPACE, "alice") == "alice"
    await aclient.delete(NAMESPACE, "alice", wait=True, timeout=30)

    used = {
        access
        for request in emulator.served
        if request.headers.get("User-Agent", "").startswith(CLIENT_AGENT)
        if (access := access_of(request)) is not None
    }
    # A server-side apply that creates the object is authorized as create as well as patch.
    used.add(("create", "craft.onyx.app", "craftsandboxes"))
    assert grants(role_rules(BACKEND_RBAC, "Role")) == used


def test_a_forbidden_error_names_the_verbs_the_role_grants_and_no_others() -> None:
    (rule,) = role_rules(BACKEND_RBAC, "Role")
    error = ForbiddenError(403, "Forbidden", "denied", Request("patch", NAMESPACE, "alice"))

    named = re.search(r"\(([a-z, ]+) on craftsandboxes", str(error))

    assert named is not None
    assert named.group(1).split(", ") == rule["verbs"]
