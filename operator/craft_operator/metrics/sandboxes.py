"""What the metrics read from CraftSandbox bodies: time to Ready, and sandboxes by phase."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from craft_operator.api.models import ConditionStatus, CraftSandboxStatus, Phase
from craft_operator.api.status_codec import parse_status
from craft_operator.policy.models import POLICY_ENFORCED

#: Phases in which a sandbox is on its way to Ready; the oldest of them is a gauge. (Failed
#: sandboxes wait for a spec change: ``craft_sandboxes{phase="Failed"}`` counts them.)
_WAITING_PHASES = frozenset({Phase.PENDING.value, Phase.PROVISIONING.value})
_PHASES = frozenset(phase.value for phase in Phase)
_TRUE, _FALSE = ConditionStatus.TRUE.value, ConditionStatus.FALSE.value


@dataclass(frozen=True)
class SandboxCounts:
    """Sandboxes by phase, and how long the longest-waiting one has not been Ready."""

    by_phase: Mapping[str, int]
    oldest_not_ready_seconds: float
    #: Sandboxes kept running while the CraftSandboxPolicy is missing or unreadable.
    without_policy: int = 0


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _conditions(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The status's conditions as stored, skipping anything that is not an object.

    The metrics read the raw body: a scrape visits every sandbox, and parsing each status
    into its model would cost the scrape ten times as much.
    """
    status = body.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    if not isinstance(conditions, list):
        return []
    return [condition for condition in conditions if isinstance(condition, dict)]


def _phase(body: Mapping[str, Any]) -> str:
    status = body.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    return phase if phase in _PHASES else Phase.PENDING.value


def not_ready_since(body: Mapping[str, Any]) -> datetime | None:
    """When a sandbox last stopped being Ready (or was created), if it is not Ready now."""
    for condition in _conditions(body):
        if condition.get("type") == "Ready":
            if condition.get("status") == _TRUE:
                return None
            since = _parse_time(condition.get("lastTransitionTime"))
            if since is not None:
                return since
            break
    return _parse_time((body.get("metadata") or {}).get("creationTimestamp"))


def time_to_ready(
    old_body: Mapping[str, Any], new_status: CraftSandboxStatus, now: datetime
) -> float | None:
    """Seconds to observe with :meth:`Metrics.observe_ready` when a reconcile pass turns a
    sandbox Ready, else ``None``: measured from :func:`not_ready_since` of the body as the
    pass found it (its creation, or when it lost Ready: pod replaced, woken from sleep)."""
    if new_status.phase != Phase.READY:
        return None
    if parse_status(old_body.get("status"))[0].phase == Phase.READY:
        return None
    since = not_ready_since(old_body)
    return None if since is None else max(0.0, (now - since).total_seconds())


def count_sandboxes(bodies: Iterable[Mapping[str, Any]], now: datetime) -> SandboxCounts:
    """Count sandboxes by ``status.phase`` (no status yet: Pending; being deleted:
    Terminating) and find the oldest one on its way to Ready (Pending or Provisioning)."""
    counts = {phase.value: 0 for phase in Phase}
    oldest = 0.0
    without_policy = 0
    for body in bodies:
        if any(
            c.get("type") == POLICY_ENFORCED and c.get("status") == _FALSE
            for c in _conditions(body)
        ):
            without_policy += 1
        phase = _phase(body)
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            phase = Phase.TERMINATING.value
        counts[phase] += 1
        if phase in _WAITING_PHASES:
            since = not_ready_since(body)
            if since is not None:
                oldest = max(oldest, (now - since).total_seconds())
    return SandboxCounts(
        by_phase=counts, oldest_not_ready_seconds=oldest, without_policy=without_policy
    )
