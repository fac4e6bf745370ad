"""CLIValidated: the PAT is delivered into the pod and onyx-cli accepts it, once per pod and
PAT; a renewed PAT goes into the same pod; a refused PAT gets one fresh one."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from craft_operator.api.status_codec import dump_status
from craft_operator.credentials import CredentialStore, KeyRing, generate_key_entry
from craft_operator.credentials.db import create_credentials_engine, upgrade
from craft_operator.credentials.errors import CredentialsError, DatabaseUnavailableError
from craft_operator.kube.exec import (
    ExecError,
    ExecOutputTooLargeError,
    ExecResult,
    ExecTimeoutError,
)
from craft_operator.reconciler import cli_validation
from craft_operator.reconciler.detached import DetachedCalls
from craft_operator.reconciler.queue import Backoff
from craft_operator.reconciler.services import StoreCredentials
from craft_operator.reconciler.step import WAITING_MESSAGE, Pass
from craft_operator.reconciler.steps import cli, credentials
from craft_operator.status import CLI_VALIDATED, ConditionState, ConditionStatus
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import CANARY, NAME, NOW, UID, Credentials, World

pytestmark = pytest.mark.unit


def sandbox_pod(uid: str = "pod-1", version: str = "1") -> dict[str, object]:
    """The sandbox's pod as the cache holds it (the deliveries exec only into it)."""
    owner = {"kind": "CraftSandbox", "name": NAME, "uid": UID, "controller": True}
    return {
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "uid": uid,
            "resourceVersion": version,
            "ownerReferences": [owner],
        }
    }


POD = sandbox_pod()


async def ready_pass(world: World, **body: object) -> Pass:
    p = world.pass_(**body)
    await credentials.ensure_pat(p)
    p.pod = POD
    world.cache.put("Pod", POD)
    world.events.posted.clear()
    return p


async def test_an_accepted_pat_validates_the_pod_once(world: World) -> None:
    p = await ready_pass(world)
    assert await cli.validate_cli(p) is None
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Validated")
    assert p.run.status.validated_pod_uid == "pod-1"
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    again = await ready_pass(world, status=stored)
    await cli.validate_cli(again)
    assert world.exec.calls == [cli.DELIVER_ARGV], "one exec, once per pod and PAT"
    assert world.exec.delivered == [CANARY.encode()]
    assert all(CANARY not in " ".join(call) for call in world.exec.calls), "never in argv"


async def test_a_validation_an_earlier_row_left_waiting_comes_back_without_an_exec(
    world: World,
) -> None:
    p = await ready_pass(world)
    await cli.validate_cli(p)
    # A later pass stopped at the credentials row (the database down): CLIValidated waits.
    p.run.set(ConditionState.unknown("CLIValidated", "WaitingForCredentials", WAITING_MESSAGE))
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    recovered = await ready_pass(world, status=stored)
    await cli.validate_cli(recovered)
    condition = recovered.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Validated")
    assert world.exec.calls == [cli.DELIVER_ARGV], "the pod took this PAT already"


async def test_a_validation_left_unknown_by_its_own_failure_is_tried_again(world: World) -> None:
    p = await ready_pass(world)
    await cli.validate_cli(p)
    p.run.set(ConditionState.unknown("CLIValidated", "ExecFailed", "the exec broke"))
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    again = await ready_pass(world, status=stored)
    await cli.validate_cli(again)
    condition = again.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Validated")
    assert world.exec.calls == [cli.DELIVER_ARGV, cli.DELIVER_ARGV]


async def test_a_slow_delivery_runs_on_without_the_pass_and_the_next_pass_judges_it(
    world: World,
) -> None:
    world.services.deliveries = DetachedCalls(inline=0.05)
    woken: list[tuple[str, str]] = []
    world.services.deliveries.wake = woken.append
    world.exec.hold_delivery = asyncio.Event()  # onyx-cli waits for a slow server

    p = await ready_pass(world)
    await asyncio.wait_for(cli.validate_cli(p), 5)  # the worker is not held
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("Unknown", "Validating")

    world.exec.hold_delivery.set()
    await asyncio.sleep(0.05)
    assert woken == [p.run.key], "its end wakes the sandbox"
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    judged = await ready_pass(world, status=stored)
    await cli.validate_cli(judged)
    condition = judged.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Validated")
    assert world.exec.calls == [cli.DELIVER_ARGV], "one delivery, judged by the next pass"
    deliveries = world.services.deliveries
    assert deliveries.is_slow(p.run.key, "pod-1"), "the pod's later deliveries: slow lane"
    assert not deliveries.is_slow(p.run.key, "pod-2")


