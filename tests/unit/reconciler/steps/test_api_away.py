"""A pass the API server's absence cut short (restarting, unreachable, not serving yet) is
no bug: it ends in ApiServerAwayError, which the queue retries without a traceback and at
once when the API server is back; a refusal by a serving API server stays what it is."""

from __future__ import annotations

import pytest

from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError
from craft_operator.reconciler.api_away import ApiServerAwayError
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


@pytest.mark.parametrize(("status", "reason"), [(403, "Forbidden"), (500, "InternalError")])
async def test_a_refusal_or_an_error_of_a_serving_api_server_is_not_taken_for_an_absence(
    world: World, status: int, reason: str
) -> None:
    world.cache.put(kinds.SANDBOX.name, sandbox_body())
    answering(world, status, reason)

    with pytest.raises(ApiError) as caught:
        await SandboxReconciler(world.services).reconcile((NAMESPACE, NAME))

    assert not isinstance(caught.value, ApiServerAwayError)
    assert caught.value.status == status
