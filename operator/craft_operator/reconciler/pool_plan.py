"""What one pass over a pool does to its pods: pure, from the pods and the spec.

- A pod that ended (Failed or Succeeded) is deleted; a new one takes its place.
- The pool holds ``replicas`` pods of the current template. Missing ones are created, at
  most ``max_creates`` per pass (a refill never holds a worker for long; the pass comes
  back at once for the rest).
- A template change replaces the old pods gradually, as a Deployment with
  ``maxUnavailable: 0``: at most ``surge`` pods above ``replicas`` exist at a time, and an
  old pod that is Ready is deleted only once enough new ones are Ready to keep the number
  of Ready pods at ``replicas``. Old pods that are not Ready go at once (no one can claim
  them anyway). A new pod claimed since the update counts as Ready here: sandboxes
  wanted it, not an old one, and under steady claims new pods are taken as soon as they
  are Ready, so counting only the unclaimed ones would keep every old pod (and the pool
  at ``surge`` usable pods) for as long as the claims go on.
- Scaling down deletes pods that are not Ready first, then the newest.

Claimed pods are not the pool's (see :mod:`craft_operator.reconciler.pool_pods`) and never
appear here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from craft_operator.reconciler.pool_pods import (
    has_ended,
    is_running_and_ready,
    is_terminating,
    template_of,
)

Pod = Mapping[str, Any]

#: Why a pod is deleted (also the reason of the event that says so).
ENDED = "PoolPodEnded"
OUTDATED = "PoolPodOutdated"
EXCESS = "PoolScaledDown"


@dataclass(frozen=True)
class PoolView:
    """A pool's unclaimed pods, sorted by what a pass does with them."""

    current: list[Pod] = field(default_factory=list)
    old: list[Pod] = field(default_factory=list)
    ended: list[Pod] = field(default_factory=list)
    terminating: list[Pod] = field(default_factory=list)

    @cached_property
    def ready(self) -> int:
        """Pods of the current template that are Running and Ready."""
        return sum(1 for pod in self.current if is_running_and_ready(pod))

    @cached_property
    def creating(self) -> int:
        """Live pods (of any template) that are not Ready yet."""
        return sum(1 for pod in (*self.current, *self.old) if not is_running_and_ready(pod))

    @property
    def alive(self) -> int:
        """Pods that neither ended nor are being deleted."""
        return len(self.current) + len(self.old)


def view(pods: Iterable[Pod], template_hash: str) -> PoolView:
    """Sort a pool's pods by state and template."""
    result = PoolView()
    for pod in pods:
        if is_terminating(pod):
            result.terminating.append(pod)
        elif has_ended(pod):
            result.ended.append(pod)
        elif template_of(pod) == template_hash:
            result.current.append(pod)
        else:
            result.old.append(pod)
    return result


@dataclass(frozen=True)
class Plan:
    """The pods to delete (each with why) and how many to create."""

    delete: tuple[tuple[Pod, str], ...] = ()
    create: int = 0


def surge_for(replicas: int) -> int:
    """Pods above ``replicas`` an update may run at once: one, or a tenth of a large pool."""
    return max(1, replicas // 10)


def _created(pod: Pod) -> str:
    return str(pod.get("metadata", {}).get("creationTimestamp") or "")


def _not_ready_first_then_newest(pods: Iterable[Pod]) -> list[Pod]:
    newest_first = sorted(pods, key=_created, reverse=True)
    return sorted(newest_first, key=is_running_and_ready)


def claimed_since_update(claimed: Iterable[Pod], pods: PoolView, template_hash: str) -> int:
    """Pods of the current template claimed from the pool since its template changed:
    those made after its newest old pod, to the second (no old pod: no update under way, 0)."""
    if not pods.old:
        return 0
    newest_old = max(_created(pod) for pod in pods.old)
    return sum(
        1 for pod in claimed if template_of(pod) == template_hash and _created(pod) >= newest_old
    )


def plan(
    pods: PoolView,
    replicas: int,
    *,
    max_creates: int,
    may_create: bool = True,
    claimed_since_update: int = 0,
) -> Plan:
    """What to do now to move ``pods`` towards ``replicas`` current ones (see the module);
    ``claimed_since_update`` is what :func:`claimed_since_update` counts."""
    delete: list[tuple[Pod, str]] = [(pod, ENDED) for pod in pods.ended]
    old_ready = [pod for pod in pods.old if is_running_and_ready(pod)]
    delete += [(pod, OUTDATED) for pod in pods.old if not is_running_and_ready(pod)]
    spare = max(0, pods.ready + claimed_since_update + len(old_ready) - replicas)
    delete += [(pod, OUTDATED) for pod in sorted(old_ready, key=_created)[:spare]]
    excess = max(0, len(pods.current) - replicas)
    delete += [(pod, EXCESS) for pod in _not_ready_first_then_newest(pods.current)[:excess]]
    removed_alive = sum(1 for _, why in delete if why != ENDED)
    alive_after = pods.alive - removed_alive
    missing = max(0, replicas - (len(pods.current) - excess))
    room = replicas + surge_for(replicas) - alive_after if pods.old else missing
    create = max(0, min(missing, room, max_creates)) if may_create else 0
    return Plan(tuple(delete), create)
