"""Claiming a warm pool pod for a sandbox that has no pod, instead of creating one.

A sandbox that names a pool (``spec.poolRef``), or that woke from sleep while a pool in
its namespace has pods like its own, takes a Ready pod of that pool: one merge patch, with
the pod's resourceVersion as its precondition, relabels it as the sandbox's (its labels,
the egress-proxy ones included; the pool's label gone, ``claimed-from`` added) and moves
its controller reference from the pool to the sandbox. Two sandboxes racing for one pod:
the API server accepts one patch and answers the other 409, and that one tries the next
pod. A claimed pod is the sandbox's until it is deleted; it never goes back to a pool.

Nothing of the user is in a pool pod's spec, so nothing of it needs to change: the token,
the SKILL.md and the library are delivered into it by exec by the steps that follow. When
no pod can be claimed the sandbox starts cold, as without a pool, and an event says why.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from craft_operator.api.models import CraftSandbox, LibraryMode
from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL, InvalidPoolError, parse_pool
from craft_operator.builders.naming import child_labels, owner_reference
from craft_operator.builders.pod import SandboxConfigError, template_hash
from craft_operator.builders.pool import (
    claimable_pod_spec,
    differing_settings,
    older_template_hashes,
    pool_pod_spec,
)
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError, ConflictError, NotFoundError
from craft_operator.kube.pod_shape import built_digest, is_as_built, where_unlike
from craft_operator.metrics.pools import ColdStartReason
from craft_operator.reconciler import egress
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.pool_pods import ready_pool_pod_names
from craft_operator.reconciler.step import Pass, Stop
from craft_operator.reconciler.steps.workspace import cold_start_reason
from craft_operator.status import POD_READY, ConditionState

POD, POOL = kinds.POD, kinds.POOL
log = logging.getLogger(__name__)
#: Pods tried per pass before starting cold (each try is one write that lost a race).
MAX_TRIES = 3
#: Candidates looked at per pass for those tries (some may not be as built).
MAX_LOOKED_AT = 16
#: Why a sandbox cannot use a pool pod at all: its pod mounts a volume of its own.
JOB_MODE = "LibraryJobModeNeedsColdStart"
#: A claim went unanswered and its pod could not be read: it may have landed.
UNSETTLED = "ClaimUnsettled"
#: The unsettled claims remembered per sandbox: a pass makes one at most, and each backs off.
UNSETTLED_KEPT = 4


def wants_pool(p: Pass) -> bool:
    """Whether this sandbox would take a pool pod: it names a pool, or it woke from sleep."""
    return p.sandbox.spec.pool_ref is not None or p.run.status.woke_at is not None


async def claim(p: Pass) -> dict[str, Any] | Stop | None:
    """Claim a Ready pool pod for the sandbox (the pod, as claimed); ``None``: start cold
    (an event and the cold-start metric say why, when the sandbox asked for a pool); a
    :class:`Stop` when a claim went unanswered and its pod could not be read: it may have
    landed, so neither a cold pod nor another claim this pass."""
    if not wants_pool(p):
        return None
    started = time.monotonic()
    blocked = needs_own_volume(p.sandbox)
    if blocked is not None:
        if p.sandbox.spec.pool_ref is not None or _pools_here(p):
            _cold(p, blocked, "its pod mounts a volume of its own, which a warm pod has not")
        return None
    try:
        built = claimable_pod_spec(p.sandbox, p.services.settings)
    except SandboxConfigError:
        return None  # the pod step reports why no pod can be made at all
    wanted = template_hash(built)
    pool, candidates = _candidates(p, wanted)
    if pool is None:
        _cold_without_pool(p)
        return None
    if not candidates:
        pools = _pool_spec(p, pool)
        if pools is not None and template_hash(pools) != wanted:
            differing = ", ".join(differing_settings(built, pools)) or "the pod spec"
            why = f"pool {pool}'s pods differ from this sandbox's in {differing}"
            _cold(p, ColdStartReason.NO_MATCHING_POOL, why, pool)
        else:
            _cold(p, ColdStartReason.POOL_EMPTY, f"pool {pool} has no Ready pod", pool)
        return None
    tries = _spread(p, candidates, built, built_digest(wanted, built))
    if not tries:
        why = f"the Ready pods of pool {pool} it looked at are not as the operator builds them"
        _cold(p, ColdStartReason.NOT_AS_BUILT, why, pool)
        return None
    tries = [pod for pod in tries if not _egress_open_once_claimed(p, pod, pool)]
    if not tries:
        why = (
            f"no NetworkPolicy restricts the egress of pool {pool}'s pods once claimed, or "
            "one that selects them then lets all egress out (a policy on the claimed-from "
            "label, say)"
        )
        _cold(p, ColdStartReason.EGRESS_NOT_RESTRICTED, why, pool)
        return None
    for pod in tries:
        claimed = await _take(p, pod, pool)
        if isinstance(claimed, Stop):
            unsettled = (pool, str(pod["metadata"].get("uid")), time.monotonic() - started)
            earlier = p.memory.unsettled_claims.get(p.run.key, ())
            p.memory.unsettled_claims[p.run.key] = (*earlier, unsettled)[-UNSETTLED_KEPT:]
            return claimed
        if isinstance(claimed, dict):
            p.memory.unsettled_claims.pop(p.run.key, None)  # (counted here, not as landed)
            namespace = p.sandbox.metadata.namespace or ""
            seconds = time.monotonic() - started
            p.services.metrics.pool_claimed(namespace, _counted_as(p, pool), seconds)
            p.run.status.claimed_from = pool
            name = claimed["metadata"]["name"]
            p.event("PodClaimed", f"claimed warm pod {name} from pool {pool}")
            return claimed
        if claimed is None:
            continue
        _cold(p, ColdStartReason.CLAIM_FAILED, "the claim could not be written", pool)
        return None
    _cold(p, ColdStartReason.CLAIM_CONFLICT, f"other sandboxes claimed {pool}'s pods first", pool)
    return None


def needs_own_volume(sandbox: CraftSandbox) -> str | None:
    """Why ``sandbox``'s pod must mount a volume of its own, which a warm pod has not (a
    workspace, or the library's PVC in Job mode): the reason, or ``None``."""
    if (reason := cold_start_reason(sandbox)) is not None:
        return reason
    return JOB_MODE if sandbox.spec.user_library.mode == LibraryMode.JOB else None