UNREACHABLE = 5  # onyx-cli: the Onyx server could not be reached from the pod


def backoff_of(world: World, base: float) -> DetachedCalls[ExecResult]:
    """The world's deliveries with a backoff of ``base`` seconds doubling, without jitter."""
    deliveries = DetachedCalls[ExecResult](backoff=Backoff(base=base, cap=60.0, jitter=0.0))
    world.services.deliveries = deliveries
    return deliveries


async def test_a_failed_delivery_waits_its_backoff_however_often_passes_come(
    world: World,
) -> None:
    deliveries = backoff_of(world, base=0.2)
    world.exec.cli_exit = UNREACHABLE
    p = await ready_pass(world)
    await cli.validate_cli(p)
    stored = p.run.status.model_dump(by_alias=True, mode="json")

    for _ in range(3):  # the pod's events bring the sandbox back at once, again and again
        soon = await ready_pass(world, status=stored)
        await cli.validate_cli(soon)
        condition = soon.run.condition("CLIValidated")
        assert condition is not None
        assert (condition.status, condition.reason) == ("False", "ServerUnreachable")
        after = soon.run.verdict.after
        assert after is not None
        assert 0 < after <= 0.2, "comes back when the backoff ends"
    assert world.exec.calls == [cli.DELIVER_ARGV], "no exec within the backoff"

    await asyncio.sleep(0.25)
    retried = await ready_pass(world, status=stored)
    await cli.validate_cli(retried)
    assert world.exec.calls == [cli.DELIVER_ARGV] * 2
    assert deliveries.retry_in(retried.run.key, cli.delivery_target(retried)) > 0.2, (
        "the backoff grows"
    )

    await asyncio.sleep(0.45)
    world.exec.cli_exit = 0  # the server is back
    healed = await ready_pass(world, status=stored)
    await cli.validate_cli(healed)
    condition = healed.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Validated")
    assert deliveries.retry_in(healed.run.key, cli.delivery_target(healed)) == 0


async def test_a_delivery_that_fails_slowly_backs_off_like_one_that_fails_at_once(
    world: World,
) -> None:
    deliveries = backoff_of(world, base=30.0)
    deliveries.inline = 0.05
    world.exec.cli_exit, world.exec.hold_delivery = UNREACHABLE, asyncio.Event()
    p = await ready_pass(world)
    await cli.validate_cli(p)  # runs on: this pass ends well, and counts no failure
    world.exec.hold_delivery.set()  # onyx-cli gives up on the server, slowly
    await asyncio.sleep(0.05)
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    judged = await ready_pass(world, status=stored)
    await cli.validate_cli(judged)
    condition = judged.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "ServerUnreachable")

    stored = judged.run.status.model_dump(by_alias=True, mode="json")
    later = await ready_pass(world, status=stored)
    await cli.validate_cli(later)
    assert world.exec.calls == [cli.DELIVER_ARGV], "the next try waits for the backoff"
    after = later.run.verdict.after
    assert after is not None
    assert after > 25


@pytest.mark.parametrize("held", ["waiting", "validating"])
async def test_a_backoff_says_when_the_next_try_is_where_the_condition_says_nothing_of_it(
    world: World, held: str
) -> None:
    backoff_of(world, base=30.0)
    world.exec.delivery_error = ExecError("the connection broke")
    p = await ready_pass(world)
    await cli.validate_cli(p)
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("Unknown", "ExecFailed")
    if held == "waiting":  # a later pass stopped at the credentials row (the database down)
        state = ConditionState.unknown("CLIValidated", "WaitingForCredentials", WAITING_MESSAGE)
    else:  # the pass that took a slow delivery's failure could not write its status
        state = ConditionState.unknown("CLIValidated", "Validating", "onyx-cli is still ...")
    p.run.set(state)
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    recovered = await ready_pass(world, status=stored)
    await cli.validate_cli(recovered)
    condition = recovered.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("Unknown", "RetryPending")
    assert "tried again at" in condition.message
    assert world.exec.calls == [cli.DELIVER_ARGV]


@pytest.mark.parametrize(
    "error",
    [ExecOutputTooLargeError("onyx-cli printed too much", limit=1024), RuntimeError("closed")],
    ids=["cannot-pass", "unexpected"],
)
async def test_every_failure_of_the_exec_itself_waits_its_backoff(
    world: World, error: Exception
) -> None:
    backoff_of(world, base=30.0)
    world.exec.delivery_error = error  # type: ignore[assignment]
    p = await ready_pass(world)
    if isinstance(error, ExecError):
        await cli.validate_cli(p)
    else:
        with pytest.raises(RuntimeError):
            await cli.validate_cli(p)  # the pass fails, and says why in the log
    for _ in range(3):
        again = await ready_pass(world)
        await cli.validate_cli(again)
    assert world.exec.calls == [cli.DELIVER_ARGV], "not run again on every event of its pod"


