"""The operator's side of the policy: the first step of every reconcile pass.

A cluster without the ValidatingAdmissionPolicy must be as safe as one with it, and a
policy tightened after a sandbox was admitted must take effect on that sandbox. So every
pass checks the sandbox against the CraftSandboxPolicy and its namespace's tenant label
(both from the watch cache), and a sandbox that is not allowed:

- gets no PAT: the credentials store is not asked for one, and no child is created;
- if it had been running, loses it all: its PAT is revoked and every child it owns (pod,
  credentials Secret, skills ConfigMap, library volume, sync Jobs) is deleted, with a uid
  precondition, so the token the platform no longer allows is neither usable nor mounted;
  but its workspace (``spec.workspace``) is kept: it holds the user's files and no token,
  no pod mounts it any more, and fixing the spec or the policy brings it back as it was
  (it is deleted with the CraftSandbox, like every child);
- is ``Failed``: CredentialsReady and PodReady say ``PolicyDenied`` with every violation,
  and a ``PolicyDenied`` event says it once per distinct verdict.

Fixing the spec, the policy or the namespace label brings it back (a fresh PAT is minted).

Withdrawal follows an explicit tightening only: while the policy object is missing or
unreadable (a GitOps prune, a bad edit), a sandbox that was admitted before (it holds a PAT
or children, on an unchanged spec) keeps running with a ``PolicyEnforced`` ``False``
condition and a Warning event, and ``craft_sandboxes_without_policy`` counts it; new or
changed sandboxes that need the policy are refused. A namespace the cache has not seen yet
is not judged allowed by default: the pass waits (condition ``WaitingForNamespace``) and is
retried with the work queue's capped backoff.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from craft_operator.api.base import STORED
from craft_operator.api.models import CraftSandbox, CraftSandboxStatus, Phase
from craft_operator.api.parse import describe_validation_error
from craft_operator.config import Settings
from craft_operator.credentials.errors import CredentialsError
from craft_operator.credentials.model import Revocation
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import (
    SECRETS,
    ApiError,
    Kind,
    KubeClient,
)
from craft_operator.metrics import Metrics
from craft_operator.policy.models import (
    POLICY_ENFORCED,
    POLICY_NAME,
    CraftSandboxPolicy,
    CraftSandboxPolicySpec,
)
from craft_operator.policy.rules import Violation, describe, evaluate
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.ports import CredentialsPort, EventSink
from craft_operator.reconciler.run import Run
from craft_operator.status import (
    CREDENTIALS_READY,
    POD_READY,
    ConditionState,
)

logger = logging.getLogger(__name__)

#: Cache kinds of the objects the policy reads (cluster-scoped: namespace ``None``).
POLICY, NAMESPACE = kinds.POLICY.name, kinds.NAMESPACE.name
REASON = "PolicyDenied"
#: Why there is no policy to read (:attr:`PolicyRead.absent`).
MISSING, UNREADABLE = "missing", "unreadable"
POLICY_MISSING, POLICY_UNREADABLE = "PolicyMissing", "PolicyUnreadable"
WAITING_FOR_NAMESPACE = "WaitingForNamespace"
#: The reasons this step gives CredentialsReady: a sandbox with one of them never got a PAT
#: from a pass this step let through.
POLICY_REASONS = frozenset({REASON, WAITING_FOR_NAMESPACE})
#: Status the operator keeps about a running sandbox; gone with the sandbox's children.


class PolicyServices(Protocol):
    """What enforcing the policy needs from the reconciler's services."""

    settings: Settings
    kube: KubeClient
    cache: ObjectCache
    credentials: CredentialsPort
    events: EventSink
    metrics: Metrics


#: The last policy parsed, by its raw spec (parsed again only when the spec changes).
_parsed: list[tuple[Any, CraftSandboxPolicySpec | None]] = []


@dataclass(frozen=True)
class PolicyRead:
    """The CraftSandboxPolicy as the cache has it: its spec (empty when there is none to
    read) and, when there is none, why (``MISSING`` or ``UNREADABLE``)."""

    spec: CraftSandboxPolicySpec
    absent: str | None = None

    @property
    def missing(self) -> bool:
        """There is no CraftSandboxPolicy object at all (not an unreadable one)."""
        return self.absent == MISSING