def _candidates(p: Pass, wanted: str) -> tuple[str | None, Sequence[str]]:
    """The pool to claim from and the names of its Ready pods like the sandbox's own pod
    (the cache's sequence: read before the next await)."""
    s, namespace = p.services, p.sandbox.metadata.namespace or ""
    # Built only if a pool has no Ready pod of ``wanted``, and then once for every pool.
    legacy = functools.cache(lambda: older_template_hashes(p.sandbox, s.settings))
    ref = p.sandbox.spec.pool_ref
    if ref is not None:
        if not _live(s.cache.get(POOL.name, namespace, ref.name)):
            return None, ()
        return ref.name, _ready(p, ref.name, wanted, legacy)
    # Woken from sleep: the first pool with a Ready pod like the sandbox's, else a pool
    # whose pods would be (empty now: the cold start is said), else none.
    matching = None
    for body in s.cache.in_namespace(POOL.name, namespace):
        if not _live(body):
            continue
        name = body["metadata"]["name"]
        names = _ready(p, name, wanted, legacy)
        if names:
            return name, names
        if matching is None and _pool_template(p, name) == wanted:
            matching = name
    return matching, ()


def _ready(p: Pass, pool: str, wanted: str, legacy: Callable[[], tuple[str, ...]]) -> Sequence[str]:
    """The names of the pool's Ready pods of the template ``wanted``; if none, of the
    sandbox's settings as older operators hashed them (``legacy``): a pool made by one
    serves claims until it has replaced its pods (a claimed one is kept, see
    ``claimed_template_hashes``)."""
    cache, namespace = p.services.cache, p.sandbox.metadata.namespace or ""
    names = ready_pool_pod_names(cache, namespace, pool, template_hash=wanted)
    for older in () if names else legacy():
        names = ready_pool_pod_names(cache, namespace, pool, template_hash=older)
        if names:
            break
    return names


def _counted_as(p: Pass, pool: str) -> str:
    """The pool a claim or cold start is counted for: ``pool`` while it exists, else none
    (a pool deleted meanwhile has had its series removed: they must not come back)."""
    if pool and _live(p.services.cache.get(POOL.name, p.sandbox.metadata.namespace, pool)):
        return pool
    return ""


