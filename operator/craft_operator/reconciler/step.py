"""What a step of a pass is, and what the steps of one pass share.

A step owns one condition. It reads the sandbox and what earlier steps found from the
:class:`Pass`, converges what it is responsible for, records its condition in ``run``, and
returns ``None`` to let the pass go on, or a :class:`Stop` saying why the steps after it
must wait. The order of the steps is the table in :mod:`craft_operator.reconciler.table`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from craft_operator.api.models import CraftSandbox, CraftSandboxStatus, Phase
from craft_operator.kube.client import ApiError
from craft_operator.kube.kinds import CachedKind
from craft_operator.metrics import ProvisioningPhase
from craft_operator.reconciler.children import ForeignObjectError, converge
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.ports import IssuedCredential
from craft_operator.reconciler.run import Run
from craft_operator.status import POD_READY, ConditionState

NORMAL, WARNING = "Normal", "Warning"
#: The message of a condition a stopped pass left to wait (its reason is the stop's).
WAITING_MESSAGE = "waiting for an earlier step"


@dataclass(frozen=True)
class Stop:
    """The pass ends after the current row of steps; later conditions wait for ``reason``."""

    reason: str


@dataclass(frozen=True)
class Step:
    """One step of a row: the condition it owns and the coroutine that converges it.

    A step that owns no condition (``None``) converges a child on behalf of another step
    and reports its failures on that step's condition (the Secret on CredentialsReady).
    """

    condition: str | None
    run: Callable[[Pass], Awaitable[Stop | None]]
    #: A False condition of this step stays as it is while an earlier step stops the pass
    #: (e.g. why the CLI was refused stays visible while the pod is replaced).
    keeps_failure: bool = False


@dataclass(frozen=True)
class Held:
    """What a pass held for the next one instead of writing and posting it."""

    #: The sandbox's resourceVersion the status was built from (used only if still current).
    version: str
    status: CraftSandboxStatus
    #: When (``time.monotonic()``) it must be written at the latest.
    until: float
    #: The pass's Normal events (reason, message), said with the next pass's.
    notes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SkillMark:
    """The SKILL.md a sandbox's ConfigMap was last written or found to hold, without its
    text (the ConfigMap holds that): what it was rendered from and what it says."""

    #: The digests of the sources and of the template (``None``: the built-in one).
    inputs: tuple[str, str | None]
    content_hash: str
    source_count: int
    unknown_sources: tuple[str, ...]


@dataclass(frozen=True)
class Refusal:
    """A resize of a volume the API server refused: to what size, when, and why."""

    size: str
    at: datetime
    message: str


@dataclass
class Memory:
    """What the reconciler remembers of a sandbox between passes (never persisted)."""

    #: The problem last reported in an event, per sandbox, so it is said once, not per pass.
    reported: dict[tuple[str, str], str] = field(default_factory=dict)
    #: What a pass held for the next one, per sandbox (see ``Run.hold``).
    held: dict[tuple[str, str], Held] = field(default_factory=dict)
    #: The reason (and pool) of the cold start said while the sandbox has no pod yet, per
    #: sandbox: a cold pod whose creation is retried (a quota, say) is one cold start, not
    #: one a pass, counted when the pod is created.
    cold_start: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    #: The claims that went unanswered and whose pods could not be read (``ClaimUnsettled``),
    #: per sandbox, the latest last (a few at most): each one's pool, its pod's uid and the
    #: seconds the claim took until the pass gave up on it. The one whose pod a later pass
    #: finds the sandbox's is counted.
    unsettled_claims: dict[tuple[str, str], tuple[tuple[str, str, float], ...]] = field(
        default_factory=dict
    )
    #: Since when the sandbox's pod (by uid) has been seen not Ready, per sandbox: a pass
    #: stopped by an earlier row (the database down, say) marks PodReady Unknown, and the
    #: False that follows would restart the provisioning timeout's clock.
    starting: dict[tuple[str, str], tuple[str, datetime]] = field(default_factory=dict)
    #: When this process created the sandbox's pod (by uid), on its own clock, per sandbox:
    #: the pod's creationTimestamp is the API server's, which may run minutes apart.
    made: dict[tuple[str, str], tuple[str, datetime]] = field(default_factory=dict)
    #: The sandbox's pod (by uid) whose creation to Ready was observed, per sandbox: a pass
    #: whose status write failed leaves PodReady not True, and its retry must not observe
    #: the same pod again.
    timed_ready: dict[tuple[str, str], str] = field(default_factory=dict)
    #: The suspension each sandbox was last resumed from, and the moment of that resume: a
    #: pass that finds the same suspension again (its resume's status was never written)
    #: resumes it as before, once.
    resumed: dict[tuple[str, str], tuple[datetime, datetime]] = field(default_factory=dict)
    #: The generation a pass cut short by an error acted on, per sandbox, until a whole
    #: pass writes it as observedGeneration (see ``Run.spec_changed``).
    acted_on: dict[tuple[str, str], int] = field(default_factory=dict)
    #: The running sync Job (by uid) found to have its Secret of scoped credentials, per
    #: sandbox: checked once per Job and process (see ``library_job``).
    job_secrets: dict[tuple[str, str], str] = field(default_factory=dict)
    #: The images the API server admitted the sandbox's pod (by uid) with, where a webhook
    #: changed them, per sandbox: they hold until a status write keeps them, which a pass
    #: may lose (the next pass must not take the webhook's change for an edit).
    admitted: dict[tuple[str, str], tuple[str, list[str]]] = field(default_factory=dict)

    #: When the API server last refused the sandbox's pod for good (``PodRejected``), per
    #: sandbox: the same spec is tried again only after ``pod_lifecycle.RETRY_REJECTED_AFTER``.
    rejected: dict[tuple[str, str], datetime] = field(default_factory=dict)
    #: Resizes the API server refused, per sandbox and volume name (see ``volume_growth``).
    refused_resizes: dict[tuple[str, str], dict[str, Refusal]] = field(default_factory=dict)
    #: Sandboxes whose last status write failed (an object too large for etcd, say): their
    #: next pass writes at once instead of holding.
    unwritten: dict[tuple[str, str], bool] = field(default_factory=dict)
    #: The SKILL.md each sandbox's ConfigMap holds, per sandbox: a pass over an unchanged
    #: sandbox renders nothing, however many sandboxes share the renderer's memo.
    skills: dict[tuple[str, str], SkillMark] = field(default_factory=dict)

    def forget(self, key: tuple[str, str]) -> None:
        """Drop everything remembered about one sandbox."""
        for table in fields(self):
            getattr(self, table.name).pop(key, None)


@dataclass
class Pass:
    """One pass over one sandbox, as its steps see it."""

    services: Services
    sandbox: CraftSandbox
    run: Run
    memory: Memory = field(default_factory=Memory)
    #: The sandbox's live PAT, once the credentials step found or minted it.
    issued: IssuedCredential | None = None
    #: The sandbox's pod, once the pod step found it running and Ready.
    pod: dict[str, Any] | None = None

    @property
    def body(self) -> Mapping[str, Any]:
        """The CraftSandbox as this pass read it (the object events are about)."""
        return self.run.body

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        """Post an event about the sandbox."""
        kind = WARNING if warning else NORMAL
        self.services.events.post(self.body, type=kind, reason=reason, message=message)

    def fail(self, condition: str, reason: str, message: str) -> Stop:
        """A failure that may pass: ``condition`` False, a Warning event, retry with backoff."""
        self.run.set(ConditionState.false(condition, reason, message))
        self.event(reason, message, warning=True)
        self.run.revisit(backoff=reason)
        return Stop(reason)

    def fail_spec(self, reason: str, message: str) -> Stop:
        """A spec that cannot work: the sandbox Failed until its spec (or settings) change.
        Its Warning is said once, not again on every revisit of a sandbox Failed so."""
        said = self.run.failed_already(reason, message)
        self.run.phase = Phase.FAILED
        self.run.set(ConditionState.false(POD_READY, reason, message))
        if not said:
            self.event(reason, message, warning=True)
        return Stop(reason)

    async def converge_child(
        self,
        desired: dict[str, Any],
        kind: CachedKind,
        condition: str,
        *,
        label: str,
        phase: ProvisioningPhase | None = None,
        detail: str = "",
    ) -> Stop | None:
        """Converge one child; an event when it changed; a failure reported on ``condition``.

        ``label`` names the child in reasons: ``<label>Created``, ``<label>NameTaken``,
        ``<label>Terminating`` (another's object of its name is being deleted), ...
        """
        s = self.services
        started = time.monotonic()
        try:
            result = await converge(s.kube, s.cache, kind.api, kind.name, desired)
        except ForeignObjectError as exc:
            return self.fail(condition, exc.reason(label), str(exc))
        except ApiError as exc:
            return self.fail(condition, f"{label}WriteFailed", str(exc))
        if result.action != "unchanged":
            if phase is not None:
                s.metrics.observe_phase(phase, time.monotonic() - started)
            name = desired["metadata"]["name"]
            self.event(
                f"{label}{result.action.capitalize()}",
                f"{result.action} {desired['kind']} {name}{detail}",
            )
        return None
