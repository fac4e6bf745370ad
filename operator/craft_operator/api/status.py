"""The status of a CraftSandbox: what the operator observed, written only by it."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import ConfigDict, Field

from craft_operator.api.base import ApiModel


class Phase(StrEnum):
    """Where a sandbox is in its life."""

    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    READY = "Ready"
    SLEEPING = "Sleeping"
    SUSPENDED = "Suspended"
    FAILED = "Failed"
    TERMINATING = "Terminating"


#: The containers whose admitted images a sandbox's status keeps (a pod's containers are
#: fixed at its creation; a webhook adding more than this many is not expected).
MAX_ADMITTED_IMAGES = 64


class StatusModel(ApiModel):
    """Base for the status: the reconciler fills it in during a pass, so it is mutable, and
    every assignment is validated so a wrong type fails where it is made."""

    model_config = ConfigDict(frozen=False, validate_assignment=True)


class ConditionStatus(StrEnum):
    """The three values a condition's status can take."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    type: str = Field(description="The aspect this condition reports, e.g. PodReady.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="A CamelCase reason, stable enough to alert on.")
    message: str = Field(default="", description="What happened, for people.")
    last_transition_time: datetime | None = Field(
        default=None, description="When the status last changed."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation this condition was computed from."
    )


class CredentialsStatus(StatusModel):
    """What is known about the sandbox's PAT; never the token itself."""

    token_display: str | None = Field(
        default=None, description="The token's display form (first 12 and last 4 characters)."
    )
    pat_id: int | None = Field(default=None, description="The PAT's id in Onyx's database.")
    minted_at: datetime | None = Field(default=None, description="When the PAT was minted.")
    expires_at: datetime | None = Field(default=None, description="When the PAT expires.")


class SkillStatus(StatusModel):
    """The rendered company-search skill."""

    source_count: int | None = Field(default=None, description="Sources listed in SKILL.md.")
    content_hash: str | None = Field(default=None, description="SHA-256 of the rendered SKILL.md.")


class DeliveredSkill(StatusModel):
    """The SKILL.md written into a claimed pool pod (which mounts no ConfigMap)."""

    pod_uid: str | None = Field(
        default=None, alias="podUID", description="The claimed pod it was written into."
    )
    content_hash: str | None = Field(default=None, description="SHA-256 of what was written.")


class UserLibraryStatus(StatusModel):
    """The last user-library sync."""

    observed_revision: str | None = Field(
        default=None, description="The user-library-revision annotation value last synced."
    )
    last_sync_time: datetime | None = Field(
        default=None, description="When the last sync finished."
    )
    files: int | None = Field(default=None, description="Files in the sandbox's library.")
    bytes: int | None = Field(default=None, description="Total bytes in the sandbox's library.")
    bytes_transferred: int | None = Field(default=None, description="Bytes sent by the last sync.")
    duration_seconds: float | None = Field(
        default=None, description="How long the last sync took, in seconds."
    )
    last_error: str | None = Field(default=None, description="Why the last sync failed, if it did.")
    skipped: int | None = Field(
        default=None,
        description="S3 keys the last sync skipped as unsafe (absolute, '..', too long, ...).",
    )
    pod_uid: str | None = Field(
        default=None, alias="podUID", description="The pod the library was last synced into."
    )
    config_hash: str | None = Field(
        default=None,
        description="Hash of the bucket, prefix, excludes and disabled paths the last sync used.",
    )
    job: str | None = Field(default=None, description="Job mode: the sync Job running now, if any.")
    job_sequence: int | None = Field(
        default=None, description="Job mode: the number of the last sync Job created."
    )
    failed_attempt: str | None = Field(
        default=None,
        description=(
            "The revision, pod and configuration of a sync that failed in a way retrying "
            "cannot fix; it is retried only when one of them changes."
        ),
    )


class LibraryVolumeStatus(StatusModel):
    """Job mode's library volume (``spec.userLibrary``) as the operator last saw it."""

    claim_name: str | None = Field(default=None, description="The PVC's name.")
    requested: str | None = Field(
        default=None, description="The size the PVC requests (spec.userLibrary.size once applied)."
    )
    capacity: str | None = Field(
        default=None, description="The size of the bound volume, from the PVC's status."
    )
    phase: str | None = Field(default=None, description="The PVC's phase: Pending, Bound, Lost.")
    message: str | None = Field(
        default=None,
        description=(
            "What the volume cannot follow: a smaller size, another storage class, a resize "
            "the storage class refused."
        ),
    )


class WorkspaceStatus(StatusModel):
    """The workspace volume (``spec.workspace``) as the operator last saw it."""

    claim_name: str | None = Field(default=None, description="The PVC's name.")
    claim_uid: str | None = Field(
        default=None,
        alias="claimUID",
        description="The PVC's uid: the same one for the sandbox's whole life (and after retain).",
    )
    requested: str | None = Field(
        default=None, description="The size the PVC requests (spec.workspace.size once applied)."
    )
    capacity: str | None = Field(
        default=None, description="The size of the bound volume, from the PVC's status."
    )
    phase: str | None = Field(default=None, description="The PVC's phase: Pending, Bound, Lost.")
    retain: bool | None = Field(
        default=None, description="Whether the volume is kept when the sandbox is deleted."
    )
    message: str | None = Field(
        default=None,
        description="What needs attention: a resize the storage class refused, a size pending.",
    )


