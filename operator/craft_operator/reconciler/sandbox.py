"""Reconcile one CraftSandbox: credentials, Secret, skill ConfigMap, pod, CLI check, status.

Level-triggered: every pass reads the sandbox and its children from the watch cache,
computes what should exist, changes only what differs, and writes the status only if it
changed. A pass may run twice, be cut off halfway or see a changed world; the next pass
converges from wherever the last one stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from craft_operator.api.models import (
    ANNOTATION_LAST_ACTIVITY,
    ANNOTATION_LIBRARY_REVISION,
    GROUP,
    ConditionStatus,
    CraftSandbox,
    CredentialsStatus,
    LibraryMode,
    Phase,
    SkillStatus,
    UserLibraryStatus,
)
from craft_operator.api.parse import InvalidSandboxError, parse_sandbox
from craft_operator.builders.configmap import build_skills_configmap
from craft_operator.builders.library_job import build_library_pvc, library_claim_name
from craft_operator.builders.naming import (
    ANNOTATION_PAT_ID,
    ANNOTATION_TEMPLATE_HASH,
    SANDBOX_CONTAINER,
    child_labels,
    pod_name,
    skills_configmap_name,
)
from craft_operator.builders.pod import SandboxConfigError, build_pod
from craft_operator.builders.secret import build_credentials_secret
from craft_operator.credentials.errors import (
    CredentialsError,
    DatabaseUnavailableError,
    KeyRingError,
    SchemaMissingError,
    UserInactiveError,
    UserNotFoundError,
)
from craft_operator.kube import kinds
from craft_operator.kube.client import (
    CONFIGMAPS,
    PODS,
    PVCS,
    SANDBOXES,
    SECRETS,
    ApiError,
    ConflictError,
    Kind,
    NotFoundError,
)
from craft_operator.kube.exec import ExecError
from craft_operator.library import (
    LibraryConfigError,
    LibraryLocation,
    LibrarySyncError,
)
from craft_operator.library import resolve_location as resolve_library_location
from craft_operator.metrics import ProvisioningPhase, time_to_ready
from craft_operator.reconciler import cli_validation, egress, library_exec, library_job
from craft_operator.reconciler import policy_step as policy
from craft_operator.reconciler.children import (
    Converged,
    ForeignObjectError,
    controlled_by,
    converge,
    is_ours,
)
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.idle import decide_idle
from craft_operator.reconciler.ports import (
    IssuedCredential,
)
from craft_operator.reconciler.run import Run
from craft_operator.skills.render import RenderedSkill
from craft_operator.skills.template import SkillTemplateError
from craft_operator.status import (
    CLI_VALIDATED,
    CREDENTIALS_READY,
    POD_READY,
    SKILL_RENDERED,
    USER_LIBRARY_SYNCED,
    ConditionState,
    kube_time,
)

logger = logging.getLogger(__name__)

FINALIZER = f"{GROUP}/finalizer"
#: Cache names of the kinds a pass reads (see :mod:`craft_operator.kube.kinds`).
SANDBOX, POD, SECRET = kinds.SANDBOX.name, kinds.POD.name, kinds.SECRET.name
CONFIGMAP, PVC = kinds.CONFIGMAP.name, kinds.PVC.name
NORMAL, WARNING = "Normal", "Warning"
#: Conditions that can only be known once the pod is ready.
POD_DEPENDENT = (CLI_VALIDATED, USER_LIBRARY_SYNCED)

CLI_TIMEOUT = 60.0
#: onyx-cli prints a line or two; more is not read.
CLI_MAX_OUTPUT = 1024 * 1024


class RetryLaterError(Exception):
    """A step failed in a way that may pass; the status says which. Retried with backoff."""


def _pod_backoff(base: float, failures: int) -> float:
    return float(min(300.0, base * 2 ** max(0, failures - 1)))


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _pod_waiting_detail(pod: Mapping[str, Any]) -> str:
    status = pod.get("status", {})
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            reason = waiting.get("reason", "Waiting")
            message = waiting.get("message", "")
            return f"{reason}: {message}".rstrip(": ")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}"
    return f"pod phase {status.get('phase') or 'Pending'}"


def _credentials_reason(exc: CredentialsError) -> str:
    """The condition reason for a credentials failure, stable enough to alert on."""
    reasons: tuple[tuple[type[CredentialsError], str], ...] = (
        (UserNotFoundError, "UserNotFound"),
        (UserInactiveError, "UserInactive"),
        (DatabaseUnavailableError, "DatabaseUnavailable"),
        (KeyRingError, "KeyRingError"),
        (SchemaMissingError, "DatabaseSchemaMissing"),
    )
    return next((reason for kind, reason in reasons if isinstance(exc, kind)), "CredentialsError")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _content_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether anything but the status (and bookkeeping metadata) differs."""

    def content(body: Mapping[str, Any]) -> dict[str, Any]:
        meta = {
            key: value
            for key, value in (body.get("metadata") or {}).items()
            if key not in ("resourceVersion", "managedFields")
        }
        return {**{k: v for k, v in body.items() if k != "status"}, "metadata": meta}

    return content(before) != content(after)


