"""The CraftSandbox API (``craft.onyx.app/v1alpha1``) as pydantic models.

These models are the only place the schema is written: the CRD in ``crds/`` is generated
from them (see :mod:`craft_operator.api.crd`), and the operator parses every object it
receives through them. Admission-time rules that the OpenAPI schema cannot express are
attached as CEL rules (``x-kubernetes-validations``) with messages written for people.

This module holds the object itself (:class:`CraftSandbox` and the metadata the operator
reads); its parts live beside it, by what they describe:

- :mod:`craft_operator.api.constants`: the API's names, field patterns and annotations;
- :mod:`craft_operator.api.base`: :class:`ApiModel`, ``Quantity`` and the CEL helpers;
- :mod:`craft_operator.api.spec`: the spec models;
- :mod:`craft_operator.api.status`: the status models.

It deliberately re-exports all of them (``__all__``), so ``from craft_operator.api.models
import X`` stays the one import path for the whole API; new code may use either.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from craft_operator.api.base import (
    ApiModel,
    Quantity,
    cel,
    cel_rules,
    cel_string,
    duration_rules,
)
from craft_operator.api.constants import (
    ANNOTATION_LAST_ACTIVITY,
    ANNOTATION_LIBRARY_REVISION,
    ANNOTATION_PAT_REVOKED,
    API_VERSION,
    CATEGORIES,
    DNS_LABEL_PATTERN,
    GROUP,
    IMAGE_PATTERN,
    KIND,
    MAX_LIBRARY_REVISION,
    MAX_NAME_LENGTH,
    PLURAL,
    QUANTITY_MAX_LENGTH,
    QUANTITY_PATTERN,
    S3_BUCKET_PATTERN,
    SHORT_NAMES,
    SINGULAR,
    SOURCE_NAME_PATTERN,
    TENANT_ID_MESSAGE,
    TENANT_ID_PATTERN,
    URL_PATTERN,
    UUID_PATTERN,
    VERSION,
)
from craft_operator.api.spec import (
    CraftSandboxSpec,
    Credentials,
    LibraryMode,
    PoolRef,
    Resources,
    Source,
    TaintEffect,
    Toleration,
    TolerationOperator,
    UserLibrary,
    UserRef,
)
from craft_operator.api.status import (
    Condition,
    ConditionStatus,
    CraftSandboxStatus,
    CredentialsStatus,
    DeliveredSkill,
    LibraryVolumeStatus,
    Phase,
    SkillStatus,
    StatusModel,
    UserLibraryStatus,
    WorkspaceStatus,
)
from craft_operator.api.workspace import WORKSPACE_MOUNT, Workspace

__all__ = [
    "ANNOTATION_LAST_ACTIVITY",
    "ANNOTATION_LIBRARY_REVISION",
    "ANNOTATION_PAT_REVOKED",
    "API_VERSION",
    "CATEGORIES",
    "DNS_LABEL_PATTERN",
    "GROUP",
    "IMAGE_PATTERN",
    "KIND",
    "MAX_LIBRARY_REVISION",
    "MAX_NAME_LENGTH",
    "PLURAL",
    "QUANTITY_MAX_LENGTH",
    "QUANTITY_PATTERN",
    "S3_BUCKET_PATTERN",
    "SHORT_NAMES",
    "SINGULAR",
    "SOURCE_NAME_PATTERN",
    "TENANT_ID_MESSAGE",
    "TENANT_ID_PATTERN",
    "URL_PATTERN",
    "UUID_PATTERN",
    "VERSION",
    "WORKSPACE_MOUNT",
    "ApiModel",
    "Condition",
    "ConditionStatus",
    "CraftSandbox",
    "CraftSandboxSpec",
    "CraftSandboxStatus",
    "Credentials",
    "CredentialsStatus",
    "DeliveredSkill",
    "LibraryMode",
    "LibraryVolumeStatus",
    "ObjectMeta",
    "Phase",
    "PoolRef",
    "Quantity",
    "Resources",
    "SkillStatus",
    "Source",
    "StatusModel",
    "TaintEffect",
    "Toleration",
    "TolerationOperator",
    "UserLibrary",
    "UserLibraryStatus",
    "UserRef",
    "Workspace",
    "WorkspaceStatus",
    "cel",
    "cel_rules",
    "cel_string",
    "duration_rules",
]


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