async def test_a_refused_pat_twice_is_retried_at_once_when_the_spec_changes(world: World) -> None:
    backoff_of(world, base=30.0)
    world.exec.cli_exit = UNREACHABLE
    p = await ready_pass(world)
    await cli.validate_cli(p)  # a failure: the backoff starts
    world.services.deliveries.clear_failures(p.run.key)  # what a spec change does
    world.exec.cli_exit = 0
    again = await ready_pass(world)
    await cli.validate_cli(again)
    assert world.exec.calls == [cli.DELIVER_ARGV] * 2


async def test_a_new_pod_is_delivered_to_at_once_whatever_the_last_one_failed(
    world: World,
) -> None:
    backoff_of(world, base=30.0)
    world.exec.cli_exit = UNREACHABLE
    p = await ready_pass(world)
    await cli.validate_cli(p)
    world.exec.cli_exit = 0
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    replaced = await ready_pass(world, status=stored)
    replaced.pod = sandbox_pod("pod-2", version="2")
    world.cache.put("Pod", replaced.pod)
    await cli.validate_cli(replaced)
    condition = replaced.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Validated")
    assert world.exec.calls == [cli.DELIVER_ARGV] * 2


async def test_no_pat_goes_into_a_pod_that_took_the_sandboxs_pod_name_since_it_was_read(
    world: World,
) -> None:
    """The exec API takes a name: a pass slowed by the database, or a delivery waiting for
    room, must not hand this user's PAT to another sandbox's pod of that name."""
    p = await ready_pass(world)
    world.cache.remove("Pod", sandbox_pod(version="2"))
    theirs = sandbox_pod("pod-9", version="3")
    theirs["metadata"]["ownerReferences"] = [  # type: ignore[index]
        {"kind": "CraftSandbox", "name": "mallory", "uid": "uid-m", "controller": True}
    ]
    world.cache.put("Pod", theirs)

    await cli.validate_cli(p)

    assert world.exec.calls == [], "nothing was run in the other pod"
    assert world.exec.delivered == []
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert condition.reason == "ExecFailed"


async def test_a_renewed_pat_is_delivered_into_the_same_pod(world: World) -> None:
    p = await ready_pass(world)
    await cli.validate_cli(p)
    world.credentials.pat_id = 2  # renewed: the next pass holds PAT 2
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    renewed = await ready_pass(world, status=stored)
    await cli.validate_cli(renewed)
    assert renewed.run.status.validated_pat_id == 2
    assert renewed.run.status.validated_pod_uid == "pod-1"
    assert len(world.exec.delivered) == 2
    assert world.exec.calls == [cli.DELIVER_ARGV, cli.DELIVER_ARGV]


async def test_a_renewed_pat_waits_for_the_old_ones_delivery_still_running_in_the_pod(
    world: World,
) -> None:
    # A cancelled exec's shell runs on in the pod: cancelled before its write, it would put
    # the old PAT over the renewed one once that one was validated and the old one revoked.
    world.services.deliveries = DetachedCalls(inline=0.05)
    woken: list[tuple[str, str]] = []
    world.services.deliveries.wake = woken.append
    world.exec.hold_delivery = asyncio.Event()
    first = await ready_pass(world)
    await cli.validate_cli(first)  # PAT 1's delivery runs on
    world.credentials.pat_id = 2
    stored = first.run.status.model_dump(by_alias=True, mode="json")
    renewed = await ready_pass(world, status=stored)
    await asyncio.wait_for(cli.validate_cli(renewed), 5)
    assert len(world.exec.calls) == 1, "no second delivery beside the one running"

    world.exec.hold_delivery.set()
    world.exec.hold_delivery = None
    await asyncio.sleep(0.05)
    assert woken == [renewed.run.key], "its end wakes the sandbox"
    stored = renewed.run.status.model_dump(by_alias=True, mode="json")
    after = await ready_pass(world, status=stored)
    await cli.validate_cli(after)
    assert len(world.exec.calls) == 2
    assert after.run.status.validated_pat_id == 2, "the renewed PAT goes in after it"


