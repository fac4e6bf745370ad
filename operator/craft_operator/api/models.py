"""The CraftSandbox API (``craft.onyx.app/v1alpha1``) as pydantic models.

These models are the only place the schema is written: the CRD in ``crds/`` is generated
from them (see :mod:`craft_operator.api.crd`), and the operator parses every object it
receives through them. Admission-time rules that the OpenAPI schema cannot express are
attached as CEL rules (``x-kubernetes-validations``) with messages written for people.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from pydantic.alias_generators import to_camel

from craft_operator.api.durations import DURATION_PATTERN, Duration

GROUP = "craft.onyx.app"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "CraftSandbox"
PLURAL = "craftsandboxes"
SINGULAR = "craftsandbox"
SHORT_NAMES = ["csb"]
CATEGORIES = ["craft"]

#: Longest CraftSandbox name: children are named ``<name>-credentials`` and
#: ``<name>-library-<n>``, and a Job's name must fit a 63-character label value.
MAX_NAME_LENGTH = 45
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
URL_PATTERN = r"^https?://[^\s/?#]+(/[^\s]*)?$"
SOURCE_NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
#: A label value (children carry the tenant in the onyx.app/tenant-id label).
TENANT_ID_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
TENANT_ID_MESSAGE = (
    "user.tenantId may contain only letters, digits, '_', '.' and '-', and starts and ends "
    "with a letter or digit"
)
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
IMAGE_PATTERN = r"^[^\s]+$"
QUANTITY_MAX_LENGTH = 64
S3_BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"

ANNOTATION_LIBRARY_REVISION = f"{GROUP}/user-library-revision"
ANNOTATION_LAST_ACTIVITY = f"{GROUP}/last-activity"


def cel(rule: str, message: str, **extra: str) -> dict[str, str]:
    """One CEL validation rule with the message shown to whoever sent the object."""
    return {"rule": rule, "message": message, **extra}


def cel_string(text: str) -> str:
    """Quote ``text`` as a single-quoted CEL string literal (for regexes in rules)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_rules(*rules: dict[str, str]) -> dict[str, Any]:
    """JSON-schema extras that attach CEL rules to a field or model."""
    return {"x-kubernetes-validations": list(rules)}


def duration_rules(field: str, bound: str, message: str) -> dict[str, Any]:
    """CEL rules for a duration field: its format, then ``bound`` on ``duration(self)``.

    ``bound`` is skipped for a malformed value, so that value reports only the format
    message and not also a failed ``duration()`` call.
    """
    pattern = f"self.matches({cel_string(DURATION_PATTERN)})"
    return cel_rules(
        cel(
            pattern,
            f"{field} must be a duration: a number and a unit, e.g. 30m, 1h or 720h "
            "(units: ns, us, ms, s, m, h)",
        ),
        cel(f"!{pattern} || ({bound})", message),
    )


class ApiModel(BaseModel):
    """Base for API objects: camelCase on the wire, snake_case in Python.

    Unknown fields are ignored rather than rejected: the API server already prunes them,
    and an operator older than its CRD must still read newer objects.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        use_attribute_docstrings=False,
    )


Quantity = Annotated[
    int | str,
    Field(union_mode="left_to_right"),
    # The format is a CEL rule rather than a schema pattern, whose error shows only the regex.
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "maxLength": QUANTITY_MAX_LENGTH,
        }
        | cel_rules(
            cel(
                f"type(self) == int || self.matches({cel_string(QUANTITY_PATTERN)})",
                "must be a Kubernetes quantity: a number with an optional unit, "
                "e.g. 500m, 2, 1.5Gi or 4Gi",
            )
        )
    ),
]
"""A Kubernetes resource quantity such as ``500m``, ``2Gi`` or ``1``."""


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and (
        len(value) > QUANTITY_MAX_LENGTH or not re.match(QUANTITY_PATTERN, value)
    ):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 4Gi)")
    return value


def _check_pattern(value: str | None, pattern: str, message: str) -> str | None:
    """Python's side of a CEL ``self.matches(pattern)`` rule, so the model agrees with the CRD."""
    if value is not None and not re.match(pattern, value):
        raise ValueError(message)
    return value


def _check_duration(value: timedelta | None, low: timedelta, high: timedelta, message: str) -> Any:
    """Python's side of a CEL duration range rule."""
    if value is not None and not low <= value <= high:
        raise ValueError(message)
    return value


