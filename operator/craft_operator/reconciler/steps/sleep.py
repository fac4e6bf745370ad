"""Suspend and idle sleep: when the sandbox's pod must not run, and waking it on activity."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from craft_operator.api.models import ANNOTATION_LAST_ACTIVITY, Phase
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.idle import IdleDecision, decide_idle
from craft_operator.reconciler.step import Pass, Stop
from craft_operator.reconciler.steps import pod_lifecycle, pod_state
from craft_operator.status import CLI_VALIDATED, POD_READY, ConditionState

#: PodReady's reason when the pod of a suspended or sleeping sandbox cannot be deleted.
STOP_FAILED = "PodStopFailed"


async def hold(p: Pass, actual: dict[str, Any] | None) -> Stop | None:
    """Stop the pod while the sandbox is suspended or asleep (a Stop says which); ``None``
    when the pod may run, waking the sandbox if activity resumed."""
    s, run, sandbox = p.services, p.run, p.sandbox
    activity = sandbox.metadata.annotations.get(ANNOTATION_LAST_ACTIVITY)
    decision = _decide(p, activity)
    if decision.sleep_now:
        # The pass may have waited long (the credential database, say) since it read the
        # sandbox: a touch() meanwhile must keep the pod of a user who is active now.
        cached = s.cache.get(kinds.SANDBOX.name, *run.key)
        annotations = {} if cached is None else cached["metadata"].get("annotations") or {}
        fresh = annotations.get(ANNOTATION_LAST_ACTIVITY)
        if cached is not None and fresh != activity:
            run.changed_meanwhile()
            decision = _decide(p, fresh)
    _report_problem(p, decision)
    if sandbox.spec.suspend:
        run.phase = Phase.SUSPENDED
        return await _stop_pod(p, actual, "Suspended", "spec.suspend is true")
    if decision.asleep:
        if decision.sleep_now:
            run.status.sleeping_since = run.moment()
        run.phase = Phase.SLEEPING
        stop = await _stop_pod(p, actual, "Sleeping", "the sandbox is asleep after being idle")
        if decision.sleep_now and stop.reason == "Sleeping":
            timeout = sandbox.spec.idle_timeout or timedelta()
            p.event(
                "SandboxSleeping",
                f"no activity for {timeout}; the pod is stopped until the next one",
            )
        return stop
    if decision.wake_now:
        run.status.sleeping_since = None
        run.status.woke_at = run.moment()
        p.event("SandboxWaking", "activity resumed")
    if decision.recheck_after is not None:
        # Precise, but never longer than the check interval (robust to clock jumps).
        run.revisit(after=min(decision.recheck_after + 1, s.settings.idle_check_interval))
    return None


def _decide(p: Pass, activity: str | None) -> IdleDecision:
    run = p.run
    return decide_idle(
        idle_timeout=p.sandbox.spec.idle_timeout,
        last_activity=activity,
        sleeping_since=run.status.sleeping_since,
        now=run.now,
        woke_at=run.status.woke_at,
    )


def _report_problem(p: Pass, decision: IdleDecision) -> None:
    """An unreadable last-activity annotation, said once per distinct problem, not per pass."""
    reported = p.memory.reported
    if decision.problem and reported.get(p.run.key) != decision.problem:
        reported[p.run.key] = decision.problem
        p.event("LastActivityInvalid", decision.problem, warning=True)
    elif not decision.problem:
        reported.pop(p.run.key, None)


async def _stop_pod(p: Pass, actual: dict[str, Any] | None, reason: str, message: str) -> Stop:
    if actual is not None and not controlled_by(actual, p.sandbox.metadata.uid):
        actual = None  # never another's pod, whatever its name
    run = p.run
    deleting = actual
    if actual is not None and not actual["metadata"].get("deletionTimestamp"):
        try:
            deleting = await pod_lifecycle.remove(p, actual)
        except ApiError as exc:
            return _stop_failed(p, actual, message, exc)
        p.event(f"Pod{reason}", message)
    # Nor may any other pod the sandbox controls run on (a claim whose answer was lost).
    for extra in pod_lifecycle.extra_pods(p, actual):
        try:
            answer = await pod_lifecycle.remove_extra(p, extra, why=message)
        except ApiError as exc:
            return _stop_failed(p, extra, message, exc)
        pod_lifecycle.look_again_once_overdue(p, answer)
    stuck = None if actual is None else pod_state.stuck_terminating(actual, run.now)
    if actual is not None and stuck is not None:
        # Still there, and maybe still running (a partitioned node): said, and looked at.
        run.set(ConditionState.false(POD_READY, reason, f"{message}, but {stuck}"))
        run.status.pod_uid = actual["metadata"].get("uid")
        run.revisit(after=pod_state.TERMINATING_OVERDUE.total_seconds())
    else:
        run.set(ConditionState.false(POD_READY, reason, message))
        run.status.pod_uid = None
        pod_lifecycle.look_again_once_overdue(p, deleting)
    run.status.forget_stopped_pods()
    run.set(ConditionState.unknown(CLI_VALIDATED, reason, f"{message}: validated in the next pod"))
    return Stop(reason)


def _stop_failed(p: Pass, pod: dict[str, Any], message: str, exc: ApiError) -> Stop:
    """The pod runs on (an admission webhook refusing deletes, say): the status must not
    say it stopped, nor Ready stay True beside Suspended or Sleeping."""
    name = pod["metadata"]["name"]
    p.fail(POD_READY, STOP_FAILED, f"{message}, but pod {name} cannot be stopped: {exc}")
    return Stop(STOP_FAILED)
