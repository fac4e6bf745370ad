"""craft_sandbox_time_to_ready_seconds runs to the status write that says Ready: the work of
the pass that made the sandbox Ready (a claim, the PAT's delivery by exec, onyx-cli's
validation) is in it, as docs/alerts.md and the README say."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from craft_operator.api.parse import parse_sandbox
from craft_operator.reconciler.run import Run
from craft_operator.reconciler.status_writer import write_status
from craft_operator.reconciler.step import Memory, Pass
from craft_operator.reconciler.table import CONDITIONS, run_steps
from craft_operator.status import format_time
from tests.support.pools import declare_pool_resource
from tests.unit.reconciler.steps.conftest import NOW, World, sandbox_body
from tests.unit.reconciler.steps.test_claim import POOL, warm_pods

pytestmark = pytest.mark.unit

#: How long the PAT's delivery and onyx-cli's check take in the pod, by the services' clock.
DELIVERY = timedelta(seconds=3)


def slow_deliveries(world: World) -> Callable[[], datetime]:
    """The services' clock, which every exec call moves on by :data:`DELIVERY`."""
    clock = [NOW]
    real_exec = world.exec.run

    async def slow_exec(*args: Any, **kwargs: Any) -> Any:
        clock[0] += DELIVERY
        return await real_exec(*args, **kwargs)

    world.exec.run = slow_exec  # type: ignore[method-assign]
    return lambda: clock[0]


def status_writes_stored(world: World, body: dict[str, Any]) -> None:
    """The API server stores the status writes of ``body`` (its answer: the body with them)."""
    real_patch = world.services.kube.patch

    async def patch(api: Any, namespace: Any, name: Any, doc: Any, **kw: Any) -> Any:
        if kw.get("subresource") != "status":
            return await real_patch(api, namespace, name, doc, **kw)
        written = {key: value for key, value in doc["status"].items() if value is not None}
        return {**body, "status": written}

    world.services.kube.patch = patch  # type: ignore[method-assign]


def time_to_ready(world: World) -> tuple[float | None, float | None]:
    """The histogram's count and sum."""
    registry = world.services.metrics.registry
    name = "craft_sandbox_time_to_ready_seconds"
    return registry.get_sample_value(f"{name}_count"), registry.get_sample_value(f"{name}_sum")


async def test_a_claimed_sandbox_is_timed_to_ready_with_the_delivery_of_its_last_pass(
    world: World,
) -> None:
    declare_pool_resource(world.emulator)
    warm_pods(world, 1)
    s = world.services
    s.clock = slow_deliveries(world)
    body = sandbox_body(spec={"poolRef": {"name": POOL}})
    body["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(seconds=1))
    status_writes_stored(world, body)
    run = Run(body, s.clock(), CONDITIONS)  # as the reconciler builds it: the pass's start

    await run_steps(Pass(s, parse_sandbox(body), run, Memory()))
    await write_status(s, run)

    assert run.status.phase == "Ready"
    assert world.exec.calls, "the PAT was delivered by exec"
    delivered = len(world.exec.calls) * DELIVERY.total_seconds()
    # Created a second before the pass; Ready written once the deliveries were made.
    assert time_to_ready(world) == (1, pytest.approx(1 + delivered))
