"""Sandbox wiring: a sandbox recreated under its name while its deletion went unseen (a
relist after the watch was down) starts afresh, inheriting no backoff or memory."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from craft_operator.handlers import sandbox
from craft_operator.kube.cache import ObjectCache
from tests.support.queues import RecordingQueue

pytestmark = pytest.mark.unit


def handler_memo() -> Any:
    """What the sandbox handler reads of the operator's context, recording."""
    return SimpleNamespace(
        gate=SimpleNamespace(active=True),
        cache=ObjectCache(),
        queue=RecordingQueue(),
        reconciler=RecordingQueue(),
    )


def body(uid: str, version: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "alice", "namespace": "team-a", "uid": uid, "resourceVersion": version}
    }


def test_a_sandbox_recreated_under_its_name_inherits_nothing_of_the_old_one() -> None:
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", body("u1", "1"))
    sandbox.on_sandbox_event(memo, "MODIFIED", body("u1", "2"))
    assert memo.reconciler.forgotten == []

    sandbox.on_sandbox_event(memo, "ADDED", body("u2", "9"))

    assert memo.queue.forgotten == [("team-a", "alice")]
    assert memo.reconciler.forgotten == [("team-a", "alice")]
    assert memo.queue.added[-1] == ("team-a", "alice")


def test_an_older_event_of_an_earlier_sandbox_of_the_name_forgets_nothing() -> None:
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", body("u2", "9"))
    sandbox.on_sandbox_event(memo, "MODIFIED", body("u1", "2"))  # late, and older
    assert memo.reconciler.forgotten == []
