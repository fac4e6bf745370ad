"""The CraftSandbox's finalizer: added before anything is made for it; on deletion, the PAT
is revoked and the children deleted before it is removed.

Both return a :class:`~craft_operator.reconciler.run.Revisit` with a backoff reason when a
step may pass later (a conflict, the database down), ``None`` when done.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from craft_operator.api.models import GROUP, Phase
from craft_operator.api.times import parse_time
from craft_operator.credentials.errors import CredentialsError
from craft_operator.credentials.model import Revocation
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError, ConflictError, NotFoundError
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.run import Revisit, Run
from craft_operator.reconciler.status_writer import write_status
from craft_operator.reconciler.steps import workspace
from craft_operator.status import CREDENTIALS_READY, ConditionState

logger = logging.getLogger(__name__)
FINALIZER = f"{GROUP}/finalizer"
DELETION_BLOCKED = "DeletionBlocked"
#: CredentialsReady's reason while other finalizers hold a sandbox this one released.
DELETING = "Deleting"
SANDBOX = kinds.SANDBOX
PAT_NOT_IN_ONYX = (
    "the sandbox's PAT was no longer in Onyx (deleted there): nothing to revoke, its stored "
    "token is forgotten"
)


class _BlockedError(Exception):
    """A deletion step failed in a way that may pass (this module's own signal)."""


async def ensure(s: Services, body: dict[str, Any]) -> dict[str, Any] | Revisit | None:
    """The sandbox with the finalizer added; ``None`` if it is gone (deleted before it had
    one: nothing was made for it, and its watch event clears the cache)."""
    meta = body["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER in finalizers:
        return body
    patch = {
        "metadata": {
            "finalizers": [*finalizers, FINALIZER],
            "resourceVersion": meta.get("resourceVersion"),
        }
    }
    try:
        updated = await s.kube.patch(SANDBOX.api, meta.get("namespace"), meta["name"], patch)
    except NotFoundError:
        return None
    except ConflictError:
        return Revisit(backoff="the CraftSandbox changed while adding the finalizer")
    s.cache.put(SANDBOX.name, updated)
    return updated


async def finalize(s: Services, body: dict[str, Any], conditions: Sequence[str]) -> Revisit | None:
    """Revoke the PAT, delete the children, then remove the finalizer."""
    meta = body["metadata"]
    namespace, name, uid = meta.get("namespace", ""), meta["name"], meta.get("uid", "")
    if FINALIZER not in (meta.get("finalizers") or []):
        return None
    try:
        created_at = parse_time(meta.get("creationTimestamp"))
        revoked = await s.credentials.revoke(namespace, name, uid, created_at=created_at)
    except CredentialsError as exc:
        return await _revoke_failed(s, body, conditions, exc)
    if revoked is Revocation.REVOKED:
        s.events.post(
            body, type="Normal", reason="PATRevoked", message="the sandbox's PAT was revoked"
        )
    elif revoked is Revocation.NOT_IN_ONYX:
        s.events.post(body, type="Normal", reason="PATForgotten", message=PAT_NOT_IN_ONYX)
    s.library_pool.forget((namespace, name))
    try:
        await s.library.forget(uid)
        if not namespace_terminating(s, namespace):
            # In a namespace being deleted the namespace controller deletes every object
            # (a retained workspace too), and the Role that let the operator do it may
            # already be gone with them.
            said = await _retain_workspace(s, body)
            await _delete_children(s, namespace, name, uid)
        else:
            said = None
        body = await _say_held_by_others(s, body, conditions)
        return await _release(s, body, said)
    except (CredentialsError, _BlockedError) as exc:
        return await _deletion_blocked(s, body, conditions, str(exc))


def removal_by_hand(name: str, namespace: str) -> str:
    """The command that removes a CraftSandbox's finalizers by hand (where the operator
    no longer may: its Role went with the namespace)."""
    patch = '{"metadata":{"finalizers":null}}'
    return f"kubectl patch csb {name} -n {namespace} --type=merge -p '{patch}'"


def namespace_terminating(s: Services, namespace: str) -> bool:
    """Whether the namespace is being deleted, as the namespaces' watch saw it."""
    body = s.cache.get(kinds.NAMESPACE.name, None, namespace)
    return body is not None and bool(body.get("metadata", {}).get("deletionTimestamp"))


async def _deletion_blocked(
    s: Services, body: dict[str, Any], conditions: Sequence[str], why: str
) -> Revisit:
    """Say what holds the deletion (status and event: the sandbox must not go on looking
    Ready); it is tried again with backoff."""
    message = f"the PAT is revoked; the deletion waits: {why}"
    s.events.post(body, type="Warning", reason=DELETION_BLOCKED, message=message)
    await _say_terminating(s, body, conditions, DELETION_BLOCKED, message)
    return Revisit(backoff=why)


async def _revoke_failed(
    s: Services, body: dict[str, Any], conditions: Sequence[str], exc: CredentialsError
) -> Revisit:
    """Say the PAT could not be revoked yet (status and event); deletion waits for it."""
    s.events.post(body, type="Warning", reason="RevokeFailed", message=str(exc))
    s.metrics.pat_failed("RevokeFailed")
    await _say_terminating(s, body, conditions, "RevokeFailed", str(exc))
    return Revisit(backoff="cannot revoke the PAT yet")


async def _say_held_by_others(
    s: Services, body: dict[str, Any], conditions: Sequence[str]
) -> dict[str, Any]:
    """Before the finalizer goes: if others hold the sandbox (a foreground deletion waiting
    for its children, another controller's finalizer), it stays after this one, and its
    status must not go on saying Ready with a PAT that is revoked. The sandbox as it now
    is (the finalizer's removal is conditional on its version)."""
    meta = body["metadata"]
    others = [item for item in meta.get("finalizers") or [] if item != FINALIZER]
    if not others:
        return body
    message = (
        "the sandbox is being deleted: its PAT is revoked and its children are deleted; "
        f"it goes once these finalizers are done: {', '.join(others)}"
    )
    if not await _say_terminating(s, body, conditions, DELETING, message):
        return body  # changed or replaced since read: released on the next pass, if at all
    return s.cache.get(SANDBOX.name, meta.get("namespace"), meta["name"]) or body


async def _say_terminating(
    s: Services, body: dict[str, Any], conditions: Sequence[str], reason: str, message: str
) -> bool:
    """Write phase Terminating, CredentialsReady False for ``reason`` (so Ready is False).
    A write refused is logged, with how to remove the finalizer by hand where the Role that
    let the operator write went with the namespace being deleted. Only onto the sandbox as
    read: a copy may be stale, of a sandbox gone since and replaced by a namesake. Returns
    ``False`` if the sandbox changed or was replaced since (nothing written: the pass comes
    back with its backoff and says it then, if it still must)."""
    run = Run(body, s.clock(), conditions)
    run.set(ConditionState.false(CREDENTIALS_READY, reason, message))
    run.phase = Phase.TERMINATING
    try:
        await write_status(s, run, as_read=True)
    except ConflictError:
        return False
    except ApiError as exc:
        meta = body["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        hint = (
            "; its namespace is being deleted, with the operator's Role: remove the "
            f"finalizer by hand ({removal_by_hand(name, namespace)})"
            if namespace_terminating(s, namespace)
            else ""
        )
        logger.warning(
            "%s/%s: %s; its status cannot say so (%s)%s", namespace, name, message, exc, hint
        )
    return True


async def _retain_workspace(s: Services, body: dict[str, Any]) -> str | None:
    """With ``spec.workspace.retain``, release the workspace before the children go: it is
    then no longer the sandbox's, so neither this finalizer nor the collector deletes it.
    Without, delete one still kept from when ``retain`` was set."""
    if not workspace.retains_workspace(body):
        try:
            await workspace.delete_unkept(s, body)
        except ApiError as exc:
            raise _BlockedError(f"cannot delete the workspace: {exc}") from None
        return None
    try:
        released = await workspace.release(s, body)
    except ApiError as exc:
        raise _BlockedError(f"cannot release the retained workspace: {exc}") from None
    if released:
        claim = body["metadata"]["name"] + kinds.WORKSPACE_SUFFIX
        message = (
            f"kept the workspace PVC {claim} (retain): a new CraftSandbox of this name and "
            "user takes it back"
        )
        return message
    return None


async def _delete_children(s: Services, namespace: str, name: str, uid: str) -> None:
    # Owner references make the garbage collector remove the children; deleting them
    # here as well frees the pod at once and does not depend on the collector.
    def owned(obj: Mapping[str, Any]) -> bool:
        return controlled_by(obj, uid)

    for kind, child in kinds.child_targets(s.cache, namespace, name, owned):
        await _delete_owned_child(s, kind, namespace, child, uid)


async def _release(s: Services, body: dict[str, Any], said: str | None = None) -> Revisit | None:
    """Remove the finalizer, so the API server deletes the sandbox."""
    meta = body["metadata"]
    namespace, name = meta.get("namespace", ""), meta["name"]
    remaining = [item for item in meta.get("finalizers") or [] if item != FINALIZER]
    patch = {"metadata": {"finalizers": remaining, "resourceVersion": meta.get("resourceVersion")}}
    try:
        updated = await s.kube.patch(SANDBOX.api, namespace, name, patch)
    except NotFoundError:
        return None
    except ConflictError:
        return Revisit(backoff="the CraftSandbox changed while removing the finalizer")
    except ApiError as exc:
        raise _BlockedError(f"cannot remove the finalizer: {exc}") from None
    if said is not None:  # once: a later pass on a stale copy finds the sandbox gone
        s.events.post(body, type="Normal", reason="WorkspaceRetained", message=said)
    if updated.get("metadata", {}).get("deletionTimestamp") and remaining:
        s.cache.put(SANDBOX.name, updated)
    return None


async def _delete_owned_child(
    s: Services, kind: kinds.CachedKind, namespace: str, name: str, uid: str
) -> None:
    """Delete the child ``name`` only if it is the sandbox's, and only that very object.

    The watches see only labelled objects, so a name the cache does not hold is read
    once: an unlabelled object of someone else's by that name must survive. The uid
    precondition keeps a successor that took the name meanwhile.
    """
    existing = s.cache.get(kind.name, namespace, name)
    if existing is None:
        try:
            existing = await s.kube.get(kind.api, namespace, name)
        except NotFoundError:
            return
        except ApiError as exc:
            raise _BlockedError(f"cannot read {kind.name} {name}: {exc}") from None
    if not controlled_by(existing, uid):
        return
    try:
        await s.kube.delete(kind.api, namespace, name, uid=existing.get("metadata", {}).get("uid"))
    except ConflictError:
        pass  # the uid precondition failed: the object by that name is another one now
    except ApiError as exc:
        raise _BlockedError(f"cannot delete {kind.name} {name}: {exc}") from None
    s.cache.forget(kind.name, namespace, name)
