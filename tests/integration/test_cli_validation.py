"""onyx-cli validate-config inside the pod: what each outcome does to the sandbox."""

from __future__ import annotations

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.reconciler.steps.cli import DELIVER_ARGV
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    condition,
    event_posted,
    event_reasons,
    live_pats,
    phase,
    pod,
    sandbox,
    status,
    token_in_secret,
)
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


async def test_the_pat_is_delivered_and_validated_once_per_pod_with_argv_only(
    emulator: KubeEmulator, operator: OperatorContext, pod_exec: EmulatedPodExec
) -> None:
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")

    done = operator.queue.processed
    operator.queue.add((NAMESPACE, "alice"))
    await eventually(lambda: operator.queue.processed > done, what="another pass")

    assert pod_exec.calls == [(NAMESPACE, "alice", DELIVER_ARGV)], "one exec, once"
    assert condition(emulator, "alice", "CLIValidated")["reason"] == "Validated"
    delivered = pod_exec.local.credentials_dir(NAMESPACE, "alice") / "pat"
    assert delivered.read_text() == token_in_secret(emulator, "alice")
    assert delivered.stat().st_mode & 0o777 == 0o600, "readable by the pod's user only"


def minting_no_more(emulator: KubeEmulator) -> bool:
    """Whether alice's CLIValidated says a fresh PAT was refused too: no more are minted."""
    return "no more are minted" in condition(emulator, "alice", "CLIValidated").get("message", "")


async def test_an_auth_failure_mints_a_new_pat_and_delivers_it_into_the_same_pod_once(
    emulator: KubeEmulator,
    operator: OperatorContext,
    cli_exit_codes: dict[str, int],
    settings: Settings,
) -> None:
    cli_exit_codes[f"{NAMESPACE}/alice"] = 4
    emulator.create(SANDBOXES, sandbox("alice"))
    first = await eventually(lambda: pod(emulator, "alice"), what="the pod")
    first_token = token_in_secret(emulator, "alice")
    mark_pod_running(emulator, NAMESPACE, "alice")

    await eventually(
        lambda: minting_no_more(emulator),
        what="the operator minting no more after the fresh PAT is refused too",
    )
    assert token_in_secret(emulator, "alice") != first_token
    assert status(emulator, "alice")["cliAuthFailures"] >= 2
    assert pod(emulator, "alice")["metadata"]["uid"] == first["metadata"]["uid"]  # type: ignore[index]
    assert len(live_pats(settings)) == 1, "the refused PAT is revoked at once"
    await event_posted(emulator, "alice", "AuthFailed")


async def test_an_unreachable_server_is_reported_with_the_exit_codes_meaning(
    emulator: KubeEmulator, operator: OperatorContext, cli_exit_codes: dict[str, int]
) -> None:
    cli_exit_codes[f"{NAMESPACE}/alice"] = 5
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")

    validated = await eventually(
        lambda: (c := condition(emulator, "alice", "CLIValidated")).get("status") == "False" and c,
        what="CLIValidated False",
    )
    assert validated["reason"] == "ServerUnreachable"
    assert status(emulator, "alice")["phase"] == "Provisioning"
    assert condition(emulator, "alice", "Ready")["reason"] == "ServerUnreachable"

    cli_exit_codes[f"{NAMESPACE}/alice"] = 0  # the server comes back; the retry succeeds
    await phase(emulator, "alice", "Ready", within=15)


async def test_a_spec_change_after_refused_pats_validates_again_in_the_same_pod(
    emulator: KubeEmulator, operator: OperatorContext, cli_exit_codes: dict[str, int]
) -> None:
    cli_exit_codes[f"{NAMESPACE}/alice"] = 4
    emulator.create(SANDBOXES, sandbox("alice"))
    first = await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await eventually(
        lambda: minting_no_more(emulator),
        what="the operator minting no more after the fresh PAT is refused too",
    )
    assert event_reasons(emulator, "alice").count("PATMinted") == 2, "the fresh PAT is said"

    cli_exit_codes[f"{NAMESPACE}/alice"] = 0  # the server accepts PATs again
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"sources": [{"name": "slack"}]}})
    await eventually(
        lambda: condition(emulator, "alice", "CLIValidated").get("reason") == "Validated",
        what="a validation after the spec change",
    )
    assert pod(emulator, "alice")["metadata"]["uid"] == first["metadata"]["uid"]  # type: ignore[index]
