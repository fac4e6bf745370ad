"""One reconcile pass's view of a sandbox: the status it is building and when to come back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from craft_operator.api.models import Condition, ConditionStatus, CraftSandboxStatus, Phase
from craft_operator.api.status_codec import dump_status, parse_status
from craft_operator.status import (
    POD_READY,
    READY,
    ConditionState,
    aggregate_ready,
    find_condition,
    format_time,
    kube_time,
    merge_patch,
    set_condition,
)


@dataclass(frozen=True)
class Revisit:
    """When a pass wants the sandbox visited again."""

    #: Come back in this many seconds even if nothing changes (``None``: only on a change).
    after: float | None = None
    #: A step failed in a way that may pass: retry with the work queue's backoff, for this
    #: reason (it takes precedence over ``after``, unless the sandbox ``changed``).
    backoff: str | None = None
    #: The sandbox was edited while the pass ran: come back at once, backoff or not (the
    #: edit may be the fix; its watch event, older than the cache, wakes nobody).
    changed: bool = False
    #: Come back within this many seconds at the latest, backoff or not: the moment a PAT
    #: reused from memory is read from the database again (``None``: no such moment).
    due: float | None = None


#: PodReady's reasons on a Failed sandbox that only a change of its spec (or a pod) can
#: undo: they stand while a pass stops before the pod step judges again (see
#: ``pod_lifecycle``, ``pod``, ``workspace``; not PolicyDenied nor NoServerURL, whose causes
#: lie in the policy and the settings).
STANDING_VERDICTS = frozenset(
    {"PodFailedRepeatedly", "PodRejected", "InvalidResources", "WorkspaceSizeInvalid"}
)


class Run:
    """The status a reconcile pass is building, plus when to visit the sandbox again.

    ``old_status`` is the status as the last pass left it (as stored when the pass began, or
    as an earlier pass held it) and ``status`` the one it builds, both typed; only the
    difference from the stored status is written. ``conditions`` are the
    conditions Ready requires, in the order of the steps that own them.
    """

    def __init__(
        self,
        body: Mapping[str, Any],
        now: datetime,
        conditions: Sequence[str],
        *,
        held: CraftSandboxStatus | None = None,
        held_for: float | None = None,
        acted_on: int | None = None,
        seen_before: bool = True,
    ) -> None:
        """``held``: a status an earlier pass built and held instead of writing (see
        :meth:`hold`), for ``held_for`` seconds more; the pass builds on it, and writes its
        difference from the stored one. ``acted_on``: the generation an earlier pass, cut
        short by an error after it judged the spec, acted on (its status keeps the older
        one): that spec is not new to this pass. ``seen_before``: an earlier pass began on
        this sandbox (it had the finalizer before this pass), so it may have acted on it,
        a PAT minted, even with no status to say so (that pass stopped before writing)."""
        self.body = body
        self.now = now
        self.conditions = tuple(conditions)
        meta = body.get("metadata", {})
        self.namespace: str = meta.get("namespace", "")
        self.name: str = meta["name"]
        self.key = (self.namespace, self.name)
        self.generation: int | None = meta.get("generation")
        stored, invalid = parse_status(body.get("status"))
        self.old_status = held.model_copy(deep=True) if held is not None else stored
        self.status: CraftSandboxStatus = self.old_status.model_copy(deep=True)
        # Unreadable stored fields count as present, so the first patch removes them.
        self._stored = {**dump_status(stored), **invalid}
        self.phase: Phase | None = None
        self.pod_exists = False
        #: The conditions this pass has set so far.
        self.touched: set[str] = set()
        self._backoff: str | None = None
        self._after: float | None = None
        self._due: float | None = None
        self._changed = False
        #: Seconds this pass's status may wait for the next pass instead of being written.
        self.hold_for: float | None = None
        self._held_for = held_for if held is not None else None
        #: The pass stopped at an error no step handles: it did not act on the whole spec.
        self.interrupted = False
        self._acted_on = acted_on
        self.seen_before = seen_before

    @property
    def spec_changed(self) -> bool:
        """Whether the spec changed since the operator last acted on it."""
        return self.generation not in (self.old_status.observed_generation, self._acted_on)

    def condition(self, type_: str) -> Condition | None:
        """The condition as this pass has it so far."""
        return find_condition(self.status.conditions, type_)

    def condition_is(self, type_: str, *statuses: ConditionStatus) -> bool:
        """Whether the condition is present with one of ``statuses``."""
        condition = self.condition(type_)
        return condition is not None and condition.status in statuses

    def set(self, state: ConditionState) -> None:
        """Record a condition. Its ``lastTransitionTime`` moves only if its status differs
        from the stored one: a condition set otherwise earlier in the pass and back again
        (a step that renders, then one that fails to deliver) did not transition."""
        self._set(state, self.generation)

    def _set(self, state: ConditionState, generation: int | None) -> None:
        self.touched.add(state.type)
        self.status.conditions = set_condition(
            self.status.conditions,
            state,
            generation=generation,
            now=self.now,
            order=(*self.conditions, READY),
            stored=find_condition(self.old_status.conditions, state.type),
        )

    def drop_condition(self, type_: str) -> None:
        """Remove a condition, if present."""
        if self.condition(type_) is not None:
            self.status.conditions = [c for c in self.status.conditions if c.type != type_]

    def revisit(self, *, after: float | None = None, backoff: str | None = None) -> None:
        """Ask for another pass: in ``after`` seconds (the earliest request wins; negative
        means now), or with the work queue's backoff because a step failed for ``backoff``
        (the first reason is kept). The one way a step asks to come back."""
        if (after is None) == (backoff is None):
            raise ValueError("revisit() takes exactly one of after= and backoff=")
        if backoff is not None:
            self._backoff = self._backoff or backoff
        if after is not None:
            after = max(0.0, after)
            self._after = after if self._after is None else min(self._after, after)

    def due_within(self, seconds: float) -> None:
        """Come back within ``seconds`` at the latest, whatever else the pass asks, its
        backoff included (the earliest request wins): what must be looked at again by then
        (a PAT's database read) is not put off by a failing step's growing backoff."""
        seconds = max(0.0, seconds)
        self._due = seconds if self._due is None else min(self._due, seconds)

    def hold(self, seconds: float) -> None:
        """Let the next pass, within ``seconds``, write this pass's status with its own: a
        pass that started work ending soon (a library sync) saves one status write."""
        self.hold_for = seconds if self.hold_for is None else min(self.hold_for, seconds)

    def keep_holding(self) -> None:
        """Hold the status an earlier pass held for the rest of its time, if any is left
        (a pass in between, e.g. on the echo of the pass's own writes, writes nothing)."""
        if self._held_for is not None and self._held_for > 0:
            self.hold(self._held_for)

    def changed_meanwhile(self) -> None:
        """The sandbox was edited while the pass ran: visit it again at once."""
        self._changed = True
        self.revisit(after=0)

    @property
    def verdict(self) -> Revisit:
        """When to come back, as the steps asked so far."""
        return Revisit(
            after=self._after, backoff=self._backoff, changed=self._changed, due=self._due
        )

    def timestamp(self) -> str:
        """``now`` as Kubernetes writes times."""
        return format_time(self.now)

    def moment(self) -> datetime:
        """``now`` as a status time: to the second, as Kubernetes writes times."""
        return kube_time(self.now)

    def finish(self) -> CraftSandboxStatus:
        """The complete new status: aggregate Ready, phase and observed generation."""
        ready = aggregate_ready(self.status.conditions, self.conditions)
        # Ready of a pass cut short sums up conditions of the older spec too.
        self._set(
            ready, self.old_status.observed_generation if self.interrupted else self.generation
        )
        phase = self.phase
        if phase is None:
            if self.condition_is("Ready", ConditionStatus.TRUE):
                phase = Phase.READY
            elif self.failed_pod_stands():
                phase = Phase.FAILED
            elif self.pod_exists:
                phase = Phase.PROVISIONING
            else:
                phase = Phase.PENDING
        if self.old_status.phase == Phase.FAILED and phase != Phase.FAILED:
            self.status.recovered_at = self.moment()
        self.status.phase = phase
        if self.generation is not None and not self.interrupted:
            # A pass cut short keeps the generation the last whole pass acted on: the spec's
            # steps after the error did not run (the backend's client waits for this field).
            self.status.observed_generation = self.generation
        return self.status

    def failed_already(self, reason: str, message: str) -> bool:
        """Whether the stored status says Failed for this very reason and message (so its
        Warning was said when it started: not again on every resync)."""
        held = self.condition(POD_READY)
        return (
            self.old_status.phase == Phase.FAILED
            and held is not None
            and (held.reason, held.message) == (reason, message)
        )

    def failed_pod_stands(self) -> bool:
        """Whether the verdict on a Failed sandbox's pod still holds: nothing this pass has
        judged the pod (its pass stopped earlier, the credential database down, say) and the
        spec is the one that failed. It is Failed still then, not Pending (which on-call
        would read as new, and the metrics as a recovery); a changed spec may have fixed it,
        so that one waits instead. Only a verdict of the spec or its pods stands: one whose
        cause lives elsewhere (the platform's policy, the operator's settings) may have
        been lifted without a spec change."""
        condition = self.condition(POD_READY)
        return (
            self.old_status.phase == Phase.FAILED
            and not self.spec_changed
            and POD_READY not in self.touched
            and condition is not None
            and condition.status == ConditionStatus.FALSE
            and condition.reason in STANDING_VERDICTS
        )

    def status_patch(self) -> dict[str, Any]:
        """The merge patch from the stored status to the new one (empty: nothing to write)."""
        return merge_patch(self._stored, dump_status(self.status))