def _library_current(
    run: Run, current: UserLibraryStatus, revision: str, pod_uid: str, config: str
) -> bool:
    """Whether the last successful sync delivered this revision, into this pod, with this config."""
    synced = run.condition(USER_LIBRARY_SYNCED)
    return (
        synced is not None
        and synced.status == ConditionStatus.TRUE
        and synced.reason in (library_exec.SYNCED, library_exec.RESYNCED)
        and (current.observed_revision or "") == revision
        and current.pod_uid == pod_uid
        and current.config_hash == config
    )


def _library_config_hash(sandbox: CraftSandbox, location: LibraryLocation) -> str:
    """What, besides the revision and the pod, decides the library's content."""
    library = sandbox.spec.user_library
    return _short_hash(
        json.dumps(
            [location.bucket, location.prefix, library.exclude, library.disabled_paths],
            separators=(",", ":"),
        )
    )


def _reason(run: Run, type_: str) -> str | None:
    """The reason of a condition as this pass has it, if present."""
    condition = run.condition(type_)
    return condition.reason if condition is not None else None


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class SandboxReconciler:
    """Reconciles CraftSandboxes by (namespace, name); see the module docstring."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self._reported: dict[tuple[str, str], str] = {}

    def forget(self, key: tuple[str, str]) -> None:
        """Drop what is remembered about a sandbox that is gone (and cancel its sync)."""
        self._reported.pop(key, None)
        self.s.library_pool.forget(key)

    # -- entry point ---------------------------------------------------------------------------

    async def reconcile(self, key: tuple[str, str]) -> float | None:
        """One pass for the sandbox ``key``; returns when to revisit (seconds) or ``None``."""
        namespace, name = key
        body = self.s.cache.get(SANDBOX, namespace, name)
        if body is None:
            return None
        if body.get("metadata", {}).get("deletionTimestamp"):
            await self._finalize(body)
            return None
        body = await self._ensure_finalizer(body)
        if body is None:
            return None
        run = Run(body, self.s.clock())
        try:
            sandbox = parse_sandbox(body)
        except InvalidSandboxError as exc:
            self._fail_spec(run, "InvalidSpec", f"the CraftSandbox is invalid: {exc}")
            await self._write_status(run)
            return None
        if run.spec_changed:
            run.status.pod_failures = None
            run.status.cli_auth_failures = None
        try:
            # The platform's policy comes first: a sandbox it does not allow gets no PAT.
            if not await policy.enforce(self.s, sandbox, run):
                await self._reconcile(sandbox, run)
        finally:
            await self._write_status(run)
        if run.retry_reason:
            raise RetryLaterError(f"{namespace}/{name}: {run.retry_reason}")
        resync = self.s.settings.resync_interval
        return min(resync, run.requeue_after) if run.requeue_after is not None else resync

    async def _reconcile(self, sandbox: CraftSandbox, run: Run) -> None:
        issued = await self._credentials(sandbox, run)
        if issued is None:
            self._waiting(run, (SKILL_RENDERED,), "WaitingForCredentials")
            self._waiting(run, (POD_READY, *POD_DEPENDENT), "WaitingForCredentials")
            return
        secret_ok = await self._secret(sandbox, issued, run)
        skill_ok = await self._skill(sandbox, run)
        volume_ok = await self._library_volume(sandbox, run)
        if not (secret_ok and skill_ok and volume_ok):
            # The volume's own failure (a name clash, say) stays on UserLibrarySynced.
            waiting = (POD_READY, *POD_DEPENDENT) if volume_ok else (POD_READY, CLI_VALIDATED)
            self._waiting(run, waiting, "WaitingForChildren")
            return
        pod = await self._pod(sandbox, issued, run)
        if pod is None:
            return
        await self._validate_cli(sandbox, pod, issued, run)
        await self._sync_library(sandbox, pod, run)

    # -- finalizer -----------------------------------------------------------------------------

    async def _ensure_finalizer(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The sandbox with the finalizer added; None if it is gone (deleted before it had
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
            updated = await self.s.kube.patch(SANDBOXES, meta.get("namespace"), meta["name"], patch)
        except NotFoundError:
            return None
        except ConflictError:
            raise RetryLaterError("the CraftSandbox changed while adding the finalizer") from None
        self.s.cache.put(SANDBOX, updated)
        return updated

    async def _finalize(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        namespace, name, uid = meta.get("namespace", ""), meta["name"], meta.get("uid", "")
        if FINALIZER not in (meta.get("finalizers") or []):
            return
        try:
            revoked = await self.s.credentials.revoke(namespace, name, uid)
        except CredentialsError as exc:
            self.s.events.post(body, type=WARNING, reason="RevokeFailed", message=str(exc))
            self.s.metrics.pat_failed("RevokeFailed")
            run = Run(body, self.s.clock())
            run.set(ConditionState.false(CREDENTIALS_READY, "RevokeFailed", str(exc)))
            run.phase = Phase.TERMINATING
            await self._write_status(run)
            raise RetryLaterError(f"{namespace}/{name}: cannot revoke the PAT yet") from None
        if revoked:
            self.s.events.post(
                body, type=NORMAL, reason="PATRevoked", message="the sandbox's PAT was revoked"
            )
        self.s.library_pool.forget((namespace, name))
        try:
            await self.s.library.forget(uid)
        except CredentialsError as exc:
            raise RetryLaterError(f"{namespace}/{name}: {exc}") from None

        # Owner references make the garbage collector remove the children; deleting them
        # here as well frees the pod at once and does not depend on the collector.
        def owned(obj: Mapping[str, Any]) -> bool:
            return controlled_by(obj, uid)

        for kind, child in kinds.child_targets(self.s.cache, namespace, name, owned):
            await self._delete_owned_child(kind.api, kind.name, namespace, child, uid)
        remaining = [item for item in meta.get("finalizers") or [] if item != FINALIZER]
        patch = {
            "metadata": {"finalizers": remaining, "resourceVersion": meta.get("resourceVersion")}
        }
        try:
            updated = await self.s.kube.patch(SANDBOXES, namespace, name, patch)
        except NotFoundError:
            return
        except ConflictError:
            raise RetryLaterError("the CraftSandbox changed while removing the finalizer") from None
        if updated.get("metadata", {}).get("deletionTimestamp") and remaining:
            self.s.cache.put(SANDBOX, updated)

    async def _delete_owned_child(
        self, kind: Kind, cache_kind: str, namespace: str, name: str, uid: str
    ) -> None:
        """Delete the child ``name`` only if it is the sandbox's, and only that very object.

        The watches see only labelled objects, so a name the cache does not hold is read
        once: an unlabelled object of someone else's by that name must survive. The uid
        precondition keeps a successor that took the name meanwhile.
        """
        existing = self.s.cache.get(cache_kind, namespace, name)
        if existing is None:
            try:
                existing = await self.s.kube.get(kind, namespace, name)
            except NotFoundError:
                return
            except ApiError as exc:
                raise RetryLaterError(f"cannot read {cache_kind} {name}: {exc}") from None
        if not controlled_by(existing, uid):
            return
        try:
            await self.s.kube.delete(
                kind, namespace, name, uid=existing.get("metadata", {}).get("uid")
            )
        except ConflictError:
            pass  # the uid precondition failed: the object by that name is another one now
        except ApiError as exc:
            raise RetryLaterError(f"cannot delete {cache_kind} {name}: {exc}") from None
        self.s.cache.forget(cache_kind, namespace, name)

    # -- credentials ---------------------------------------------------------------------------

    async def _credentials(self, sandbox: CraftSandbox, run: Run) -> IssuedCredential | None:
        started = time.monotonic()
        try:
            issued = await self.s.credentials.ensure(sandbox)
        except CredentialsError as exc:
            self._credentials_failed(sandbox, run, _credentials_reason(exc), str(exc))
            return None
        if issued.minted:
            self.s.metrics.pat_minted(issued.reason)
            self.s.metrics.observe_phase(ProvisioningPhase.CREDENTIALS, time.monotonic() - started)
        else:
            self.s.metrics.pat_reused()
        validity = (
            f"PAT {issued.token_display} is valid until {issued.expires_at:%Y-%m-%dT%H:%M:%SZ}"
            if issued.expires_at
            else f"PAT {issued.token_display} does not expire"
        )
        message = validity
        if issued.minted and issued.superseded_pat_id is not None and issued.reason:
            message = f"{validity}; it replaced PAT {issued.superseded_pat_id}: {issued.reason}"
        else:
            # Why this PAT replaced the last one stays said while the PAT is the same.
            held = run.condition(CREDENTIALS_READY)
            current = held.message if held is not None else ""
            if current.startswith(f"{validity}; it replaced PAT "):
                message = current
        run.set(ConditionState.true(CREDENTIALS_READY, "PATValid", message))
        run.status.credentials = CredentialsStatus(
            token_display=issued.token_display,
            pat_id=issued.pat_id,
            minted_at=kube_time(issued.created_at),
            expires_at=kube_time(issued.expires_at) if issued.expires_at else None,
        )
        if issued.minted:
            self.s.events.post(
                self._body(run),
                type=NORMAL,
                reason="PATMinted",
                message=f"minted PAT {issued.token_display} (id {issued.pat_id})"
                + (f": {issued.reason}" if issued.reason else ""),
            )
        if issued.expires_at is not None:
            lifetime = sandbox.spec.credentials.lifetime
            renew_at = issued.expires_at - lifetime * self.s.settings.credential_renewal_fraction
            run.requeue(max(60.0, (renew_at - run.now).total_seconds() + 1))
        return issued

    def _credentials_failed(
        self, sandbox: CraftSandbox, run: Run, reason: str, message: str
    ) -> None:
        run.set(ConditionState.false(CREDENTIALS_READY, reason, message))
        self.s.metrics.pat_failed(reason)
        self.s.events.post(self._body(run), type=WARNING, reason=reason, message=message)
        run.retry(reason)

    # -- secret and skill ----------------------------------------------------------------------

    async def _secret(self, sandbox: CraftSandbox, issued: IssuedCredential, run: Run) -> bool:
        desired = build_credentials_secret(sandbox, token=issued.token, pat_id=issued.pat_id)
        result = await self._apply_child(
            run, desired, SECRETS, SECRET, "Secret", CREDENTIALS_READY, ProvisioningPhase.SECRET
        )
        return result is not None

    async def _skill(self, sandbox: CraftSandbox, run: Run) -> bool:
        name = skills_configmap_name(sandbox)
        existing = self.s.cache.get(CONFIGMAP, sandbox.metadata.namespace, name)
        try:
            rendered: RenderedSkill = await self.s.skills.render(sandbox)
        except SkillTemplateError as exc:
            run.set(ConditionState.false(SKILL_RENDERED, "TemplateError", str(exc)))
            self.s.events.post(
                self._body(run), type=WARNING, reason="SkillTemplateError", message=str(exc)
            )
            if existing is not None:
                return True  # keep the last good rendering in place
            rendered = await self.s.skills.render(sandbox, builtin=True)
        else:
            run.set(
                ConditionState.true(
                    SKILL_RENDERED,
                    "Rendered",
                    f"company-search skill lists {rendered.source_count} source(s)",
                )
            )
        previous_hash = run.old_status.skill.content_hash if run.old_status.skill else None
        desired = build_skills_configmap(
            sandbox, text=rendered.text, content_hash=rendered.content_hash
        )
        result = await self._apply_child(
            run,
            desired,
            CONFIGMAPS,
            CONFIGMAP,
            "ConfigMap",
            SKILL_RENDERED,
            ProvisioningPhase.SKILL,
            detail=f" (skill {rendered.content_hash[:12]})",
        )
        if result is None:
            return False
        run.status.skill = SkillStatus(
            source_count=rendered.source_count, content_hash=rendered.content_hash
        )
        if rendered.unknown_sources and previous_hash != rendered.content_hash:
            self.s.events.post(
                self._body(run),
                type=WARNING,
                reason="UnknownSource",
                message="not known to this operator, listed by name only: "
                + ", ".join(rendered.unknown_sources),
            )
        return True

    async def _library_volume(self, sandbox: CraftSandbox, run: Run) -> bool:
        """Job mode keeps the library on a PVC the pod mounts; Exec mode needs none."""
        if sandbox.spec.user_library.mode != LibraryMode.JOB:
            return True
        desired = build_library_pvc(sandbox, default_size=self.s.settings.library_volume_size)
        result = await self._apply_child(run, desired, PVCS, PVC, "Volume", USER_LIBRARY_SYNCED)
        return result is not None

    async def _apply_child(
        self,
        run: Run,
        desired: dict[str, Any],
        kind: Kind,
        cache_kind: str,
        label: str,
        condition: str,
        phase: ProvisioningPhase | None = None,
        detail: str = "",
    ) -> Converged | None:
        """Converge one child; an event when it changed; a failure reported on ``condition``.

        ``label`` names the child in reasons: ``<label>Created``, ``<label>NameTaken``, ...
        """
        started = time.monotonic()
        try:
            result = await converge(self.s.kube, self.s.cache, kind, cache_kind, desired)
        except ForeignObjectError as exc:
            self._child_failed(run, condition, f"{label}NameTaken", str(exc))
            return None
        except ApiError as exc:
            self._child_failed(run, condition, f"{label}WriteFailed", str(exc))
            return None
        if result.action != "unchanged":
            if phase is not None:
                self.s.metrics.observe_phase(phase, time.monotonic() - started)
            self.s.events.post(
                self._body(run),
                type=NORMAL,
                reason=f"{label}{result.action.capitalize()}",
                message=f"{result.action} {desired['kind']} {desired['metadata']['name']}{detail}",
            )
        return result

    def _child_failed(self, run: Run, condition: str, reason: str, message: str) -> bool:
        run.set(ConditionState.false(condition, reason, message))
        self.s.events.post(self._body(run), type=WARNING, reason=reason, message=message)
        run.retry(reason)
        return False

    # -- pod -----------------------------------------------------------------------------------

    async def _pod(
        self, sandbox: CraftSandbox, issued: IssuedCredential, run: Run
    ) -> dict[str, Any] | None:
        """Converge the pod; the pod if it is running and Ready, else ``None``."""
        claim = (
            library_claim_name(sandbox)
            if sandbox.spec.user_library.mode == LibraryMode.JOB
            else None
        )
        try:
            desired = build_pod(sandbox, self.s.settings, pat_id=issued.pat_id, library_claim=claim)
        except SandboxConfigError as exc:
            self._fail_spec(run, exc.reason, str(exc))
            return None
        namespace, name = sandbox.metadata.namespace, pod_name(sandbox)
        actual = self.s.cache.get(POD, namespace, name)
        run.status.pod_name = name

        if await self._sleeping(sandbox, actual, run):
            return None
        if actual is not None and not is_ours(actual, desired):
            message = str(ForeignObjectError("Pod", namespace, name))
            self._child_failed(run, POD_READY, "PodNameTaken", message)
            return None
        if actual is not None and actual["metadata"].get("deletionTimestamp"):
            run.pod_exists = True
            run.set(ConditionState.false(POD_READY, "PodTerminating", "the old pod is stopping"))
            self._waiting(run, POD_DEPENDENT, "WaitingForPod")
            run.requeue(5)
            return None
        if actual is None:
            if self._egress_refused(run, desired):
                return None
            return await self._create_pod(sandbox, desired, run)
        run.pod_exists = True
        run.status.pod_uid = actual["metadata"].get("uid")
        stale = self._pod_drift(actual, desired)
        if stale:
            await self._delete_pod(run, actual, reason="PodReplaced", message=stale)
            return None
        phase = actual.get("status", {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            await self._pod_failed(sandbox, actual, run)
            return None
        labels = child_labels(sandbox)
        have = actual["metadata"].get("labels") or {}
        if any(have.get(key) != value for key, value in labels.items()):
            patch = {"metadata": {"labels": labels}}
            actual = await self.s.kube.patch(PODS, namespace, name, patch)
            self.s.cache.put(POD, actual)
        if not _pod_ready(actual):
            detail = _pod_waiting_detail(actual)
            created = _parse_time(actual["metadata"].get("creationTimestamp"))
            timeout = self.s.settings.provisioning_timeout
            if created and (run.now - created).total_seconds() > timeout:
                if _reason(run, POD_READY) != "ProvisioningTimedOut":
                    self.s.events.post(
                        self._body(run),
                        type=WARNING,
                        reason="ProvisioningTimedOut",
                        message=f"the pod is not ready after {timeout:.0f}s: {detail}",
                    )
                run.set(ConditionState.false(POD_READY, "ProvisioningTimedOut", detail))
            else:
                run.set(ConditionState.false(POD_READY, "PodStarting", detail))
                if created:
                    run.requeue(timeout - (run.now - created).total_seconds() + 1)
            self._waiting(run, POD_DEPENDENT, "WaitingForPod")
            return None
        if not run.condition_is(POD_READY, ConditionStatus.TRUE):
            started_at = _parse_time(actual["metadata"].get("creationTimestamp"))
            if started_at is not None:
                seconds = (run.now - started_at).total_seconds()
                self.s.metrics.observe_phase(ProvisioningPhase.POD_READY, seconds)
        run.set(ConditionState.true(POD_READY, "PodReady", f"pod {name} is ready"))
        run.status.pod_failures = None
        return actual

    def _egress_refused(self, run: Run, desired: Mapping[str, Any]) -> bool:
        """Whether the pod must wait for a NetworkPolicy restricting its egress (it says so)."""
        refused = egress.refusal(self.s.cache, self.s.settings, desired)
        if refused is None:
            return False
        if _reason(run, POD_READY) != refused.reason:
            self.s.events.post(
                self._body(run), type=WARNING, reason=refused.reason, message=refused.message
            )
        run.set(refused)
        self._waiting(run, POD_DEPENDENT, refused.reason)
        return True

    def _pod_drift(self, actual: Mapping[str, Any], desired: Mapping[str, Any]) -> str | None:
        want = desired["metadata"]["annotations"][ANNOTATION_TEMPLATE_HASH]
        have = (actual["metadata"].get("annotations") or {}).get(ANNOTATION_TEMPLATE_HASH)
        if have != want:
            if (actual["metadata"].get("annotations") or {}).get(ANNOTATION_PAT_ID) != desired[
                "metadata"
            ]["annotations"][ANNOTATION_PAT_ID]:
                return "the sandbox's PAT changed; replacing the pod so it reads the new one"
            return "the pod spec changed; replacing the pod"
        images = [c.get("image") for c in actual.get("spec", {}).get("containers", [])]
        wanted = [c.get("image") for c in desired["spec"]["containers"]]
        if images != wanted:
            return "the pod's image was edited; replacing the pod"
        return None

    async def _create_pod(
        self, sandbox: CraftSandbox, desired: dict[str, Any], run: Run
    ) -> dict[str, Any] | None:
        failures = run.status.pod_failures or 0
        previous = run.condition(POD_READY)
        if failures and previous is not None and previous.reason == "PodFailed":
            failed_at = previous.last_transition_time or run.now
            backoff = _pod_backoff(self.s.settings.pod_restart_backoff, failures)
            wait = (failed_at - run.now).total_seconds() + backoff
            if wait > 0:
                run.requeue(wait)
                self._waiting(run, POD_DEPENDENT, "WaitingForPod")
                return None
        started = time.monotonic()
        try:
            created = await self.s.kube.create(PODS, desired)
        except ConflictError:
            created = await self.s.kube.get(PODS, sandbox.metadata.namespace, pod_name(sandbox))
            if not is_ours(created, desired):
                namespace, name = sandbox.metadata.namespace, pod_name(sandbox)
                message = str(ForeignObjectError("Pod", namespace, name))
                self._child_failed(run, POD_READY, "PodNameTaken", message)
                return None
            self.s.cache.put(POD, created)
            run.requeue(0)
            run.pod_exists = True
            return None
        except ApiError as exc:
            if exc.status in (400, 422):
                # The API server refuses this pod (e.g. an admission policy); retrying the
                # same spec cannot help, so wait for the spec or the settings to change.
                self._fail_spec(run, "PodRejected", str(exc))
            else:
                self._child_failed(run, POD_READY, "PodCreateFailed", str(exc))
            return None
        self.s.metrics.observe_phase(ProvisioningPhase.POD_CREATE, time.monotonic() - started)
        self.s.cache.put(POD, created)
        run.pod_exists = True
        run.status.pod_uid = created["metadata"].get("uid")
        run.set(ConditionState.false(POD_READY, "PodStarting", _pod_waiting_detail(created)))
        self._waiting(run, POD_DEPENDENT, "WaitingForPod")
        self.s.events.post(
            self._body(run),
            type=NORMAL,
            reason="PodCreated",
            message=f"created pod {pod_name(sandbox)}",
        )
        return None

    async def _remove_pod(self, pod: Mapping[str, Any]) -> None:
        """Delete this very pod (its uid), not a successor that took its name meanwhile."""
        meta = pod["metadata"]
        await self.s.kube.delete(PODS, meta.get("namespace"), meta["name"], uid=meta.get("uid"))

    async def _delete_pod(
        self, run: Run, pod: Mapping[str, Any], *, reason: str, message: str, type: str = NORMAL
    ) -> None:
        await self._remove_pod(pod)
        run.pod_exists = True
        run.set(ConditionState.false(POD_READY, reason, message))
        self._waiting(run, POD_DEPENDENT, "WaitingForPod")
        self.s.events.post(self._body(run), type=type, reason=reason, message=message)

    async def _pod_failed(self, sandbox: CraftSandbox, pod: dict[str, Any], run: Run) -> None:
        status = pod.get("status", {})
        why = status.get("reason") or status.get("phase")
        detail = f"pod {pod['metadata']['name']} {status.get('phase', '').lower()}: {why}"
        if status.get("message"):
            detail += f" ({status['message']})"
        failures = run.status.pod_failures or 0
        limit = self.s.settings.max_pod_failures
        if failures >= limit:
            run.phase = Phase.FAILED
            run.set(ConditionState.false(POD_READY, "PodFailedRepeatedly", detail))
            self._waiting(run, POD_DEPENDENT, "WaitingForPod")
            return
        failures += 1
        run.status.pod_failures = failures
        if failures >= limit:
            message = (
                f"{detail}; {failures} pods failed in a row, not replacing it until the spec "
                "changes (the failed pod is kept for its logs)"
            )
            run.phase = Phase.FAILED
            run.set(ConditionState.false(POD_READY, "PodFailedRepeatedly", message))
            self._waiting(run, POD_DEPENDENT, "WaitingForPod")
            self.s.events.post(
                self._body(run), type=WARNING, reason="PodFailedRepeatedly", message=message
            )
            return
        await self._delete_pod(run, pod, reason="PodFailed", message=detail, type=WARNING)
        run.requeue(_pod_backoff(self.s.settings.pod_restart_backoff, failures))

    # -- sleep ---------------------------------------------------------------------------------

    async def _sleeping(
        self, sandbox: CraftSandbox, actual: dict[str, Any] | None, run: Run
    ) -> bool:
        """Handle suspend and idle sleep; True if the pod must not run now."""
        annotations = sandbox.metadata.annotations
        sleeping_since = run.status.sleeping_since
        decision = decide_idle(
            idle_timeout=sandbox.spec.idle_timeout,
            last_activity=annotations.get(ANNOTATION_LAST_ACTIVITY),
            sleeping_since=sleeping_since,
            now=run.now,
            woke_at=run.status.woke_at,
        )
        if decision.problem and self._reported.get(run.key) != decision.problem:
            self._reported[run.key] = decision.problem  # once per distinct problem, not per pass
            self.s.events.post(
                self._body(run),
                type=WARNING,
                reason="LastActivityInvalid",
                message=decision.problem,
            )
        elif not decision.problem:
            self._reported.pop(run.key, None)
        if sandbox.spec.suspend:
            await self._stop_pod(run, actual, "Suspended", "spec.suspend is true")
            run.phase = Phase.SUSPENDED
            return True
        if decision.asleep:
            if decision.sleep_now:
                run.status.sleeping_since = run.moment()
                timeout = sandbox.spec.idle_timeout or timedelta()
                self.s.events.post(
                    self._body(run),
                    type=NORMAL,
                    reason="SandboxSleeping",
                    message=f"no activity for {timeout}; the pod is stopped until the next one",
                )
            await self._stop_pod(run, actual, "Sleeping", "the sandbox is asleep after being idle")
            run.phase = Phase.SLEEPING
            return True
        if decision.wake_now:
            run.status.sleeping_since = None
            run.status.woke_at = run.moment()
            self.s.events.post(
                self._body(run), type=NORMAL, reason="SandboxWaking", message="activity resumed"
            )
        if decision.recheck_after is not None:
            # Precise, but never longer than the check interval (robust to clock jumps).
            run.requeue(min(decision.recheck_after + 1, self.s.settings.idle_check_interval))
        return False

    async def _stop_pod(
        self, run: Run, actual: dict[str, Any] | None, reason: str, message: str
    ) -> None:
        if actual is not None and not actual["metadata"].get("deletionTimestamp"):
            await self._remove_pod(actual)
            self.s.events.post(self._body(run), type=NORMAL, reason=f"Pod{reason}", message=message)
        run.set(ConditionState.false(POD_READY, reason, message))
        run.status.pod_uid = None
        self._waiting(run, POD_DEPENDENT, reason)

    # -- onyx-cli validation -------------------------------------------------------------------

    async def _validate_cli(
        self, sandbox: CraftSandbox, pod: dict[str, Any], issued: IssuedCredential, run: Run
    ) -> None:
        uid = pod["metadata"].get("uid")
        if run.status.validated_pod_uid == uid and run.condition(CLI_VALIDATED) is not None:
            return
        namespace, name = pod["metadata"].get("namespace", ""), pod["metadata"]["name"]
        started = time.monotonic()
        try:
            result = await self.s.exec.run(
                namespace,
                name,
                SANDBOX_CONTAINER,
                list(cli_validation.VALIDATE_ARGV),
                timeout=CLI_TIMEOUT,
                max_output_bytes=CLI_MAX_OUTPUT,
            )
        except ExecError as exc:
            run.set(ConditionState.unknown(CLI_VALIDATED, "ExecFailed", str(exc)))
            if exc.retryable:
                run.retry("ExecFailed")
            return
        self.s.metrics.observe_phase(ProvisioningPhase.CLI_VALIDATION, time.monotonic() - started)
        reason, meaning = cli_validation.describe_exit(result.exit_code)
        if result.exit_code == cli_validation.EXIT_OK:
            run.status.validated_pod_uid = uid
            run.status.cli_auth_failures = None
            run.set(ConditionState.true(CLI_VALIDATED, reason, meaning))
            self.s.events.post(self._body(run), type=NORMAL, reason="CLIValidated", message=meaning)
            return
        detail = f"{meaning} (exit {result.exit_code})"
        excerpt = result.stderr_excerpt(300)
        if excerpt:
            detail += f": {excerpt}"
        if result.exit_code == cli_validation.EXIT_AUTH_FAILURE:
            await self._auth_failed(sandbox, issued, run, uid, detail)
            return
        run.set(ConditionState.false(CLI_VALIDATED, reason, detail))
        self.s.events.post(self._body(run), type=WARNING, reason=reason, message=detail)
        run.retry(reason)

    async def _auth_failed(
        self, sandbox: CraftSandbox, issued: IssuedCredential, run: Run, uid: str, detail: str
    ) -> None:
        failures = (run.status.cli_auth_failures or 0) + 1
        run.status.cli_auth_failures = failures
        if failures > 1:
            run.status.validated_pod_uid = uid
            message = f"{detail}; a freshly minted PAT was refused too, so the operator stops "
            message += "retrying until the spec changes"
            run.set(ConditionState.false(CLI_VALIDATED, "AuthFailed", message))
            self.s.events.post(self._body(run), type=WARNING, reason="AuthFailed", message=message)
            return
        message = f"{detail}; minting a new PAT and replacing the pod"
        run.set(ConditionState.false(CLI_VALIDATED, "AuthFailed", message))
        self.s.events.post(self._body(run), type=WARNING, reason="AuthFailed", message=message)
        try:
            await self.s.credentials.ensure(sandbox, rejected_pat_id=issued.pat_id)
        except CredentialsError as exc:
            self._credentials_failed(sandbox, run, "CredentialsError", str(exc))
            return
        run.requeue(0)  # the next pass writes the new Secret and replaces the pod

    # -- user library --------------------------------------------------------------------------

    async def _sync_library(self, sandbox: CraftSandbox, pod: dict[str, Any], run: Run) -> None:
        """Sync the user library into the ready pod when the revision, pod or config moved.

        Exec mode runs the sync in the library pool (:mod:`.library_exec`), Job mode in a
        Job; a pass never waits for either. One sandbox's syncs never overlap; a revision
        annotated while a sync runs is synced once it ends.
        """
        try:
            location = resolve_library_location(
                sandbox.spec.user_library, sandbox.spec.user, self.s.settings
            )
        except LibraryConfigError:
            run.status.user_library = None
            run.set(
                ConditionState.true(
                    USER_LIBRARY_SYNCED,
                    "NotConfigured",
                    "no S3 bucket in spec.userLibrary.bucket or CRAFT_S3_BUCKET: the library "
                    "is empty",
                )
            )
            return
        revision = sandbox.metadata.annotations.get(ANNOTATION_LIBRARY_REVISION, "")
        pod_uid = str(pod["metadata"].get("uid", ""))
        config = _library_config_hash(sandbox, location)
        attempt = _short_hash(f"{revision}|{pod_uid}|{config}")
        current = run.status.user_library or UserLibraryStatus()
        if sandbox.spec.user_library.mode != LibraryMode.JOB and (
            _library_current(run, current, revision, pod_uid, config)
            or current.failed_attempt == attempt  # reported; retrying cannot help
        ):
            return
        if sandbox.spec.user_library.mode == LibraryMode.JOB:
            await self._sync_library_job(sandbox, run, location, revision, pod_uid, config)
            return
        library_exec.step(
            self.s,
            run,
            sandbox,
            location,
            pod,
            library_exec.Attempt(revision, pod_uid, config, attempt),
        )

    async def _sync_library_job(
        self,
        sandbox: CraftSandbox,
        run: Run,
        location: LibraryLocation,
        revision: str,
        pod_uid: str,
        config: str,
    ) -> None:
        """Job mode: collect a finished sync Job's outcome, then start the next if needed."""
        namespace = sandbox.metadata.namespace or ""
        current = (run.status.user_library or UserLibraryStatus()).model_copy()
        running = current.job
        if running:
            job = self.s.cache.get(library_job.JOB, namespace, running)
            outcome = library_job.read_outcome(self.s.cache, job) if job is not None else None
            if job is not None and outcome is not None and not outcome.result:
                # The Job's end can arrive before its pod's: read the pods once, directly.
                selector = f"{library_job.JOB_NAME_LABEL}={running}"
                for job_pod in await self.s.kube.list(PODS, namespace, label_selector=selector):
                    self.s.cache.put(POD, job_pod)
                outcome = library_job.read_outcome(self.s.cache, job)
            if job is not None and outcome is None:
                if not run.condition_is(USER_LIBRARY_SYNCED, ConditionStatus.TRUE):
                    run.set(
                        ConditionState.unknown(
                            USER_LIBRARY_SYNCED, "Syncing", f"sync Job {running} is running"
                        )
                    )
                return  # the Job's watch events bring us back when it ends
            current.job = None
            if job is not None and outcome is not None:
                await library_job.remove_job(self.s.kube, self.s.cache, job)
                current = self._job_outcome(run, current, outcome)
            run.status.user_library = current
        attempt = _short_hash(f"{revision}|{pod_uid}|{config}")
        if _library_current(run, current, revision, pod_uid, config):
            return
        if current.failed_attempt == attempt:
            return
        sequence = (current.job_sequence or 0) + 1
        try:
            job = library_job.desired_job(
                sandbox,
                self.s.settings,
                location,
                sequence=sequence,
                revision=revision,
                pod_uid=pod_uid,
                config=config,
            )
            scoped = await library_job.scoped_credentials(self.s.settings, location, job)
        except LibrarySyncError as exc:
            self.s.metrics.sync_failed(exc.reason)
            if exc.retryable:
                # STS throttled or briefly down: try again with backoff, not once per change.
                self._child_failed(run, USER_LIBRARY_SYNCED, exc.reason, exc.message)
                return
            current.last_error = exc.message
            current.failed_attempt = attempt
            run.status.user_library = current
            run.set(ConditionState.false(USER_LIBRARY_SYNCED, exc.reason, exc.message))
            self.s.events.post(
                self._body(run), type=WARNING, reason=f"Library{exc.reason}", message=exc.message
            )
            return
        try:
            await library_job.start_job(self.s.kube, self.s.cache, job, scoped)
        except ForeignObjectError as exc:
            self._child_failed(run, USER_LIBRARY_SYNCED, f"{exc.kind}NameTaken", str(exc))
            return
        current.job = job["metadata"]["name"]
        current.job_sequence = sequence
        run.status.user_library = current
        if not run.condition_is(USER_LIBRARY_SYNCED, ConditionStatus.TRUE):
            run.set(
                ConditionState.unknown(
                    USER_LIBRARY_SYNCED, "Syncing", f"sync Job {job['metadata']['name']} started"
                )
            )
        self.s.events.post(
            self._body(run),
            type=NORMAL,
            reason="LibrarySyncJobCreated",
            message=f"created sync Job {job['metadata']['name']}",
        )

    def _job_outcome(
        self, run: Run, current: UserLibraryStatus, outcome: library_job.JobOutcome
    ) -> UserLibraryStatus:
        """Record a finished Job's outcome in ``status.userLibrary`` and the condition."""
        result = outcome.result
        if outcome.succeeded:
            synced = library_job.synced_status(
                outcome, now=run.moment(), job_sequence=current.job_sequence
            )
            message = f"{result.get('files', '?')} files, {result.get('bytes', '?')} bytes"
            run.set(ConditionState.true(USER_LIBRARY_SYNCED, "Synced", message))
            self.s.metrics.sync_finished(
                int(result.get("bytesTransferred") or 0), float(result.get("durationSeconds") or 0)
            )
            self.s.events.post(
                self._body(run), type=NORMAL, reason="LibrarySynced", message=message
            )
            return synced
        reason = str(result.get("reason") or "SyncJobFailed")
        self.s.metrics.sync_failed(reason)
        failed = current.model_copy()
        failed.last_error = outcome.message[:1000]
        if outcome.retryable:
            run.retry(reason)
        else:
            failed.failed_attempt = _short_hash(
                f"{outcome.revision}|{outcome.pod_uid}|{outcome.config}"
            )
        run.set(ConditionState.false(USER_LIBRARY_SYNCED, reason, outcome.message))
        self.s.events.post(
            self._body(run), type=WARNING, reason=f"Library{reason}", message=outcome.message
        )
        return failed

    # -- status --------------------------------------------------------------------------------

    def _waiting(self, run: Run, types: tuple[str, ...], reason: str) -> None:
        for type_ in types:
            if type_ == CLI_VALIDATED and run.condition_is(type_, ConditionStatus.FALSE):
                continue  # keep why validation failed visible while the pod is replaced
            run.set(ConditionState.unknown(type_, reason, "waiting for an earlier step"))

    def _fail_spec(self, run: Run, reason: str, message: str) -> None:
        run.phase = Phase.FAILED
        run.set(ConditionState.false(POD_READY, reason, message))
        self.s.events.post(self._body(run), type=WARNING, reason=reason, message=message)

    def _body(self, run: Run) -> Mapping[str, Any]:
        return run.body

    async def _write_status(self, run: Run) -> None:
        run.finish()
        patch = run.status_patch()
        if not patch:
            return
        logger.debug("%s/%s: status patch %s", run.namespace, run.name, patch)
        try:
            updated = await self.s.kube.patch(
                SANDBOXES, run.namespace, run.name, {"status": patch}, subresource="status"
            )
        except NotFoundError:
            return
        self.s.cache.put(SANDBOX, updated)
        if _content_changed(run.body, updated):
            # The sandbox changed while this pass ran (e.g. it is being deleted). Its watch
            # event is older than what the cache now holds and wakes nobody: go again.
            run.requeue(0)
        seconds = time_to_ready(run.body, run.status, run.now)
        if seconds is not None:
            self.s.metrics.observe_ready(seconds)