def read_policy(cache: ObjectCache) -> PolicyRead:
    """The CraftSandboxPolicy ``default`` from the cache; none, or unreadable: an empty spec
    (only the operator's defaults are allowed), saying which."""
    body = cache.get(POLICY, None, POLICY_NAME)
    if body is None:
        return PolicyRead(CraftSandboxPolicySpec(), MISSING)
    raw = body.get("spec")
    if not (_parsed and _parsed[0][0] == raw):
        try:
            spec: CraftSandboxPolicySpec | None = CraftSandboxPolicy.model_validate(
                body, context=STORED
            ).spec
        except ValidationError as exc:
            logger.warning(
                "CraftSandboxPolicy %s is unreadable: allowing only the defaults (%s)",
                POLICY_NAME,
                describe_validation_error(exc),
            )
            spec = None
        _parsed[:] = [(copy.deepcopy(raw), spec)]
    parsed = _parsed[0][1]
    return (
        PolicyRead(CraftSandboxPolicySpec(), UNREADABLE) if parsed is None else PolicyRead(parsed)
    )


def namespace_labels(cache: ObjectCache, namespace: str) -> dict[str, str] | None:
    """The namespace's labels, or ``None`` if the cache has not seen the namespace yet."""
    body = cache.get(NAMESPACE, None, namespace)
    if body is None:
        return None
    return dict(body.get("metadata", {}).get("labels") or {})


def check(sandbox: CraftSandbox, cache: ObjectCache, settings: Settings) -> list[Violation] | None:
    """The sandbox's violations (empty: allowed); ``None`` while its namespace is unknown."""
    labels = namespace_labels(cache, sandbox.metadata.namespace or "")
    if labels is None:
        return None
    policy = read_policy(cache)
    return evaluate(
        sandbox,
        policy.spec,
        namespace_labels=labels,
        settings=settings,
        policy_missing=policy.missing,
    )


async def enforce(services: PolicyServices, sandbox: CraftSandbox, run: Run) -> bool:
    """Check the sandbox; True when this pass must stop here (not allowed, or not known yet)."""
    labels = namespace_labels(services.cache, sandbox.metadata.namespace or "")
    if labels is None:
        _wait_for_namespace(run)
        return True
    policy = read_policy(services.cache)
    violations = evaluate(
        sandbox,
        policy.spec,
        namespace_labels=labels,
        settings=services.settings,
        policy_missing=policy.missing,
    )
    if not violations:
        _clear_policy_warning(run)
        return False
    if policy.absent and all(item.needs_policy for item in violations):
        children = _children(sandbox, services.cache)
        if _admitted_before(run, children):
            _keep_without_policy(services, run, policy.absent, describe(violations))
            return False
    await _deny(services, sandbox, run, describe(violations))
    return True


def _wait_for_namespace(run: Run) -> None:
    # Retried with the work queue's capped backoff; the namespace's watch event queues the
    # sandbox again at once.
    run.revisit(backoff=WAITING_FOR_NAMESPACE)
    message = (
        f"namespace {run.namespace} is not in the operator's cache yet (its tenant label is "
        "unknown): the sandbox is not judged until it is"
    )
    run.set(ConditionState.unknown(CREDENTIALS_READY, WAITING_FOR_NAMESPACE, message))


def _admitted_before(run: Run, children: list[tuple[str, Kind, dict[str, Any]]]) -> bool:
    """Whether the sandbox runs on a spec the operator already accepted: it holds a PAT or
    children, and its spec has not changed since (a changed spec is judged as new), and
    the operator's last word on it was no denial (a PAT whose revocation failed, or a
    child whose deletion is yet to be seen, is what is left of a withdrawal)."""
    if run.spec_changed:
        return False
    credentials = run.condition(CREDENTIALS_READY)
    if credentials is not None and credentials.reason in (REASON, "RevokeFailed"):
        return False
    return run.status.credentials is not None or bool(children)


def _keep_without_policy(services: PolicyServices, run: Run, absent: str, message: str) -> None:
    reason = POLICY_MISSING if absent == MISSING else POLICY_UNREADABLE
    what = "missing" if absent == MISSING else "unreadable"
    text = (
        f"the CraftSandboxPolicy {POLICY_NAME} is {what}: this sandbox, admitted before, "
        f"keeps running, but a new one like it would be refused ({message})"
    )
    previous = run.condition(POLICY_ENFORCED)
    run.set(ConditionState.false(POLICY_ENFORCED, reason, text))
    if previous is None or previous.reason != reason or previous.message != text:
        logger.warning(
            "CraftSandboxPolicy %s is %s: %s/%s keeps running on a spec it may not allow",
            POLICY_NAME,
            what,
            run.namespace,
            run.name,
        )
        services.events.post(run.body, type="Warning", reason=reason, message=text)


def _clear_policy_warning(run: Run) -> None:
    run.drop_condition(POLICY_ENFORCED)


