"""The operator's watch streams: every kind it caches, listed then watched by its own
streams (:mod:`craft_operator.kube.watch`), none by kopf.

Two reasons. kopf's streams, after a 410 Gone (routine after an API server restart), list
afresh but say nothing of what vanished in the gap: a pool, NetworkPolicy, policy or
sandbox deleted then stayed in the cache (a deleted NetworkPolicy went on counting as
restricting egress, a deleted pool kept being refilled). These streams hand over such
deletions, as client-go's reflector does. And kopf's per-event work (a worker, causes and
a logger per object, about a millisecond) was a fifth of the operator's CPU; here an
event is one function call.

They start with the workers (:mod:`craft_operator.handlers.lifecycle`); kopf still runs
the operator's start-up, clean-up, peering and probes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from craft_operator.context import OperatorContext
from craft_operator.handlers.children import on_child_event
from craft_operator.handlers.networkpolicies import on_network_policy_event
from craft_operator.handlers.policy import on_namespace_event, on_policy_event
from craft_operator.handlers.pools import on_pool_event, queue_pools
from craft_operator.handlers.sandbox import on_sandbox_event
from craft_operator.kube import kinds
from craft_operator.kube.watch import WatchStream
from craft_operator.reconciler import egress
from craft_operator.reconciler.api_away import ApiServerAwayError

logger = logging.getLogger(__name__)

Handler = Callable[[OperatorContext, str, dict[str, Any]], None]

#: The handler of each cached kind that is not a child (children: :func:`on_child_event`).
HANDLERS: dict[str, Handler] = {
    kinds.NETWORK_POLICY.name: on_network_policy_event,
    kinds.SANDBOX.name: on_sandbox_event,
    kinds.POOL.name: on_pool_event,
    kinds.POLICY.name: on_policy_event,
    kinds.NAMESPACE.name: on_namespace_event,
}


def handler_for(
    memo: OperatorContext, kind: kinds.CachedKind
) -> Callable[[str, dict[str, Any]], None]:
    """The function a stream of ``kind`` hands its events to."""
    if kind.child:
        return partial(on_child_event, memo, kind.name)
    return partial(HANDLERS[kind.name], memo)


def on_stream_failing(
    memo: OperatorContext, kind: str, namespace: str | None, failing: bool
) -> None:
    """Mark the cache's view of ``kind`` in ``namespace`` stale while its stream fails (no
    sandbox pod starts on a stale view of the NetworkPolicies: one deleted meanwhile would
    still count); when the NetworkPolicies' view is whole again, wake what waited on it.

    When the sandboxes' or pools' stream is answered again, the API server is back (it
    restarted, say): those with a pass it cut short since their last success go again at
    once, their backoff forgotten (a relist queues only what changed, and after a long
    outage they would wait up to five minutes)."""
    memo.cache.mark_stale(kind, namespace, failing)
    if failing or not memo.gate.active:
        return
    if kind in (kinds.SANDBOX.name, kinds.POOL.name):
        queue = memo.queue if kind == kinds.SANDBOX.name else memo.pool_queue
        back = queue.retry_now(ApiServerAwayError, lambda key: namespace in (None, key[0]))
        if back:
            logger.info(
                "the API server serves again: %d %s passes it cut short go again", back, kind
            )
    if kind != kinds.NETWORK_POLICY.name:
        return
    # Cluster-wide: every namespace with a sandbox or a pool (a pool may wait alone).
    scopes = {namespace} if namespace is not None else _namespaces(memo, kinds.SANDBOX, kinds.POOL)
    for scope in sorted(scopes):
        for key in egress.waiting_on(memo.cache, scope, kinds.SANDBOX.name, kinds.POD.name):
            memo.queue.add(key)
        queue_pools(memo, scope)


def _namespaces(memo: OperatorContext, *of: kinds.CachedKind) -> set[str]:
    """The namespaces in which the cache holds an object of any kind ``of``."""
    return {scope for kind in of for scope in memo.cache.namespaces(kind.name)}


def watch_streams(memo: OperatorContext) -> list[WatchStream]:
    """One stream per cached kind and watched namespace (one per kind if cluster-wide, and
    for cluster-scoped kinds); children filtered on the API server to the operator's own."""
    scopes: tuple[str | None, ...] = memo.gate.namespaces or (None,)
    return [
        WatchStream(
            memo.kube,
            kind.api,
            namespace,
            handler_for(memo, kind),
            known=partial(memo.cache.keys, kind.name, namespace),
            label_selector=kind.selector,
            on_failing=partial(on_stream_failing, memo, kind.name, namespace),
            list_begins=partial(memo.cache.list_begins, kind.name, namespace),
            list_ends=partial(memo.cache.list_ends, kind.name, namespace),
            list_event=partial(memo.cache.list_event, kind.name, namespace),
        )
        for kind in kinds.KINDS
        for namespace in (scopes if kind.api.namespaced else (None,))
    ]
