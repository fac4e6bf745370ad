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
  at ``surge`` usable pods) for as long as the claims go on. A pod not as built counts as
  a new one too, as it counts towards ``replicas`` when no update is under way: else it
  would hold the update's surge slot, and every old pod, for ever.
- Scaling down deletes pods that are not Ready first, then the newest.

Claimed pods are not the pool's (see :mod:`craft_operator.reconciler.pool_pods`) and never
appear here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
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
ORPHANED = "PoolPodOrphaned"


@dataclass(frozen=True)
class PoolView:
    """A pool's unclaimed pods, sorted by what a pass does with them: each pod's state is
    read once (a pass over a pool of hundreds comes with every claim's events)."""

    ready_current: list[Pod] = field(default_factory=list)
    waiting_current: list[Pod] = field(default_factory=list)
    ready_old: list[Pod] = field(default_factory=list)
    waiting_old: list[Pod] = field(default_factory=list)
    ended: list[Pod] = field(default_factory=list)
    terminating: list[Pod] = field(default_factory=list)
    #: Live pods with the current template's label that are not as the operator builds
    #: them (someone else's, or changed by a webhook): never claimed nor counted Ready,
    #: but counted towards ``replicas`` (a surplus goes first).
    unlike: list[Pod] = field(default_factory=list)

    @property
    def current(self) -> list[Pod]:
        """Live pods of the current template (those not as built included)."""
        return [*self.ready_current, *self.waiting_current, *self.unlike]

    @property
    def old(self) -> list[Pod]:
        """Live pods of an earlier template."""
        return [*self.ready_old, *self.waiting_old]

    @property
    def has_old(self) -> bool:
        """Whether live pods of an earlier template are left (an update is under way)."""
        return bool(self.ready_old or self.waiting_old)

    @property
    def waiting(self) -> list[Pod]:
        """Live pods (of any template) that are not Ready yet."""
        return [*self.waiting_current, *self.waiting_old]

    @property
    def ready(self) -> int:
        """Pods of the current template that are Running and Ready."""
        return len(self.ready_current)

    @property
    def creating(self) -> int:
        """Live pods (of any template) that are not Ready yet."""
        return len(self.waiting_current) + len(self.waiting_old)

    @property
    def alive(self) -> int:
        """Pods that neither ended nor are being deleted."""
        return (
            len(self.ready_current)
            + len(self.waiting_current)
            + len(self.ready_old)
            + len(self.waiting_old)
            + len(self.unlike)
        )


def view(pods: Iterable[Pod], template_hash: str, unlike: Collection[str] = ()) -> PoolView:
    """Sort a pool's pods by state and template (``unlike``: the uids of pods that are not
    as built)."""
    result = PoolView()
    for pod in pods:
        if is_terminating(pod):
            result.terminating.append(pod)
        elif has_ended(pod):
            result.ended.append(pod)
        elif pod.get("metadata", {}).get("uid") in unlike:
            result.unlike.append(pod)
        else:
            current = template_of(pod) == template_hash
            if is_running_and_ready(pod):
                (result.ready_current if current else result.ready_old).append(pod)
            else:
                (result.waiting_current if current else result.waiting_old).append(pod)
    return result


@dataclass(frozen=True)
class Plan:
    """The pods to delete (each with why) and how many to create."""

    delete: tuple[tuple[Pod, str], ...] = ()
    create: int = 0
    #: Pods the pool would create now if nothing held creates back (a backoff, a pass's
    #: bound): 0 when it holds what it needs.
    short: int = 0


def surge_for(replicas: int) -> int:
    """Pods above ``replicas`` an update may run at once: one, or a tenth of a large pool."""
    return max(1, replicas // 10)


def _created(pod: Pod) -> str:
    return str(pod.get("metadata", {}).get("creationTimestamp") or "")


def _not_ready_first_then_newest(pods: PoolView) -> list[Pod]:
    """The current template's pods, those not as built first, then those not Ready, each
    part newest first."""
    return [
        *sorted(pods.unlike, key=_created, reverse=True),
        *sorted(pods.waiting_current, key=_created, reverse=True),
        *sorted(pods.ready_current, key=_created, reverse=True),
    ]


def claimed_since_update(claimed: Iterable[Pod], pods: PoolView, template_hash: str) -> int:
    """Pods of the current template claimed from the pool since its template changed:
    those made after its newest old pod, to the second (no old pod: no update under way, 0)."""
    if not pods.has_old:
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
    old_ready = pods.ready_old
    delete += [(pod, OUTDATED) for pod in pods.waiting_old]
    spare = max(0, pods.ready + len(pods.unlike) + claimed_since_update + len(old_ready) - replicas)
    if spare:
        delete += [(pod, OUTDATED) for pod in sorted(old_ready, key=_created)[:spare]]
    current = len(pods.current)
    excess = max(0, current - replicas)
    if excess:
        delete += [(pod, EXCESS) for pod in _not_ready_first_then_newest(pods)[:excess]]
    removed_alive = sum(1 for _, why in delete if why != ENDED)
    alive_after = pods.alive - removed_alive
    missing = max(0, replicas - (current - excess))
    room = replicas + surge_for(replicas) - alive_after if pods.has_old else missing
    short = max(0, min(missing, room))
    create = min(short, max(0, max_creates)) if may_create else 0
    return Plan(tuple(delete), create, short)
