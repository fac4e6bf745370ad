"""A PAT lives in its Secret and nowhere else the operator writes or logs."""

from __future__ import annotations

import json
import logging

import pytest

from craft_operator.api.models import ANNOTATION_PAT_REVOKED
from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.credentials import build_credential_store
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    event_posted,
    phase,
    pod,
    sandbox,
    token_in_secret,
)
from tests.support.emulator import KubeEmulator
from tests.support.leaks import secret_forms
from tests.support.operator import eventually
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


async def test_the_pat_appears_in_no_object_event_or_log_line_but_its_secret(
    emulator: KubeEmulator,
    operator: OperatorContext,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    pod_exec: EmulatedPodExec,
) -> None:
    caplog.set_level(logging.DEBUG)
    refused: list[str] = []

    def refuse_the_first_pat(namespace: str, name: str) -> int:
        refused.append(name)
        return 4 if len(refused) == 1 else 0  # refused: a second PAT is minted, delivered

    pod_exec.scripted_cli = refuse_the_first_pat
    emulator.create(SANDBOXES, sandbox("alice", sources=[{"name": "slack"}]))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    tokens = {token_in_secret(emulator, "alice")}
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")
    await event_posted(emulator, "alice", "CLIValidated")
    tokens.add(token_in_secret(emulator, "alice"))
    assert len(tokens) == 2
    canaries = set().union(*(secret_forms(token) for token in tokens))

    for (resource, namespace, name), obj in emulator.objects.items():
        if resource.plural == "secrets" and name == "alice-credentials":
            continue
        for version in obj.history:
            text = json.dumps(version.raw) if version is not None else ""
            leaked = [c for c in canaries if c in text]
            assert not leaked, f"a PAT leaked into {resource.plural} {namespace}/{name}"

    operator_records = [
        r for r in caplog.records if not r.name.startswith(("kmock", "aiohttp.server"))
    ]
    assert operator_records, "the operator's logs were not captured"
    for record in operator_records:
        line = record.getMessage() + (record.exc_text or "")
        assert not [c for c in canaries if c in line], (
            f"a PAT leaked into a log line: {record.name}"
        )


async def test_a_pat_revoked_by_hand_is_replaced_as_soon_as_the_sandbox_says_so(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    """What `craft-operator credentials revoke` does: the database, then the annotation;
    the fresh PAT comes now, not at the next recheck or revisit (a minute to five)."""
    emulator.create(SANDBOXES, sandbox("alice", sources=[{"name": "slack"}]))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")
    before = token_in_secret(emulator, "alice")
    store = build_credential_store(settings)
    try:
        revoked = store.revoke_named(NAMESPACE, "alice")
    finally:
        store.close()
    assert revoked is not None

    annotation = {ANNOTATION_PAT_REVOKED: str(revoked.pat_id)}
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"annotations": annotation}})

    await eventually(lambda: token_in_secret(emulator, "alice") != before, what="a fresh PAT")
    await event_posted(emulator, "alice", "PATMinted")
