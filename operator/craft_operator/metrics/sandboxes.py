"""What the metrics read from CraftSandbox bodies: time to Ready, and sandboxes by phase."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from craft_operator.api.models import ConditionStatus, CraftSandboxStatus, Phase
from craft_operator.api.status_codec import parse_status
from craft_operator.api.times import parse_time, utc
from craft_operator.policy.models import POLICY_ENFORCED

#: Phases in which a sandbox is on its way to Ready; the oldest of them is a gauge. (Failed
#: sandboxes wait for a spec change: ``craft_sandboxes{phase="Failed"}`` counts them.)
_WAITING_PHASES = frozenset({Phase.PENDING.value, Phase.PROVISIONING.value})
_PHASES = frozenset(phase.value for phase in Phase)
#: The resolution of the times Kubernetes writes.
_SECOND = timedelta(seconds=1)
_TRUE, _FALSE = ConditionStatus.TRUE.value, ConditionStatus.FALSE.value


@dataclass(frozen=True)
class SandboxCounts:
    """Sandboxes by phase, and how long the longest-waiting one has not been Ready."""

    by_phase: Mapping[str, int]
    oldest_not_ready_seconds: float
    #: Sandboxes kept running while the CraftSandboxPolicy is missing or unreadable (not
    #: those being deleted, which the policy step no longer visits).
    without_policy: int = 0
    #: ``namespace/name`` of the bodies that could not be read, left out of every count.
    unreadable: tuple[str, ...] = ()


def _status(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The status as stored, or nothing when it is not an object."""
    status = body.get("status")
    return status if isinstance(status, Mapping) else {}


def _conditions(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The status's conditions as stored, skipping anything that is not an object.

    The metrics read the raw body: a scrape visits every sandbox, and parsing each status
    into its model would cost the scrape ten times as much.
    """
    conditions = _status(body).get("conditions")
    if not isinstance(conditions, list):
        return []
    return [condition for condition in conditions if isinstance(condition, dict)]


def _phase(body: Mapping[str, Any]) -> str:
    phase = _status(body).get("phase")
    return phase if phase in _PHASES else Phase.PENDING.value


def _lost_ready(body: Mapping[str, Any]) -> datetime | None:
    """When Ready last turned False (or Unknown), else the sandbox's creation; ``None`` if
    it is Ready now."""
    for condition in _conditions(body):
        if condition.get("type") == "Ready":
            if condition.get("status") == _TRUE:
                return None
            since = parse_time(condition.get("lastTransitionTime"))
            if since is not None:
                return since
            break
    return parse_time((body.get("metadata") or {}).get("creationTimestamp"))


def _latest(*moments: datetime | None) -> datetime | None:
    known = [moment for moment in moments if moment is not None]
    return max(known) if known else None


def not_ready_since(body: Mapping[str, Any]) -> datetime | None:
    """When a sandbox last set out for Ready, if it is not Ready now: the latest of its
    creation, Ready turning False (pod replaced or failed), ``status.wokeAt`` and
    ``status.recoveredAt``.

    Woken from idle sleep, a sandbox's Ready is still False from when it fell asleep (it
    stayed False while it slept): the wait for Ready starts when it woke, not days before;
    likewise for a sandbox fixed after it failed (Ready stayed False while it was Failed).
    """
    lost = _lost_ready(body)
    if lost is None:
        return None
    status = _status(body)
    return _latest(lost, parse_time(status.get("wokeAt")), parse_time(status.get("recoveredAt")))


def time_to_ready(
    old_body: Mapping[str, Any],
    new_status: CraftSandboxStatus,
    now: datetime,
    seen: datetime | None = None,
) -> float | None:
    """Seconds to observe with :meth:`Metrics.observe_ready` when a reconcile pass turns a
    sandbox Ready, else ``None``: measured from :func:`not_ready_since` of the body as the
    pass found it (its creation, when it lost Ready, when it woke or left Failed), or from
    the wake or recovery of this very pass (a woken sandbox that claims a warm pod may be
    Ready in the pass that woke it), to ``now``: when the status saying Ready was written,
    so that the work of the pass is in it. ``seen``: when the operator saw the sandbox created
    (:meth:`Metrics.saw_created`), which stands for a start moment written to the second
    that it falls within (the creation, or Ready turning False in the first pass)."""
    if new_status.phase != Phase.READY:
        return None
    if parse_status(old_body.get("status"))[0].phase == Phase.READY:
        return None
    own = [utc(t) for t in (new_status.woke_at, new_status.recovered_at) if t is not None]
    since = _latest(not_ready_since(old_body), *own)
    if since is not None and seen is not None and since <= utc(seen) < since + _SECOND:
        since = utc(seen)
    return None if since is None else max(0.0, (now - since).total_seconds())


def _name(body: Mapping[str, Any]) -> str:
    """``namespace/name`` of a body, for the log line about it (whatever its shape)."""
    meta = body.get("metadata") if isinstance(body, Mapping) else None
    if not isinstance(meta, Mapping):
        return "<a sandbox without metadata>"
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass
class _Tally:
    """The counts as :func:`count_sandboxes` adds them up, one body at a time."""

    now: datetime
    by_phase: dict[str, int]
    oldest: float = 0.0
    without_policy: int = 0

    def add(self, body: Mapping[str, Any]) -> None:
        """Count one body (it raises, counting nothing, if the body cannot be read)."""
        conditions = _conditions(body)
        unenforced = any(
            c.get("type") == POLICY_ENFORCED and c.get("status") == _FALSE for c in conditions
        )
        phase = _phase(body)
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            # Its passes go to the finalizer, never to the policy step: a PolicyEnforced
            # False left from an outage would stay after the policy is back.
            phase = Phase.TERMINATING.value
            unenforced = False
        waited = 0.0
        if phase in _WAITING_PHASES:
            since = not_ready_since(body)
            waited = (self.now - since).total_seconds() if since is not None else 0.0
        self.by_phase[phase] += 1
        self.without_policy += int(unenforced)
        self.oldest = max(self.oldest, waited)


def count_sandboxes(bodies: Iterable[Mapping[str, Any]], now: datetime) -> SandboxCounts:
    """Count sandboxes by ``status.phase`` (no status yet: Pending; being deleted:
    Terminating) and find the oldest one on its way to Ready (Pending or Provisioning).

    A body that cannot be read is left out and named in ``unreadable``: one odd status
    must not fail the whole scrape (and with it ``up``, which pages as the operator down).
    """
    tally = _Tally(utc(now), {phase.value: 0 for phase in Phase})
    unreadable: list[str] = []
    for body in bodies:
        try:
            tally.add(body)
        except Exception:  # any shape of body: skip it, name it, go on
            unreadable.append(_name(body))
    return SandboxCounts(
        by_phase=tally.by_phase,
        oldest_not_ready_seconds=tally.oldest,
        without_policy=tally.without_policy,
        unreadable=tuple(unreadable),
    )