async def test_a_new_pod_does_not_wait_for_a_delivery_still_running_in_the_old_one(
    world: World,
) -> None:
    world.services.deliveries = DetachedCalls(inline=0.05)
    world.exec.hold_delivery = asyncio.Event()
    first = await ready_pass(world)
    await cli.validate_cli(first)
    world.exec.hold_delivery = None
    stored = first.run.status.model_dump(by_alias=True, mode="json")
    replaced = await ready_pass(world, status=stored)
    replaced.pod = sandbox_pod("pod-2", version="2")
    world.cache.put("Pod", replaced.pod)
    await cli.validate_cli(replaced)
    assert len(world.exec.calls) == 2, "the old pod's delivery is cancelled, not waited for"
    assert replaced.run.status.validated_pod_uid == "pod-2"


async def test_a_pat_that_cannot_be_written_into_the_pod_is_retried(world: World) -> None:
    world.exec.deliver_exit = 1
    p = await ready_pass(world)
    await cli.validate_cli(p)
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "DeliveryFailed")
    assert p.run.verdict.backoff == "DeliveryFailed"
    assert p.run.status.validated_pat_id is None


async def test_a_refused_pat_whose_replacement_cannot_be_minted_says_why_as_any_mint_failure(
    world: World,
) -> None:
    world.exec.cli_exit = 4
    p = await ready_pass(world)
    world.credentials.error = DatabaseUnavailableError("the credentials database is down")
    await cli.validate_cli(p)
    condition = p.run.condition("CredentialsReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "DatabaseUnavailable")


async def test_a_refused_pat_is_replaced_once_then_tried_again_with_backoff(world: World) -> None:
    """A server that refuses every PAT must not burn one per try; one whose authentication
    was down for a while validates the PAT it refused once it is back."""
    world.exec.cli_exit = 4
    p = await ready_pass(world)
    await cli.validate_cli(p)
    assert world.credentials.calls[-1] == 1, "PAT 1 is named as rejected"
    assert p.run.verdict.after == 0, "the next pass delivers the new PAT into the same pod"
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    second = await ready_pass(world, status=stored)
    await cli.validate_cli(second)
    condition = second.run.condition("CLIValidated")
    assert condition is not None
    assert condition.reason == "AuthFailed"
    assert "no more are minted" in condition.message
    assert second.run.verdict.backoff == "AuthFailed"
    assert second.run.status.validated_pat_id is None, "the same PAT is tried again"
    minted = len(world.credentials.calls)

    world.exec.cli_exit = 0  # the server's authentication is back
    world.services.deliveries.clear_failures(second.run.key)  # its backoff has passed
    stored = second.run.status.model_dump(by_alias=True, mode="json")
    third = await ready_pass(world, status=stored)
    await cli.validate_cli(third)
    assert third.run.status.validated_pat_id == second.issued.pat_id  # type: ignore[union-attr]
    assert third.run.status.cli_auth_failures is None
    assert world.credentials.calls[minted:] == [None], "no PAT named as rejected since"


async def test_a_refused_pat_an_older_operator_marked_validated_is_tried_again(
    world: World,
) -> None:
    """Operators before 2026-11-27 stopped after a fresh PAT was refused too, marking it
    validated in its pod: an upgrade tries it again rather than leaving the sandbox so."""
    p = await ready_pass(world)
    assert p.issued is not None
    p.run.status.validated_pod_uid = "pod-1"
    p.run.status.validated_pat_id = p.issued.pat_id
    p.run.status.cli_auth_failures = 2
    p.run.set(ConditionState.false("CLIValidated", "AuthFailed", "refused, no more are minted"))
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    upgraded = await ready_pass(world, status=stored)
    await cli.validate_cli(upgraded)
    condition = upgraded.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Validated")
    assert upgraded.run.status.cli_auth_failures is None
    assert world.exec.calls == [cli.DELIVER_ARGV]


#: What onyx-cli 1.4.4 prints for each of its exit-4 failures (``TestConnection`` in its
#: ``internal/api/client.go``), after ``Error: connection check failed: ``; the last two
#: quote up to 300 bytes of the server's answer.
BLOCKED_BASE_URL = (
    "HTTP 403 on base URL \u2014 the server is blocking all traffic.\n"
    "  This is likely a firewall, WAF, or IP allowlist restriction"
)
AWS_LOAD_BALANCER = (
    "blocked by AWS load balancer (HTTP 403 on all requests).\n"
    "  Your IP address may not be in the ALB's security group or WAF allowlist"
)
REVERSE_PROXY = (
    "HTTP 403 from a reverse proxy (not the Onyx backend).\n"
    "  Check your deployment's ingress / proxy configuration"
)
INVALID_PAT = "invalid personal access token.\n  " + '{"detail":"' + "x" * 280 + '"}'
DENIED_PAT = "access denied \u2014 check that the personal access token is valid.\n  forbidden"


def onyx_cli_stderr(message: str) -> bytes:
    return f"Config:  environment variables\nError: connection check failed: {message}\n".encode()


@pytest.mark.parametrize(
    "message", [BLOCKED_BASE_URL, AWS_LOAD_BALANCER, REVERSE_PROXY], ids=["base", "alb", "proxy"]
)
async def test_a_refusal_that_is_not_onyxs_verdict_on_the_pat_costs_no_pat(
    world: World, message: str
) -> None:
    """A firewall's, load balancer's or proxy's 401/403 is also onyx-cli's exit 4: minting
    would revoke a good PAT, and a fleet's at once; the same one is tried again."""
    world.exec.cli_exit = cli_validation.EXIT_AUTH_FAILURE
    world.exec.cli_stderr = onyx_cli_stderr(message)
    p = await ready_pass(world)
    await cli.validate_cli(p)

    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "ServerRefused")
    assert "no new PAT is minted" in condition.message
    assert world.credentials.calls[-1] is None, "no PAT named as rejected"
    assert p.run.verdict.backoff == "ServerRefused"
    assert p.run.status.cli_auth_failures is None
    assert p.run.status.validated_pat_id is None, "the same PAT is tried again"


