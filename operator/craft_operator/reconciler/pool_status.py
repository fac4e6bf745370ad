"""A pool's status: counted from its pods, with typed conditions, written only if changed."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from craft_operator.api.pool import (
    EGRESS_RESTRICTED,
    LABEL_POOL,
    POOL_READY,
    CraftSandboxPoolStatus,
)
from craft_operator.api.status import Condition
from craft_operator.kube import kinds
from craft_operator.kube.client import NotFoundError
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.dropped_status import known_dropped, say_dropped, without
from craft_operator.reconciler.pool_plan import PoolView
from craft_operator.status import ConditionState, find_condition, merge_patch, set_condition

POOL = kinds.POOL
CONDITIONS = (POOL_READY, EGRESS_RESTRICTED)


def stored_conditions(body: Mapping[str, Any]) -> list[Condition]:
    """The conditions the stored status holds (unreadable ones dropped)."""
    found = []
    for item in (body.get("status") or {}).get("conditions") or []:
        try:
            found.append(Condition.model_validate(item))
        except ValidationError:
            continue
    return found


def stored_reason(body: Mapping[str, Any], type_: str) -> str | None:
    """The reason of a stored condition (to say a change once, in an event)."""
    condition = find_condition(stored_conditions(body), type_)
    return condition.reason if condition is not None else None


def with_conditions(
    body: Mapping[str, Any], states: list[ConditionState], now: datetime
) -> list[Condition]:
    """The stored conditions with ``states`` applied (transition times kept when unchanged)."""
    generation = body.get("metadata", {}).get("generation")
    conditions = stored_conditions(body)
    for state in states:
        conditions = set_condition(
            conditions, state, generation=generation, now=now, order=CONDITIONS
        )
    return conditions


def count_status(
    body: Mapping[str, Any],
    pods: PoolView,
    *,
    claimed: int,
    template_hash: str | None,
    conditions: list[Condition],
) -> CraftSandboxPoolStatus:
    """The status a pass computed from the pool's pods."""
    name = body.get("metadata", {}).get("name", "")
    return CraftSandboxPoolStatus(
        replicas=pods.alive,
        ready=pods.ready,
        creating=pods.creating,
        claimed=claimed,
        observed_generation=body.get("metadata", {}).get("generation"),
        template_hash=template_hash,
        selector=f"{LABEL_POOL}={name}",
        conditions=conditions,
    )


#: Fields a claim and its refill move, and the Ready reasons they move between.
ROUTINE_FIELDS = frozenset({"replicas", "ready", "creating", "claimed", "conditions"})
ROUTINE_READY = frozenset({"PoolReady", "Filling"})


def status_patch(
    body: Mapping[str, Any], status: CraftSandboxPoolStatus, dropped: Collection[str] = ()
) -> dict[str, Any]:
    """The merge patch from the stored status to ``status`` (empty: nothing to write),
    without the ``dropped`` fields (those the installed CRD lacks: see ``known_dropped``)."""
    new = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    return without(merge_patch(body.get("status") or {}, new), dropped)


def is_routine(
    body: Mapping[str, Any], status: CraftSandboxPoolStatus, dropped: Collection[str] = ()
) -> bool:
    """Whether the change from the stored status is only what claims and refills move: the
    pod counts, and Ready between PoolReady and Filling (nothing failing, nothing new).
    The ``dropped`` fields, which no write keeps, are no change."""
    patch = status_patch(body, status, dropped)
    if not patch.keys() <= ROUTINE_FIELDS:
        return False
    old = {c.type: c for c in stored_conditions(body)}
    new = {c.type: c for c in status.conditions}
    for type_ in old.keys() | new.keys():
        before, after = old.get(type_), new.get(type_)
        if before == after:
            continue
        if before is None or after is None or type_ != POOL_READY:
            return False
        if before.reason not in ROUTINE_READY or after.reason not in ROUTINE_READY:
            return False
    return True


async def write_pool_status(
    s: Services, body: Mapping[str, Any], status: CraftSandboxPoolStatus
) -> bool:
    """Patch the status subresource with what changed; nothing when nothing did, or only
    fields the installed CRD drops (said once: see ``dropped_status``).

    Returns whether the pool's spec changed while the pass ran: the write's answer is newer
    than the watch event of that change, which the cache then drops as old news, so the
    caller must come back by itself.
    """
    if not status_patch(body, status, known_dropped(s, POOL)):
        return False  # nothing, or only what the installed CRD drops: no write per pass
    # The whole patch, fields known dropped too: the CRDs may have been applied since.
    patch = status_patch(body, status)
    meta = body["metadata"]
    try:
        updated = await s.kube.patch(
            POOL.api, meta.get("namespace"), meta["name"], {"status": patch}, subresource="status"
        )
    except NotFoundError:
        return False
    s.cache.put(POOL.name, updated)
    say_dropped(s, POOL, body, patch, updated.get("status") or {})
    return bool(
        updated.get("spec") != body.get("spec")
        or updated.get("metadata", {}).get("deletionTimestamp") != meta.get("deletionTimestamp")
    )
