"""Reconcile one CraftSandboxPool: keep ``replicas`` warm, unclaimed pods of its template.

Level-triggered like the sandbox reconciler, over the same cache, on a work queue of its
own (pool keys never meet sandbox keys, and a refill never takes a sandbox's worker). A
pass reads the pool and its unclaimed pods from the cache, plans (pure:
:mod:`craft_operator.reconciler.pool_plan`), deletes and creates what the plan says, and
writes the status if it changed: at once, unless only what claims and refills move changed
(the counts, Ready between PoolReady and Filling), which waits up to STATUS_INTERVAL so
that the claims of those seconds share one write. What a pass did is one Normal event.
New pods wait for a NetworkPolicy that restricts their egress, exactly as sandbox pods do
(:mod:`craft_operator.reconciler.egress`).

Deletion only ever targets the pool's own unclaimed pods, each with the uid and the
resourceVersion it was seen with: a pod claimed meanwhile has changed, so its deletion
fails and the next pass no longer counts it. A deleted pool's pods go with it (the
garbage collector follows their owner reference, and a pass over a pool that is gone
deletes what is left); claimed pods are owned by their sandboxes and stay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from craft_operator.api.pool import (
    EGRESS_RESTRICTED,
    MAX_REPLICAS,
    POOL_READY,
    CraftSandboxPool,
    CraftSandboxPoolStatus,
    InvalidPoolError,
    parse_pool,
)
from craft_operator.builders.pod import SandboxConfigError
from craft_operator.builders.pool import build_pool_pod
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError, ConflictError
from craft_operator.kube.event_batch import post_coalesced
from craft_operator.kube.pod_shape import built_digest, is_as_built, where_unlike
from craft_operator.reconciler import api_away, egress
from craft_operator.reconciler.deadline import Moment
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.dropped_status import known_dropped
from craft_operator.reconciler.policy_step import MISSING
from craft_operator.reconciler.pool_out_of_sight import OutOfSight
from craft_operator.reconciler.pool_plan import (
    ENDED,
    EXCESS,
    ORPHANED,
    Plan,
    PoolView,
    claimed_since_update,
    plan,
    view,
)
from craft_operator.reconciler.pool_pods import (
    claimed_pods,
    count_claimed,
    is_terminating,
    pool_members,
    pool_pods,
    template_of,
)
from craft_operator.reconciler.pool_policy import PoolVerdict, images_denied, judge_pool
from craft_operator.reconciler.pool_status import (
    count_status,
    is_routine,
    status_patch,
    stored_reason,
    with_conditions,
    write_pool_status,
)
from craft_operator.reconciler.queue import RetryableError
from craft_operator.reconciler.steps import pod_state
from craft_operator.reconciler.steps.pod import STABLE_AFTER
from craft_operator.status import ConditionState

POD = kinds.POD
POOL = kinds.POOL.name
#: The Ready reasons of a pool whose pod settings the platform's policy does not allow,
#: or may not allow while the policy object is missing or unreadable.
POLICY_DENIED = "PolicyDenied"
POLICY_ABSENT = "PolicyMissing"
POLICY_UNREADABLE = "PolicyUnreadable"
#: A pod with a pool's labels and owner that the operator did not make (a Warning event).
NOT_AS_BUILT = "PoolPodNotAsBuilt"
#: Why an outdated pod is deleted before its replacement is Ready (the event's reason).
IMAGE_DENIED = "PoolPodImageDenied"
log = logging.getLogger(__name__)
PoolKey = tuple[str, str]
#: Pods one pass creates at most; the pass comes back at once for more.
CREATES_PER_PASS = 10
#: Pods deleted at once: a pool of hundreds deleted, scaled to zero or replaced takes
#: seconds, not one round trip after another (a pass that ran for many minutes would be
#: taken for a stuck worker).
DELETES_AT_ONCE = 10
#: Workers of the pools' own queue.
POOL_WORKERS = 2
#: Seconds the status changes of claims and refills wait so that they share one write.
STATUS_INTERVAL = 5.0


class PoolRetryLaterError(RetryableError):
    """A pass failed in a way that may pass (the status says which); the queue backs off."""


@dataclass(frozen=True)
class _Failures:
    """Waves of pool pods ending in a row (new ones wait a backoff): how many, when the
    last came, and the pods it saw (a pod seen ended by several passes counts once); a new
    pod template (the crashing image fixed) starts afresh."""

    count: int
    at: Moment
    seen: frozenset[str]
    #: The pool's template hash when the waves came.
    template: str


@dataclass
class _Outcome:
    """What a pass did, for its status, events and revisit."""

    created: int = 0
    create_error: ApiError | None = None
    conflicts: int = 0
    #: The pool's own pods deleted above its replicas (a scale-down frees their quota).
    scaled_down: int = 0
    #: The last refusal of pod creates, while new ones wait out its backoff.
    held_refusal: str | None = None
    #: The pass's Normal events (reason, message), posted as one at its end.
    notes: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _Refusals:
    """Pod creates the API server refused in a row (a quota, say), and until when new ones
    wait: events of the pool's pods, which come often under claims, do not shorten it; a
    new pod template (resources lowered to fit the quota, say) is tried at once, as is a
    scale-up after a scale-down that deleted the pool's own pods (their quota is free), and
    refusals are forgotten REFUSALS_FORGOTTEN_AFTER the last one."""

    count: int
    until: Moment
    #: When the last refusal came.
    at: Moment
    error: str
    #: The template hash of the pods refused.
    template: str


#: Seconds without a pool pod ending after which its failures are forgotten: as a
#: sandbox's pod failures once its pod stayed Ready that long. A pool seen full again
#: keeps them meanwhile, since pods that crash soon after they are Ready fill it between
#: their waves (a pool that stays full that long has had no pod end).
FAILURES_FORGOTTEN_AFTER = STABLE_AFTER
#: Seconds after the last refused create after which the refusals are forgotten: a new
#: peak's first refusal, hours after the last, waits the first backoff, not the cap.
REFUSALS_FORGOTTEN_AFTER = FAILURES_FORGOTTEN_AFTER


def _wave_end(failures: _Failures, base: float) -> Moment:
    """When new pods may start again after the last wave of failures."""
    return failures.at.after(_backoff(base, failures.count))


def _backoff(base: float, failures: int) -> float:
    return float(min(300.0, base * 2 ** max(0, failures - 1)))


class PoolReconciler:
    """Reconciles CraftSandboxPools by (namespace, name); see the module docstring."""

    def __init__(
        self,
        services: Services,
        *,
        max_creates: int = CREATES_PER_PASS,
        status_interval: float = STATUS_INTERVAL,
    ) -> None:
        self.services = services
        self.max_creates = max_creates
        self.status_interval = status_interval
        self._failures: dict[PoolKey, _Failures] = {}
        self._refusals: dict[PoolKey, _Refusals] = {}
        #: When a routine status change held back is written at the latest, per pool.
        self._status_due: dict[PoolKey, Moment] = {}
        #: The pods of each pool's current template said not to be as built (by uid).
        self._foreign: dict[PoolKey, set[str]] = {}
        #: The uid of the pool the memories above are of (a pool recreated under its name
        #: inherits none of them).
        self._uids: dict[PoolKey, str] = {}
        #: Pods reported deleted while not being deleted (labels edited out of sight).
        self.out_of_sight = OutOfSight()

    def forget(self, key: PoolKey) -> None:
        """Drop what is remembered about a pool that is gone, and its claim metrics."""
        self.services.metrics.pool_gone(*key)
        self._failures.pop(key, None)
        self._refusals.pop(key, None)
        self._status_due.pop(key, None)
        self._foreign.pop(key, None)
        self._uids.pop(key, None)
        self.out_of_sight.forget(key)

    async def forget_all(self) -> None:
        """The replica stands by: the backoffs and held status changes it remembers go
        stale (the other replica acts meanwhile, and a pool may be recreated under its
        name), so it starts afresh from the cluster's state when active."""
        self._failures.clear()
        self._refusals.clear()
        self._status_due.clear()
        self._foreign.clear()
        self._uids.clear()
        self.out_of_sight.forget()

    async def reconcile(self, key: PoolKey) -> float | None:
        """One pass over the pool ``key``; returns when to revisit (seconds) or ``None``.

        Raises :class:`PoolRetryLaterError` when pods could not be created, and
        :class:`~craft_operator.reconciler.api_away.ApiServerAwayError` when the API server
        was away, :class:`~craft_operator.reconciler.api_away.ApiRefusedError` when it
        refused a request.
        """
        try:
            return await self._reconcile(key)
        except ApiError as exc:
            retried = api_away.expected(f"pool {key[0]}/{key[1]}", exc)
            if retried is None:
                raise
            raise retried from exc

    async def _reconcile(self, key: PoolKey) -> float | None:
        s = self.services
        namespace, name = key
        body = s.cache.get(POOL, namespace, name)
        if body is None or body.get("metadata", {}).get("deletionTimestamp"):
            await self._release(namespace, name)
            return None
        uid = str(body["metadata"].get("uid") or "")
        if self._uids.get(key, uid) != uid:
            # Deleted and recreated under its name between two passes (both watch events
            # before either pass): the backoffs and claim counts were the old pool's.
            self.forget(key)
        self._uids[key] = uid
        s.metrics.pool_seen(namespace, name)
        await self.out_of_sight.list_once(s, body)
        await self.out_of_sight.settle(s, body)
        try:
            pool = parse_pool(body)
            desired = build_pool_pod(pool, s.settings)
        except (InvalidPoolError, SandboxConfigError) as exc:
            reason = exc.reason if isinstance(exc, SandboxConfigError) else "InvalidSpec"
            changed_meanwhile = await self._cannot_make_pods(body, reason, str(exc), None)
            return 0.0 if changed_meanwhile else None
        denied = judge_pool(pool, s.cache, s.settings)
        if denied is not None:
            return await self._denied(body, key, pool, desired, denied)
        return await self._converge(key, body, pool, desired)

    async def _denied(
        self,
        body: dict[str, Any],
        key: PoolKey,
        pool: CraftSandboxPool,
        desired: dict[str, Any],
        denied: PoolVerdict,
    ) -> float | None:
        """The platform's policy does not allow the pool's pod settings: no pod is made.
        Its unclaimed pods of those settings go (a policy that tightened reaches them), as
        do those whose own image it does not allow; those of an earlier template it still
        allows stay and serve claims (a spec changed to an image the policy refuses, a typo
        in a registry say, leaves the pool its warm pods). While the policy object is only
        missing or unreadable (a GitOps prune) every pod waits for it. Meanwhile only a
        scale-down and ended pods are carried out (:meth:`_cannot_make_pods`)."""
        s = self.services
        if denied.absent is None:
            members, _ = pool_members(s.cache, *key, pool.metadata.uid)
            await self._delete_all(self._refused(members, desired))
        if denied.absent is None:
            reason, message = POLICY_DENIED, denied.message
        elif denied.absent == MISSING:
            # Perhaps there never was one: "until it is back" would send someone looking.
            message = f"{denied.message}; no new pods until a CraftSandboxPolicy allows them"
            reason = POLICY_ABSENT
        else:
            message = f"{denied.message}; no new pods until the CraftSandboxPolicy is back"
            reason = POLICY_UNREADABLE
        changed_meanwhile = await self._cannot_make_pods(body, reason, message, desired)
        return 0.0 if changed_meanwhile else None

    def _refused(
        self, members: Sequence[dict[str, Any]], desired: dict[str, Any]
    ) -> list[Mapping[str, Any]]:
        """The pool's live unclaimed pods the policy, present and readable, refuses: those
        of the pool's current settings (which it does not allow), and those of an earlier
        template whose own image it does not allow."""
        hash_ = template_of(desired)
        live = [pod for pod in members if not is_terminating(pod)]
        earlier = [pod for pod in live if template_of(pod) != hash_]
        banned = images_denied(earlier, self.services.cache, self.services.settings)
        return [*(pod for pod in live if template_of(pod) == hash_), *banned]

    async def _converge(
        self, key: PoolKey, body: dict[str, Any], pool: CraftSandboxPool, desired: dict[str, Any]
    ) -> float | None:
        s = self.services
        namespace, name = key
        hash_ = template_of(desired) or ""
        members, strays = self._members(body, key, pool, desired)
        ours = view(members, hash_, self._foreign.get(key, ()))
        banned = images_denied(ours.ready_old, s.cache, s.settings) if ours.ready_old else []
        if banned:  # deleted at once below, without waiting for Ready replacements
            gone = {id(pod) for pod in banned}
            ours = replace(ours, ready_old=[pod for pod in ours.ready_old if id(pod) not in gone])
        refused = egress.refusal(s.cache, s.settings, desired)
        now = Moment.now(s.steady, s.clock)
        waiting = self._failure_wait(key, ours, now, hash_)
        held = self._held_refusals(key, now, hash_)
        refusal_wait = 0.0 if held is None else now.until(held.until)
        # Waves of pods keep ending and none of this template is Ready (an image that
        # crashes, a command that exits): one pod at a time, and only once the last one has
        # come up or ended, proves the template before a batch. One wave (a node drained)
        # refills at full speed. The claimed pods are read only when needed: a pool's
        # live sandboxes' pods, thousands in time, and a pass comes with every claim.
        failures = self._failures.get(key)
        probing = (
            failures is not None
            and failures.count > 1
            and ours.ready == 0
            and not _proven_since(claimed_pods(s.cache, namespace, name), hash_, failures.at.wall)
        )
        todo = plan(
            ours,
            pool.spec.replicas,
            max_creates=(0 if ours.creating else 1) if probing else self.max_creates,
            may_create=refused is None and waiting <= 0 and refusal_wait <= 0,
            claimed_since_update=(
                claimed_since_update(claimed_pods(s.cache, namespace, name), ours, hash_)
                if ours.has_old
                else 0
            ),
        )
        # A stray already being deleted is not deleted (and reported) again on every pass.
        orphaned = [pod for pod in strays if not pod["metadata"].get("deletionTimestamp")]
        todo = replace(
            todo,
            delete=(
                *((pod, IMAGE_DENIED) for pod in banned),
                *todo.delete,
                *((pod, ORPHANED) for pod in orphaned),
            ),
        )
        outcome = await self._act(body, todo, desired)
        self._count_refusals(key, outcome, now, hash_)
        refusal = self._refusals.get(key)
        # A backoff is said only while the pool lacks pods: scaled down meanwhile to what
        # it holds, it waits for nothing (the backoff still holds the next scale-up).
        if (
            refusal is not None
            and todo.short
            and (outcome.create_error is not None or refusal_wait > 0)
        ):
            # The same words from the refusal until the next try: one status write.
            outcome.held_refusal = (
                f"{refusal.error}; new pods are tried after {_clock(refusal.until.wall)}"
            )
        # A pass with nothing to do changed nothing (and awaited nothing: no event came in
        # meanwhile), so what it read still holds.
        after = ours
        if todo.delete or todo.create:
            members, strays = self._members(body, key, pool, desired)
            after = view(members, hash_, self._foreign.get(key, ()))
        base = s.settings.pod_restart_backoff
        resume_at = (
            None
            if failures is None or waiting <= 0 or not todo.short
            else _wave_end(failures, base).wall
        )
        states = self._conditions(body, pool, after, refused, outcome, resume_at)
        status = count_status(
            body,
            after,
            claimed=count_claimed(s.cache, namespace, name),
            template_hash=hash_,
            conditions=with_conditions(body, states, s.clock()),
        )
        wait = self._status_wait(key, body, status)
        changed_meanwhile = False if wait else await write_pool_status(s, body, status)
        if outcome.create_error is not None:
            if outcome.create_error.away:
                raise api_away.away(f"pool {namespace}/{name}", outcome.create_error)
            message = f"{namespace}/{name}: {outcome.create_error}"
            raise PoolRetryLaterError(message, retry_after=0.0 if changed_meanwhile else None)
        if changed_meanwhile:
            return 0.0
        revisit = self._revisit(after, todo, outcome, max(waiting, refusal_wait))
        return revisit if wait is None else min(revisit, wait)

    def _status_wait(
        self, key: PoolKey, body: Mapping[str, Any], status: CraftSandboxPoolStatus
    ) -> float | None:
        """Seconds a routine status change (claims, refills) still waits, so that those of
        STATUS_INTERVAL seconds share one write; ``None``: write now."""
        dropped = known_dropped(self.services, kinds.POOL)
        if not is_routine(body, status, dropped) or not status_patch(body, status, dropped):
            self._status_due.pop(key, None)
            return None
        now = Moment.now(self.services.steady, self.services.clock)
        due = self._status_due.setdefault(key, now.after(self.status_interval))
        wait = now.until(due)
        if wait <= 0:
            del self._status_due[key]
            return None
        return wait

    def _held_refusals(self, key: PoolKey, now: Moment, template: str) -> _Refusals | None:
        """The pool's refused creates that still hold new ones back: none once the
        template changed (what was refused is not what is made now) or once none came for
        REFUSALS_FORGOTTEN_AFTER (the backoff ran out long ago, and one refusal an hour
        must not climb to the 300 s cap)."""
        held = self._refusals.get(key)
        if held is None:
            return None
        if held.template != template or now.since(held.at) >= REFUSALS_FORGOTTEN_AFTER:
            self._refusals.pop(key, None)
            return None
        return held

    def _count_refusals(self, key: PoolKey, outcome: _Outcome, now: Moment, template: str) -> None:
        """A refused create starts (or doubles) the wait before the next ones; a create
        that went through ends it, as does a scale-down that deleted the pool's own pods
        (the quota they held is free: a scale-up soon after is tried at once). A create the
        API server's absence cut short is no refusal: the pool fills as soon as it is back."""
        if outcome.create_error is not None and not outcome.create_error.away:
            held = self._refusals.get(key)
            count = (held.count if held else 0) + 1
            delay = _backoff(self.services.settings.pod_restart_backoff, count)
            error = str(outcome.create_error)
            self._refusals[key] = _Refusals(count, now.after(delay), now, error, template)
        elif outcome.created or outcome.scaled_down:
            self._refusals.pop(key, None)

    def _failure_wait(self, key: PoolKey, pods: PoolView, now: Moment, template: str) -> float:
        """Seconds new pods must still wait after pods that ended (0: none).

        The backoff doubles per wave of failures, not per pod (six pods evicted by one node
        drain are one wave: the refill after it waits the first backoff only), and is
        forgotten once no pod has ended for FAILURES_FORGOTTEN_AFTER (one failure an hour
        must not climb to the 300 s cap). A pool seen full again does not forget it: pods
        that crash soon after they are Ready fill the pool between their waves. A crashing
        image's replacements keep ending, wave after wave, so their backoff keeps doubling.
        """
        held = self._failures.get(key)
        if held is not None and held.template != template:
            self._failures.pop(key, None)  # what kept ending is not what is made now
            held = None
        ended = frozenset(str(pod["metadata"].get("uid", "")) for pod in pods.ended)
        seen = held.seen if held is not None else frozenset()
        if held is not None and now.since(held.at) >= FAILURES_FORGOTTEN_AFTER:
            # Quiet that long: pods that end now are a first wave again (even when no pass
            # came between, the pool full and nothing changing).
            self._failures.pop(key, None)
            held = None
        base = self.services.settings.pod_restart_backoff
        if held is not None and ended - held.seen and now.until(_wave_end(held, base)) > 0:
            # Ends that come while the wave's backoff runs are that wave (a kubelet evicts
            # a node's pods one at a time, each its own event and pass).
            self._failures[key] = _Failures(held.count, held.at, held.seen | ended, template)
        elif ended - seen:
            count = (held.count if held else 0) + 1
            self._failures[key] = _Failures(count, now, ended, template)
        held = self._failures.get(key)
        if held is None:
            return 0.0
        return now.until(_wave_end(held, base))

    async def _act(
        self, body: dict[str, Any], todo: Plan, desired: dict[str, Any] | None
    ) -> _Outcome:
        """Carry out ``todo``: its deletions, then its creates of ``desired`` (``None``: the
        pool can make no pod, and the plan creates none)."""
        outcome = _Outcome()
        deleted: dict[str, list[Mapping[str, Any]]] = {}
        done = await self._delete_all([pod for pod, _ in todo.delete])
        for (pod, why), ok in zip(todo.delete, done, strict=True):
            if ok:
                deleted.setdefault(why, []).append(pod)
                if why == EXCESS:
                    outcome.scaled_down += 1
            else:
                outcome.conflicts += 1
        for why, pods in deleted.items():
            self._deleted_event(body, why, pods, outcome)
        try:
            if todo.create and desired is not None:
                await self._create(body, desired, todo.create, outcome)
        finally:
            post_coalesced(self.services.events, body, outcome.notes)
        return outcome

    async def _create(
        self, body: dict[str, Any], desired: dict[str, Any], count: int, outcome: _Outcome
    ) -> None:
        s = self.services
        results = await asyncio.gather(
            *(s.kube.create(POD.api, desired) for _ in range(count)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, ApiError):
                outcome.create_error = result
            elif isinstance(result, BaseException):
                raise result
            else:
                s.cache.put(POD.name, result)
                outcome.created += 1
        if outcome.created:
            outcome.notes.append(("PoolPodsCreated", f"created {outcome.created} pods"))
        if outcome.create_error is not None:
            message = f"cannot create pool pods: {outcome.create_error}"
            s.events.post(body, type="Warning", reason="PodCreateFailed", message=message)

    async def _delete_all(self, pods: Sequence[Mapping[str, Any]]) -> list[bool]:
        """:meth:`_delete` each pod, :data:`DELETES_AT_ONCE` at a time; what one raised is
        raised once the others of its batch are done."""
        done: list[bool] = []
        for start in range(0, len(pods), DELETES_AT_ONCE):
            batch = pods[start : start + DELETES_AT_ONCE]
            results = await asyncio.gather(
                *(self._delete(pod) for pod in batch), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
                done.append(result)
        return done

    async def _delete(self, pod: Mapping[str, Any]) -> bool:
        """Delete this very pod as it was seen; False if it changed since (e.g. claimed)."""
        s = self.services
        meta = pod["metadata"]
        try:
            answer = await s.kube.delete(
                POD.api,
                meta.get("namespace"),
                meta["name"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            )
        except ConflictError:
            return False
        if answer is not None and answer.get("kind") == "Pod":
            s.cache.put(POD.name, answer)
        else:
            s.cache.remove(POD.name, pod)
        return True

    def _deleted_event(
        self, body: dict[str, Any], why: str, pods: list[Mapping[str, Any]], outcome: _Outcome
    ) -> None:
        names = ", ".join(sorted(pod["metadata"]["name"] for pod in pods))
        if why == ENDED:
            message = f"replacing {len(pods)} pods that ended: {_how_they_ended(pods)}"
        elif why == ORPHANED:
            message = f"deleted {len(pods)} pods of an earlier pool of this name: {names}"
        elif why == EXCESS:
            message = f"deleted {len(pods)} pods above spec.replicas: {names}"
        elif why == IMAGE_DENIED:
            message = (
                f"deleted {len(pods)} pods of an earlier template whose image the "
                f"CraftSandboxPolicy no longer allows, without waiting for their replacements: "
                f"{names}"
            )
        else:
            message = f"replacing {len(pods)} pods of an earlier template: {names}"
        if why in (ENDED, IMAGE_DENIED):
            self.services.events.post(body, type="Warning", reason=why, message=message)
        else:
            outcome.notes.append((why, message))

    def _conditions(
        self,
        body: dict[str, Any],
        pool: CraftSandboxPool,
        pods: PoolView,
        refused: ConditionState | None,
        outcome: _Outcome,
        resume_at: datetime | None,
    ) -> list[ConditionState]:
        return [self._egress(body, refused), _ready(pool, pods, refused, outcome, resume_at)]

    def _egress(self, body: dict[str, Any], refused: ConditionState | None) -> ConditionState:
        """The pool's ``EgressRestricted`` condition for the egress ``refused`` (said in a
        Warning event when it starts)."""
        if refused is None:
            return ConditionState.true(EGRESS_RESTRICTED, "EgressRestricted", "new pods may start")
        if stored_reason(body, EGRESS_RESTRICTED) != refused.reason:
            self.services.events.post(
                body, type="Warning", reason=refused.reason, message=refused.message
            )
        return ConditionState.false(EGRESS_RESTRICTED, refused.reason, refused.message)

    def _revisit(self, pods: PoolView, todo: Plan, outcome: _Outcome, waiting: float) -> float:
        resync = self.services.settings.resync_interval
        if outcome.conflicts or (todo.create == self.max_creates and outcome.created):
            return 0.0 if not outcome.conflicts else 1.0
        if waiting > 0:
            return min(resync, waiting)
        return resync

    def _members(
        self, body: dict[str, Any], key: PoolKey, pool: CraftSandboxPool, desired: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The pool's pods and the strays of an earlier pool of its name (as
        :func:`pool_members`). A pod of its current template that is not as built (someone
        else's with the pool's labels and owner, or one an admission webhook changed; see
        :mod:`~craft_operator.kube.pod_shape`) is said in a Warning event, once, and its
        uid kept in :attr:`_foreign`: no claim takes it and it is not counted Ready, but it
        counts towards ``replicas`` (a surplus goes first), so that a mutation the shape
        does not expect never has the pool create pods without end."""
        members, strays = pool_members(self.services.cache, *key, pool.metadata.uid)
        hash_ = template_of(desired) or ""
        digest = built_digest(hash_, desired["spec"])
        foreign = [
            pod for pod in members if template_of(pod) == hash_ and not is_as_built(pod, digest)
        ]
        said = self._foreign.get(key, set())
        for pod in foreign:
            if pod["metadata"].get("uid") not in said:
                self._say_foreign(body, pod, desired)
        self._foreign[key] = {str(pod["metadata"].get("uid")) for pod in foreign}
        return members, strays

    def _say_foreign(
        self, body: dict[str, Any], pod: dict[str, Any], desired: dict[str, Any]
    ) -> None:
        where = where_unlike(pod, desired["spec"])
        message = (
            f"pod {pod['metadata']['name']} carries this pool's labels and owner but its "
            f"{where} is not as the operator builds it: never claimed (made by "
            "someone else, or changed by an admission webhook?)"
        )
        log.warning("%s/%s: %s", body["metadata"]["namespace"], body["metadata"]["name"], message)
        self.services.events.post(body, type="Warning", reason=NOT_AS_BUILT, message=message)

    async def _cannot_make_pods(
        self, body: dict[str, Any], reason: str, message: str, desired: dict[str, Any] | None
    ) -> bool:
        """The spec, the settings or the policy cannot make a pod: say so once; nothing is
        created, but a scale-down (to zero, say: ``kubectl scale`` or an autoscaler) and
        ended pods are still carried out. Egress is still judged for the ``desired`` pod
        (when the spec makes one), so that ``EgressRestricted`` never keeps an old verdict
        beside this one."""
        s = self.services
        try:
            await self._scale_down_only(body, desired)
        except ApiError as exc:
            if exc.away:
                raise
            # (a webhook refusing pod deletes, say): what the pool cannot do is said anyway
            meta = body["metadata"]
            log.warning("%s/%s: pods not scaled down: %s", meta["namespace"], meta["name"], exc)
        if stored_reason(body, POOL_READY) != reason:
            s.events.post(body, type="Warning", reason=reason, message=message)
        if desired is None:
            egress_state = ConditionState.unknown(
                EGRESS_RESTRICTED, reason, "not judged: the pool's spec makes no pod"
            )
        else:
            egress_state = self._egress(body, egress.refusal(s.cache, s.settings, desired))
        states = [egress_state, ConditionState.false(POOL_READY, reason, message)]
        meta = body["metadata"]
        # The pods made before are counted by the template they were made of: kept while
        # the policy is missing, say, those Ready serve claims still.
        status = count_status(
            body,
            self._as_made(body),
            claimed=count_claimed(s.cache, meta["namespace"], meta["name"]),
            template_hash=(body.get("status") or {}).get("templateHash"),
            conditions=with_conditions(body, states, s.clock()),
        )
        return await write_pool_status(s, body, status)

    def _as_made(self, body: Mapping[str, Any]) -> PoolView:
        """The pool's pods, seen by the template they were made of (``status.templateHash``):
        for a pass whose spec, settings or policy make no pod now."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        members, _ = pool_members(self.services.cache, *key, meta.get("uid"))
        made = (body.get("status") or {}).get("templateHash") or ""
        return view(members, made, self._foreign.get(key, ()))

    async def _scale_down_only(self, body: dict[str, Any], desired: dict[str, Any] | None) -> None:
        """Delete the pool's ended pods and those above its ``replicas``, creating none:
        its pods are seen by the template they were made of (``status.templateHash``), as
        the spec may make none now. A ``replicas`` that cannot be read scales nothing down."""
        pods = self._as_made(body)
        replicas = _stated_replicas(body)
        if replicas is None:
            todo = Plan(tuple((pod, ENDED) for pod in pods.ended))
        else:
            todo = plan(pods, replicas, max_creates=0, may_create=False)
        if todo.delete and (await self._act(body, todo, desired)).scaled_down:
            meta = body["metadata"]  # their quota is free (see _count_refusals)
            self._refusals.pop((meta["namespace"], meta["name"]), None)

    async def _release(self, namespace: str, name: str) -> None:
        """The pool is gone or going: delete what is left of its unclaimed pods."""
        await self._delete_unclaimed(namespace, name)
        self.forget((namespace, name))

    async def _delete_unclaimed(self, namespace: str, name: str) -> None:
        """Delete the pool's unclaimed pods not being deleted yet."""
        pods = pool_pods(self.services.cache, namespace, name)
        await self._delete_all([pod for pod in pods if not is_terminating(pod)])


def _stated_replicas(body: Mapping[str, Any]) -> int | None:
    """The pool's ``spec.replicas`` (1 when not given, as the CRD defaults it), read alone
    so that a spec the operator cannot otherwise read still scales; ``None`` when it is no
    count the CRD allows."""
    value = (body.get("spec") or {}).get("replicas", 1)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_REPLICAS else None


def _clock(moment: datetime) -> str:
    """A moment as a condition message says it: fixed while it stands (a countdown would
    change the message, and so write the status, on every pass)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _proven_since(claimed: list[dict[str, Any]], template_hash: str, since: datetime) -> bool:
    """Whether a pod of this template came up Ready since ``since``: one was claimed (a
    claim takes Ready pods only), which under steady claims is where Ready pods go."""
    for pod in claimed:
        created = pod_state.created_at(pod)
        if template_of(pod) == template_hash and created is not None and created >= since:
            return True
    return False


def _ready(
    pool: CraftSandboxPool,
    pods: PoolView,
    refused: ConditionState | None,
    outcome: _Outcome,
    resume_at: datetime | None,
) -> ConditionState:
    """The pool's Ready condition: it holds ``replicas`` Ready pods, all of its template
    (``resume_at``: when new pods may start after pods that ended, if the pool lacks pods
    and they wait; ``outcome.held_refusal`` is likewise only set while it lacks pods)."""
    replicas = pool.spec.replicas
    count = f"{pods.ready}/{replicas} pods ready"
    if pods.ready >= replicas and not pods.has_old:
        return ConditionState.true(POOL_READY, "PoolReady", count)
    if refused is not None:
        return ConditionState.false(POOL_READY, refused.reason, f"{count}; {refused.message}")
    if outcome.held_refusal is not None:
        return ConditionState.false(POOL_READY, "PodCreateFailed", outcome.held_refusal)
    if outcome.create_error is not None:
        return ConditionState.false(POOL_READY, "PodCreateFailed", str(outcome.create_error))
    if resume_at is not None:
        message = f"{count}; pool pods ended, new ones start after {_clock(resume_at)}"
        return ConditionState.false(POOL_READY, "PoolPodsFailing", message)
    if pods.unlike:
        first = min(pods.unlike, key=lambda pod: pod["metadata"].get("name", ""))
        message = (
            f"{count}; {len(pods.unlike)} pods with this pool's labels and owner are not as "
            f"the operator builds them, never claimed ({first['metadata']['name']}, ...: made "
            "by someone else, or changed by an admission webhook? see its events)"
        )
        return ConditionState.false(POOL_READY, NOT_AS_BUILT, message)
    why = _oldest_waiting(pods)
    if pods.has_old:
        message = f"{count}; {len(pods.old)} outdated{why}"
        return ConditionState.false(POOL_READY, "Updating", message)
    return ConditionState.false(POOL_READY, "Filling", f"{count}{why}")


#: The most of a pod's waiting reason a pool's Ready condition repeats.
WAITING_DETAIL_LIMIT = 200


def _oldest_waiting(pods: PoolView) -> str:
    """Why the pool's oldest pod that is not Ready waits (an image pull, scheduling), as
    a clause of the Ready condition's message; empty when every live pod is Ready."""
    waiting = pods.waiting
    if not waiting:
        return ""
    oldest = min(waiting, key=lambda pod: pod["metadata"].get("creationTimestamp") or "")
    detail = pod_state.waiting_detail(oldest)[:WAITING_DETAIL_LIMIT]
    return f"; {oldest['metadata']['name']} waits: {detail}"


def _how_they_ended(pods: Sequence[Mapping[str, Any]]) -> str:
    """Each ended pod's name, with how its containers ended (an OOM kill is said nowhere
    else: the kubelet posts no event, and the pod is deleted at once)."""
    said = []
    for pod in sorted(pods, key=lambda pod: str(pod["metadata"]["name"])):
        ended = pod_state.terminations(pod)
        said.append(f"{pod['metadata']['name']} ({ended})" if ended else pod["metadata"]["name"])
    return ", ".join(said)