@pytest.mark.parametrize("message", [INVALID_PAT, DENIED_PAT], ids=["401", "403"])
async def test_onyxs_refusal_of_the_pat_mints_a_new_one_whatever_answer_it_quotes(
    world: World, message: str
) -> None:
    world.exec.cli_exit = cli_validation.EXIT_AUTH_FAILURE
    world.exec.cli_stderr = onyx_cli_stderr(message)
    p = await ready_pass(world)
    await cli.validate_cli(p)
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert condition.reason == "AuthFailed"
    assert world.credentials.calls[-1] == 1, "PAT 1 is named as rejected"


async def test_a_refusal_whose_new_pat_could_not_be_minted_is_still_the_first(
    world: World,
) -> None:
    """No fresh PAT was refused: the next refusal mints again (it does not stop minting)."""
    world.exec.cli_exit = cli_validation.EXIT_AUTH_FAILURE
    p = await ready_pass(world)
    world.credentials.error = CredentialsError("the database is down")
    await cli.validate_cli(p)
    assert p.run.status.cli_auth_failures is None


@pytest.mark.parametrize("exit_code", [1, cli.EXIT_NOT_DELIVERED, cli_validation.EXIT_AUTH_FAILURE])
async def test_a_pod_that_prints_its_token_never_gets_it_into_status_or_events(
    world: World, exit_code: int
) -> None:
    world.exec.cli_exit, world.exec.echo_stdin = exit_code, True
    p = await ready_pass(world)
    await cli.validate_cli(p)
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert ": output withheld: it contained the PAT" in condition.message
    said = [condition.message, *(message for _, _, message in world.events.posted)]
    # Only the display form (its first 12 characters and last 4) may be said.
    longer = {CANARY[start : start + 13] for start in range(len(CANARY) - 12)}
    for text in said:
        assert not [piece for piece in longer if piece in text]
        assert CANARY[-8:] not in text.replace(f"****{CANARY[-4:]}", "")


async def test_an_unreachable_server_is_retried_with_backoff(world: World) -> None:
    world.exec.cli_exit = 5
    p = await ready_pass(world)
    await cli.validate_cli(p)
    assert p.run.verdict.backoff == "ServerUnreachable"
    assert world.events.reasons == ["ServerUnreachable"]


