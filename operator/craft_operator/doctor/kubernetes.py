"""``doctor``'s Kubernetes checks: the API server answers, serves every CRD the operator
lists (kopf's peering one too for a peered operator), grants the operator every permission
it needs (asked with SelfSubjectAccessReviews), and holds the peering object of a peered
operator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import kopf

from craft_operator.access import access_fix, denied_access, describe_denied, excuse_absent
from craft_operator.api import models
from craft_operator.api.crd import APPLY_CRDS
from craft_operator.api.pool import POOL_PLURAL
from craft_operator.config import Settings
from craft_operator.daemon_threads import DaemonThreadPool
from craft_operator.doctor.crd_schema import describe_stale, stale_crds
from craft_operator.doctor.policy import check_policy
from craft_operator.doctor.results import CheckResult, fail, ok, warn
from craft_operator.kube.client import ApiError, KubeClient, NotFoundError
from craft_operator.kube.connection import (
    ClusterUnreachableError,
    check_reachable,
    discover_connection,
)
from craft_operator.peering.monitor import CLUSTER_PEERINGS, PEERING_GROUP
from craft_operator.peering.options import PeeringError, PeeringOptions, resolve_peering
from craft_operator.peering.rule import records
from craft_operator.permissions import access_requests
from craft_operator.policy.models import POLICY_PLURAL

KUBE_TIMEOUT_S = 10.0
PEERING = "peering"
#: How doctor is told the operator's peering, as ``craft-operator run`` is.
PEERING_HOW = (
    "pass the operator's own: --peering NAME (manifests/base: craft-operator) or --standalone"
)

_T = TypeVar("_T")


async def in_daemon_thread(function: Callable[[], _T], limit: float) -> _T:
    """``function()`` in a daemon thread (:class:`DaemonThreadPool`), for at most ``limit``
    seconds (else :class:`TimeoutError`): one that hangs (a kubeconfig's exec plugin that
    never answers) holds neither the event loop's close nor the exit."""
    pool = DaemonThreadPool(1, name="doctor-kubernetes-login")
    try:
        return await asyncio.wait_for(
            asyncio.get_running_loop().run_in_executor(pool, function), limit
        )
    finally:
        pool.shutdown(wait=False)


async def check_kubernetes(
    settings: Settings,
    *,
    connect: Callable[[], kopf.ConnectionInfo] = discover_connection,
    peering: str | None = None,
    standalone: bool = False,
) -> list[CheckResult]:
    """Reach the API server, find every CRD the operator lists, check every permission the
    operator's ClusterRole grants with SelfSubjectAccessReviews (as the identity in use),
    and that the peering object exists.

    The peering is the operator's: ``peering`` (``--peering``), else CRAFT_PEERING_NAME,
    or ``standalone``; told neither, doctor checks no peering and says so.
    """
    try:
        info = await in_daemon_thread(connect, KUBE_TIMEOUT_S)
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
    except TimeoutError:
        return [
            fail(
                "Kubernetes API",
                f"reading the Kubernetes credentials took longer than {KUBE_TIMEOUT_S:g}s "
                "(a kubeconfig exec plugin that does not answer?)",
                "check the kubeconfig's user with kubectl, or run doctor in the operator's pod",
            )
        ]
    server = f"{info.server} (Kubernetes {version.get('gitVersion', 'version unknown')})"
    results = [ok("Kubernetes API", server)]
    options, problem = _peering_options(settings, peering, standalone)
    peered = options is not None and not options.standalone
    kube = KubeClient(request_timeout=KUBE_TIMEOUT_S)
    kube.configure(info)
    try:
        results.append(await _check_crd(kube, peering=peered))
        results.append(await _check_permissions(kube, settings, peering=peered))
        results.append(problem or await _check_peering(kube, options))
        try:
            results.append(await check_policy(kube, settings))
        except ApiError as exc:
            results.append(
                warn(
                    "policy",
                    f"cannot judge the sandboxes by the CraftSandboxPolicy: {exc.reason}",
                    "see the API permissions line",
                )
            )
    finally:
        await kube.close()
    return results


async def _served(kube: KubeClient, api_version: str) -> set[str]:
    """The resources (and subresources) the API server serves at ``api_version``; none if
    it does not serve the group version at all."""
    try:
        answer = await kube.request("GET", f"/apis/{api_version}")
    except NotFoundError:
        return set()
    return {str(item.get("name")) for item in answer.get("resources") or []}


