"""Exec only into the pod a call was meant for.

The exec API names a pod, not its uid. A call made a while after the pod was read (a PAT
delivery that waited for room, a library sync queued behind others, a pass slowed by the
database) could reach another pod that took the name meanwhile, and a pool pod's name is
anyone's to give a CraftSandbox: another user's pod would receive this user's PAT or
library. So every such exec first checks, in the watch cache, that the pod of that name is
still the one that was read (its uid), the sandbox's (its controller reference) and not
being deleted; a transport that waits for a connection checks again once it holds one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.exec import BEFORE_START, ExecError, ExecResult, ExecTransport, Stdin
from craft_operator.reconciler.children import controlled_by

if TYPE_CHECKING:
    from craft_operator.reconciler.step import Pass


class PodChangedError(ExecError):
    """The pod of that name is no longer the one the call was for: nothing was run in it.
    Retryable: the next pass works on the sandbox's pod as it is then."""


def pod_check(
    cache: ObjectCache, pod: Mapping[str, Any], owner_uid: str | None
) -> Callable[[], None]:
    """A check that the pod ``pod`` (as read) is still in the cache under its name, with
    its uid, controlled by ``owner_uid`` and not being deleted; it raises
    :class:`PodChangedError` otherwise."""
    meta = pod.get("metadata", {})
    namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid")

    def check() -> None:
        now = cache.get(kinds.POD.name, namespace, name)
        if now is None or not uid or now.get("metadata", {}).get("uid") != uid:
            raise PodChangedError(f"pod {name} is gone or was replaced; nothing was run in it")
        if not controlled_by(now, owner_uid) or now["metadata"].get("deletionTimestamp"):
            raise PodChangedError(f"pod {name} is no longer the sandbox's running pod")

    return check


class GuardedExec:
    """An :class:`ExecTransport` that runs ``check`` before each call (see the module)."""

    def __init__(self, transport: ExecTransport, check: Callable[[], None]) -> None:
        """Exec through ``transport`` once ``check`` passes."""
        self._transport = transport
        self._check = check

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the transport enforces it
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        """:meth:`ExecTransport.run`, if the pod is still the one meant: checked now, and
        again by a transport that waits for a connection, once it holds one."""
        self._check()
        before = BEFORE_START.set(self._check)
        try:
            return await self._transport.run(
                namespace,
                pod,
                container,
                argv,
                stdin=stdin,
                timeout=timeout,
                max_output_bytes=max_output_bytes,
            )
        finally:
            BEFORE_START.reset(before)


def exec_into_pod_of(p: Pass) -> GuardedExec:
    """The services' exec, for the pod this pass read (``p.pod``) only."""
    assert p.pod is not None
    check = pod_check(p.services.cache, p.pod, p.sandbox.metadata.uid)
    return GuardedExec(p.services.exec, check)
