"""Ask the API server which of the operator's grants it holds (SelfSubjectAccessReviews).

Used by ``craft-operator doctor`` and by ``craft-operator run`` before it starts: a
sandbox namespace the operator serves without its Role there would otherwise show only as
watch streams that fail and a first listing that never completes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.kube.namespaces import NamespaceState, namespace_state
from craft_operator.permissions import AccessRequest, Permission, Scope, access_requests

logger = logging.getLogger(__name__)

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
#: Reviews in flight at once: hundreds of namespaces must not become thousands of requests
#: at the same moment.
CONCURRENCY = 16


def review(permission: Permission, namespace: Scope) -> dict[str, Any]:
    """The SelfSubjectAccessReview asking for ``permission`` in ``namespace`` (pure)."""
    attributes = {
        "group": permission.group,
        "resource": permission.plural,
        "verb": permission.verb,
    }
    if permission.subresource:
        attributes["subresource"] = permission.subresource
    if namespace is not None:
        attributes["namespace"] = namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }


async def denied_access(kube: KubeClient, requests: Sequence[AccessRequest]) -> list[AccessRequest]:
    """The requests the API server says the operator's identity may not make, in order.

    Raises :class:`~craft_operator.kube.client.ApiError` if it cannot be asked.
    """
    limit = asyncio.Semaphore(CONCURRENCY)

    async def allowed(permission: Permission, namespace: Scope) -> bool:
        async with limit:
            answer = await kube.request("POST", SSAR_PATH, body=review(permission, namespace))
        return bool((answer.get("status") or {}).get("allowed"))

    verdicts = await asyncio.gather(*(allowed(*request) for request in requests))
    return [request for request, ok in zip(requests, verdicts, strict=True) if not ok]


def describe_denied(denied: Sequence[AccessRequest], *, limit: int = 6) -> str:
    """``verb resource in namespace, ...`` of the first ``limit`` denied requests (pure)."""
    shown = ", ".join(
        permission.describe() + (f" in {namespace}" if namespace else "")
        for permission, namespace in denied[:limit]
    )
    return shown + (f" and {len(denied) - limit} more" if len(denied) > limit else "")


def _lacking(denied: Sequence[AccessRequest], served: Sequence[str]) -> list[str]:
    return sorted({namespace for _, namespace in denied if namespace is not None} & set(served))


def access_fix(
    denied: Sequence[AccessRequest],
    *,
    served: Sequence[str],
    operator_namespace: str,
) -> str:
    """How to grant the ``denied`` requests of an operator serving ``served`` (pure).

    manifests/base grants its Role in ``operator_namespace`` only, so a request denied in
    another namespace that is not served (the SKILL.md template's ConfigMap kept there) gets
    advice of its own.
    """
    lacking = _lacking(denied, served)
    elsewhere = sorted(
        {
            namespace
            for _, namespace in denied
            if namespace is not None and namespace not in served and namespace != operator_namespace
        }
    )
    other = [
        permission
        for permission, namespace in denied
        if namespace not in served and namespace not in elsewhere
    ]
    fixes = []
    if lacking:
        fixes.append(
            f"apply manifests/sandbox-namespace in {', '.join(lacking)} (kubectl apply -n "
            "<namespace> -k manifests/sandbox-namespace), or take them out of CRAFT_NAMESPACES"
        )
    if not served and any(permission.namespaced for permission in other):
        fixes.append(
            "serving all namespaces needs the cluster-wide grants of "
            "manifests/overlays/all-namespaces; or name the sandbox namespaces in "
            "CRAFT_NAMESPACES"
        )
    elif other:
        fixes.append("apply the operator's RBAC (kubectl apply -k manifests/base)")
    if elsewhere:
        fixes.append(
            f"manifests/base grants nothing in {', '.join(elsewhere)}: move the SKILL.md "
            f"template's ConfigMap (CRAFT_SKILL_TEMPLATE_CONFIGMAP) to {operator_namespace} or "
            "a served namespace, or bind a Role allowing get configmaps there to the "
            f"operator's ServiceAccount ({operator_namespace}/craft-operator)"
        )
    return "; ".join(fixes)


def missing_access_message(
    denied: Sequence[AccessRequest],
    *,
    served: Sequence[str],
    operator_namespace: str,
) -> str:
    """One line: where the operator lacks access, what is denied, how to fix it (pure)."""
    lacking = _lacking(denied, served)
    where = (
        f"the operator's Role is missing or incomplete in namespace(s) {', '.join(lacking)}"
        if lacking
        else "the operator lacks API access it needs"
    )
    fix = access_fix(denied, served=served, operator_namespace=operator_namespace)
    return f"{where}: denied {describe_denied(denied)}; {fix}"


@dataclass(frozen=True)
class AccessVerdict:
    """What the start-up check found."""

    #: Why the operator cannot serve its namespaces (one line), or ``None`` if it can.
    problem: str | None = None
    #: Served namespaces being deleted whose Role is gone already (the namespace controller
    #: deletes it with everything else): not a reason to stop.
    terminating: tuple[str, ...] = ()
    #: Served namespaces that do not exist (deleted, or not made yet): not one either.
    missing: tuple[str, ...] = ()


async def check_operator_access(
    info: kopf.ConnectionInfo,
    namespaces: Sequence[str],
    *,
    peering: bool,
    template_namespace: str | None = None,
    operator_namespace: str,
    timeout: float = 10.0,  # noqa: ASYNC109 -- the API client's per-request timeout
) -> AccessVerdict:
    """Whether the operator can serve ``namespaces`` (see :class:`AccessVerdict`).

    An API server that cannot be asked (no SelfSubjectAccessReview) is logged, not fatal:
    the check is there to explain a missing Role, not to be another way to fail. A served
    namespace being deleted, or that does not exist, without the Role is not fatal either
    (one namespace torn down must not keep the operator from every other): it is still
    watched, its watches failing until it is made again with the Role (the caller warns).
    """
    kube = KubeClient(request_timeout=timeout)
    kube.configure(info)
    requests = access_requests(namespaces, peering=peering, template_namespace=template_namespace)
    try:
        try:
            denied = await denied_access(kube, requests)
        except ApiError as exc:
            logger.warning("cannot check the operator's API access: %s", exc)
            return AccessVerdict()
        denied, terminating, missing = await excuse_absent(kube, denied, namespaces)
    finally:
        await kube.close()
    excused = {*terminating, *missing}
    served = [namespace for namespace in namespaces if namespace not in excused]
    problem = (
        missing_access_message(denied, served=served, operator_namespace=operator_namespace)
        if denied
        else None
    )
    return AccessVerdict(problem, terminating, missing)


async def excuse_absent(
    kube: KubeClient, denied: Sequence[AccessRequest], namespaces: Sequence[str]
) -> tuple[list[AccessRequest], tuple[str, ...], tuple[str, ...]]:
    """The ``denied`` requests but those in served namespaces being deleted or that do not
    exist (their Role is gone with them, or not made yet: no reason to stop), and those
    namespaces (terminating, missing). If the namespaces cannot be read, none is excused."""
    try:
        terminating, missing = await _not_there(kube, _lacking(denied, namespaces))
    except ApiError as exc:  # the denials stand: none is excused
        logger.warning("cannot read the served namespaces: %s", exc)
        return list(denied), (), ()
    excused = {*terminating, *missing}
    return [request for request in denied if request[1] not in excused], terminating, missing


async def _not_there(
    kube: KubeClient, names: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Those of ``names`` that are namespaces being deleted, and those that do not exist."""
    states = {name: await namespace_state(kube, name) for name in names}
    terminating = [name for name, state in states.items() if state == NamespaceState.TERMINATING]
    missing = [name for name, state in states.items() if state == NamespaceState.GONE]
    return tuple(terminating), tuple(missing)