def _live(pool: Mapping[str, Any] | None) -> bool:
    """Whether this pool exists and is not being deleted (its pods go with it)."""
    return pool is not None and not pool["metadata"].get("deletionTimestamp")


def _pools_here(p: Pass) -> bool:
    """Whether any pool lives in the sandbox's namespace (else a cold start goes unsaid)."""
    return bool(p.services.cache.in_namespace(POOL.name, p.sandbox.metadata.namespace))


def _pool_template(p: Pass, pool: str) -> str | None:
    """The template hash the pool's pods are made from now (``None``: unknown)."""
    spec = _pool_spec(p, pool)
    return None if spec is None else template_hash(spec)


def _pool_spec(p: Pass, pool: str) -> dict[str, Any] | None:
    """The pod spec the pool's pods are made from now (``None``: unknown)."""
    body = p.services.cache.get(POOL.name, p.sandbox.metadata.namespace, pool)
    if body is None:
        return None
    try:
        return pool_pod_spec(parse_pool(body).spec, p.services.settings)
    except (InvalidPoolError, SandboxConfigError):
        return None


def _cold_without_pool(p: Pass) -> None:
    ref = p.sandbox.spec.pool_ref
    if ref is not None:  # (woken with no pool like it around: nothing to say)
        there = p.services.cache.get(POOL.name, p.sandbox.metadata.namespace, ref.name)
        why = "is being deleted" if there is not None else "does not exist"
        _cold(p, ColdStartReason.NO_POOL, f"CraftSandboxPool {ref.name} {why}")


def _spread(
    p: Pass, names: Sequence[str], built: Mapping[str, Any], digest: str
) -> list[dict[str, Any]]:
    """Up to :data:`MAX_TRIES` of the candidates that are as the pool builds them (the
    spec ``built``, of shape digest ``digest``; others are said, in one event, and passed
    over), oldest first from a place of this sandbox's own, so that sandboxes claiming at
    the same moment mostly try different pods (read before any await: ``names`` is the
    cache's own)."""
    seed = hashlib.sha256((p.sandbox.metadata.uid or p.run.name).encode()).digest()
    start = int.from_bytes(seed[:4], "big") % len(names)
    namespace = p.sandbox.metadata.namespace
    picked: list[dict[str, Any]] = []
    unlike: list[str] = []
    for offset in range(min(MAX_LOOKED_AT, len(names))):
        pod = p.services.cache.get(POD.name, namespace, names[(start + offset) % len(names)])
        if pod is None:
            continue
        if not is_as_built(pod, digest):
            unlike.append(f"{pod['metadata']['name']} ({where_unlike(pod, built)})")
            continue
        picked.append(pod)
        if len(picked) == MAX_TRIES:
            break
    if unlike:
        _not_as_built(p, unlike)
    return picked


def _not_as_built(p: Pass, pods: Sequence[str]) -> None:
    """Say that pods of a pool are not as the operator builds them: never claimed (whoever
    made them could read the token written into them; the pool says so too)."""
    message = (
        f"pods with a pool's labels and owner are not as the operator builds them, not "
        f"claimed (made by someone else?): {', '.join(pods)}"
    )
    log.warning("%s/%s: %s", p.sandbox.metadata.namespace, p.run.name, message)
    p.event(ColdStartReason.NOT_AS_BUILT, message, warning=True)


def claim_patch(pod: Mapping[str, Any], p: Pass, pool: str) -> dict[str, Any]:
    """The one write of a claim: the sandbox's labels and controller reference, only if the
    pod is still the version the cache showed (else 409)."""
    labels: dict[str, str | None] = {LABEL_POOL: None, LABEL_CLAIMED_FROM: pool}
    labels.update(child_labels(p.sandbox))
    return {
        "metadata": {
            "resourceVersion": pod["metadata"]["resourceVersion"],
            "labels": labels,
            "ownerReferences": [owner_reference(p.sandbox)],
        }
    }


def as_claimed(pod: Mapping[str, Any], p: Pass, pool: str) -> dict[str, Any]:
    """The metadata (namespace, labels) ``pod`` will have once :func:`claim_patch` lands."""
    labels = dict(pod["metadata"].get("labels") or {})
    for key, value in claim_patch(pod, p, pool)["metadata"]["labels"].items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return {"metadata": {"namespace": pod["metadata"].get("namespace"), "labels": labels}}