async def _check_crd(kube: KubeClient, *, peering: bool = False) -> CheckResult:
    """Every CRD the operator lists or watches is served (without one, its first listing
    fails and the operator never becomes active; kopf's peering one too when it peers), and
    declares every field the operator's does (see :mod:`~craft_operator.doctor.crd_schema`)."""
    name = "CraftSandbox API"
    wanted = {
        models.API_VERSION: {
            models.PLURAL,
            f"{models.PLURAL}/status",
            POOL_PLURAL,
            f"{POOL_PLURAL}/status",
            POLICY_PLURAL,
        }
    }
    if peering:
        wanted[CLUSTER_PEERINGS.api_version] = {CLUSTER_PEERINGS.plural}
    missing: list[str] = []
    try:
        for api_version, resources in wanted.items():
            served = await _served(kube, api_version)
            if not served:
                missing.append(f"the API server does not serve {api_version}")
                continue
            lacking = ", ".join(sorted(resources - served))
            if lacking:
                missing.append(f"{api_version} lacks {lacking}")
    except ApiError as exc:
        return fail(name, f"cannot read API discovery: {exc}", "check the API server")
    if missing:
        return fail(
            name,
            f"{'; '.join(missing)}: the operator lists each of these when it starts and, "
            "missing one, never becomes active",
            f"install the CRDs: {APPLY_CRDS}",
        )
    stale, unread = await stale_crds(kube)
    if stale:
        return fail(
            name,
            f"{describe_stale(stale)}: older than this operator, so the API server drops "
            "those fields from what is written (specs, and the operator's status)",
            f"bring the CRDs up to date: {APPLY_CRDS}",
        )
    craft = ", ".join(
        f"{plural}.{models.GROUP}"
        for plural in sorted(wanted[models.API_VERSION])
        if "/" not in plural
    )
    detail = f"{craft} are served at {models.API_VERSION}"
    if unread:
        detail += (
            f" (their schemas not compared with the operator's: reading the API server's "
            f"OpenAPI v3 gave {unread})"
        )
    if peering:
        detail += f", {CLUSTER_PEERINGS.plural}.{PEERING_GROUP} at {CLUSTER_PEERINGS.api_version}"
    return ok(name, detail)


async def _check_permissions(kube: KubeClient, settings: Settings, *, peering: bool) -> CheckResult:
    """Every grant the operator needs; the peering object's only when it peers."""
    name = "API permissions"
    namespaces = settings.namespaces
    template = settings.skill_template_configmap_ref
    requests = access_requests(
        namespaces,
        peering=peering,
        template_namespace=template[0] if template is not None else None,
    )
    try:
        denied = await denied_access(kube, requests)
    except ApiError as exc:
        return fail(
            name,
            f"cannot ask the API server what is allowed (SelfSubjectAccessReview): {exc}",
            "allow creating selfsubjectaccessreviews (system:basic-user grants it by default)",
        )
    denied, terminating, absent = await excuse_absent(kube, denied, namespaces)
    excused = {*terminating, *absent}
    served = [namespace for namespace in namespaces if namespace not in excused]
    if denied:
        missing = describe_denied(denied, limit=len(denied))
        fix = access_fix(denied, served=served, operator_namespace=settings.operator_namespace)
        return fail(name, f"{len(denied)} missing: {missing}", fix)
    scope = f"in {', '.join(served)}" if namespaces else "cluster-wide"
    if not peering:
        scope += ", without the peering object's"
    granted = f"the grants the operator needs are allowed ({scope})"
    if excused:
        # As run does: such a namespace is watched all the same, served once it is made
        # (again) with the operator's Role.
        gone = [f"{n} (does not exist)" for n in absent] + [
            f"{n} (being deleted)" for n in terminating
        ]
        return warn(
            name,
            f"{granted}; served namespace(s) {', '.join(gone)} have no Role",
            "make the namespace with manifests/sandbox-namespace applied in it, or take it "
            "out of CRAFT_NAMESPACES",
        )
    return ok(name, f"all {len(requests)} grants the operator needs are allowed ({scope})")


def _peering_options(
    settings: Settings, name: str | None, standalone: bool
) -> tuple[PeeringOptions | None, CheckResult | None]:
    """The operator's peering as ``run`` resolves it (``None``: doctor was not told), or
    the failed line when the options contradict each other."""
    name = name if name is not None else settings.peering_name
    if not name and not standalone:
        return None, None
    try:
        return resolve_peering(name=name, priority=0, standalone=standalone), None
    except PeeringError as exc:
        return None, fail(PEERING, str(exc), PEERING_HOW)


async def _check_peering(kube: KubeClient, options: PeeringOptions | None) -> CheckResult:
    """A peered operator's ClusterKopfPeering exists (without it every replica idles)."""
    if options is None:
        return warn(
            PEERING, "not checked: doctor was not told whether the operator peers", PEERING_HOW
        )
    if options.name is None:
        return ok(PEERING, "none (standalone: one replica, no peering object)")
    name = options.name
    try:
        body = await kube.get(CLUSTER_PEERINGS, None, name)
    except NotFoundError:
        return await _missing_peering(kube, name)
    except ApiError as exc:
        return fail(
            PEERING,
            f"cannot read ClusterKopfPeering {name}: {exc}",
            "apply the operator's RBAC (kubectl apply -k manifests/base)",
        )
    now = datetime.now(UTC)
    live = [peer for peer in records(body.get("status"), now) if peer.alive(now)]
    who = ", ".join(f"{peer.identity} (priority {peer.priority})" for peer in live)
    return ok(PEERING, f"ClusterKopfPeering {name} exists; live replicas: {who or 'none yet'}")


async def _missing_peering(kube: KubeClient, name: str) -> CheckResult:
    """The peering object is not there: the object, or kopf's CRD itself."""
    try:
        served = await _served(kube, CLUSTER_PEERINGS.api_version)
    except ApiError:
        served = {CLUSTER_PEERINGS.plural}  # discovery unreadable: say what is known
    if CLUSTER_PEERINGS.plural not in served:
        return fail(
            PEERING,
            f"the API server does not serve {CLUSTER_PEERINGS.plural}.{PEERING_GROUP}: "
            "no replica can peer, each waits as a standby",
            f"install kopf's peering CRD: {APPLY_CRDS}",
        )
    return fail(
        PEERING,
        f"ClusterKopfPeering {name} does not exist: every replica waits as a standby and "
        "does nothing",
        "create it: kubectl apply -k manifests/base (manifests/base/peering.yaml), or run "
        "a single replica with --standalone",
    )
