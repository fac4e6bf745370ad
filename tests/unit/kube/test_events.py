"""Specification of Kubernetes events: their shape, and posting them in the background."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import aiohttp.web
import kopf
import pytest

from craft_operator.kube.client import KubeClient
from craft_operator.kube.events import MAX_MESSAGE, EventRecorder, build_event
from tests.support.emulator import KubeEmulator
from tests.support.schemas import kubernetes_schema_problems
from tests.unit.kube.conftest import NAMESPACE

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SANDBOX = {
    "apiVersion": "craft.onyx.app/v1alpha1",
    "kind": "CraftSandbox",
    "metadata": {"name": "alice", "namespace": NAMESPACE, "uid": "u-1"},
}


def events(emulator: KubeEmulator) -> list[dict[str, Any]]:
    """The events stored in the emulator."""
    return emulator.list("v1/events", NAMESPACE)


def test_an_event_is_a_valid_core_v1_event_about_the_object() -> None:
    event = build_event(SANDBOX, type="Normal", reason="PodCreated", message="created", now=NOW)
    assert kubernetes_schema_problems(event) == []
    assert event["involvedObject"] == {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "name": "alice",
        "namespace": NAMESPACE,
        "uid": "u-1",
    }
    assert event["metadata"] == {"generateName": "alice.", "namespace": NAMESPACE}
    assert (event["type"], event["reason"], event["message"]) == ("Normal", "PodCreated", "created")
    assert event["source"] == {"component": "craft-operator"}
    assert event["reportingComponent"] == "craft-operator"
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-03-01T12:00:00Z"
    assert event["count"] == 1


def test_the_reporting_instance_fits_the_api_limit() -> None:
    event = build_event(SANDBOX, type="Normal", reason="R", message="m", now=NOW)
    assert 0 < len(event["reportingInstance"]) <= 128


def test_a_message_at_the_limit_is_kept_whole() -> None:
    message = "m" * MAX_MESSAGE
    assert (
        build_event(SANDBOX, type="Warning", reason="R", message=message, now=NOW)["message"]
        == message
    )


def test_a_longer_message_is_cut_to_the_limit_with_an_ellipsis() -> None:
    event = build_event(SANDBOX, type="Warning", reason="R", message="m" * 5000, now=NOW)
    assert len(event["message"]) == MAX_MESSAGE == 1024
    assert event["message"].endswith("m…")
    assert kubernetes_schema_problems(event) == []


# -- EventRecorder -------------------------------------------------------------------------


async def test_posted_events_reach_the_api_server(kube: KubeClient, emulator: KubeEmulator) -> None:
    recorder = EventRecorder(kube)
    recorder.start()
    recorder.post(SANDBOX, type="Normal", reason="SecretCreated", message="one")
    recorder.post(SANDBOX, type="Warning", reason="NoServerURL", message="two")
    await recorder.stop()
    stored = events(emulator)
    assert sorted(event["reason"] for event in stored) == ["NoServerURL", "SecretCreated"]
    assert all(event["metadata"]["name"].startswith("alice.") for event in stored)
    assert recorder.posted == 2
    assert recorder.dropped == 0


async def test_post_never_blocks_and_drops_what_does_not_fit(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(kube, capacity=2)
    for index in range(5):
        recorder.post(SANDBOX, type="Normal", reason=f"R{index}", message="m")
    assert recorder.dropped == 3
    recorder.start()
    await recorder.stop()
    assert sorted(event["reason"] for event in events(emulator)) == ["R0", "R1"]
    assert recorder.posted == 2


async def test_stop_drains_what_is_queued(kube: KubeClient, emulator: KubeEmulator) -> None:
    recorder = EventRecorder(kube)
    for index in range(20):
        recorder.post(SANDBOX, type="Normal", reason=f"R{index}", message="m")
    recorder.start()
    # The default timeout is for a shutdown; 20 posts may take longer on a loaded machine.
    await recorder.stop(drain_timeout=60)
    assert recorder.posted == 20
    assert len(events(emulator)) == 20


async def test_an_event_the_server_refuses_is_counted_dropped_and_the_rest_still_go(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    async def forbid_bad(request: Any) -> aiohttp.web.StreamResponse | None:
        if isinstance(request.data, dict) and request.data.get("reason") == "Bad":
            return aiohttp.web.json_response({"reason": "Forbidden", "message": "no"}, status=403)
        return None

    emulator.before_request.insert(0, forbid_bad)
    recorder = EventRecorder(kube)
    recorder.start()
    recorder.post(SANDBOX, type="Normal", reason="Bad", message="m")
    recorder.post(SANDBOX, type="Normal", reason="Good", message="m")
    await recorder.stop()
    assert recorder.dropped == 1
    assert recorder.posted == 1
    assert [event["reason"] for event in events(emulator)] == ["Good"]


@pytest.mark.parametrize(("status", "level"), [(503, "INFO"), (403, "WARNING")])
async def test_an_event_cut_by_the_api_server_being_away_is_logged_at_info_not_as_a_warning(
    kube: KubeClient,
    emulator: KubeEmulator,
    caplog: pytest.LogCaptureFixture,
    status: int,
    level: str,
) -> None:
    """A pass the API server's absence cuts short says so in one INFO line (README): the
    events it could not post are no refusal to warn about."""

    async def answer(request: Any) -> aiohttp.web.StreamResponse | None:
        return aiohttp.web.json_response({"reason": "Away", "message": "no"}, status=status)

    caplog.set_level(logging.INFO, logger="craft_operator.kube.events")
    emulator.before_request.insert(0, answer)
    recorder = EventRecorder(kube)
    recorder.start()
    recorder.post(SANDBOX, type="Warning", reason="StatusWriteFailed", message="m")
    await recorder.stop()
    said = [r for r in caplog.records if "could not post event" in r.getMessage()]
    assert [r.levelname for r in said] == [level]


async def test_stop_gives_up_draining_after_its_timeout(emulator: KubeEmulator) -> None:
    hang = asyncio.Event()

    async def never_answer(request: Any) -> None:
        await hang.wait()

    emulator.before_request.insert(0, never_answer)
    client = KubeClient(request_timeout=30)
    client.configure(kopf.ConnectionInfo(server=str(emulator.url), insecure=True))
    recorder = EventRecorder(client)
    recorder.start()
    recorder.post(SANDBOX, type="Normal", reason="Stuck", message="m")
    await recorder.stop(drain_timeout=0.2)
    hang.set()
    await client.close()
    assert recorder.posted == 0


async def test_stop_without_start_and_start_twice_are_harmless(kube: KubeClient) -> None:
    recorder = EventRecorder(kube)
    await recorder.stop()
    recorder.start()
    recorder.start()
    await recorder.stop()


@pytest.mark.parametrize("event_type", ["Normal", "Warning"])
def test_both_event_types_validate(event_type: str) -> None:
    event = build_event(SANDBOX, type=event_type, reason="R", message="m", now=NOW)
    assert kubernetes_schema_problems(event) == []


# -- series: repeats count up in the stored event -------------------------------------------


def event_writes(emulator: KubeEmulator) -> list[str]:
    """The recorder's writes to events, by method."""
    return [write.split()[0] for write in emulator.writes() if "/events" in write]