class UserRef(ApiModel):
    """The Onyx user who owns the sandbox."""

    id: str = Field(
        description=(
            "The Onyx user's UUID. The sandbox's credentials are minted for this user. "
            "Immutable: create a new CraftSandbox for another user."
        ),
        max_length=36,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(UUID_PATTERN)})",
                "user.id must be an Onyx user UUID, e.g. 3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b",
            )
        ),
    )
    tenant_id: str = Field(
        default="public",
        description=(
            "The Onyx tenant the user belongs to; 'public' in single-tenant deployments. Immutable."
        ),
        min_length=1,
        max_length=63,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(TENANT_ID_PATTERN)})",
                TENANT_ID_MESSAGE,
            )
        ),
    )
    email: str | None = Field(
        default=None,
        description="The user's email address, for display only (kubectl get, events).",
        max_length=254,
    )

    @field_validator("id")
    @classmethod
    def _uuid(cls, value: str) -> str:
        if not re.match(UUID_PATTERN, value):
            raise ValueError("user.id must be an Onyx user UUID")
        return value.lower()

    @field_validator("tenant_id")
    @classmethod
    def _tenant(cls, value: str) -> str | None:
        return _check_pattern(value, TENANT_ID_PATTERN, TENANT_ID_MESSAGE)


class Resources(ApiModel):
    """Compute resources for the sandbox container (requests and limits)."""

    requests: dict[str, Quantity] | None = Field(
        default=None,
        description="Minimum resources, e.g. {cpu: '1', memory: 2Gi, ephemeral-storage: 5Gi}.",
        json_schema_extra={"maxProperties": 16},
    )
    limits: dict[str, Quantity] | None = Field(
        default=None,
        description="Maximum resources, e.g. {cpu: '2', memory: 10Gi}.",
        json_schema_extra={"maxProperties": 16},
    )

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, value: dict[str, int | str] | None) -> dict[str, int | str] | None:
        if value is not None:
            for quantity in value.values():
                _check_quantity(quantity)
        return value


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """The taint effect a toleration matches."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ApiModel):
    """A pod toleration, as in the Kubernetes Pod API."""

    key: str | None = Field(default=None, description="The taint key to match.", max_length=317)
    operator: TolerationOperator | None = Field(
        default=None, description="Exists or Equal (default Equal)."
    )
    value: str | None = Field(default=None, description="The taint value to match.", max_length=63)
    effect: TaintEffect | None = Field(
        default=None, description="The taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        description="How long a NoExecute taint is tolerated before eviction.",
        ge=0,
    )


class Source(ApiModel):
    """A connected Onyx source, listed in the company-search skill."""

    name: str = Field(
        description=(
            "The Onyx source identifier (a DocumentSource value such as slack, "
            "google_drive or confluence)."
        ),
        min_length=1,
        max_length=64,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(SOURCE_NAME_PATTERN)})",
                "a source name is an Onyx source identifier: lowercase letters, digits "
                "and '_', starting with a letter (e.g. google_drive)",
            )
        ),
    )
    description: str | None = Field(
        default=None,
        description="What this source holds for this user; overrides the built-in description.",
        max_length=500,
    )
    scopes: list[Annotated[str, Field(max_length=200)]] | None = Field(
        default=None,
        description=(
            "Examples of what is reachable in this source (channels, spaces, projects); "
            "the first five are shown."
        ),
        max_length=50,
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str | None:
        message = "a source name is an Onyx source identifier (e.g. google_drive)"
        return _check_pattern(value, SOURCE_NAME_PATTERN, message)


class LibraryMode(StrEnum):
    """How the user library reaches the sandbox."""

    EXEC = "Exec"
    JOB = "Job"


class UserLibrary(ApiModel):
    """Where the user's uploaded files live in S3 and how they reach the sandbox."""

    bucket: str | None = Field(
        default=None,
        description="The S3 bucket; defaults to the operator's CRAFT_S3_BUCKET.",
        min_length=3,
        max_length=63,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(S3_BUCKET_PATTERN)})",
                "userLibrary.bucket must be an S3 bucket name: 3 to 63 lowercase letters, "
                "digits, '.' and '-', starting and ending with a letter or digit",
            )
        ),
    )
    prefix: str | None = Field(
        default=None,
        description=(
            "The key prefix holding the user's files; defaults to "
            "'<tenantId>/knowledge/<user.id>/user_library/'."
        ),
        max_length=1024,
        json_schema_extra=cel_rules(
            cel("!self.startsWith('/')", "userLibrary.prefix is an S3 key prefix: no leading '/'"),
            cel("!self.contains('..')", "userLibrary.prefix must not contain '..'"),
        ),
    )
    mode: LibraryMode = Field(
        default=LibraryMode.EXEC,
        description=(
            "Exec streams changed files into the running pod over the exec API; Job runs a "
            "sync Job that writes into a volume the pod mounts."
        ),
    )
    exclude: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list,
        description="Glob patterns (relative to the library root) never copied into the sandbox.",
        max_length=100,
    )
    disabled_paths: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        default_factory=list,
        description=(
            "Paths the user disabled for sync; a disabled directory disables everything "
            "under it. They are removed from the sandbox."
        ),
        max_length=1000,
    )
    size: Quantity | None = Field(
        default=None,
        description="Job mode: size of the library volume (default from operator settings).",
    )
    storage_class_name: str | None = Field(
        default=None,
        description="Job mode: storage class of the library volume (default: the cluster's).",
        max_length=253,
    )

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("/") or ".." in value):
            raise ValueError("userLibrary.prefix is an S3 key prefix: no leading '/', no '..'")
        return value

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and not re.match(S3_BUCKET_PATTERN, value):
            raise ValueError("userLibrary.bucket must be an S3 bucket name")
        return value

    @field_validator("size")
    @classmethod
    def _size(cls, value: int | str | None) -> int | str | None:
        return None if value is None else _check_quantity(value)


