"""Specification of a pass's events: its Normal events said as one, Warnings at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from craft_operator.kube.event_batch import (
    MAX_MESSAGE,
    EventBatch,
    coalesce,
    post_coalesced,
    steps_of,
)
from tests.unit.reconciler.steps.conftest import Events

ALICE = {"metadata": {"name": "alice", "namespace": "ns", "uid": "u-1"}}
BOB = {"metadata": {"name": "bob", "namespace": "ns", "uid": "u-2"}}
PROVISIONING = [
    ("PATMinted", "minted PAT 12"),
    ("SecretCreated", "created Secret alice-credentials"),
    ("ConfigMapCreated", "created ConfigMap alice-skills (skill 0123abcd)"),
    ("PodCreated", "created pod alice"),
]


def event(type_: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "reason": reason, "message": message}


def test_a_pass_posts_its_normal_events_as_one_when_it_ends() -> None:
    sink = Events()
    batch = EventBatch(sink)
    for reason, message in PROVISIONING:
        batch.post(ALICE, type="Normal", reason=reason, message=message)
    assert sink.posted == [], "nothing is posted while the pass runs"
    batch.close()
    assert sink.posted == [
        (
            "Normal",
            "PodCreated",
            "PATMinted: minted PAT 12; SecretCreated: created Secret alice-credentials; "
            "ConfigMapCreated: created ConfigMap alice-skills (skill 0123abcd); "
            "PodCreated: created pod alice",
        )
    ]
    assert steps_of(event(*sink.posted[0])) == PROVISIONING


def test_a_single_normal_event_keeps_its_own_message() -> None:
    sink = Events()
    batch = EventBatch(sink)
    batch.post(ALICE, type="Normal", reason="CLIValidated", message="onyx-cli accepted PAT 12")
    batch.close()
    assert sink.posted == [("Normal", "CLIValidated", "onyx-cli accepted PAT 12")]
    assert steps_of(event(*sink.posted[0])) == [("CLIValidated", "onyx-cli accepted PAT 12")]


def test_a_warning_is_posted_at_once_after_the_normal_events_before_it() -> None:
    sink = Events()
    batch = EventBatch(sink)
    batch.post(ALICE, type="Normal", reason="PATMinted", message="minted PAT 12")
    batch.post(ALICE, type="Normal", reason="SecretCreated", message="created Secret s")
    batch.post(ALICE, type="Warning", reason="PodWriteFailed", message="quota exceeded")
    assert sink.reasons == ["SecretCreated", "PodWriteFailed"], "in the order things happened"
    batch.post(ALICE, type="Normal", reason="ColdStart", message="no warm pod")
    batch.close()
    assert sink.reasons == ["SecretCreated", "PodWriteFailed", "ColdStart"]
    assert sink.steps == ["PATMinted", "SecretCreated", "PodWriteFailed", "ColdStart"]


def test_a_pass_cut_off_posts_what_it_got_to_when_closed() -> None:
    sink = Events()
    batch = EventBatch(sink)

    def cut_off() -> None:
        try:
            batch.post(ALICE, type="Normal", reason="PATMinted", message="minted PAT 12")
            raise TimeoutError
        finally:
            batch.close()

    with pytest.raises(TimeoutError):
        cut_off()
    assert sink.posted == [("Normal", "PATMinted", "minted PAT 12")]


def test_after_the_pass_events_pass_straight_through_and_nothing_is_held() -> None:
    sink = Events()
    batch = EventBatch(sink)
    batch.post(ALICE, type="Normal", reason="PATMinted", message="m")
    batch.close()
    assert vars(batch)["_body"] is None
    assert vars(batch)["_notes"] == []
    batch.post(ALICE, type="Normal", reason="LibrarySynced", message="late")
    assert sink.reasons == ["PATMinted", "LibrarySynced"]


def test_an_event_about_another_object_is_not_mixed_in() -> None:
    sink = Events()
    batch = EventBatch(sink)
    batch.post(ALICE, type="Normal", reason="PATMinted", message="a")
    batch.post(BOB, type="Normal", reason="PodCreated", message="b")
    batch.close()
    assert sink.posted == [("Normal", "PATMinted", "a"), ("Normal", "PodCreated", "b")]


def test_a_long_pass_fits_the_limit_keeping_every_step_named() -> None:
    notes = [("PATMinted", "minted PAT 12"), ("LibrarySynced", "x" * 3000), ("PodClaimed", "p")]
    reason, message = coalesce(notes)
    assert reason == "PodClaimed"
    assert len(message) <= MAX_MESSAGE
    steps = steps_of(event("Normal", reason, message))
    assert [step for step, _ in steps] == ["PATMinted", "LibrarySynced", "PodClaimed"]
    assert (steps[0][1], steps[2][1]) == ("minted PAT 12", "p"), "short messages stay whole"
    assert steps[1][1].endswith("…")


def test_a_warning_or_a_plain_message_is_one_step() -> None:
    warning = event("Warning", "AuthFailed", "Reason: x; Other: y")
    assert steps_of(warning) == [("AuthFailed", "Reason: x; Other: y")]
    plain = event("Normal", "LibrarySynced", "copied 1; Skipped: 2 files")
    assert steps_of(plain) == [("LibrarySynced", "copied 1; Skipped: 2 files")]


def test_posting_nothing_coalesced_posts_nothing() -> None:
    sink = Events()
    post_coalesced(sink, ALICE, [])
    assert sink.posted == []


class Bodies:
    """A sink that keeps the bodies, to see which one an event is about."""

    def __init__(self) -> None:
        self.bodies: list[Mapping[str, Any]] = []

    def post(self, body: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        self.bodies.append(body)


def test_the_coalesced_event_is_about_the_object_of_the_pass() -> None:
    sink = Bodies()
    batch = EventBatch(sink)
    batch.post(ALICE, type="Normal", reason="PATMinted", message="m")
    batch.post(ALICE, type="Normal", reason="PodCreated", message="m")
    batch.close()
    assert sink.bodies == [ALICE]


def test_events_taken_from_one_pass_are_said_first_by_the_next() -> None:
    sink = Events()
    first = EventBatch(sink)
    first.post(ALICE, type="Normal", reason="PodClaimed", message="claimed warm pod w")
    first.post(ALICE, type="Normal", reason="CLIValidated", message="onyx-cli accepted")
    taken = first.take()
    first.close()
    assert sink.posted == [], "taken, not posted"
    second = EventBatch(sink)
    second.carry(ALICE, taken)
    second.post(ALICE, type="Normal", reason="LibrarySynced", message="copied 10")
    second.close()
    assert sink.reasons == ["LibrarySynced"]
    assert sink.steps == ["PodClaimed", "CLIValidated", "LibrarySynced"]


def test_carried_events_are_posted_even_when_the_next_pass_says_nothing() -> None:
    sink = Events()
    batch = EventBatch(sink)
    batch.carry(ALICE, [("PodClaimed", "claimed warm pod w"), ("CLIValidated", "ok")])
    batch.close()
    assert sink.reasons == ["CLIValidated"]
    assert sink.steps == ["PodClaimed", "CLIValidated"]