def _forget_running(status: CraftSandboxStatus) -> None:
    """Clear what the status says about a running sandbox: its PAT and its children, and
    what its pods did (as a sleep does): a sandbox let in again starts afresh, and a
    refusal count carried over read its new PAT's first refusal as a fresh PAT refused
    too, so no PAT was minted for it."""
    status.credentials = None
    status.pod_name = None
    status.pod_uid = None
    status.validated_pod_uid = None
    status.validated_pat_id = None
    status.validated_pat_display = None
    status.forget_stopped_pods()
    status.skill = None
    status.user_library = None
    status.library_volume = None


def _children(sandbox: CraftSandbox, cache: ObjectCache) -> list[tuple[str, Kind, dict[str, Any]]]:
    """The children this sandbox owns that are not being deleted already, but its workspace."""
    namespace, uid = sandbox.metadata.namespace, sandbox.metadata.uid or ""
    found: list[tuple[str, Kind, dict[str, Any]]] = []
    targets = kinds.child_targets(
        cache, namespace, sandbox.metadata.name, lambda o: controlled_by(o, uid)
    )
    workspace = sandbox.metadata.name + kinds.WORKSPACE_SUFFIX
    for kind, name in targets:
        if kind is kinds.PVC and name == workspace:
            continue  # the user's files, not access: kept until the sandbox is deleted
        obj = cache.get(kind.name, namespace, name)
        if obj is None or not controlled_by(obj, uid):
            continue
        if not obj["metadata"].get("deletionTimestamp"):
            found.append((kind.name, kind.api, obj))
    return found


async def _deny(services: PolicyServices, sandbox: CraftSandbox, run: Run, message: str) -> None:
    namespace, name = run.namespace, run.name
    uid = sandbox.metadata.uid or ""
    previous = run.condition(CREDENTIALS_READY)
    children = _children(sandbox, services.cache)
    # A sandbox the policy never let through has no PAT: its denial opens no database. One
    # it did may have one even when neither its status nor a Secret says so (the pass that
    # minted it ended before writing them), and so may one an earlier pass began on and
    # gave no verdict at all (it stopped, killed, before writing its status).
    admitted_before = (
        previous.reason not in POLICY_REASONS if previous is not None else run.seen_before
    )
    had_token = (
        run.status.credentials is not None
        or admitted_before
        or any(kind is SECRETS for _, kind, _ in children)
    )
    withdrawn: list[str] = []
    unrevoked: str | None = None
    if had_token:
        try:
            created_at = sandbox.metadata.creation_timestamp
            revoked = await services.credentials.revoke(namespace, name, uid, created_at=created_at)
            if revoked is Revocation.REVOKED:
                withdrawn.append("revoked the PAT")
            elif revoked is Revocation.NOT_IN_ONYX:
                withdrawn.append("forgot the PAT (no longer in Onyx)")
        except CredentialsError as exc:
            unrevoked = str(exc)
            services.metrics.pat_failed("RevokeFailed")
            run.revisit(backoff="RevokeFailed")
            services.events.post(run.body, type="Warning", reason="RevokeFailed", message=str(exc))
    for cache_kind, kind, obj in children:
        meta = obj["metadata"]
        try:
            await services.kube.delete(kind, namespace, meta["name"], uid=meta.get("uid"))
        except ApiError as exc:
            run.revisit(backoff=f"cannot delete {meta['name']}: {exc.reason}")
            continue
        services.cache.forget(cache_kind, namespace, meta["name"])  # not a sign of a PAT now
        withdrawn.append(f"deleted {cache_kind} {meta['name']}")
    live = run.status.credentials if unrevoked else None
    _forget_running(run.status)
    # Until it is revoked, the PAT stays on record and CredentialsReady says so: the retry
    # must still know to revoke it (the Secret, the other sign of it, is gone by then).
    run.status.credentials = live
    _clear_policy_warning(run)
    run.phase = Phase.FAILED
    if unrevoked:
        detail = f"no PAT allowed: {message}; revoking the PAT failed (retried): {unrevoked}"
        run.set(ConditionState.false(CREDENTIALS_READY, "RevokeFailed", detail))
    else:
        run.set(ConditionState.false(CREDENTIALS_READY, REASON, f"no PAT: {message}"))
    run.set(ConditionState.false(POD_READY, REASON, message))
    for type_ in (t for t in run.conditions if t not in (CREDENTIALS_READY, POD_READY)):
        run.set(ConditionState.unknown(type_, REASON, "the spec is not allowed by the platform"))
    said = (previous.reason, previous.message) if previous is not None else None
    if said != (REASON, f"no PAT: {message}"):
        services.events.post(run.body, type="Warning", reason=REASON, message=message)
    if withdrawn:
        services.events.post(
            run.body,
            type="Warning",
            reason="AccessWithdrawn",
            message="the spec is no longer allowed: " + ", ".join(withdrawn),
        )