@pytest.mark.parametrize("validated_before", [True, False], ids=["replaced", "first"])
async def test_a_pat_that_replaced_the_pods_goes_in_though_an_earlier_row_stopped_the_pass(
    world: World, validated_before: bool
) -> None:
    """The PAT the pod used was revoked (by an admin, say) and a new one minted, with no
    grace: a refused Secret write must not leave the pod with a dead token. A pod that
    validated none yet gets its first from the pod step, as ever."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "uid": "pod-1",
            "resourceVersion": "1",
            "ownerReferences": [
                {"kind": "CraftSandbox", "name": NAME, "uid": UID, "controller": True}
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    world.cache.put("Pod", pod)
    world.credentials.pat_id = 2  # PAT 1 was revoked; no grace
    status = {"validatedPatID": 1, "validatedPodUID": "pod-1"} if validated_before else {}
    p = world.pass_(status=status)
    await credentials.ensure_pat(p)  # the rows before the pod step stop after this

    await cli.deliver_renewal(p)

    if validated_before:
        assert p.run.status.validated_pat_id == 2
        assert world.exec.calls == [cli.DELIVER_ARGV]
    else:
        assert world.exec.calls == []


NOT_THE_SANDBOXS_READY_POD = {
    "someone else's": {
        "metadata": {
            "ownerReferences": [
                {"kind": "CraftSandbox", "name": "x", "uid": "x", "controller": True}
            ]
        }
    },
    "not ready": {
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    },
    "being deleted": {"metadata": {"deletionTimestamp": "2026-11-23T12:00:00Z"}},
}


@pytest.mark.parametrize(
    "unlike", NOT_THE_SANDBOXS_READY_POD.values(), ids=list(NOT_THE_SANDBOXS_READY_POD)
)
async def test_a_renewed_pat_that_an_earlier_row_held_back_goes_into_no_other_pod(
    world: World, unlike: dict[str, Any]
) -> None:
    """The renewal's PAT goes in past a stopped pass only into the sandbox's own Ready pod:
    a pod of its name that another controls would keep the token."""
    pod: dict[str, Any] = {
        **sandbox_pod(),
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    pod = {key: {**pod[key], **unlike.get(key, {})} for key in pod}
    world.cache.put("Pod", pod)
    world.credentials.pat_id, world.credentials.grace_pat_id = 2, 1
    p = world.pass_(status={"validatedPatID": 1, "validatedPodUID": "pod-1"})
    await credentials.ensure_pat(p)  # the rows before the pod step stop after this

    await cli.deliver_renewal(p)

    assert world.exec.calls == []
    assert p.run.status.validated_pat_id == 1


async def test_a_renewed_pat_that_failed_to_go_in_still_goes_in_once_the_old_one_is_dead(
    world: World,
) -> None:
    """PAT 1 validated; the renewal's PAT 2 failed to go in (the pod still holds PAT 1);
    PAT 1's grace ends while an earlier row stops every pass: PAT 2 must still go in."""
    pod = {
        **sandbox_pod(),
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    world.cache.put("Pod", pod)
    first = world.pass_()
    await credentials.ensure_pat(first)
    first.pod = pod
    await cli.validate_cli(first)
    world.credentials.pat_id, world.credentials.grace_pat_id = 2, 1
    world.exec.deliver_exit = 1
    renewed = world.pass_(status=dump_status(first.run.status))
    await credentials.ensure_pat(renewed)
    renewed.pod = pod
    await cli.validate_cli(renewed)
    assert renewed.run.status.validated_pat_id == 1

    world.credentials.grace_pat_id = None
    world.exec.deliver_exit = 0
    world.services.deliveries.clear_failures(renewed.run.key)
    later = world.pass_(status=dump_status(renewed.run.status))
    await credentials.ensure_pat(later)  # the rows before the pod step stop after this
    calls = len(world.exec.calls)
    await cli.deliver_renewal(later)
    assert len(world.exec.calls) == calls + 1
    assert later.run.status.validated_pat_id == 2


async def test_once_the_pod_uses_a_renewed_pat_the_superseded_one_is_retired(world: World) -> None:
    world.credentials.grace_pat_id = 1
    world.credentials.pat_id = 2
    p = await ready_pass(world)
    await cli.validate_cli(p)
    assert world.credentials.retired == [2], "retired for PAT 2, the one the pod now uses"


async def test_no_pat_is_retired_before_onyx_cli_accepts_the_new_one(world: World) -> None:
    world.credentials.grace_pat_id = 1
    world.credentials.pat_id = 2
    world.exec.cli_exit = 5
    await cli.validate_cli(await ready_pass(world))
    assert world.credentials.retired == []


async def test_a_pod_that_stalls_the_delivery_is_retried_with_backoff(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def stalled(*args: object, **kwargs: object) -> object:
        raise ExecTimeoutError("the command did not finish in time")

    monkeypatch.setattr(world.exec, "run", stalled)
    p = await ready_pass(world)
    await cli.validate_cli(p)
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert condition.reason == "ExecFailed"
    assert p.run.verdict.backoff == "ExecFailed"


async def test_a_delivery_the_pod_holds_forever_ends_at_the_cli_timeout(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent can stop onyx-cli (SIGSTOP): the delivery is abandoned at the CLI timeout,
    so it gives back its place among the deliveries that run on, and is retried."""

    async def held(
        *args: object,
        timeout: float | None = None,  # noqa: ASYNC109 - the ExecTransport interface
        **kwargs: object,
    ) -> object:
        try:  # as every transport does: the call is abandoned at its timeout
            async with asyncio.timeout(timeout):
                await asyncio.Event().wait()
        except TimeoutError:
            raise ExecTimeoutError("the command did not finish in time") from None
        raise AssertionError("never set")

    monkeypatch.setattr(cli, "CLI_TIMEOUT", 0.05)
    monkeypatch.setattr(world.exec, "run", held)
    world.services.deliveries = DetachedCalls(inline=1.0)
    p = await ready_pass(world)
    await cli.validate_cli(p)
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert condition.reason == "ExecFailed"
    assert world.services.deliveries.unfinished == 0


def test_a_delivery_keeps_only_the_ends_of_what_the_pod_printed() -> None:
    """Its result may wait in memory for the sandbox's next pass (days, if it sleeps), and
    the pod decides how much it prints: a megabyte each would add up over sandboxes."""
    marker = b"Error: connection check failed: invalid personal access token.\n"
    printed = ExecResult(
        cli_validation.EXIT_AUTH_FAILURE, b"o" * 1024 * 1024, marker + b"x" * 1024 * 1024
    )

    kept = cli.kept_of(printed)

    assert kept.exit_code == printed.exit_code
    assert kept.stdout == b""
    assert len(kept.stderr) <= 2 * cli.KEPT_STDERR + 16
    assert not cli_validation.refused_not_for_the_pat(kept.exit_code, kept.stderr)
    assert kept.stderr_excerpt(100) == printed.stderr_excerpt(100)
    small = ExecResult(0, b"ok", b"fine")
    assert cli.kept_of(small).stderr == b"fine"


async def _validated_then_renewed_while_the_deliveries_are_full(
    world: World, *, grace: bool, later: timedelta
) -> Pass:
    """PAT 1 validated in the pod; then PAT 2 (PAT 1 in its five-minute grace, or revoked at
    once), whose delivery finds no room (a wave of renewals, onyx-cli slow); the pass
    ``later`` after the renewal."""
    first = world.pass_()
    await credentials.ensure_pat(first)
    first.pod = POD
    world.cache.put("Pod", POD)
    await cli.validate_cli(first)
    assert first.run.status.validated_pat_id == 1
    stored = first.run.status.model_dump(by_alias=True, mode="json")
    world.credentials.pat_id = 2
    world.credentials.grace_pat_id = 1 if grace else None
    world.services.deliveries = DetachedCalls(limit=1, inline=0.01)
    room = asyncio.Event()

    async def another_sandboxs_delivery() -> None:
        await room.wait()

    await world.services.deliveries.result(("ns", "other"), "x", another_sandboxs_delivery)
    p = world.pass_(status=stored, now=NOW + later)
    await credentials.ensure_pat(p)
    p.pod = POD
    await cli.validate_cli(p)
    room.set()
    assert len(world.exec.delivered) == 1  # PAT 2 has not reached the pod
    return p


async def test_a_renewal_waiting_for_a_delivery_keeps_the_verdict_while_the_old_pat_lives(
    world: World,
) -> None:
    p = await _validated_then_renewed_while_the_deliveries_are_full(
        world, grace=True, later=timedelta(minutes=1)
    )
    assert p.run.condition_is("CLIValidated", ConditionStatus.TRUE)


async def test_the_verdict_ends_with_the_grace_of_the_pat_it_was_given_for(world: World) -> None:
    """The pod holds only PAT 1, whose grace is over: its onyx-cli is refused, and the
    sandbox must not say Ready while PAT 2 waits for a delivery."""
    p = await _validated_then_renewed_while_the_deliveries_are_full(
        world, grace=True, later=timedelta(minutes=10)
    )
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert condition.status == "Unknown"
    assert "the pod's PAT 1 is no longer live" in condition.message


async def test_a_pod_pat_revoked_at_once_ends_the_verdict_at_once(world: World) -> None:
    p = await _validated_then_renewed_while_the_deliveries_are_full(
        world, grace=False, later=timedelta(minutes=1)
    )
    condition = p.run.condition("CLIValidated")
    assert condition is not None
    assert condition.status == "Unknown"


@pytest.mark.parametrize(
    ("exit_code", "timed"),
    [(cli_validation.EXIT_OK, 1), (cli_validation.EXIT_AUTH_FAILURE, 0), (1, 0)],
    ids=["delivered", "refused", "failed"],
)
async def test_only_a_delivery_that_succeeded_is_timed_as_the_cli_validation_phase(
    world: World, exit_code: int, timed: int
) -> None:
    world.exec.cli_exit = exit_code
    await cli.validate_cli(await ready_pass(world))
    registry = world.services.metrics.registry
    count = registry.get_sample_value(
        "craft_provisioning_phase_duration_seconds_count", {"phase": "cli_validation"}
    )
    assert (count or 0) == timed


def sqlite_credentials(path: Path, ring: KeyRing) -> tuple[CredentialStore, StoreCredentials]:
    """The real credential store on a SQLite database of its own at ``path``."""
    engine = create_credentials_engine(f"sqlite:///{path}")
    upgrade(engine)
    store = CredentialStore(engine, ring, owns_engine=True, clock=lambda: NOW)
    return store, StoreCredentials(store, clock=lambda: NOW)


async def test_a_new_token_that_reuses_the_validated_pats_id_still_reaches_the_pod(
    world: World, tmp_path: Path
) -> None:
    # A credentials database reset (the embedded SQLite's emptyDir went with its pod) or
    # restored from a backup hands out the same PAT ids again, for other tokens.
    ring = KeyRing.parse(generate_key_entry("k1").get_secret_value())
    first_store, world.services.credentials = sqlite_credentials(tmp_path / "a.db", ring)
    p = await ready_pass(world)
    await cli.validate_cli(p)
    assert p.issued is not None
    assert world.exec.delivered == [p.issued.token.get_secret_value().encode()]

    second_store, world.services.credentials = sqlite_credentials(tmp_path / "b.db", ring)
    again = await ready_pass(world, status=dump_status(p.run.status))
    assert again.issued is not None
    assert again.issued.pat_id == p.issued.pat_id, "another token under the same id"
    await cli.validate_cli(again)

    assert world.exec.delivered[-1] == again.issued.token.get_secret_value().encode()
    assert again.run.status.validated_pat_display == again.issued.token_display
    first_store.close()
    second_store.close()


async def test_a_token_refused_in_the_pod_leaves_no_standing_verdict_on_the_one_before(
    world: World, tmp_path: Path
) -> None:
    # Database A's token was validated; database B's token under the same id was written
    # over it and refused. Back on A, the pod's file holds B's token: A's must go in again.
    ring = KeyRing.parse(generate_key_entry("k1").get_secret_value())
    store_a, credentials_a = sqlite_credentials(tmp_path / "a.db", ring)
    store_b, credentials_b = sqlite_credentials(tmp_path / "b.db", ring)
    world.services.credentials = credentials_a
    p = await ready_pass(world)
    await cli.validate_cli(p)
    assert p.run.condition_is(CLI_VALIDATED, ConditionStatus.TRUE)

    world.services.credentials = credentials_b
    world.exec.cli_exit = 9
    refused = await ready_pass(world, status=dump_status(p.run.status))
    await cli.validate_cli(refused)
    assert refused.run.condition_is(CLI_VALIDATED, ConditionStatus.FALSE)

    world.services.credentials = credentials_a
    world.exec.cli_exit = 0
    back = await ready_pass(world, status=dump_status(refused.run.status))
    await cli.validate_cli(back)
    store_a.close()
    store_b.close()
    assert back.issued is not None
    assert world.exec.delivered[-1] == back.issued.token.get_secret_value().encode()
    assert back.run.condition_is(CLI_VALIDATED, ConditionStatus.TRUE)


async def test_a_status_from_before_display_forms_were_recorded_validates_nothing_again(
    world: World,
) -> None:
    # An upgrade must not send every sandbox of the fleet its PAT again.
    p = await ready_pass(world)
    await cli.validate_cli(p)
    status = dump_status(p.run.status)
    del status["validatedPatDisplay"]
    again = await ready_pass(world, status=status)
    await cli.validate_cli(again)
    assert len(world.exec.calls) == 1


async def test_a_refused_pat_whose_replacement_cannot_be_minted_is_tried_again_with_backoff(
    world: World,
) -> None:
    """Onyx refuses the PAT and the database is down for its replacement: the same PAT
    is delivered again after the deliveries' backoff, not on every pass."""

    class MintFails(Credentials):
        async def ensure(self, sandbox: Any, *, rejected_pat_id: int | None = None) -> Any:
            if rejected_pat_id is not None:
                raise DatabaseUnavailableError("the database is down")
            return await super().ensure(sandbox, rejected_pat_id=rejected_pat_id)

    world.services.credentials = world.credentials = MintFails()
    world.exec.cli_exit = 4  # Onyx: not a valid PAT
    status: dict[str, Any] = {}
    for _ in range(4):
        p = await ready_pass(world, status=status)
        await cli.validate_cli(p)
        status = dump_status(p.run.status)
    assert len(world.exec.calls) == 1
    assert p.run.condition_is(CLI_VALIDATED, ConditionStatus.FALSE)
