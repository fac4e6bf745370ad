"""Suspend and resume, noted at the start of every pass (before any step may stop it).

``status.suspendedAt`` records that the sandbox is suspended from the first pass that sees
``spec.suspend`` true, whatever else that pass does; the first pass that sees it false
again resumes the sandbox, even if a step stops that pass early (the database down, say).
A resume is a wake (``status.wokeAt``, event ``SandboxResumed``): the idle window starts
again (the last activity is from before the suspension, and the sandbox would otherwise
fall asleep at once), a matching pool's pod is claimed like any woken sandbox's, and the
time to Ready counts from the resume. A sandbox asleep when it was suspended sleeps on
until its next activity. The pod itself is stopped and started by the pod step
(``steps/sleep.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from craft_operator.api.models import Phase
from craft_operator.reconciler.step import Pass

#: The suspension of a sandbox known by its phase alone (from before suspendedAt): one
#: fixed moment, so that a pass that finds it again resumes it once.
PHASE_ONLY = datetime.min.replace(tzinfo=UTC)


def note(p: Pass) -> None:
    """Record a suspension, or resume the sandbox whose suspension just ended."""
    run, key = p.run, p.run.key
    status = run.status
    if p.sandbox.spec.suspend:
        if status.suspended_at is None:
            status.suspended_at = run.moment()
        p.memory.resumed.pop(key, None)  # the next resume is a new one
        return
    suspended_at = status.suspended_at
    # A sandbox suspended before suspendedAt existed says so by its phase alone.
    if suspended_at is None and status.phase != Phase.SUSPENDED:
        return
    status.suspended_at = None
    if status.sleeping_since is not None:
        return
    since = suspended_at or PHASE_ONLY
    remembered = p.memory.resumed.get(key)
    if remembered is not None and remembered[0] == since:
        status.woke_at = remembered[1]  # resumed by a pass whose status was not written
        return
    status.woke_at = run.moment()
    p.memory.resumed[key] = (since, status.woke_at)
    p.event("SandboxResumed", "spec.suspend is false again: the pod starts")