async def test_repeats_are_folded_into_the_stored_event_not_created_again(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(kube, patch_interval=3600)
    recorder.start()
    for _ in range(5):
        recorder.post(SANDBOX, type="Warning", reason="AuthFailed", message="refused")
        await recorder.drained()
    await recorder.stop()
    [stored] = events(emulator)
    assert (stored["reason"], stored["count"]) == ("AuthFailed", 5)
    assert event_writes(emulator) == ["POST", "PATCH"], "four repeats, one PATCH carries them"
    assert (recorder.posted, recorder.folded, recorder.patched) == (1, 4, 1)


async def test_a_repeat_of_an_event_the_server_refused_is_posted_anew(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    refusals: list[str] = []

    async def refuse_first(request: Any) -> aiohttp.web.StreamResponse | None:
        if request.method == "POST" and "/events" in request.url.path and not refusals:
            refusals.append(request.url.path)
            return aiohttp.web.json_response({"reason": "ServerTimeout"}, status=504)
        return None

    emulator.before_request.insert(0, refuse_first)
    recorder = EventRecorder(kube, patch_interval=3600)
    recorder.start()
    for _ in range(3):  # a warning repeated at each retry of a failing step
        recorder.post(SANDBOX, type="Warning", reason="PodCreateFailed", message="quota")
        await recorder.drained()
    await recorder.stop()
    [stored] = events(emulator)
    assert (stored["reason"], stored["count"]) == ("PodCreateFailed", 2)
    assert (recorder.dropped, recorder.posted) == (1, 1)


async def test_a_repeat_after_the_patch_interval_is_patched_at_once(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(kube, patch_interval=0)
    recorder.start()
    recorder.post(SANDBOX, type="Normal", reason="PoolPodsCreated", message="created 1 pods")
    await recorder.drained()
    recorder.post(SANDBOX, type="Normal", reason="PoolPodsCreated", message="created 1 pods")
    await recorder.drained()
    assert [event["count"] for event in events(emulator)] == [2]
    await recorder.stop()
    assert event_writes(emulator) == ["POST", "PATCH"]


async def test_another_message_or_an_old_one_is_a_new_event(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(kube)
    recorder.start()
    recorder.post(SANDBOX, type="Normal", reason="PodCreated", message="created pod a")
    recorder.post(SANDBOX, type="Normal", reason="PodCreated", message="created pod b")
    await recorder.stop()
    assert len(events(emulator)) == 2
    expired = EventRecorder(kube, window=0)
    expired.start()
    for _ in range(2):
        expired.post(SANDBOX, type="Normal", reason="Again", message="m")
    await expired.stop()
    assert [event["count"] for event in events(emulator) if event["reason"] == "Again"] == [1, 1]


async def test_an_object_past_its_burst_of_new_events_has_them_dropped_not_the_others(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    """Its author writes a different invalid annotation value on every patch: each would be
    an event of its own, and would fill the queue that every sandbox's events share."""
    recorder = EventRecorder(kube, burst=5, refill=3600)
    recorder.start()
    for index in range(30):
        recorder.post(SANDBOX, type="Warning", reason="LastActivityInvalid", message=f"v{index}")
    other = {**SANDBOX, "metadata": {**SANDBOX["metadata"], "name": "bob", "uid": "u-2"}}
    recorder.post(other, type="Warning", reason="PodFailed", message="the pod failed")
    await recorder.stop()

    stored = events(emulator)
    assert len([e for e in stored if e["involvedObject"]["uid"] == "u-1"]) == 5
    assert [e["reason"] for e in stored if e["involvedObject"]["uid"] == "u-2"] == ["PodFailed"]
    assert recorder.filtered == 25


async def test_routine_events_never_cost_an_object_its_warnings(
    kube: KubeClient, emulator: KubeEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """A library synced on every upload posts news of its own each time: the sandbox's
    next PodFailed must still be posted; each object's first drop is logged by name."""
    recorder = EventRecorder(kube, burst=3, refill=3600)
    recorder.start()
    for index in range(5):
        recorder.post(SANDBOX, type="Normal", reason="LibrarySynced", message=f"{index} files")
    recorder.post(SANDBOX, type="Warning", reason="PodFailed", message="the pod failed")
    other = {**SANDBOX, "metadata": {**SANDBOX["metadata"], "name": "bob", "uid": "u-2"}}
    for index in range(5):
        recorder.post(other, type="Normal", reason="LibrarySynced", message=f"{index} files")
    await recorder.stop()

    reasons = [event["reason"] for event in events(emulator)]
    assert reasons.count("PodFailed") == 1
    assert reasons.count("LibrarySynced") == 6
    dropped = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    assert len(dropped) == 2
    assert any("/alice" in line for line in dropped)
    assert any("/bob" in line for line in dropped)


async def test_an_object_earns_a_new_event_back_per_refill_and_repeats_cost_nothing(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(kube, burst=1, refill=0.5)
    recorder.start()
    recorder.post(SANDBOX, type="Normal", reason="First", message="m")
    recorder.post(SANDBOX, type="Normal", reason="First", message="m")  # a repeat: folded
    recorder.post(SANDBOX, type="Normal", reason="Second", message="m")  # no token left
    await asyncio.sleep(0.6)
    recorder.post(SANDBOX, type="Normal", reason="Third", message="m")
    await recorder.stop()
    assert sorted(event["reason"] for event in events(emulator)) == ["First", "Third"]
    assert recorder.folded == 1


async def test_the_series_are_bounded_the_oldest_forgotten(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(kube, max_series=2)
    recorder.start()
    for reason in ("First", "Second", "Third", "First"):
        recorder.post(SANDBOX, type="Normal", reason=reason, message="m")
    await recorder.stop()
    assert sorted(event["reason"] for event in events(emulator)) == [
        "First",
        "First",
        "Second",
        "Third",
    ]


async def test_a_series_whose_event_expired_starts_again(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(kube, patch_interval=0)
    recorder.start()
    recorder.post(SANDBOX, type="Warning", reason="AuthFailed", message="refused")
    await recorder.drained()
    [stored] = events(emulator)
    emulator.remove("v1/events", NAMESPACE, stored["metadata"]["name"])  # its TTL passed
    recorder.post(SANDBOX, type="Warning", reason="AuthFailed", message="refused")
    await recorder.drained()
    recorder.post(SANDBOX, type="Warning", reason="AuthFailed", message="refused")
    await recorder.stop()
    assert [event["count"] for event in events(emulator)] == [1]


async def test_a_write_failing_before_it_reaches_the_api_drops_that_event_only(
    emulator: KubeEmulator, tmp_path: Any
) -> None:
    """A login whose CA file is being rotated (absent for a moment) fails the write with
    no API answer: that event is counted as dropped, and later ones are posted."""
    client = KubeClient()
    client.configure(
        kopf.ConnectionInfo(server=str(emulator.url), ca_path=str(tmp_path / "ca.crt"))
    )
    recorder = EventRecorder(client)
    recorder.start()
    recorder.post(SANDBOX, type="Warning", reason="First", message="m")
    await asyncio.wait_for(recorder.drained(), 5)
    client.configure(kopf.ConnectionInfo(server=str(emulator.url), insecure=True))
    recorder.post(SANDBOX, type="Warning", reason="Second", message="m")
    await asyncio.wait_for(recorder.drained(), 5)

    await recorder.stop(drain_timeout=1)
    await client.close()

    assert [event["reason"] for event in events(emulator)] == ["Second"]
    assert (recorder.dropped, recorder.posted) == (1, 1)


async def test_an_event_naming_a_file_that_is_not_utf8_is_posted_with_the_name_escaped(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(kube)
    recorder.start()
    recorder.post(SANDBOX, type="Warning", reason="Planted", message="file \udcff.txt")
    await asyncio.wait_for(recorder.drained(), 5)
    await recorder.stop(drain_timeout=1)

    assert [event["reason"] for event in events(emulator)] == ["Planted"]
    assert recorder.dropped == 0


async def test_an_event_the_client_fails_to_send_is_dropped_and_stop_still_returns(
    kube: KubeClient, emulator: KubeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not an API error: the client could not log in, say."""
    create = kube.create

    async def failing(kind: Any, obj: Any) -> dict[str, Any]:
        if obj.get("reason") == "Bad":
            raise RuntimeError("the client could not log in")
        return await create(kind, obj)

    monkeypatch.setattr(kube, "create", failing)
    recorder = EventRecorder(kube)
    recorder.start()
    recorder.post(SANDBOX, type="Warning", reason="Bad", message="m")
    recorder.post(SANDBOX, type="Warning", reason="Good", message="m")
    await asyncio.wait_for(recorder.drained(), 5)

    await recorder.stop(drain_timeout=1)
    await recorder.stop(drain_timeout=1)

    assert [event["reason"] for event in events(emulator)] == ["Good"]
    assert recorder.dropped == 1
