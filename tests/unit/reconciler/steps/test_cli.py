"""CLIValidated: onyx-cli accepts the PAT once per pod; a refused PAT gets one fresh one."""

from __future__ import annotations

import pytest

from craft_operator.reconciler.step import Pass
from craft_operator.reconciler.steps import cli, credentials
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, World

pytestmark = pytest.mark.unit

POD = {"metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "pod-1"}}


async def ready_pass(world: World, **body: object) -> Pass:
    p = world.pass_(**body)
    await credentials.ensure_pat(p)
    p.pod = POD
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
    assert world.exec.calls == [("onyx-cli", "validate-config")], "not again for the same pod"


async def test_a_refused_pat_is_replaced_once_then_the_operator_stops(world: World) -> None:
    world.exec.cli_exit = 4
    p = await ready_pass(world)
    await cli.validate_cli(p)
    assert world.credentials.calls[-1] == 1, "PAT 1 is named as rejected"
    assert p.run.verdict.after == 0, "the next pass delivers the new PAT"
    stored = p.run.status.model_dump(by_alias=True, mode="json")
    second = await ready_pass(world, status=stored)
    await cli.validate_cli(second)
    condition = second.run.condition("CLIValidated")
    assert condition is not None
    assert condition.reason == "AuthFailed"
    assert "stops retrying" in condition.message
    assert second.run.verdict.backoff is None


async def test_an_unreachable_server_is_retried_with_backoff(world: World) -> None:
    world.exec.cli_exit = 5
    p = await ready_pass(world)
    await cli.validate_cli(p)
    assert p.run.verdict.backoff == "ServerUnreachable"
    assert world.events.reasons == ["ServerUnreachable"]
