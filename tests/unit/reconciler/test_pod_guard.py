"""An exec goes only into the pod it was meant for: the exec API takes a name, and a pool
pod's name is anyone's to give a CraftSandbox, so a call made a while after its pod was read
must find that very pod (uid), still the sandbox's and not being deleted, or run nothing."""

from __future__ import annotations

from typing import Any

import pytest

from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.exec import ExecResult
from craft_operator.reconciler.pod_guard import GuardedExec, PodChangedError, pod_check

pytestmark = pytest.mark.unit

SANDBOX_UID = "uid-of-alice"


def pod(uid: str = "pod-1", owner: str = SANDBOX_UID, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "warm-x7k2p",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": version,
            "ownerReferences": [{"kind": "CraftSandbox", "uid": owner, "controller": True}],
        }
    }


class Recording:
    """An exec transport that records what it ran."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def run(self, namespace: str, name: str, *args: Any, **kwargs: Any) -> ExecResult:
        self.calls.append(name)
        return ExecResult(0, b"", b"")


async def test_the_pod_that_was_read_is_exec_d_into() -> None:
    cache = ObjectCache()
    cache.put("Pod", pod())
    transport = Recording()
    await GuardedExec(transport, pod_check(cache, pod(), SANDBOX_UID)).run(
        "ns", "warm-x7k2p", "sandbox", ["true"]
    )
    assert transport.calls == ["warm-x7k2p"]


def replaced_by_another_sandbox(cache: ObjectCache) -> None:
    cache.remove("Pod", pod(version="2"))
    cache.put("Pod", pod(uid="pod-9", owner="uid-of-mallory", version="3"))


def recreated_by_its_sandbox(cache: ObjectCache) -> None:
    cache.remove("Pod", pod(version="2"))
    cache.put("Pod", pod(uid="pod-2", version="3"))


def gone(cache: ObjectCache) -> None:
    cache.remove("Pod", pod(version="2"))


def terminating(cache: ObjectCache) -> None:
    stopping = pod(version="2")
    stopping["metadata"]["deletionTimestamp"] = "2026-11-27T12:00:00Z"
    cache.put("Pod", stopping)


def released(cache: ObjectCache) -> None:
    cache.put("Pod", pod(owner="uid-of-someone-else", version="2"))


@pytest.mark.parametrize(
    "change",
    [replaced_by_another_sandbox, recreated_by_its_sandbox, gone, terminating, released],
)
async def test_a_pod_that_changed_since_it_was_read_gets_nothing(change: Any) -> None:
    cache = ObjectCache()
    read = pod()
    cache.put("Pod", read)
    check = pod_check(cache, read, SANDBOX_UID)
    change(cache)
    transport = Recording()
    with pytest.raises(PodChangedError) as raised:
        await GuardedExec(transport, check).run("ns", "warm-x7k2p", "sandbox", ["true"])
    assert transport.calls == []
    assert raised.value.retryable
