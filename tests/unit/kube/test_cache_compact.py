"""Specification of what the cache keeps of a pod: only what the operator reads, so that
every reader of a pod answers the same from the compact record as from the whole pod."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from craft_operator.kube import kinds
from craft_operator.kube.cache import POD_KIND, ObjectCache, compact_pod, shared
from craft_operator.reconciler import pool_pods
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.steps import pod_state
from craft_operator.reconciler.sync_jobs import read_outcome

#: A sandbox pod as a real API server (kube-apiserver with kwok) returns it: defaulted spec,
#: managed fields, a Running status.
REAL_POD: dict[str, Any] = json.loads((Path(__file__).parent / "real_pod.json").read_text())
OWNER = REAL_POD["metadata"]["ownerReferences"][0]["uid"]


def variant(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    pod = copy.deepcopy(REAL_POD)
    change(pod)
    return pod


def _waiting(pod: dict[str, Any]) -> None:
    pod["status"]["phase"] = "Pending"
    pod["status"]["conditions"][1]["status"] = "False"
    pod["status"]["containerStatuses"][0]["ready"] = False
    pod["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    }


def _unschedulable(pod: dict[str, Any]) -> None:
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/3 nodes are available", "lastTransitionTime": "2026-11-23T18:33:17Z"}
        ],
    }  # fmt: skip


def _failed(pod: dict[str, Any]) -> None:
    pod["status"].update(phase="Failed", reason="Evicted", message="low on memory")


def _job_pod(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "sync-1"
    pod["metadata"]["ownerReferences"][0].update(kind="Job", uid="job-uid")
    pod["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"exitCode": 0, "message": '{"files": 3}', "reason": "Completed"}
    }


POD_SHAPES = {
    "running and ready": REAL_POD,
    "waiting for its image": variant(_waiting),
    "unschedulable": variant(_unschedulable),
    "failed": variant(_failed),
    "being deleted": variant(lambda pod: pod["metadata"].update(deletionTimestamp="2026-11-23")),
    "a finished Job's pod": variant(_job_pod),
    "image edited": variant(lambda pod: pod["spec"]["containers"][0].update(image="other:1")),
}  # fmt: skip

DESIRED = {
    "metadata": {"annotations": dict(REAL_POD["metadata"]["annotations"])},
    "spec": {"containers": [{"name": "sandbox", "image": "craft-sandbox:0.1.0"}]},
}

#: Every function of the operator that reads a pod the cache holds, by name.
READERS: dict[str, Callable[[dict[str, Any]], object]] = {
    "is_ready": pod_state.is_ready,
    "waiting_detail": pod_state.waiting_detail,
    "failure_detail": pod_state.failure_detail,
    "drift": lambda pod: pod_state.drift(pod, DESIRED),
    "drift of a claimed pod": lambda pod: pod_state.drift(
        pod, DESIRED, claimed_as=frozenset({"h"})
    ),
    "created_at": pod_state.created_at,
    "has_ended": pool_pods.has_ended,
    "is_running_and_ready": pool_pods.is_running_and_ready,
    "is_terminating": pool_pods.is_terminating,
    "template_of": pool_pods.template_of,
    "pool_controller": pool_pods.pool_controller,
    "controlled_by": lambda pod: controlled_by(pod, OWNER),
}


def cached(pod: dict[str, Any]) -> dict[str, Any]:
    cache = ObjectCache()
    cache.put(POD_KIND, pod)
    meta = pod["metadata"]
    found = cache.get(POD_KIND, meta["namespace"], meta["name"])
    assert found is not None
    return found


def test_the_cache_compacts_pods_by_their_kind_name() -> None:
    assert kinds.POD.name == POD_KIND


@pytest.mark.parametrize("shape", POD_SHAPES)
@pytest.mark.parametrize("reader", READERS)
def test_every_pod_reader_answers_the_same_from_the_cached_pod(shape: str, reader: str) -> None:
    pod = POD_SHAPES[shape]

    assert READERS[reader](cached(copy.deepcopy(pod))) == READERS[reader](pod)


def test_a_job_pods_termination_message_is_read_from_the_cached_pod() -> None:
    cache = ObjectCache()
    cache.put(POD_KIND, copy.deepcopy(POD_SHAPES["a finished Job's pod"]))
    job = {
        "metadata": {"name": "sync-1", "namespace": "load", "uid": "job-uid"},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }

    outcome = read_outcome(cache, job)

    assert outcome is not None
    assert outcome.result == {"files": 3}


def test_a_cached_pod_keeps_its_metadata_but_not_its_managed_fields() -> None:
    pod = cached(copy.deepcopy(REAL_POD))

    assert "managedFields" not in pod["metadata"]
    expected = {k: v for k, v in REAL_POD["metadata"].items() if k != "managedFields"}
    assert pod["metadata"] == expected


def test_a_cached_pod_drops_what_no_reader_reads() -> None:
    pod = cached(copy.deepcopy(REAL_POD))

    assert pod["spec"] == {"containers": [{"name": "sandbox", "image": "craft-sandbox:0.1.0"}]}
    assert set(pod["status"]) == {"phase", "conditions", "containerStatuses"}
    # When a pod turned Ready is the pod_ready step's end (read after a database outage).
    assert set(pod["status"]["conditions"][0]) == {"type", "status", "lastTransitionTime"}
    assert set(pod["status"]["containerStatuses"][0]) == {"name", "ready", "state"}
    assert len(json.dumps(pod)) < len(json.dumps(REAL_POD)) / 3


def test_other_kinds_are_kept_whole_but_for_their_managed_fields() -> None:
    secret = {
        "metadata": {"name": "s", "namespace": "load", "managedFields": [{"manager": "x"}]},
        "data": {"pat": "c2VjcmV0"},
        "type": "Opaque",
    }
    cache = ObjectCache()
    cache.put(kinds.SECRET.name, secret)

    assert cache.get(kinds.SECRET.name, "load", "s") == {
        "metadata": {"name": "s", "namespace": "load"},
        "data": {"pat": "c2VjcmV0"},
        "type": "Opaque",
    }


def test_compacting_leaves_the_given_pod_alone() -> None:
    pod = copy.deepcopy(REAL_POD)

    compact_pod(pod)

    assert pod == REAL_POD


def test_cached_objects_share_their_keys_and_short_strings() -> None:
    cache = ObjectCache()
    text = '{"metadata": {"name": "%s", "namespace": "team-a"}, "status": {"phase": "Ready"}}'
    for name in ("one", "two"):
        cache.put("CraftSandbox", json.loads(text % name))

    one = cache.get("CraftSandbox", "team-a", "one")
    two = cache.get("CraftSandbox", "team-a", "two")
    assert one is not None
    assert two is not None
    key_of_one, key_of_two = next(iter(one["status"])), next(iter(two["status"]))
    assert key_of_one is key_of_two
    assert one["metadata"]["namespace"] is two["metadata"]["namespace"]
    assert one["status"]["phase"] is two["status"]["phase"]


def test_sharing_strings_changes_no_value() -> None:
    pod = json.loads((Path(__file__).parent / "real_pod.json").read_text())
    secret = {
        "metadata": {"name": "alice-credentials", "namespace": "team-a"},
        "data": {"ONYX_PAT": "b" * 200, "EMPTY": ""},
        "immutable": False,
        "count": 3,
        "items": [None, 1.5, ["nested"]],
    }

    assert shared(pod) == pod
    assert shared(secret) == secret
