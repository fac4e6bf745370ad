"""Stream wiring: when the sandboxes' or pools' stream is answered again after failing, the
API server is back, and the passes it cut short go again at once, in that stream's scope."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from craft_operator.handlers.streams import on_stream_failing
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.reconciler.api_away import ApiServerAwayError
from tests.support.queues import RecordingQueue

pytestmark = pytest.mark.unit

Key = tuple[str, str]


class CutShort:
    """A queue whose ``keys`` had their last pass cut short by the API server's absence."""

    def __init__(self, *keys: Key) -> None:
        self.keys = list(keys)
        self.retried: list[Key] = []

    def retry_now(self, cause: type[Exception], which: Callable[[Key], bool]) -> int:
        assert cause is ApiServerAwayError
        picked = [key for key in self.keys if which(key)]
        self.retried += picked
        return len(picked)


def memo(active: bool = True) -> Any:
    return SimpleNamespace(
        gate=SimpleNamespace(active=active),
        cache=ObjectCache(),
        queue=CutShort(("team-a", "alice"), ("team-b", "bob")),
        pool_queue=CutShort(("team-a", "warm"), ("team-b", "cold")),
    )


def test_the_sandboxes_stream_answered_again_reruns_its_namespaces_passes_cut_short() -> None:
    context = memo()
    on_stream_failing(context, kinds.SANDBOX.name, "team-a", True)
    assert context.queue.retried == [], "not while it fails"

    on_stream_failing(context, kinds.SANDBOX.name, "team-a", False)

    assert context.queue.retried == [("team-a", "alice")]
    assert context.pool_queue.retried == []


def test_a_cluster_wide_pools_stream_answered_again_reruns_every_pool_cut_short() -> None:
    context = memo()
    on_stream_failing(context, kinds.POOL.name, None, False)
    assert context.pool_queue.retried == [("team-a", "warm"), ("team-b", "cold")]
    assert context.queue.retried == []


@pytest.mark.parametrize("kind", [kinds.POD.name, kinds.SECRET.name])
def test_other_streams_answered_again_rerun_nothing(kind: str) -> None:
    context = memo()
    on_stream_failing(context, kind, None, False)
    assert (context.queue.retried, context.pool_queue.retried) == ([], [])


def test_a_standby_reruns_nothing() -> None:
    context = memo(active=False)
    on_stream_failing(context, kinds.SANDBOX.name, None, False)
    assert context.queue.retried == []


def test_the_network_policies_stream_answered_again_wakes_a_pool_alone_in_its_namespace() -> None:
    """A pool may wait for an egress policy where no sandbox is yet: the cluster-wide
    stream's recovery wakes it too, not only the pools beside a sandbox."""
    context: Any = SimpleNamespace(
        gate=SimpleNamespace(active=True),
        cache=ObjectCache(),
        queue=RecordingQueue(),
        pool_queue=RecordingQueue(),
    )
    warm = {"metadata": {"name": "warm", "namespace": "team-b", "resourceVersion": "1"}}
    context.cache.put(kinds.POOL.name, warm)

    on_stream_failing(context, kinds.NETWORK_POLICY.name, None, False)

    assert context.pool_queue.added == [("team-b", "warm")]
