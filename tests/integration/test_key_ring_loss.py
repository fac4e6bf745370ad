"""A stored token that no key in the ring can open is replaced at once, and the sandbox says so."""

from __future__ import annotations

from craft_operator.config import Settings
from craft_operator.credentials.keyring import generate_key_entry
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    condition,
    live_pats,
    phase,
    pod,
    sandbox,
    token_in_secret,
)
from tests.support.emulator import KubeEmulator
from tests.support.events import step_messages
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


async def test_a_token_sealed_with_a_key_that_left_the_ring_is_revoked_and_replaced(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    url = str(emulator.url).rstrip("/")
    async with running_operator(url, settings, exec_transport=pod_exec):
        emulator.create(SANDBOXES, sandbox("alice"))
        await eventually(lambda: pod(emulator, "alice"), what="the pod")
        mark_pod_running(emulator, NAMESPACE, "alice")
        await phase(emulator, "alice", "Ready")
    [first_pat] = live_pats(settings)
    first_pod = pod(emulator, "alice")
    assert first_pod is not None
    first_token = token_in_secret(emulator, "alice")

    # The old key is gone from the ring (a rotation done wrong, a lost Secret).
    rotated = settings.model_copy(update={"encryption_keys": generate_key_entry("k-new")})
    async with running_operator(url, rotated, exec_transport=pod_exec):
        replaced = await eventually(
            lambda: (
                "cannot be decrypted"
                in condition(emulator, "alice", "CredentialsReady").get("message", "")
                and condition(emulator, "alice", "CredentialsReady")
            ),
            what="CredentialsReady naming the undecryptable token",
        )
        await eventually(
            lambda: token_in_secret(emulator, "alice") != first_token, what="the new token"
        )
        delivered = pod_exec.local.credentials_dir(NAMESPACE, "alice") / "pat"
        await eventually(
            lambda: delivered.read_text() == token_in_secret(emulator, "alice"),
            what="the new token delivered into the pod",
        )
        await phase(emulator, "alice", "Ready")
        still = pod(emulator, "alice")
        assert still is not None
        assert still["metadata"]["uid"] == first_pod["metadata"]["uid"], "no restart"
        # Said for as long as that PAT is the sandbox's, not only in the pass that minted it.
        assert condition(emulator, "alice", "CredentialsReady")["message"] == replaced["message"]

    assert replaced["status"] == "True"
    assert f"replaced PAT {first_pat}" in replaced["message"]
    assert "'test'" in replaced["message"]  # the key id it was sealed with
    [second_pat] = live_pats(settings)
    assert second_pat != first_pat
    minted = [
        message
        for message in step_messages(emulator.list("v1/events", NAMESPACE), "PATMinted")
        if "cannot be decrypted" in message
    ]
    assert len(minted) == 1
