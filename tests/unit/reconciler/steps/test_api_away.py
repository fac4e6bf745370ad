"""A pass the API server's absence cut short (restarting, unreachable, not serving yet) is
no bug: it ends in ApiServerAwayError, which the queue retries without a traceback and at
once when the API server is back; a refusal (403) ends in ApiRefusedError, retried without a
traceback too; any other error of a serving API server stays what it is."""

from __future__ import annotations

import pytest

from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError
from craft_operator.reconciler.api_away import (
    REFUSED_ERROR_SECONDS,
    ApiRefusedError,
    ApiServerAwayError,
)
from craft_operator.reconciler.sandbox import SandboxReconciler
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, World, sandbox_body

pytestmark = pytest.mark.unit


def answering(world: World, status: int, reason: str) -> None:
    """Every write of the pass is answered ``status``."""

    async def answer(*args: object, **kwargs: object) -> object:
        raise ApiError(status, reason, "the answer of the test")

    for verb in ("create", "patch", "replace", "delete"):
        setattr(world.services.kube, verb, answer)


@pytest.mark.parametrize(
    ("status", "reason"),
    [(0, "Unreachable"), (503, "ServiceUnavailable"), (429, "TooManyRequests"), (504, "Timeout")],
)
async def test_a_pass_the_api_servers_absence_cut_short_says_so(
    world: World, status: int, reason: str
) -> None:
    world.cache.put(kinds.SANDBOX.name, sandbox_body())
    answering(world, status, reason)

    with pytest.raises(ApiServerAwayError) as caught:
        await SandboxReconciler(world.services).reconcile((NAMESPACE, NAME))

    assert str(caught.value).startswith(f"{NAMESPACE}/{NAME}: the API server is away ({status} ")
    assert str(caught.value).endswith("retried, at once when it serves again")


async def test_an_error_of_a_serving_api_server_is_not_taken_for_an_absence(
    world: World,
) -> None:
    world.cache.put(kinds.SANDBOX.name, sandbox_body())
    answering(world, 500, "InternalError")

    with pytest.raises(ApiError) as caught:
        await SandboxReconciler(world.services).reconcile((NAMESPACE, NAME))

    assert not isinstance(caught.value, ApiServerAwayError)
    assert caught.value.status == 500


async def test_a_refusal_is_retried_naming_what_was_refused_and_is_no_absence(
    world: World,
) -> None:
    """A restarted API server refuses requests (403) until its authorizer has loaded: the
    pass is retried, logged without a traceback, and an error only once it lasts."""
    world.cache.put(kinds.SANDBOX.name, sandbox_body())
    answering(world, 403, "Forbidden")

    with pytest.raises(ApiRefusedError) as caught:
        await SandboxReconciler(world.services).reconcile((NAMESPACE, NAME))

    assert not isinstance(caught.value, ApiServerAwayError)
    said = str(caught.value)
    assert said.startswith(f"{NAMESPACE}/{NAME}: the API server refused a request (403 ")
    assert "the answer of the test" in said  # the server's words: the verb and resource
    assert "retried" in said
    assert caught.value.error_after == REFUSED_ERROR_SECONDS
