"""One reconcile pass's view of a sandbox: the status it is building and when to come back."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from craft_operator.api.models import Phase
from craft_operator.status import (
    ConditionState,
    aggregate_ready,
    find_condition,
    format_time,
    merge_patch,
    set_condition,
)


class Run:
    """The status a reconcile pass is building, plus its verdict on retries and revisits."""

    def __init__(self, body: Mapping[str, Any], now: datetime) -> None:
        self.body = body
        self.now = now
        meta = body.get("metadata", {})
        self.namespace: str = meta.get("namespace", "")
        self.name: str = meta["name"]
        self.key = (self.namespace, self.name)
        self.generation: int | None = meta.get("generation")
        self.old_status: dict[str, Any] = copy.deepcopy(dict(body.get("status") or {}))
        self.status: dict[str, Any] = copy.deepcopy(self.old_status)
        self.phase: Phase | None = None
        self.pod_exists = False
        #: Why a step failed in a way that may pass: the pass is retried with backoff.
        self.retry_reason: str | None = None
        self._requeue: float | None = None

    @property
    def spec_changed(self) -> bool:
        """Whether the spec changed since the operator last acted on it."""
        return self.old_status.get("observedGeneration") != self.generation

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        """The condition as this pass has it so far."""
        return find_condition(self.status.get("conditions") or [], type_)

    def set(self, state: ConditionState) -> None:
        """Record a condition."""
        self.status["conditions"] = set_condition(
            self.status.get("conditions") or [], state, generation=self.generation, now=self.now
        )

    def retry(self, reason: str) -> None:
        """A step failed in a way that may pass: retry the whole pass with backoff."""
        self.retry_reason = self.retry_reason or reason

    def requeue(self, seconds: float) -> None:
        """Come back in ``seconds`` even if nothing changes (the earliest request wins)."""
        seconds = max(0.0, seconds)
        self._requeue = seconds if self._requeue is None else min(self._requeue, seconds)

    @property
    def requeue_after(self) -> float | None:
        """When to revisit, if any step asked."""
        return self._requeue

    def timestamp(self) -> str:
        """``now`` as Kubernetes writes times."""
        return format_time(self.now)

    def finish(self) -> dict[str, Any]:
        """The complete new status: aggregate Ready, phase and observed generation."""
        self.set(aggregate_ready(self.status.get("conditions") or []))
        ready = self.condition("Ready")
        phase = self.phase
        if phase is None:
            if ready is not None and ready.get("status") == "True":
                phase = Phase.READY
            elif self.pod_exists:
                phase = Phase.PROVISIONING
            else:
                phase = Phase.PENDING
        self.status["phase"] = phase.value
        if self.generation is not None:
            self.status["observedGeneration"] = self.generation
        return self.status

    def status_patch(self) -> dict[str, Any]:
        """The merge patch from the stored status to the new one (empty: nothing to write)."""
        return merge_patch(self.old_status, self.status)
