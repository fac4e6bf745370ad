"""The asyncio client: create, wait for, annotate, suspend and delete CraftSandboxes.

:class:`AsyncSandboxClient` is the whole client; :class:`~craft_operator.client.sync.SandboxClient`
runs it for synchronous callers. Writes use the client's own field manager: ``ensure`` is a
server-side apply of only the fields the backend sets, all of them on every call (a field
it leaves out it gives up; never forced unless asked, so it does not fight GitOps or the
operator); annotations and ``spec.suspend`` are merge patches.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from craft_operator.api.models import (
    ANNOTATION_LAST_ACTIVITY,
    ANNOTATION_LIBRARY_REVISION,
    MAX_LIBRARY_REVISION,
    CraftSandbox,
    CraftSandboxStatus,
    Source,
    Workspace,
)
from craft_operator.api.status_codec import parse_status
from craft_operator.client.connection import Connection, discover
from craft_operator.client.errors import (
    ApiError,
    ConflictError,
    CrdMissingError,
    FieldConflictError,
    NotFoundError,
    Request,
    SandboxGoneError,
    UnreachableError,
    WaitTimeoutError,
)
from craft_operator.client.objects import (
    apply_body,
    format_time,
    parse_activity,
    sandbox_path,
    to_model,
    to_second,
)
from craft_operator.client.readiness import (
    Progress,
    failure_of,
    library_failure_key,
    library_synced,
    pod_stopped,
    progress_of,
    stop_refused,
)
from craft_operator.client.transport import APPLY_PATCH, MERGE_PATCH, RetryPolicy, Transport
from craft_operator.client.watching import Watcher

FIELD_MANAGER = "onyx-backend"
#: Statuses of a failed try that the server may have carried out all the same (a gateway's
#: timeout or error, not a 503 or 429 refusal); network failures count when the request
#: may have been sent (:attr:`UnreachableError.sent`).
LOST_ANSWER = frozenset({500, 502, 504})
T = TypeVar("T")
ProgressCallback = Callable[[Progress], object]


class AsyncSandboxClient:
    """CraftSandboxes for the Onyx backend, on asyncio (FastAPI handlers, async workers).

    ``connection`` defaults to what kubectl would use (``kubeconfig``/``context``, else
    ``$KUBECONFIG``, the in-cluster service account, ``~/.kube/config``). Close it (or use
    ``async with``) when done.
    """

    def __init__(
        self,
        connection: Connection | None = None,
        *,
        kubeconfig: str | Path | None = None,
        context: str | None = None,
        field_manager: str = FIELD_MANAGER,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.connection = connection or discover(kubeconfig, context)
        self.field_manager = field_manager
        self.retry = retry or RetryPolicy()
        self._http = Transport(self.connection, timeout=timeout, retry=self.retry)
        #: API calls by verb (``get``, ``watch``, ``patch``, ...): what a wait cost. A call's
        #: own retries after throttling or server errors are not counted.
        self.requests: collections.Counter[str] = collections.Counter()
        self._watcher = Watcher(self._http, self._get_or_none, self.requests)

    async def __aenter__(self) -> AsyncSandboxClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session."""
        await self._http.close()

    # -- create or update -------------------------------------------------------------------

    async def ensure(
        self,
        namespace: str,
        name: str,
        *,
        user_id: str,
        tenant_id: str = "public",
        sources: Iterable[Source | str] | None = None,
        email: str | None = None,
        labels: Mapping[str, str] | None = None,
        force: bool = False,
        workspace: Workspace | Mapping[str, Any] | None = None,
        **spec: Any,
    ) -> CraftSandbox:
        """Create the sandbox, or update the fields the backend owns (server-side apply).

        Declarative: pass the whole spec the backend wants on every call, not only what
        changed. A field this manager applied before and leaves out now is given up, and
        removed from the sandbox unless another manager sets it too: an ``ensure`` with
        only ``user_library`` removes the ``idle_timeout`` and ``sources`` applied before.
        ``workspace`` asks for a volume at ``/workspace/sessions`` that survives sleep and
        wake: a :class:`Workspace` or a mapping (``size``, ``storage_class_name``,
        ``retain``). Once applied, pass it on every later ``ensure``: leaving it out asks
        to remove it, which the API server refuses (:class:`InvalidError`) so that no
        user's files are deleted by an omission; its size may only grow.
        ``sources`` (the user's connected sources) is sent only when given, as every field:
        without it the backend claims none, so those another manager set stay (``[]``: the
        user has none).
        ``spec`` takes any other field of :class:`CraftSandboxSpec` by its Python name
        (``idle_timeout``, ``user_library``, ``resources``, ...). ``spec.suspend`` is not
        set here (see :meth:`sleep`), so ensuring a sleeping sandbox does not wake it.
        Fields another manager owns raise :class:`FieldConflictError` unless ``force``.
        A sandbox being deleted (``delete()`` without ``wait``, its finalizer still at work)
        raises :class:`SandboxGoneError`: ensure it again once it is gone.
        """
        body = apply_body(
            namespace, name, user_id, tenant_id, sources, email, labels, spec, workspace
        )
        params = {"fieldManager": self.field_manager, "force": "true" if force else "false"}
        what = Request("patch", namespace, name)

        async def apply() -> dict[str, Any]:
            return await self._call(
                "PATCH", sandbox_path(namespace, name), what, body, APPLY_PATCH, params
            )

        applied = await self._on_conflict(apply)
        if applied.get("metadata", {}).get("deletionTimestamp"):
            # The apply updated an object that is about to vanish, with everything it has.
            raise SandboxGoneError(
                f'CraftSandbox "{name}" in namespace "{namespace}" is being deleted: ensure() '
                "it again once it is gone (delete(..., wait=True) waits for that)"
            )
        return to_model(applied)

    # -- reading ----------------------------------------------------------------------------

    async def get(self, namespace: str, name: str) -> CraftSandbox:
        """The sandbox, typed (its status parsed as the operator does)."""
        return to_model(await self._get(namespace, name))

    async def status(self, namespace: str, name: str) -> CraftSandboxStatus:
        """The sandbox's typed status (empty before the operator's first pass)."""
        return parse_status((await self._get(namespace, name)).get("status"))[0]

    async def pod_name(self, namespace: str, name: str) -> str | None:
        """The sandbox pod's name, or ``None`` while it has none (not yet, asleep, suspended)."""
        status = await self.status(namespace, name)
        return status.pod_name if status.pod_uid else None

    # -- waiting ----------------------------------------------------------------------------

    async def wait_ready(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float = 300.0,  # noqa: ASYNC109 - the wait's own deadline, with its own error
        on_progress: ProgressCallback | None = None,
    ) -> CraftSandbox:
        """Watch the sandbox until it is Ready for its current spec; the sandbox then.

        ``on_progress(progress)`` is called with the first state seen and on every change of
        phase or conditions (it may be a coroutine function). Raises :class:`SandboxFailedError`
        when the sandbox cannot become Ready as it is, :class:`SandboxGoneError` if it is
        deleted, :class:`WaitTimeoutError` after ``timeout`` seconds. A sandbox asleep
        (``Suspended``, or ``Sleeping`` after being idle with no activity since) fails it at
        once: :meth:`wake` it, or :meth:`touch` one asleep on idleness, first. A library sync
        that failed for good fails the wait only if it is the current attempt's (keyed by the
        annotated revision, the pod and the last successful sync's configuration): the status
        keeps an earlier attempt's failure while the operator retries after a new revision,
        pod or configuration. The failure of a sync under a new configuration cannot be keyed
        so and leaves the wait to its timeout; before the first successful sync any such
        failure fails the wait at once. A sync that failed on a full library volume
        (``DestinationFailed``) does not fail it while the volume is being grown
        (``status.libraryVolume`` requests more than its capacity): the operator syncs
        again once it has.
        """
        return await self._wait_ready(namespace, name, timeout, on_progress)

    async def _wait_ready(
        self,
        namespace: str,
        name: str,
        timeout: float,  # noqa: ASYNC109
        on_progress: ProgressCallback | None,
        *,
        budget: float | None = None,
    ) -> CraftSandbox:
        """:meth:`wait_ready`; ``budget``: the caller's whole timeout, which a
        :class:`WaitTimeoutError` names when the wait has only what is left of it."""
        seen: list[tuple[object, ...]] = []

        async def decide(found: dict[str, Any] | None) -> dict[str, Any] | None:
            obj = _present(found, namespace, name)
            progress = progress_of(obj)
            if on_progress is not None and (not seen or seen[-1] != progress.key):
                seen.append(progress.key)
                await _call_back(on_progress, progress)
            if progress.ready:
                return obj
            failure = failure_of(progress)
            if failure is not None:
                raise failure
            return None

        found = await self._watcher.until(namespace, name, decide, timeout, "Ready", budget=budget)
        return to_model(found)

    # -- the backend's triggers ---------------------------------------------------------------

    async def touch(self, namespace: str, name: str, *, at: datetime | None = None) -> datetime:
        """Record user activity (the last-activity annotation); never moves it backwards.

        The stored time after the call (``at``, or a later one already there). Activity now
        (no ``at``) wakes a sandbox asleep on idleness even if this clock is behind the
        operator's: the stamp is raised past ``status.sleepingSince``, as :meth:`wake` does.
        A given ``at`` is stored as it is.
        """
        moment = to_second(at or datetime.now(UTC))
        return await self._set_activity(namespace, name, moment, unsuspend=False, wakes=at is None)

    async def notify_library_changed(
        self,
        namespace: str,
        name: str,
        revision: str | None = None,
        *,
        wait: bool = False,
        timeout: float = 300.0,  # noqa: ASYNC109
    ) -> str:
        """Say the user's files in S3 changed: the operator syncs them (revision annotation).

        ``revision`` defaults to a fresh value; any new value triggers one sync. ``wait``
        until the operator synced it, or a later revision written over it (that sync lists
        the whole library, these files too); a sleeping sandbox syncs when it wakes. A sync
        that fails in a way retrying cannot fix raises :class:`SandboxFailedError`, and so
        does a sandbox with no bucket configured (``UserLibrarySynced`` True
        ``NotConfigured``: nothing is synced); :class:`SandboxGoneError` if it is deleted.
        A ``revision`` over 1,024 characters, which the operator would not sync, raises
        :class:`ValueError` and writes nothing.
        """
        value = revision if revision is not None else str(time.time_ns())
        if len(value) > MAX_LIBRARY_REVISION:
            raise ValueError(
                f"a library revision has at most {MAX_LIBRARY_REVISION:,} characters, "
                f"not {len(value):,}"
            )
        patch = {"metadata": {"annotations": {ANNOTATION_LIBRARY_REVISION: value}}}
        what = f"library sync {value}"
        if not wait:
            await self._merge(namespace, name, patch)
            return value
        written, left = await _within(
            timeout, namespace, name, what, self._merge(namespace, name, patch)
        )
        before = library_failure_key(written)

        async def decide(obj: dict[str, Any] | None) -> bool | None:
            return library_synced(_present(obj, namespace, name), value, before)

        await self._watcher.until(namespace, name, decide, left, what, budget=timeout)
        return value

    async def sleep(
        self,
        namespace: str,
        name: str,
        *,
        wait: bool = False,
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> None:
        """Put the sandbox to sleep now (``spec.suspend: true``): its pod is deleted, its
        credentials, status and library record kept. ``wait`` until the operator has
        stopped the pod: a status for the suspended spec that names no pod, whatever its
        phase (``Suspended``; ``Failed`` for a sandbox the platform's policy denies, whose
        pod the operator deleted then). :class:`SandboxGoneError` if the sandbox is deleted
        meanwhile; :class:`SandboxFailedError` (``InvalidSpec``) if the operator cannot read
        the spec, and so leaves the pod running."""
        suspend = self._merge(namespace, name, {"spec": {"suspend": True}})
        if not wait:
            await suspend
            return
        _, left = await _within(timeout, namespace, name, "Suspended", suspend)

        async def decide(obj: dict[str, Any] | None) -> bool | None:
            progress = progress_of(_present(obj, namespace, name))
            refused = stop_refused(progress)
            if refused is not None:
                raise refused
            return True if pod_stopped(progress) else None

        await self._watcher.until(namespace, name, decide, left, "Suspended", budget=timeout)

    async def wake(
        self,
        namespace: str,
        name: str,
        *,
        wait: bool = False,
        timeout: float = 300.0,  # noqa: ASYNC109
        on_progress: ProgressCallback | None = None,
    ) -> None:
        """Wake the sandbox from either sleep: ``spec.suspend`` back to false, and activity
        later than the moment it fell asleep on idleness. ``wait`` until Ready."""
        woken = self._set_activity(namespace, name, to_second(datetime.now(UTC)), unsuspend=True)
        if not wait:
            await woken
            return
        _, left = await _within(timeout, namespace, name, "Ready", woken)
        await self._wait_ready(namespace, name, left, on_progress, budget=timeout)

    async def delete(
        self,
        namespace: str,
        name: str,
        *,
        wait: bool = False,
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> bool:
        """Delete the sandbox (the operator revokes its PAT, its children go with it).

        False if it did not exist. ``wait`` until it is gone, i.e. the operator finished.
        A cluster without the CRD raises :class:`CrdMissingError`.
        """
        if not wait:
            return await self._delete(namespace, name) is not None
        deleted, left = await _within(
            timeout, namespace, name, "deletion", self._delete(namespace, name)
        )
        if deleted is not None:

            async def gone(obj: dict[str, Any] | None) -> bool | None:
                # Another of its name (an ensure() right after) is not the one deleted.
                if obj is None or (deleted and obj["metadata"].get("uid") != deleted):
                    return True
                return None

            await self._watcher.until(namespace, name, gone, left, "deletion", budget=timeout)
        return deleted is not None

    async def _delete(self, namespace: str, name: str) -> str | None:
        """Ask for the deletion: the uid of the sandbox deleted (``""`` if the answer that
        would say it was lost), ``None`` if none existed."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        retried: list[ApiError] = []
        try:
            answer = await self._call(
                "DELETE",
                sandbox_path(namespace, name),
                Request("delete", namespace, name),
                body,
                retried=retried,
            )
        except CrdMissingError:
            raise
        except NotFoundError:
            # A retry that finds nothing after a try the server may have carried out: that
            # try deleted it.
            if not any(_maybe_carried_out(exc) for exc in retried):
                return None
            return ""
        # The object (being deleted) or, once it is gone, a Status whose details name it.
        uid = (answer.get("metadata") or {}).get("uid") or (answer.get("details") or {}).get("uid")
        return str(uid or "")

    # -- internals ----------------------------------------------------------------------------

    async def _set_activity(
        self, namespace: str, name: str, moment: datetime, *, unsuspend: bool, wakes: bool = True
    ) -> datetime:
        """Raise the last-activity annotation to ``moment`` (and unsuspend), conditionally on
        the version read, so two writers never move it backwards; retried on conflict.
        ``wakes``: past ``status.sleepingSince`` too, whatever the clocks say."""

        async def attempt() -> datetime:
            obj = await self._get(namespace, name)
            meta = obj["metadata"]
            target = moment
            if wakes:
                slept = parse_status(obj.get("status"))[0].sleeping_since
                if slept is not None and target <= slept:  # clocks differ: still wake it
                    target = to_second(slept + timedelta(seconds=1))
            stored = parse_activity((meta.get("annotations") or {}).get(ANNOTATION_LAST_ACTIVITY))
            patch: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"]}}
            if stored is None or stored < target:
                patch["metadata"]["annotations"] = {ANNOTATION_LAST_ACTIVITY: format_time(target)}
            if unsuspend and (obj.get("spec") or {}).get("suspend"):
                patch["spec"] = {"suspend": False}
            if len(patch) > 1 or "annotations" in patch["metadata"]:
                await self._merge(namespace, name, patch)
            return target if stored is None or stored < target else stored

        return await self._on_conflict(attempt)

    async def _on_conflict(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run ``operation`` again (it re-reads what it needs) after an optimistic conflict."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await operation()
            except FieldConflictError:
                raise  # another manager's field: the same request would conflict again
            except ConflictError:
                if attempt >= self.retry.attempts:
                    raise
                await self._http.backoff(attempt, None)

    async def _get(self, namespace: str, name: str) -> dict[str, Any]:
        return await self._call(
            "GET", sandbox_path(namespace, name), Request("get", namespace, name)
        )

    async def _get_or_none(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._get(namespace, name)
        except CrdMissingError:
            raise  # not "the sandbox is gone": nothing can be found
        except NotFoundError:
            return None

    async def _merge(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call(
            "PATCH",
            sandbox_path(namespace, name),
            Request("patch", namespace, name),
            patch,
            MERGE_PATCH,
            {"fieldManager": self.field_manager},
        )

    async def _call(
        self,
        method: str,
        path: str,
        what: Request,
        body: Any = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        *,
        retried: list[ApiError] | None = None,
    ) -> dict[str, Any]:
        self.requests[what.verb] += 1
        return await self._http.request(
            method,
            path,
            what,
            body=body,
            content_type=content_type,
            params=params,
            retried=retried,
        )


def _present(obj: dict[str, Any] | None, namespace: str, name: str) -> dict[str, Any]:
    """The sandbox a wait saw; :class:`SandboxGoneError` if it is gone or being deleted."""
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        raise SandboxGoneError(
            f'CraftSandbox "{name}" in namespace "{namespace}" does not exist or is being deleted'
        )
    return obj


def _maybe_carried_out(exc: ApiError) -> bool:
    """Whether the server may have done what a failed try asked: its answer was lost."""
    if isinstance(exc, UnreachableError):
        return exc.sent
    return exc.status in LOST_ANSWER


async def _call_back(callback: ProgressCallback, progress: Progress) -> None:
    result = callback(progress)
    if inspect.isawaitable(result):
        await result


async def _within(
    timeout: float,  # noqa: ASYNC109 - the caller's deadline, shared with its wait
    namespace: str,
    name: str,
    what: str,
    write: Awaitable[T],
) -> tuple[T, float]:
    """``write`` (with its retries) within ``timeout``, and the seconds left for the wait
    that follows it: a throttled write must not stretch a wait past its deadline (the
    wait's :class:`WaitTimeoutError` still names ``timeout``, the caller's). Raises
    :class:`WaitTimeoutError` if the write does not finish in time (it may have landed:
    every write the client makes can be made again)."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout) as deadline:
            result = await write
    except TimeoutError:
        if not deadline.expired():
            raise
        where = f'CraftSandbox "{name}" in namespace "{namespace}"'
        raise WaitTimeoutError(
            f"{where}: {what}", timeout, "the write before the wait had not finished"
        ) from None
    return result, max(0.0, timeout - (time.monotonic() - started))
