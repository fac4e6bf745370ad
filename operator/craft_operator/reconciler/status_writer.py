"""Writing a pass's status: only what changed, as one merge patch on the status subresource."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from craft_operator.api.models import Phase
from craft_operator.kube import kinds
from craft_operator.kube.client import NotFoundError
from craft_operator.metrics import time_to_ready
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.dropped_status import say_dropped
from craft_operator.reconciler.run import Run

logger = logging.getLogger(__name__)
SANDBOX = kinds.SANDBOX


async def write_status(s: Services, run: Run, *, as_read: bool = False) -> None:
    """Complete the status (Ready, phase) and write its difference from the stored one.

    Nothing is written when nothing changed. If the sandbox itself changed while the pass
    ran, the pass asks to run again at once (the watch event it would have waited for is
    older than what the cache now holds).

    With ``as_read``, only onto the sandbox as the pass read it (its resourceVersion), else
    :class:`~craft_operator.kube.client.ConflictError`: the finalizer's passes may hold a
    stale copy of a sandbox already gone, whose name a new CraftSandbox took. The API
    server ignores a uid in a status write's metadata, so that is no precondition; a
    resourceVersion is.
    """
    run.finish()
    patch = run.status_patch()
    if not patch:
        return
    logger.debug("%s/%s: status patch %s", run.namespace, run.name, patch)
    body: dict[str, Any] = {"status": patch}
    if as_read:
        body["metadata"] = {"resourceVersion": run.body["metadata"].get("resourceVersion")}
    try:
        updated = await s.kube.patch(
            SANDBOX.api, run.namespace, run.name, body, subresource="status"
        )
    except NotFoundError:
        return
    s.cache.put(SANDBOX.name, updated)
    say_dropped(s, SANDBOX, run.body, patch, updated.get("status") or {})
    if _content_changed(run.body, updated):
        run.changed_meanwhile()
    _observe_ready(s, run)


def _observe_ready(s: Services, run: Run) -> None:
    """Observe the time to Ready of a pass that made the sandbox Ready, up to now: its
    status is written, so whatever the pass did first (a claim, the PAT's delivery by
    exec, onyx-cli's validation, the Secret and SKILL.md) is in it, not only the passes
    before it. Once per sandbox: the next pass finds Ready stored."""
    if run.status.phase != Phase.READY:
        return
    seen = s.metrics.take_seen(str(run.body.get("metadata", {}).get("uid", "")))
    seconds = time_to_ready(run.body, run.status, s.clock(), seen)
    if seconds is not None:
        s.metrics.observe_ready(seconds)


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