class Credentials(ApiModel):
    """How the sandbox's Onyx personal access token is minted."""

    lifetime: Duration = Field(
        default=timedelta(hours=720),
        description=(
            "Lifetime of the sandbox's personal access token; it is renewed before it "
            "expires. Between 1h and 8760h."
        ),
        json_schema_extra=duration_rules(
            "credentials.lifetime",
            "duration(self) >= duration('1h') && duration(self) <= duration('8760h')",
            "credentials.lifetime must be between 1h and 8760h (one year)",
        )
        | {"default": "720h"},
    )

    @field_validator("lifetime")
    @classmethod
    def _lifetime(cls, value: timedelta) -> Any:
        message = "credentials.lifetime must be between 1h and 8760h (one year)"
        return _check_duration(value, timedelta(hours=1), timedelta(hours=8760), message)


class CraftSandboxSpec(ApiModel):
    """The desired state of a Craft sandbox."""

    user: UserRef = Field(
        description="The Onyx user who owns the sandbox.",
        json_schema_extra=cel_rules(
            cel(
                "self.id == oldSelf.id",
                "user.id is immutable; delete this CraftSandbox and create a new one",
            ),
            cel(
                "self.tenantId == oldSelf.tenantId",
                "user.tenantId is immutable; delete this CraftSandbox and create a new one",
            ),
        ),
    )
    image: str | None = Field(
        default=None,
        description="Sandbox container image; defaults to the operator's CRAFT_SANDBOX_IMAGE.",
        min_length=1,
        max_length=512,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(IMAGE_PATTERN)})",
                "image must be an image reference without spaces, e.g. craft-sandbox:1.4.4",
            )
        ),
    )
    server_url: str | None = Field(
        default=None,
        alias="serverURL",
        description=(
            "URL of the Onyx server the sandbox talks to (becomes ONYX_SERVER_URL); "
            "defaults to the operator's CRAFT_SERVER_URL."
        ),
        max_length=2048,
        json_schema_extra=cel_rules(
            cel(
                f"self.matches({cel_string(URL_PATTERN)})",
                "serverURL must be an http:// or https:// URL, e.g. https://onyx.example.com",
            )
        ),
    )
    suspend: bool = Field(
        default=False,
        description="True puts the sandbox to sleep: the pod is deleted; credentials are kept.",
    )
    idle_timeout: Duration | None = Field(
        default=None,
        description=(
            "Put the sandbox to sleep when the craft.onyx.app/last-activity annotation is "
            "older than this (e.g. 1h); it wakes when the annotation moves past the moment it "
            "slept. At least 1m. Unset: never sleeps on idleness."
        ),
        json_schema_extra=duration_rules(
            "idleTimeout", "duration(self) >= duration('1m')", "idleTimeout must be at least 1m"
        ),
    )
    resources: Resources | None = Field(
        default=None,
        description="Sandbox container resources; defaults come from operator settings.",
    )
    runtime_class_name: str | None = Field(
        default=None,
        description="RuntimeClass for the sandbox pod (e.g. gvisor or kata).",
        max_length=253,
    )
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] | None = Field(
        default=None,
        description="Node labels the sandbox pod must be scheduled on.",
        json_schema_extra={"maxProperties": 32},
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        description="Tolerations for the sandbox pod.",
        max_length=32,
    )
    priority_class_name: str | None = Field(
        default=None,
        description="PriorityClass for the sandbox pod.",
        max_length=253,
    )
    sources: list[Source] = Field(
        default_factory=list,
        description="The user's connected Onyx sources, rendered into the company-search skill.",
        max_length=100,
    )
    user_library: UserLibrary = Field(
        default_factory=UserLibrary,
        description="The user's uploaded files, synced from S3 into /workspace/user_library.",
    )
    credentials: Credentials = Field(
        default_factory=Credentials,
        description="Settings for the sandbox's Onyx personal access token.",
    )

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return _check_pattern(value, IMAGE_PATTERN, "image must not contain spaces")

    @field_validator("server_url")
    @classmethod
    def _server_url(cls, value: str | None) -> str | None:
        return _check_pattern(value, URL_PATTERN, "serverURL must be an http:// or https:// URL")

    @field_validator("idle_timeout")
    @classmethod
    def _idle_timeout(cls, value: timedelta | None) -> Any:
        message = "idleTimeout must be at least 1m"
        return _check_duration(value, timedelta(minutes=1), timedelta.max, message)


