"""Spec updates: what lives in the pod replaces the pod; what lives in SKILL.md does not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    events_about,
    phase,
    pod,
    refuse_pod_deletion,
    status,
)
from tests.integration.test_drift import ready_sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_running


async def test_changing_a_field_that_lives_in_the_pod_replaces_the_pod(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None

    emulator.patch(
        SANDBOXES, NAMESPACE, "alice", {"spec": {"resources": {"limits": {"memory": "12Gi"}}}}
    )

    second = await eventually(
        lambda: (
            (p := pod(emulator, "alice")) and p["metadata"]["uid"] != first["metadata"]["uid"] and p
        ),
        what="the replacement pod",
    )
    assert second["spec"]["containers"][0]["resources"]["limits"]["memory"] == "12Gi"
    mark_pod_running(emulator, NAMESPACE, "alice")
    assert (await phase(emulator, "alice", "Ready"))["observedGeneration"] == 2


async def test_changing_the_sources_updates_the_skill_and_leaves_the_pod_alone(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None
    old_hash = status(emulator, "alice")["skill"]["contentHash"]

    emulator.patch(
        SANDBOXES,
        NAMESPACE,
        "alice",
        {"spec": {"sources": [{"name": "slack"}, {"name": "github", "scopes": ["onyx/craft"]}]}},
    )

    await eventually(
        lambda: status(emulator, "alice").get("observedGeneration") == 2, what="generation 2"
    )
    skill = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"]["SKILL.md"]
    assert "`github`" in skill
    assert "onyx/craft" in skill
    current = status(emulator, "alice")
    assert current["skill"]["sourceCount"] == 2
    assert current["skill"]["contentHash"] != old_hash
    assert current["phase"] == "Ready"
    same = pod(emulator, "alice")
    assert same is not None
    assert same["metadata"]["uid"] == first["metadata"]["uid"]


async def test_an_update_that_changes_nothing_the_operator_owns_writes_only_the_status(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_sandbox(emulator)
    # Events are posted after the pass that queued them: the last ones of provisioning
    # may still be on their way when the sandbox reads Ready.
    await asyncio.wait_for(operator.events.drained(), 10)
    settled = len(emulator.served)

    emulator.patch(
        SANDBOXES, NAMESPACE, "alice", {"spec": {"user": {"email": "alice@example.com"}}}
    )
    await eventually(
        lambda: status(emulator, "alice").get("observedGeneration") == 2, what="generation 2"
    )
    await asyncio.sleep(0.2)

    sandbox_path = f"/apis/craft.onyx.app/v1alpha1/namespaces/{NAMESPACE}/craftsandboxes/alice"
    assert emulator.writes(settled) == [f"PATCH {sandbox_path}/status"]  # observedGeneration


async def test_a_pass_stopped_by_an_error_keeps_the_generation_it_last_acted_on_and_says_so(
    emulator: KubeEmulator, operator: OperatorContext, caplog: pytest.LogCaptureFixture
) -> None:
    # E.g. an admission webhook refuses the old pod's deletion: the new spec is not in the
    # pod, so the status must not say Ready for it (the backend's client waits for
    # observedGeneration), and on-call must see why without the operator's log.
    caplog.set_level(logging.INFO, logger="craft_operator.reconciler.queue")
    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None

    emulator.before_request.append(refuse_pod_deletion)  # type: ignore[arg-type]
    emulator.patch(
        SANDBOXES, NAMESPACE, "alice", {"spec": {"resources": {"limits": {"memory": "12Gi"}}}}
    )
    warning = await eventually(
        lambda: next(
            (e for e in events_about(emulator, "alice") if e["reason"] == "ReconcileError"), None
        ),
        what="a ReconcileError event",
    )
    assert warning["type"] == "Warning"
    assert "403 Forbidden" in warning["message"]
    assert "canary-words" not in warning["message"]
    await asyncio.sleep(0.5)  # passes retried meanwhile
    assert status(emulator, "alice")["observedGeneration"] == 1
    [ready] = [c for c in status(emulator, "alice")["conditions"] if c["type"] == "Ready"]
    assert ready["observedGeneration"] == 1, "Ready sums up conditions of the older spec"
    assert operator.queue.failed >= 1
    # The log names the refusal, without a traceback: a restarted API server refuses
    # requests for a moment, and an error comes only once the refusal lasts.
    retries = [r for r in caplog.records if r.name == "craft_operator.reconciler.queue"]
    refused = [r for r in retries if "the API server refused a request (403" in r.getMessage()]
    assert refused
    assert "canary-words" in refused[0].getMessage()
    assert all(r.levelno == logging.INFO and r.exc_info is None for r in retries)

    emulator.before_request.remove(refuse_pod_deletion)  # type: ignore[arg-type]
    await eventually(
        lambda: (p := pod(emulator, "alice")) and p["metadata"]["uid"] != first["metadata"]["uid"],
        what="the replacement pod",
    )
    mark_pod_running(emulator, NAMESPACE, "alice")
    assert (await phase(emulator, "alice", "Ready"))["observedGeneration"] == 2
