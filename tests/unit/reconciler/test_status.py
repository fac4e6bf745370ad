"""Specification of conditions, the aggregate Ready condition and minimal status patches."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from craft_operator.api.models import Condition
from craft_operator.reconciler.table import CONDITIONS
from craft_operator.status import (
    ConditionState,
    aggregate_ready,
    find_condition,
    format_time,
    kube_time,
    merge_patch,
    set_condition,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, written from the RFC's pseudocode (independently of the code under test)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


# -- conditions ----------------------------------------------------------------------------


def typed(*conditions: dict[str, Any]) -> list[Condition]:
    """Conditions as the API stores them, parsed."""
    return [Condition.model_validate(item) for item in conditions]


def wire(condition: Condition) -> dict[str, Any]:
    """A condition as the API stores it."""
    return condition.model_dump(by_alias=True, mode="json", exclude_none=True)


def test_format_time_is_rfc3339_utc_with_seconds() -> None:
    assert format_time(T0) == "2026-01-02T03:04:05Z"


def test_kube_time_drops_the_fraction_of_a_second() -> None:
    assert kube_time(T0 + timedelta(microseconds=999_999)) == T0


def test_a_new_condition_gets_the_current_time_and_the_generation() -> None:
    [condition] = set_condition(
        [], ConditionState.true("PodReady", "Running", "up"), generation=3, now=T0
    )
    assert wire(condition) == {
        "type": "PodReady",
        "status": "True",
        "reason": "Running",
        "message": "up",
        "lastTransitionTime": "2026-01-02T03:04:05Z",
        "observedGeneration": 3,
    }


def test_without_a_generation_the_condition_has_no_observed_generation() -> None:
    [condition] = set_condition(
        [], ConditionState.false("PodReady", "Gone"), generation=None, now=T0
    )
    assert "observedGeneration" not in wire(condition)


def test_the_transition_time_stays_when_the_status_does_not_change() -> None:
    first = set_condition([], ConditionState.false("PodReady", "Pending"), generation=1, now=T0)
    second = set_condition(
        first,
        ConditionState.false("PodReady", "ContainerCreating", "pulling"),
        generation=2,
        now=T1,
    )
    [condition] = second
    assert condition.last_transition_time == T0
    assert condition.reason == "ContainerCreating"
    assert condition.message == "pulling"
    assert condition.observed_generation == 2


def test_the_transition_time_moves_when_the_status_changes() -> None:
    first = set_condition([], ConditionState.false("PodReady", "Pending"), generation=1, now=T0)
    [condition] = set_condition(
        first, ConditionState.true("PodReady", "Running"), generation=1, now=T1
    )
    assert condition.last_transition_time == T1
    assert condition.status == "True"


def test_a_condition_without_a_transition_time_gets_one() -> None:
    stored = typed({"type": "PodReady", "status": "True", "reason": "Running"})
    [condition] = set_condition(
        stored, ConditionState.true("PodReady", "Running"), generation=1, now=T1
    )
    assert condition.last_transition_time == T1


def test_other_conditions_are_kept_untouched() -> None:
    other = typed({"type": "CredentialsReady", "status": "True", "reason": "Minted"})
    result = set_condition(other, ConditionState.true("PodReady", "Running"), generation=1, now=T0)
    assert result[0] == other[0]


def test_set_condition_does_not_modify_its_input() -> None:
    stored = typed(
        {"type": "PodReady", "status": "False", "reason": "Pending", "lastTransitionTime": T0}
    )
    before = copy.deepcopy(stored)
    set_condition(stored, ConditionState.true("PodReady", "Running"), generation=1, now=T1)
    assert stored == before


def test_conditions_are_kept_in_reporting_order_with_unknown_types_last() -> None:
    order = (*CONDITIONS, "Ready")
    conditions: list[Condition] = []
    for type_ in ["Custom", "Ready", "PodReady", "CredentialsReady", "UserLibrarySynced"]:
        conditions = set_condition(
            conditions, ConditionState.true(type_, "Yes"), generation=1, now=T0, order=order
        )
    for type_ in ["CLIValidated", "SkillRendered"]:
        conditions = set_condition(
            conditions, ConditionState.true(type_, "Yes"), generation=1, now=T0, order=order
        )
    assert [item.type for item in conditions] == [*order, "Custom"]


def test_condition_state_constructors_set_the_status() -> None:
    assert ConditionState.true("A", "r").status == "True"
    assert ConditionState.false("A", "r").status == "False"
    assert ConditionState.unknown("A", "r", "m") == ConditionState("A", "Unknown", "r", "m")


def test_find_condition_finds_by_type_or_returns_none() -> None:
    conditions = typed(
        {"type": "A", "status": "True", "reason": "r"},
        {"type": "B", "status": "False", "reason": "r"},
    )
    assert find_condition(conditions, "B") == conditions[1]
    assert find_condition(conditions, "C") is None


# -- aggregate Ready -----------------------------------------------------------------------


def all_true() -> list[Condition]:
    """Every required condition, True."""
    return typed(*({"type": type_, "status": "True", "reason": "OK"} for type_ in CONDITIONS))


def test_ready_is_true_when_every_required_condition_is() -> None:
    state = aggregate_ready(all_true(), CONDITIONS)
    assert (state.type, state.status, state.reason) == ("Ready", "True", "SandboxReady")


def test_ready_names_the_first_required_condition_that_is_not_true() -> None:
    conditions = all_true()
    conditions[2:4] = typed(
        {"type": "PodReady", "status": "False", "reason": "Pending", "message": "pull"},
        {"type": "CLIValidated", "status": "False", "reason": "AuthFailed"},
    )
    state = aggregate_ready(conditions, CONDITIONS)
    assert state == ConditionState("Ready", "False", "Pending", "PodReady: pull")


def test_an_unknown_required_condition_makes_ready_false_with_its_reason() -> None:
    conditions = all_true()
    conditions[0:1] = typed({"type": "CredentialsReady", "status": "Unknown", "reason": "Waiting"})
    state = aggregate_ready(conditions, CONDITIONS)
    assert (state.status, state.reason, state.message) == ("False", "Waiting", "CredentialsReady")


def test_a_failing_condition_without_reason_is_reported_by_its_type() -> None:
    conditions = all_true()
    conditions[1:2] = typed({"type": "SkillRendered", "status": "False", "reason": ""})
    state = aggregate_ready(conditions, CONDITIONS)
    assert (state.reason, state.message) == ("SkillRendered", "SkillRendered")


def test_a_missing_required_condition_makes_ready_unknown() -> None:
    conditions = [item for item in all_true() if item.type != "CLIValidated"]
    state = aggregate_ready(conditions, CONDITIONS)
    assert (state.status, state.reason) == ("Unknown", "Reconciling")
    assert "CLIValidated" in state.message


def test_ready_itself_and_extra_conditions_do_not_count() -> None:
    conditions = [
        *all_true(),
        *typed(
            {"type": "Ready", "status": "False", "reason": "r"},
            {"type": "X", "status": "False", "reason": "r"},
        ),
    ]
    assert aggregate_ready(conditions, CONDITIONS).status == "True"


# -- merge patches -------------------------------------------------------------------------


def test_equal_inputs_give_an_empty_patch() -> None:
    status = {"phase": "Ready", "skill": {"sourceCount": 2}, "conditions": [{"type": "A"}]}
    assert merge_patch(status, copy.deepcopy(status)) == {}


def test_changed_scalars_are_replaced() -> None:
    assert merge_patch({"phase": "Pending", "x": 1}, {"phase": "Ready", "x": 1}) == {
        "phase": "Ready"
    }


def test_nested_dicts_patch_only_what_changed() -> None:
    old = {"skill": {"sourceCount": 2, "contentHash": "a"}, "phase": "Ready"}
    new = {"skill": {"sourceCount": 2, "contentHash": "b"}, "phase": "Ready"}
    assert merge_patch(old, new) == {"skill": {"contentHash": "b"}}


def test_removed_keys_become_null_at_any_depth() -> None:
    old = {"podName": "alice", "credentials": {"patId": 1, "expiresAt": "x"}}
    new = {"credentials": {"patId": 1}}
    assert merge_patch(old, new) == {"podName": None, "credentials": {"expiresAt": None}}


def test_lists_are_replaced_whole() -> None:
    old = {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}
    new = {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]}
    assert merge_patch(old, new) == new


def test_a_dict_replacing_a_scalar_is_sent_whole() -> None:
    assert merge_patch({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}


def test_a_new_key_holding_an_empty_dict_is_sent() -> None:
    assert merge_patch({}, {"userLibrary": {}}) == {"userLibrary": {}}


def test_a_none_in_the_new_status_for_a_key_the_old_lacks_needs_no_patch() -> None:
    """The API never stores nulls, so None in the new status means "absent"; sending null
    for an absent key would be a write that changes nothing, on every resync."""
    assert merge_patch({"a": 1}, {"a": 1, "podUID": None}) == {}


def test_a_none_in_the_new_status_removes_a_key_the_old_has() -> None:
    assert merge_patch({"podUID": "u"}, {"podUID": None}) == {"podUID": None}


json_scalars = st.one_of(st.booleans(), st.integers(), st.text(max_size=3))
keys = st.sampled_from("abcd")


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=2) | st.dictionaries(keys, children, max_size=3)


# Stored objects hold no nulls (the API drops them), so documents are built without None.
documents = st.recursive(json_scalars, _containers, max_leaves=8)
objects = st.dictionaries(keys, documents, max_size=4)
examples = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@examples
@given(old=objects, new=objects)
def test_applying_the_patch_to_the_old_object_gives_the_new_one(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    assert apply_merge_patch(old, merge_patch(old, new)) == new


@examples
@given(old=objects, new=objects)
def test_the_patch_is_empty_exactly_when_nothing_changes(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    assert (merge_patch(old, new) == {}) == (old == new)


@examples
@given(old=objects, new=objects)
def test_the_patch_never_mentions_a_key_that_did_not_change(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    patch = merge_patch(old, new)
    for key in patch:
        assert key not in old or key not in new or old[key] != new[key]


def strip_nulls(document: Any) -> Any:
    """``document`` without None members in its (nested) dicts; lists are values, as in
    RFC 7386, and are kept as they are."""
    if isinstance(document, Mapping):
        return {key: strip_nulls(value) for key, value in document.items() if value is not None}
    return document


documents_with_nulls = st.recursive(st.none() | json_scalars, _containers, max_leaves=8)
objects_with_nulls = st.dictionaries(keys, documents_with_nulls, max_size=4)


@examples
@given(old=objects, new=objects_with_nulls)
def test_nulls_in_the_new_status_mean_absent_and_cost_no_write(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    patch = merge_patch(old, new)
    assert apply_merge_patch(old, patch) == strip_nulls(new)
    assert (patch == {}) == (old == strip_nulls(new))