class CraftSandboxStatus(StatusModel):
    """The observed state of a Craft sandbox, written only by the operator."""

    phase: Phase | None = Field(default=None, description="Where the sandbox is in its life.")
    observed_generation: int | None = Field(
        default=None, description="The spec generation the operator last acted on."
    )
    pod_name: str | None = Field(default=None, description="The sandbox pod's name.")
    pod_uid: str | None = Field(
        default=None, alias="podUID", description="The current sandbox pod's UID."
    )
    admitted_images: list[str] | None = Field(
        default=None,
        max_length=MAX_ADMITTED_IMAGES,
        description=(
            "The images of pod podUID's containers as the API server admitted it, where a "
            "mutating webhook changed them at its creation (a digest, a registry mirror, a "
            "sidecar); only a later change of them is taken for an edit. Kept for the first "
            f"{MAX_ADMITTED_IMAGES} containers."
        ),
    )
    pod_failures: int | None = Field(
        default=None,
        description=(
            "Sandbox pods that failed or were evicted in a row; the operator stops replacing "
            "them (phase Failed) after a limit, until the spec changes."
        ),
    )
    last_pod_failure_time: datetime | None = Field(
        default=None,
        description=(
            "When a sandbox pod last failed or was evicted; the next pod waits out the "
            "restart backoff from then."
        ),
    )
    validated_pod_uid: str | None = Field(
        default=None,
        alias="validatedPodUID",
        description="The pod in which onyx-cli validate-config last ran.",
    )
    claimed_from: str | None = Field(
        default=None,
        description="The CraftSandboxPool whose warm pod the sandbox claimed, if it did.",
    )
    delivered_skill: DeliveredSkill | None = Field(
        default=None, description="The SKILL.md written into a claimed pod."
    )
    validated_pat_id: int | None = Field(
        default=None,
        alias="validatedPatID",
        description=(
            "The PAT the operator last delivered into that pod and ran onyx-cli "
            "validate-config with (its id, never the token)."
        ),
    )
    validated_pat_display: str | None = Field(
        default=None,
        description=(
            "That PAT's display form (first 12 and last 4 characters): an id alone may name "
            "another token once the credentials database was reset or restored."
        ),
    )
    cli_auth_failures: int | None = Field(
        default=None,
        description=(
            "onyx-cli validate-config auth failures in a row; after a fresh PAT also fails, "
            "the operator mints no more until the spec changes (the same PAT is tried "
            "again with a backoff)."
        ),
    )
    sleeping_since: datetime | None = Field(
        default=None,
        description=(
            "When the sandbox went to sleep for idleness; a craft.onyx.app/last-activity "
            "annotation at or after this (to the second) wakes it."
        ),
    )
    suspended_at: datetime | None = Field(
        default=None,
        description=(
            "When spec.suspend was first seen true; cleared when the sandbox is resumed "
            "(which is a wake: see wokeAt)."
        ),
    )
    woke_at: datetime | None = Field(
        default=None,
        description=(
            "When the sandbox last woke from idle sleep or was resumed from suspend; it "
            "does not fall asleep again within idleTimeout of that moment."
        ),
    )
    recovered_at: datetime | None = Field(
        default=None,
        description=(
            "When the sandbox last left phase Failed (a change to its spec or to the "
            "platform's policy let it go on): its wait for Ready counts from here, not from "
            "when it failed."
        ),
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "CredentialsReady, SkillRendered, PodReady, CLIValidated, UserLibrarySynced, the "
            "aggregate Ready, and PolicyEnforced (False only while the sandbox runs, admitted "
            "earlier, without a readable CraftSandboxPolicy)."
        ),
    )
    credentials: CredentialsStatus | None = Field(
        default=None, description="The sandbox's PAT, without the token."
    )
    skill: SkillStatus | None = Field(default=None, description="The rendered skill.")
    user_library: UserLibraryStatus | None = Field(
        default=None, description="The last user-library sync."
    )
    workspace: WorkspaceStatus | None = Field(
        default=None, description="The workspace volume, when spec.workspace is set."
    )
    library_volume: LibraryVolumeStatus | None = Field(
        default=None, description="The library volume, when spec.userLibrary.mode is Job."
    )

    def forget_stopped_pods(self) -> None:
        """Forget what the sandbox's pods did once they are stopped (a sleep, a suspension,
        a withdrawal by the policy): a stop ends a row of failed pods, the verdict on
        onyx-cli (a refused PAT, no onyx-cli) is given again in the next pod, and the
        images an admission webhook gave the old pod are not the next one's."""
        self.admitted_images = None
        self.pod_failures = None
        self.last_pod_failure_time = None
        self.cli_auth_failures = None
