"""``doctor``'s Kubernetes checks: the API server answers, serves the CraftSandbox API, and
grants the operator every permission it needs (asked with SelfSubjectAccessReviews)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import kopf

from craft_operator.access import access_fix, denied_access, describe_denied
from craft_operator.api import models
from craft_operator.api.pool import POOL_PLURAL
from craft_operator.config import Settings
from craft_operator.doctor.results import CheckResult, fail, ok
from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.kube.connection import (
    ClusterUnreachableError,
    check_reachable,
    discover_connection,
)
from craft_operator.permissions import access_requests

KUBE_TIMEOUT_S = 10.0


async def check_kubernetes(
    settings: Settings,
    *,
    connect: Callable[[], kopf.ConnectionInfo] = discover_connection,
) -> list[CheckResult]:
    """Reach the API server, find the CraftSandbox API, and check every permission the
    operator's ClusterRole grants with SelfSubjectAccessReviews (as the identity in use)."""
    try:
        info = await asyncio.to_thread(connect)
        version = await check_reachable(info, limit=KUBE_TIMEOUT_S)
    except ClusterUnreachableError as exc:
        return [
            fail(
                "Kubernetes API",
                str(exc),
                "run doctor in the operator's pod, or point KUBECONFIG (the current context) "
                "at the cluster",
            )
        ]
    server = f"{info.server} (Kubernetes {version.get('gitVersion', 'version unknown')})"
    results = [ok("Kubernetes API", server)]
    kube = KubeClient(request_timeout=KUBE_TIMEOUT_S)
    kube.configure(info)
    try:
        results.append(await _check_crd(kube))
        results.append(await _check_permissions(kube, settings))
    finally:
        await kube.close()
    return results


async def _check_crd(kube: KubeClient) -> CheckResult:
    name = "CraftSandbox API"
    fix = "install the CRD: kubectl apply -f crds/ (kubectl apply -k manifests/base does too)"
    try:
        answer = await kube.request("GET", f"/apis/{models.API_VERSION}")
    except ApiError as exc:
        if exc.status == 404:
            return fail(name, f"the API server does not serve {models.API_VERSION}", fix)
        return fail(name, f"cannot read API discovery: {exc}", "check the API server")
    served = {item.get("name") for item in answer.get("resources") or []}
    wanted = {models.PLURAL, POOL_PLURAL}
    missing = (wanted | {f"{plural}/status" for plural in wanted}) - served
    if missing:
        what = f"{models.API_VERSION} lacks {', '.join(sorted(missing))}: an old CRD"
        return fail(name, what, fix)
    served_names = ", ".join(f"{plural}.{models.GROUP}" for plural in sorted(wanted))
    return ok(name, f"{served_names} are served at {models.API_VERSION}")


async def _check_permissions(kube: KubeClient, settings: Settings) -> CheckResult:
    name = "API permissions"
    namespaces = settings.namespaces
    template = settings.skill_template_configmap_ref
    requests = access_requests(
        namespaces, template_namespace=template[0] if template is not None else None
    )
    try:
        denied = await denied_access(kube, requests)
    except ApiError as exc:
        return fail(
            name,
            f"cannot ask the API server what is allowed (SelfSubjectAccessReview): {exc}",
            "allow creating selfsubjectaccessreviews (system:basic-user grants it by default)",
        )
    if denied:
        missing = describe_denied(denied, limit=len(denied))
        return fail(
            name, f"{len(denied)} missing: {missing}", access_fix(denied, served=namespaces)
        )
    scope = f"in {', '.join(namespaces)}" if namespaces else "cluster-wide"
    return ok(name, f"all {len(requests)} grants the operator needs are allowed ({scope})")
