"""The operator's metrics after a real provisioning: what the reconciler reported, and
the sandboxes by phase read from its cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    UNBUILDABLE_RESOURCES,
    WIDGET_LIMIT,
    phase,
    pod,
    sandbox,
)
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_running


def samples(context: OperatorContext) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(context.services.metrics.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_a_provisioned_sandbox_shows_in_the_metrics(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")

    found = await eventually(
        lambda: (s := samples(operator))[("craft_sandboxes", (("phase", "Ready"),))] == 1 and s,
        what="the Ready sandbox in the metrics",
    )
    assert found[("craft_pat_mints_total", (("reason", "new"),))] == 1
    assert found[("craft_sandbox_time_to_ready_seconds_count", ())] == 1
    for step in ("credentials", "secret", "skill", "pod_create", "pod_ready", "cli_validation"):
        key = ("craft_provisioning_phase_duration_seconds_count", (("phase", step),))
        assert found[key] == 1, step
    assert found[("craft_reconcile_passes_total", ())] >= 2
    assert found[("craft_api_requests_total", (("verb", "POST"),))] >= 3
    assert found[("craft_workqueue_depth", ())] == 1


async def test_a_sandbox_fixed_after_hours_failed_is_measured_from_its_fix(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, sandbox("alice", resources=UNBUILDABLE_RESOURCES))
    failed = await phase(emulator, "alice", "Failed")
    # Two hours go by while it is Failed (its Ready condition False since then).
    long_ago = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {**c, "lastTransitionTime": long_ago} if c["type"] == "Ready" else c
        for c in failed["conditions"]
    ]
    emulator.patch(
        SANDBOXES, NAMESPACE, "alice", {"status": {"conditions": conditions}}, subresource="status"
    )

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"resources": WIDGET_LIMIT}})
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    provisioning = await phase(emulator, "alice", "Provisioning")
    assert provisioning["recoveredAt"]
    assert samples(operator)[("craft_sandbox_oldest_not_ready_seconds", ())] < 60
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")
    found = samples(operator)
    assert found[("craft_sandbox_time_to_ready_seconds_count", ())] == 1
    assert found[("craft_sandbox_time_to_ready_seconds_sum", ())] < 60