class Phase(StrEnum):
    """Where a sandbox is in its life."""

    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    READY = "Ready"
    SLEEPING = "Sleeping"
    SUSPENDED = "Suspended"
    FAILED = "Failed"
    TERMINATING = "Terminating"


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
    pod_failures: int | None = Field(
        default=None,
        description=(
            "Sandbox pods that failed or were evicted in a row; the operator stops replacing "
            "them (phase Failed) after a limit, until the spec changes."
        ),
    )
    validated_pod_uid: str | None = Field(
        default=None,
        alias="validatedPodUID",
        description="The pod in which onyx-cli validate-config last ran.",
    )
    cli_auth_failures: int | None = Field(
        default=None,
        description=(
            "onyx-cli validate-config auth failures in a row; after a fresh PAT also fails, "
            "the operator stops retrying until the spec changes."
        ),
    )
    sleeping_since: datetime | None = Field(
        default=None,
        description=(
            "When the sandbox went to sleep for idleness; a craft.onyx.app/last-activity "
            "annotation later than this wakes it."
        ),
    )
    woke_at: datetime | None = Field(
        default=None,
        description=(
            "When the sandbox last woke from idle sleep; it does not fall asleep again "
            "within idleTimeout of that moment."
        ),
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "CredentialsReady, SkillRendered, PodReady, CLIValidated, UserLibrarySynced and "
            "the aggregate Ready."
        ),
    )
    credentials: CredentialsStatus | None = Field(
        default=None, description="The sandbox's PAT, without the token."
    )
    skill: SkillStatus | None = Field(default=None, description="The rendered skill.")
    user_library: UserLibraryStatus | None = Field(
        default=None, description="The last user-library sync."
    )


class ObjectMeta(ApiModel):
    """The parts of Kubernetes object metadata the operator reads."""

    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None


class CraftSandbox(ApiModel):
    """A per-user Craft sandbox: an agent pod with Onyx credentials, skills and files."""

    api_version: Literal["craft.onyx.app/v1alpha1"] = Field(
        default="craft.onyx.app/v1alpha1", description="craft.onyx.app/v1alpha1"
    )
    kind: Literal["CraftSandbox"] = Field(default="CraftSandbox", description="CraftSandbox")
    metadata: ObjectMeta
    spec: CraftSandboxSpec
    status: CraftSandboxStatus = Field(default_factory=CraftSandboxStatus)
