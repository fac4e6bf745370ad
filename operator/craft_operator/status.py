"""Status of a CraftSandbox: conditions, the aggregate Ready condition, and minimal patches.

Pure functions over typed conditions, and a merge patch over the status as the API stores
it, so the reconciler can compute the whole desired status and write only what changed,
or nothing at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from craft_operator.api.models import Condition, ConditionStatus

CREDENTIALS_READY = "CredentialsReady"
SKILL_RENDERED = "SkillRendered"
POD_READY = "PodReady"
CLI_VALIDATED = "CLIValidated"
USER_LIBRARY_SYNCED = "UserLibrarySynced"
READY = "Ready"

# Which conditions Ready requires, and their order, is the reconciler's table of steps
# (craft_operator.reconciler.table.CONDITIONS): one row per condition.


@dataclass(frozen=True)
class ConditionState:
    """What a condition should say now: ``True``, ``False`` or ``Unknown``, why, and detail."""

    type: str
    status: str
    reason: str
    message: str = ""

    @classmethod
    def true(cls, type_: str, reason: str, message: str = "") -> ConditionState:
        """A condition that holds."""
        return cls(type_, "True", reason, message)

    @classmethod
    def false(cls, type_: str, reason: str, message: str = "") -> ConditionState:
        """A condition that does not hold."""
        return cls(type_, "False", reason, message)

    @classmethod
    def unknown(cls, type_: str, reason: str, message: str = "") -> ConditionState:
        """A condition not yet known (e.g. waiting for an earlier step)."""
        return cls(type_, "Unknown", reason, message)


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with seconds, as Kubernetes writes times."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def kube_time(moment: datetime) -> datetime:
    """``moment`` to the second in UTC, as :func:`format_time` writes it."""
    return datetime.strptime(format_time(moment), "%Y-%m-%dT%H:%M:%S%z")


def set_condition(
    conditions: Sequence[Condition],
    state: ConditionState,
    *,
    generation: int | None,
    now: datetime,
    order: Sequence[str] = (),
    stored: Condition | None = None,
) -> list[Condition]:
    """Conditions with ``state`` applied; ``lastTransitionTime`` moves only when status does:
    from ``stored``, the condition as last written, if given (what a pass set before and
    set otherwise again was never seen), else from the one in ``conditions``.

    Sorted by ``order``; types it does not name follow, in the order they came.
    """
    result: list[Condition] = []
    found = False
    for condition in conditions:
        if condition.type != state.type:
            result.append(condition)
            continue
        found = True
        result.append(_condition(state, _transition(stored or condition, state, now), generation))
    if not found:
        result.append(_condition(state, _transition(stored, state, now), generation))
    rank = {name: index for index, name in enumerate(order)}
    return sorted(result, key=lambda item: rank.get(item.type, len(rank)))


def _transition(before: Condition | None, state: ConditionState, now: datetime) -> datetime:
    """The ``lastTransitionTime`` of ``state`` after ``before``."""
    if before is None or before.status != state.status or before.last_transition_time is None:
        return kube_time(now)
    return before.last_transition_time


def _condition(state: ConditionState, transition: datetime, generation: int | None) -> Condition:
    return Condition(
        type=state.type,
        status=ConditionStatus(state.status),
        reason=state.reason,
        message=state.message,
        last_transition_time=transition,
        observed_generation=generation,
    )


def find_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of ``type_``, if present."""
    return next((item for item in conditions if item.type == type_), None)


def aggregate_ready(conditions: Sequence[Condition], required: Sequence[str]) -> ConditionState:
    """Ready is True when every ``required`` condition is; otherwise it names the first that
    is not."""
    for type_ in required:
        condition = find_condition(conditions, type_)
        if condition is None:
            return ConditionState.unknown(READY, "Reconciling", f"{type_} is not known yet")
        if condition.status != ConditionStatus.TRUE:
            reason = condition.reason or type_
            return ConditionState.false(READY, reason, f"{type_}: {condition.message}".rstrip(": "))
    return ConditionState.true(READY, "SandboxReady", "the sandbox is ready for its agent")


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest RFC 7386 merge patch that turns ``old`` into ``new`` (empty if equal)."""
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        previous = old.get(key)
        if value is None:
            # The API stores no nulls: None in ``new`` means absent, not "send null again".
            if previous is not None:
                patch[key] = None
        elif isinstance(value, Mapping) and isinstance(previous, Mapping):
            nested = merge_patch(previous, value)
            if nested:
                patch[key] = nested
        elif key not in old or previous != value:
            patch[key] = value
    return patch
