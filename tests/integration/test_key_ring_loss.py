"""A stored token whose key is missing from the operator's key ring is kept: nothing is
revoked or replaced, the sandbox says KeyNotInRing, and with the key back in the ring it
goes on with the same PAT (a ring gone stale must not cost the fleet its tokens)."""

from __future__ import annotations

from pydantic import SecretStr

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
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


async def test_a_token_sealed_with_a_key_missing_from_the_ring_is_kept_until_the_key_is_back(
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
    delivered = pod_exec.local.credentials_dir(NAMESPACE, "alice") / "pat"
    assert delivered.read_text() == first_token
    assert settings.encryption_keys is not None
    old_entry = settings.encryption_keys.get_secret_value()
    new_entry = generate_key_entry("k-new")

    # The operator runs with a ring that lacks the token's key (a stale or mistaken ring).
    stale = settings.model_copy(update={"encryption_keys": new_entry})
    async with running_operator(url, stale, exec_transport=pod_exec):
        said = await eventually(
            lambda: (
                (found := condition(emulator, "alice", "CredentialsReady")).get("reason")
                == "KeyNotInRing"
                and found
            ),
            what="CredentialsReady saying KeyNotInRing",
        )
    assert said["status"] == "False"
    assert "'test'" in said["message"]  # the key id the token is sealed with
    assert "nothing was revoked" in said["message"]
    assert f"credentials revoke {NAMESPACE}/alice" in said["message"]
    assert live_pats(settings) == [first_pat], "the PAT is still live"
    assert token_in_secret(emulator, "alice") == first_token
    assert delivered.read_text() == first_token

    # With the key back (after the new one), the stored token is used again: same PAT.
    both = f"{new_entry.get_secret_value()},{old_entry}"
    mended = settings.model_copy(update={"encryption_keys": SecretStr(both)})
    async with running_operator(url, mended, exec_transport=pod_exec):
        try:
            await phase(emulator, "alice", "Ready")
        except AssertionError:
            raise AssertionError(
                str(emulator.get(SANDBOXES, NAMESPACE, "alice").get("status"))
            ) from None
        assert condition(emulator, "alice", "CredentialsReady")["status"] == "True"
    assert live_pats(settings) == [first_pat]
    assert token_in_secret(emulator, "alice") == first_token
    still = pod(emulator, "alice")
    assert still is not None
    assert still["metadata"]["uid"] == first_pod["metadata"]["uid"], "no restart"
