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


def not_ready_since(body: Mapping[str, Any]) -> datetime | None:
    """When a sandbox last stopped being Ready (or was created), if it is not Ready now."""
    status, _ = parse_status(body.get("status"))
    for condition in status.conditions:
        if condition.type == "Ready":
            if condition.status == ConditionStatus.TRUE:
                return None
            if condition.last_transition_time is not None:
                return condition.last_transition_time
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
        status, _ = parse_status(body.get("status"))
        if any(
            c.type == POLICY_ENFORCED and c.status == ConditionStatus.FALSE
            for c in status.conditions
        ):
            without_policy += 1
        phase = (status.phase or Phase.PENDING).value
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
