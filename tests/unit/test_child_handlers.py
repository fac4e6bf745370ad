"""Children wiring: an event of one of the operator's children wakes the sandbox it belongs
to, by its controller reference or, without one, by its label; and a child's deletion is
news to its sandbox even while the sandbox's pass runs."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from craft_operator.builders.naming import LABEL_SANDBOX
from craft_operator.handlers import children
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.reconciler.queue import WorkQueue
from tests.support.queues import RecordingQueue

pytestmark = pytest.mark.unit

Key = tuple[str, str]


def memo(queue: Any, *, ours: bool = False) -> Any:
    """What the children's handler reads of the operator's context; ``ours``: every object
    version it sees is one the operator wrote."""
    return SimpleNamespace(
        gate=SimpleNamespace(active=True),
        echo_check=lambda meta: lambda: ours,
        cache=ObjectCache(),
        queue=queue,
        pool_queue=RecordingQueue(),
        pool_reconciler=SimpleNamespace(),
    )


def child(name: str, version: int, *, owner: str | None = "alice") -> dict[str, Any]:
    refs = [{"kind": "CraftSandbox", "name": owner, "uid": "u1", "controller": True}]
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
            "labels": {LABEL_SANDBOX: "alice"},
            "ownerReferences": refs if owner else [],
        }
    }


def test_a_child_without_an_owner_reference_wakes_the_sandbox_its_label_names() -> None:
    """A retained workspace has no owner (it outlives its sandbox), and one whose owner
    reference was removed by hand must still bring its sandbox to say so."""
    m = memo(RecordingQueue())
    children.on_child_event(m, kinds.PVC.name, "MODIFIED", child("alice-workspace", 2, owner=None))
    assert m.queue.added == [("team-a", "alice")]


async def test_a_child_deleted_while_its_sandboxs_pass_runs_brings_another_pass() -> None:
    """A deletion is never the echo of the operator's own write, even when the copy the
    cache held (all a deletion a relist inferred tells of) is a version the operator
    wrote: the sandbox must put the child back now, not at its resync."""
    passes: list[Key] = []
    first, again, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def visit(key: Key) -> None:
        passes.append(key)
        (again if first.is_set() else first).set()
        if not release.is_set():
            await release.wait()

    queue: WorkQueue[Key] = WorkQueue(visit, concurrency=1)
    m = memo(queue, ours=True)
    m.cache.put(kinds.SECRET.name, child("alice-credentials", 3))
    queue.start()
    try:
        queue.add(("team-a", "alice"))
        await asyncio.wait_for(first.wait(), 5)
        gone = {"metadata": {"namespace": "team-a", "name": "alice-credentials"}}
        children.on_child_event(m, kinds.SECRET.name, "DELETED", gone)
        release.set()
        await asyncio.wait_for(again.wait(), 5)
    finally:
        await queue.stop()
    assert passes == [("team-a", "alice")] * 2
