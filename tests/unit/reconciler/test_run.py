"""Specification of one reconcile pass's status: phase, patch and revisit time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from craft_operator.api.models import CraftSandboxStatus, CredentialsStatus, Phase
from craft_operator.reconciler.run import Revisit, Run
from craft_operator.reconciler.sandbox import RetryLaterError, next_visit
from craft_operator.reconciler.table import CONDITIONS
from craft_operator.status import ConditionState

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def body(status: dict[str, Any] | None = None, generation: int | None = 2) -> dict[str, Any]:
    """A CraftSandbox body as the API hands it over."""
    metadata: dict[str, Any] = {"name": "alice", "namespace": "ns"}
    if generation is not None:
        metadata["generation"] = generation
    result: dict[str, Any] = {"metadata": metadata}
    if status is not None:
        result["status"] = status
    return result


def all_required_true(run: Run) -> None:
    """Set every condition Ready needs to True."""
    for type_ in CONDITIONS:
        run.set(ConditionState.true(type_, "OK"))


def test_a_run_knows_its_key_and_generation() -> None:
    run = Run(body(), NOW, CONDITIONS)
    assert run.key == ("ns", "alice")
    assert run.generation == 2


def test_the_spec_changed_when_the_observed_generation_differs() -> None:
    assert Run(body({"observedGeneration": 1}), NOW, CONDITIONS).spec_changed
    assert not Run(body({"observedGeneration": 2}), NOW, CONDITIONS).spec_changed
    assert Run(body(), NOW, CONDITIONS).spec_changed


def test_with_everything_true_the_phase_is_ready() -> None:
    run = Run(body(), NOW, CONDITIONS)
    all_required_true(run)
    status = run.finish()
    assert status.phase == Phase.READY
    assert run.condition("Ready") is not None
    assert status.observed_generation == 2


def test_with_a_pod_but_not_ready_the_phase_is_provisioning() -> None:
    run = Run(body(), NOW, CONDITIONS)
    run.set(ConditionState.true("CredentialsReady", "OK"))
    run.pod_exists = True
    assert run.finish().phase == Phase.PROVISIONING


def test_without_a_pod_and_not_ready_the_phase_is_pending() -> None:
    run = Run(body(), NOW, CONDITIONS)
    assert run.finish().phase == Phase.PENDING
    ready = run.condition("Ready")
    assert ready is not None
    assert ready.status == "Unknown"


@pytest.mark.parametrize("phase", [Phase.SLEEPING, Phase.SUSPENDED, Phase.FAILED])
def test_an_explicit_phase_wins_over_the_derived_one(phase: Phase) -> None:
    run = Run(body(), NOW, CONDITIONS)
    all_required_true(run)
    run.phase = phase
    assert run.finish().phase == phase


def test_without_a_generation_no_observed_generation_is_written() -> None:
    run = Run(body(generation=None), NOW, CONDITIONS)
    assert run.finish().observed_generation is None
    assert "observedGeneration" not in run.status_patch()


def test_a_pass_that_changes_nothing_has_an_empty_status_patch() -> None:
    first = Run(body(), NOW, CONDITIONS)
    all_required_true(first)
    first.finish()
    stored = first.status_patch()
    later = datetime(2026, 3, 1, 13, 0, 0, tzinfo=UTC)
    second = Run(body(stored), later, CONDITIONS)
    all_required_true(second)
    second.finish()
    assert second.status_patch() == {}


def test_the_status_patch_holds_only_what_changed() -> None:
    first = Run(body(), NOW, CONDITIONS)
    all_required_true(first)
    first.finish()
    stored = first.status_patch()
    second = Run(body(stored), NOW, CONDITIONS)
    all_required_true(second)
    second.set(ConditionState.false("PodReady", "Evicted", "node pressure"))
    second.pod_exists = True
    second.finish()
    patch = second.status_patch()
    assert set(patch) == {"phase", "conditions"}
    assert patch["phase"] == "Provisioning"


def test_the_run_does_not_modify_the_body_it_was_given() -> None:
    stored = {"phase": "Pending", "conditions": [], "credentials": {"patId": 1}}
    original = body(stored)
    run = Run(original, NOW, CONDITIONS)
    assert run.status.credentials is not None
    run.status.credentials.pat_id = 2
    all_required_true(run)
    run.finish()
    assert original["status"] == {"phase": "Pending", "conditions": [], "credentials": {"patId": 1}}


def test_the_earliest_revisit_wins_and_negative_means_now() -> None:
    run = Run(body(), NOW, CONDITIONS)
    assert run.verdict == Revisit()
    run.revisit(after=30)
    run.revisit(after=60)
    assert run.verdict.after == 30
    run.revisit(after=-5)
    assert run.verdict.after == 0


def test_the_first_backoff_reason_is_kept_beside_the_earliest_revisit() -> None:
    run = Run(body(), NOW, CONDITIONS)
    run.revisit(backoff="DatabaseUnavailable")
    run.revisit(backoff="Other")
    run.revisit(after=10)
    assert run.verdict == Revisit(after=10, backoff="DatabaseUnavailable")


def test_a_revisit_names_exactly_one_of_when_and_why() -> None:
    run = Run(body(), NOW, CONDITIONS)
    with pytest.raises(ValueError, match="exactly one"):
        run.revisit()
    with pytest.raises(ValueError, match="exactly one"):
        run.revisit(after=1, backoff="Both")


def test_the_conditions_set_by_a_pass_are_known_to_it() -> None:
    run = Run(body(), NOW, CONDITIONS)
    run.set(ConditionState.true("PodReady", "PodReady"))
    assert run.touched == {"PodReady"}


def test_the_timestamp_is_now_in_kubernetes_form() -> None:
    assert Run(body(), NOW, CONDITIONS).timestamp() == "2026-03-01T12:00:00Z"


def test_the_status_patch_is_camel_case_json_as_the_api_stores_it() -> None:
    run = Run(body(), datetime(2026, 3, 1, 12, 0, 0, 999_999, tzinfo=UTC), CONDITIONS)
    run.status.pod_uid = "u-1"
    run.status.woke_at = run.moment()
    run.status.credentials = CredentialsStatus(pat_id=7)
    run.finish()
    patch = run.status_patch()
    assert patch["podUID"] == "u-1"
    assert patch["wokeAt"] == "2026-03-01T12:00:00Z"
    assert patch["credentials"] == {"patId": 7}
    assert patch["conditions"][-1]["lastTransitionTime"] == "2026-03-01T12:00:00Z"


def test_clearing_a_field_removes_it_in_the_patch() -> None:
    run = Run(
        body({"observedGeneration": 2, "podFailures": 3, "phase": "Pending"}), NOW, CONDITIONS
    )
    run.status.pod_failures = None
    run.finish()
    assert run.status_patch()["podFailures"] is None


def test_fields_this_version_does_not_know_are_kept_and_never_patched() -> None:
    first = Run(body(), NOW, CONDITIONS)
    first.finish()
    stored = {**first.status_patch(), "futureField": {"a": 1}}
    second = Run(body(stored), NOW, CONDITIONS)
    second.finish()
    assert second.status_patch() == {}


def test_an_unreadable_status_field_does_not_fail_the_pass_and_is_removed() -> None:
    first = Run(body(), NOW, CONDITIONS)
    first.finish()
    stored = {**first.status_patch(), "podFailures": "many", "phase": "Exploded"}
    second = Run(body(stored), NOW, CONDITIONS)
    assert second.status.pod_failures is None
    second.finish()
    assert second.status_patch() == {"podFailures": None, "phase": "Pending"}


@pytest.mark.parametrize("stored", [None, "not a mapping", {"conditions": "nope"}])
def test_a_status_that_is_not_an_object_gives_a_fresh_one(stored: Any) -> None:
    run = Run({**body(), "status": stored}, NOW, CONDITIONS)
    assert run.status == CraftSandboxStatus()
    run.finish()
    assert run.status_patch()["phase"] == "Pending"


def test_an_unreadable_condition_costs_only_itself_and_the_next_patch_rewrites_the_list() -> None:
    first = Run(body(), NOW, CONDITIONS)
    all_required_true(first)
    first.finish()
    stored = first.status_patch()
    stored["conditions"] = [*stored["conditions"], {"type": "Broken"}]
    second = Run(body(stored), NOW, CONDITIONS)
    assert second.condition("PodReady") is not None
    assert second.condition("Broken") is None
    all_required_true(second)
    second.finish()
    assert [item["type"] for item in second.status_patch()["conditions"]] == [
        item["type"] for item in first.status_patch()["conditions"]
    ]


# -- a status held for the next pass ----------------------------------------------------------


def test_a_pass_builds_on_a_held_status_and_writes_its_difference_from_the_stored_one() -> None:
    held = CraftSandboxStatus(pod_name="warm-abc12", claimed_from="warm", observed_generation=2)
    run = Run(body(), NOW, CONDITIONS, held=held, held_for=1.5)
    assert run.status.pod_name == "warm-abc12"
    assert run.old_status.pod_name == "warm-abc12", "as the last pass left it"
    assert not run.spec_changed, "the held pass acted on this generation"
    patch = run.status_patch()
    assert (patch["podName"], patch["claimedFrom"]) == ("warm-abc12", "warm")


def test_holding_asks_for_the_shortest_time_and_comes_to_nothing_without_a_request() -> None:
    run = Run(body(), NOW, CONDITIONS)
    assert run.hold_for is None
    run.keep_holding()
    assert run.hold_for is None, "nothing was held: nothing to keep holding"
    run.hold(2.0)
    run.hold(0.5)
    assert run.hold_for == 0.5


def test_a_held_status_is_kept_only_for_the_rest_of_its_time() -> None:
    held = CraftSandboxStatus(pod_name="warm-abc12")
    still = Run(body(), NOW, CONDITIONS, held=held, held_for=0.7)
    still.keep_holding()
    assert still.hold_for == 0.7
    over = Run(body(), NOW, CONDITIONS, held=held, held_for=-0.1)
    over.keep_holding()
    assert over.hold_for is None, "its time is up: this pass writes it"


def test_a_failed_pass_backs_off_unless_the_sandbox_was_edited_while_it_ran() -> None:
    failed = Run(body(), NOW, CONDITIONS)
    failed.revisit(backoff="PodCreateFailed")
    with pytest.raises(RetryLaterError, match="PodCreateFailed"):
        next_visit(failed.key, failed.verdict, resync=300)

    assert failed.verdict.backoff
    edited = Run(body(), NOW, CONDITIONS)
    edited.revisit(backoff="PodCreateFailed")
    edited.changed_meanwhile()  # the status write found the spec changed: maybe the fix
    with pytest.raises(RetryLaterError) as retried:
        next_visit(edited.key, edited.verdict, resync=300)

    assert retried.value.retry_after == 0, "at once, still counted towards the backoff"


def test_a_condition_set_otherwise_and_back_within_a_pass_keeps_its_transition_time() -> None:
    """The skill step renders (True), then the claimed pod's delivery fails (False) again:
    nobody saw it True, so it did not transition, and nothing is written for it."""
    failed = {
        "type": "SkillRendered",
        "status": "False",
        "reason": "SkillDeliveryFailed",
        "message": "could not write SKILL.md into pod warm-x (exit 1)",
        "lastTransitionTime": "2026-03-01T11:00:00Z",
        "observedGeneration": 2,
    }
    run = Run(body({"conditions": [failed]}), NOW, CONDITIONS)

    run.set(ConditionState.true("SkillRendered", "Rendered", "SKILL.md lists 2 sources"))
    run.set(ConditionState.false("SkillRendered", failed["reason"], failed["message"]))

    condition = run.condition("SkillRendered")
    assert condition is not None
    assert condition.last_transition_time == datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
    assert "conditions" not in run.status_patch()


FAILED_STATUS = {
    "phase": "Failed",
    "observedGeneration": 2,
    "podFailures": 3,
    "conditions": [
        {
            "type": "PodReady",
            "status": "False",
            "reason": "PodFailedRepeatedly",
            "message": "3 pods failed in a row",
            "lastTransitionTime": "2026-03-01T11:00:00Z",
        }
    ],
}


def test_a_failed_sandbox_whose_pass_stopped_before_its_pod_was_judged_stays_failed() -> None:
    """The credential database down: not Pending (new, to on-call), and not recovered."""
    run = Run(body(FAILED_STATUS), NOW, CONDITIONS)
    run.set(ConditionState.false("CredentialsReady", "DatabaseUnavailable", "down"))

    status = run.finish()

    assert status.phase == Phase.FAILED
    assert status.recovered_at is None


def test_a_failed_sandbox_whose_pod_step_says_otherwise_is_no_longer_failed() -> None:
    run = Run(body(FAILED_STATUS), NOW, CONDITIONS)
    run.set(ConditionState.false("PodReady", "PodStarting", "a new pod"))
    run.pod_exists = True

    status = run.finish()

    assert status.phase == Phase.PROVISIONING
    assert status.recovered_at is not None
