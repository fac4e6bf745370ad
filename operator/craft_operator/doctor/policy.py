"""``doctor``'s policy check: would the CraftSandboxPolicy, judged with *these* settings,
withdraw a sandbox or a pool that runs now?

The operator's own defaults (``CRAFT_SANDBOX_IMAGE``, ``CRAFT_SERVER_URL``,
``CRAFT_S3_BUCKET``) are allowed without being listed, so a rollout that changes one is a
tightening for every sandbox that names the old value: the operator withdraws it (revokes
its PAT, deletes its pod) at its first pass. Run in the new image before the rollout, this
check names them while there is time to list the old value in the policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from craft_operator.api.base import STORED
from craft_operator.api.constants import API_VERSION, PLURAL
from craft_operator.api.parse import InvalidSandboxError, parse_sandbox
from craft_operator.api.pool import POOL_PLURAL, InvalidPoolError, parse_pool
from craft_operator.config import Settings
from craft_operator.doctor.results import CheckResult, fail, ok, warn
from craft_operator.kube.client import ApiError, KubeClient, NotFoundError
from craft_operator.policy.models import POLICY_NAME, POLICY_PLURAL, CraftSandboxPolicy
from craft_operator.policy.models import CraftSandboxPolicySpec as PolicySpec
from craft_operator.policy.rules import Violation, describe, evaluate
from craft_operator.reconciler.pool_policy import pool_violations

NAME = "policy"
#: Sandboxes and pools named one by one; the rest are counted.
NAMED = 5
#: The reason of a sandbox or pool the operator already refuses (nothing left to withdraw).
DENIED = "PolicyDenied"


async def check_policy(kube: KubeClient, settings: Settings) -> CheckResult:
    """Judge every CraftSandbox and CraftSandboxPool the operator serves by the policy and
    these settings, as the operator will; fail naming those it would withdraw."""
    # Listed, not read by name: the operator may list and watch policies, not get them.
    listed = await kube.request(
        "GET",
        f"/apis/{API_VERSION}/{POLICY_PLURAL}",
        params={"fieldSelector": f"metadata.name={POLICY_NAME}"},
    )
    body = next(iter(listed.get("items") or []), None)
    if body is None:
        return ok(
            NAME,
            f"no CraftSandboxPolicy {POLICY_NAME}: new sandboxes may name only the operator's "
            "defaults; running ones keep running",
        )
    try:
        policy = CraftSandboxPolicy.model_validate(body, context=STORED).spec
    except ValidationError:
        return warn(
            NAME,
            f"CraftSandboxPolicy {POLICY_NAME} is unreadable: the operator allows only its "
            "defaults to new sandboxes (running ones keep running)",
            "fix it: kubectl explain craftsandboxpolicy.spec",
        )
    sandboxes = await _listed(kube, settings, PLURAL)
    pools = await _listed(kube, settings, POOL_PLURAL)
    labels = await _namespace_labels(kube)
    refused = [
        *_refused_sandboxes(sandboxes, policy, labels, settings),
        *_refused_pools(pools, policy, settings),
    ]
    if not refused:
        return ok(
            NAME,
            f"CraftSandboxPolicy {POLICY_NAME} allows the {len(sandboxes)} sandboxes and "
            f"{len(pools)} pools under these settings",
        )
    named = "; ".join(refused[:NAMED])
    more = f"; and {len(refused) - NAMED} more" if len(refused) > NAMED else ""
    return fail(
        NAME,
        f"under these settings CraftSandboxPolicy {POLICY_NAME} does not allow "
        f"{len(refused)} that run now (the operator withdraws a sandbox: its PAT revoked, its "
        f"pod deleted; and deletes a pool's unclaimed pods): {named}{more}",
        "list what they name in the policy before the rollout (a changed CRAFT_SANDBOX_IMAGE, "
        "CRAFT_SERVER_URL or CRAFT_S3_BUCKET: the previous value, in spec.images, "
        "spec.serverURLs or spec.buckets), or change their specs",
    )


async def _listed(kube: KubeClient, settings: Settings, plural: str) -> list[dict[str, Any]]:
    """Every object of ``plural`` in the namespaces the operator serves."""
    paths = (
        [
            f"/apis/{API_VERSION}/namespaces/{namespace}/{plural}"
            for namespace in settings.namespaces
        ]
        if settings.namespaces
        else [f"/apis/{API_VERSION}/{plural}"]
    )
    found: list[dict[str, Any]] = []
    for path in paths:
        try:
            answer = await kube.request("GET", path)
        except NotFoundError:
            continue  # a served namespace not made yet
        found.extend(answer.get("items") or [])
    return found


async def _namespace_labels(kube: KubeClient) -> dict[str, Mapping[str, str]]:
    """Each namespace's labels (the tenant label binds a namespace to a tenant)."""
    try:
        answer = await kube.request("GET", "/api/v1/namespaces")
    except ApiError:
        return {}  # the permissions check says why; the tenant rule is then not judged
    return {
        str(item["metadata"]["name"]): item["metadata"].get("labels") or {}
        for item in answer.get("items") or []
    }


def _denied_already(body: Mapping[str, Any]) -> bool:
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(condition.get("reason") == DENIED for condition in conditions)


def _where(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _refused_sandboxes(
    bodies: list[dict[str, Any]],
    policy: PolicySpec,
    labels: Mapping[str, Mapping[str, str]],
    settings: Settings,
) -> list[str]:
    def judged(body: Mapping[str, Any]) -> list[Violation]:
        sandbox = parse_sandbox(body)
        namespace = dict(labels.get(sandbox.metadata.namespace or "", {}))
        return evaluate(sandbox, policy, namespace_labels=namespace, settings=settings)

    return _refused("CraftSandbox", bodies, judged, InvalidSandboxError)


def _refused_pools(
    bodies: list[dict[str, Any]], policy: PolicySpec, settings: Settings
) -> list[str]:
    return _refused(
        "CraftSandboxPool",
        bodies,
        lambda body: pool_violations(parse_pool(body), policy, settings),
        InvalidPoolError,
    )


def _refused(
    kind: str,
    bodies: list[dict[str, Any]],
    judged: Callable[[Mapping[str, Any]], list[Violation]],
    invalid: type[Exception],
) -> list[str]:
    """``kind namespace/name: why`` of each object ``judged`` finds violations in; those
    already refused, or invalid (the operator says so on the object), are left out."""
    refused = []
    for body in bodies:
        if _denied_already(body):
            continue
        try:
            found = judged(body)
        except invalid:
            continue
        if found:
            refused.append(f"{kind} {_where(body)}: {describe(found)}")
    return refused