def _egress_open_once_claimed(p: Pass, pod: Mapping[str, Any], pool: str) -> bool:
    """Whether ``pod`` would run with its egress unrestricted once claimed: the pod step
    asked of the sandbox's own pod's labels, and a claimed pod's differ (``claimed-from``
    added, the pool's template hash kept), which a NetworkPolicy may select."""
    return egress.unrestricted(p.services.cache, p.services.settings, as_claimed(pod, p, pool))


class _NotWritten:
    """A claim that failed, not for a race: the API server refused or lost it, and it did
    not land (the pass's backoff says why). Its own answer, not read from the pass's
    verdict, which an earlier step may have set for reasons of its own."""


NOT_WRITTEN = _NotWritten()


async def _take(
    p: Pass, pod: Mapping[str, Any], pool: str
) -> dict[str, Any] | Stop | _NotWritten | None:
    """Claim this pod; ``None`` if another sandbox (or the pool) got to it first,
    :data:`NOT_WRITTEN` if the claim failed and did not land."""
    s, meta = p.services, pod["metadata"]
    try:
        claimed = await s.kube.patch(
            POD.api, meta.get("namespace"), meta["name"], claim_patch(pod, p, pool)
        )
    except (ConflictError, NotFoundError):
        return None
    except ApiError as exc:
        p.run.revisit(backoff=f"PodClaimFailed: {exc.reason}")
        settled = await _settle(p, meta, exc)
        return NOT_WRITTEN if settled is None else settled
    s.cache.put(POD.name, claimed)
    return claimed


async def _settle(
    p: Pass, meta: Mapping[str, Any], failure: ApiError
) -> dict[str, Any] | Stop | None:
    """After a claim that failed without an answer saying so (a timeout, a cut connection, a
    5xx): the API server may have applied it. The pod, read back, says: ours (the claim
    landed), or not (start cold); unreadable: stop the pass, never a second pod beside it."""
    s = p.services
    try:
        now = await s.kube.get(POD.api, meta.get("namespace"), meta["name"])
    except NotFoundError:
        return None
    except ApiError as exc:
        message = f"claiming pod {meta['name']} failed ({failure}) and it cannot be read ({exc})"
        p.run.set(ConditionState.unknown(POD_READY, UNSETTLED, message))
        return Stop(UNSETTLED)
    if not controlled_by(now, p.sandbox.metadata.uid):
        return None
    s.cache.put(POD.name, now, read=True)
    return now


def _cold(p: Pass, reason: str, why: str, pool: str = "") -> None:
    """Say that the sandbox starts cold, and why (``pool``: the existing pool involved, if
    any): once until it has a pod, not once per pass that retries the cold pod's creation,
    and again only if the reason changes. It is counted once, when the cold pod is created
    (:func:`count_cold_start`)."""
    said = p.memory.cold_start
    if said.get(p.run.key, ("", ""))[0] == reason:
        return
    said[p.run.key] = (reason, pool)
    p.event("ColdStart", f"no warm pod ({reason}): {why}; starting a new pod")


def count_landed(p: Pass, pod: Mapping[str, Any]) -> None:
    """Count the claim of ``pod``, the sandbox's claimed pod, if it is one a pass left
    unsettled (:data:`UNSETTLED`): that claim landed, though no answer said so. Once: what
    was remembered goes, whichever pod the sandbox runs on (a claim that did not land is
    no claim, and a later one that did was counted when it was written)."""
    uid = pod["metadata"].get("uid")
    for pool, claimed_uid, seconds in p.memory.unsettled_claims.pop(p.run.key, ()):
        if claimed_uid == uid:
            namespace = p.sandbox.metadata.namespace or ""
            p.services.metrics.pool_claimed(namespace, _counted_as(p, pool), seconds)
            return


def count_cold_start(p: Pass) -> None:
    """Count the cold start said for the sandbox, by its latest reason, now that its cold
    pod was created: a sandbox whose creation was retried, under a quota say, while the
    reason changed is one cold start, and one that claimed a warm pod meanwhile is none."""
    p.memory.unsettled_claims.pop(p.run.key, None)  # (a claim left unsettled did not count)
    said = p.memory.cold_start.pop(p.run.key, None)
    if said is not None:
        reason, pool = said
        namespace = p.sandbox.metadata.namespace or ""
        p.services.metrics.pool_cold_start(reason, namespace, _counted_as(p, pool))
